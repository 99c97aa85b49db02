"""Shared by the res_*.py hostile tests (resources held for, or taken by,
hostile peers): live rov_stream processes, their listening port, their CPU
time and memory read from /proc, and raw frames built from transport/wire.h.
"""
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
FAILURES = []


def fail(msg):
    print("FAIL: " + msg, flush=True)
    FAILURES.append(msg)


def note(msg):
    print(msg, flush=True)


def finish(name):
    if FAILURES:
        print("%s: %d failure(s)" % (name, len(FAILURES)), flush=True)
        sys.exit(1)
    print("%s: PASS" % name, flush=True)
    sys.exit(0)


def wire_consts(src_dir):
    """Magic, version and DATA type as transport/wire.h defines them now."""
    text = open(os.path.join(src_dir, "transport", "wire.h")).read()
    version = int(re.search(r"#define ROV_WIRE_VERSION (\d+)", text).group(1))
    data = int(re.search(r"ROV_FT_DATA = (\d+)", text).group(1))
    return 0x5652, version, data


def frame_header(src_dir, ftype_name, length, seq=1, ack=0, tag=0):
    magic, version, data = wire_consts(src_dir)
    ftype = {"DATA": data}[ftype_name]
    return struct.pack("<HBBIQQII", magic, version, ftype, length, seq, ack, tag, 0)


class Proc:
    """A rov_stream side with its log in a file; killed at exit."""

    all = []

    def __init__(self, argv, env, nofile=None, log=None):
        self.log_path = log or tempfile.mktemp(prefix="rov_res_", suffix=".log")
        self.log = open(self.log_path, "w")

        def pre():
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.p = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                  preexec_fn=pre)
        Proc.all.append(self)

    @property
    def pid(self):
        return self.p.pid

    def text(self):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait(self, timeout):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def alive(self):
        return self.p.poll() is None

    def kill(self):
        if self.alive():
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()

    @staticmethod
    def kill_all():
        for p in Proc.all:
            p.kill()


def wait_file(path, proc, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        if not proc.alive():
            return False
        time.sleep(0.05)
    return False


def cpu_s(pid):
    """utime + stime of pid, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_kib(pid, key):
    """A KiB field of /proc/PID/status (VmRSS, VmPin, ...), 0 if absent."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rss_kib(pid):
    return status_kib(pid, "VmRSS")


def stream_done(lis, con, done_note):
    """The real stream beside the strangers: both sides exited 0 (a failure
    with both logs), else done_note noted."""
    rc_c = con.wait(240)
    rc_l = lis.wait(60)
    if rc_c != 0 or rc_l != 0:
        fail("the real stream did not complete (connector rc %s, listener rc %s)\n"
             "--- listener\n%s\n--- connector\n%s" %
             (rc_c, rc_l, lis.text()[-3000:], con.text()[-3000:]))
    else:
        note(done_note)


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def _socket_inodes(pid):
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def listen_addrs(pid):
    """(ip, port) of the TCP sockets pid listens on, IPv4 then IPv6 (a
    wildcard address as loopback)."""
    inodes = _socket_inodes(pid)
    out = []
    for table, wild, loop in (("/proc/net/tcp", "0.0.0.0", "127.0.0.1"),
                              ("/proc/net/tcp6", "::", "::1")):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != "0A" or f[9] not in inodes:  # LISTEN
                continue
            hexip, hexport = f[1].rsplit(":", 1)
            raw = bytes.fromhex(hexip)
            if len(raw) == 4:
                ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:
                ip = socket.inet_ntop(socket.AF_INET6, b"".join(
                    raw[i:i + 4][::-1] for i in range(0, 16, 4)))
            out.append((loop if ip == wild else ip, int(hexport, 16)))
    return out


def listen_ports(pid):
    """TCP ports pid listens on (IPv4 and IPv6), from its socket inodes."""
    return [port for _, port in listen_addrs(pid)]


def one_port(lis):
    """The one TCP port lis listens on, else None (a failure said)."""
    ports = listen_ports(lis.pid)
    if len(ports) != 1:
        fail("expected one listening TCP port, found %s" % ports)
        return None
    return ports[0]


def start_listener(stream, work, args, env, nofile=None, wait=20):
    """A rov_stream listener, its log and address file in work: (Proc, the
    address file) once it wrote its address, else None (a failure said)."""
    addr = os.path.join(work, "addr")
    lis = Proc([stream, "--listen", addr] + args, env, nofile=nofile,
               log=os.path.join(work, "listener.log"))
    if not wait_file(addr, lis, wait):
        fail("listener wrote no address:\n" + lis.text())
        return None
    return lis, addr


def stream_env(rails="tcp@127.0.0.1", **extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("RAILOVER_"):
            del env[k]
    env["RAILOVER_RAILS"] = rails
    env["RAILOVER_LOG"] = "warn"
    env.update(extra)
    return env


def closed_by_peer(sock, timeout):
    """Whether the peer ends (EOF or reset) the connection within timeout
    (0: by now, without waiting)."""
    sock.settimeout(timeout)
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except (socket.timeout, BlockingIOError):
        return False
