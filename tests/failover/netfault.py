"""Real-fault test harness for the failover engine (DESIGN.md section 7, tier 3).

Two network namespaces, A and B, are joined by two veth pairs:

    A (listener)                          B (connector)
    fab  192.0.2.1/24    <---------->     fab  192.0.2.2/24      rail 0, "fabric"
    eth  198.51.100.1/24 <---------->     eth  198.51.100.2/24   rail 1, "ethernet"

rov_stream runs as listener in A and as connector in B (`ip netns exec`), and
the test breaks the fabric for real: link down/up on either end, nftables
drop (silent) or `reject with tcp reset` in a dedicated table `inet rovtest`
of one namespace, a drop of one TCP 4-tuple, flapping.

Everything created here is removed again: try/finally in the test, atexit,
and SIGINT/SIGTERM/SIGHUP handlers; namespaces left by a run that was killed
(SIGKILL, e.g. by a ctest timeout) carry the creator's pid in their name and
are removed by the next run once that pid is dead.  Every process started
here dies with the test (PR_SET_PDEATHSIG).

Only the Python standard library is used.  Exit codes of the test scripts:
0 pass, 1 fail, 77 skipped (prerequisite missing; always says which).
"""

import argparse
import atexit
import ctypes
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

SKIP = 77

FAB_A, FAB_B = "192.0.2.1", "192.0.2.2"
ETH_A, ETH_B = "198.51.100.1", "198.51.100.2"
FAB_NET, ETH_NET = "192.0.2.0/24", "198.51.100.0/24"
RAILS_A = "tcp@%s,tcp@%s" % (FAB_A, ETH_A)
RAILS_B = "tcp@%s,tcp@%s" % (FAB_B, ETH_B)
NFT_TABLE = "rovtest"
# RAILOVER_RUN_DIR must be shorter than this (sun_path less the socket name).
RUN_DIR_MAX = 76

# Reason codes (names as they appear in events, status and results).
FAILOVER_PREFIX = "failover."
FAILBACK = "failback"
PEER_FAILOVER = "peer.failover"
PEER_FAILBACK = "peer.failback"

# Library configuration of the fault tests: fast detection, short dwell,
# everything else at its defaults.  A test overrides what it needs.
FAULT_ENV = {
    "RAILOVER_LOG": "info",
    "RAILOVER_FAILOVER": "on",
    "RAILOVER_FAILOVER_TIMEOUT": "250ms",
    "RAILOVER_KEEPALIVE": "100ms",
    "RAILOVER_FAILBACK": "on",
    "RAILOVER_FAILBACK_DWELL": "1s",
    "RAILOVER_FAILBACK_RETRY": "50ms",
    "RAILOVER_FAILBACK_RETRY_MAX": "200ms",
}


class Skip(Exception):
    """A prerequisite is missing: the test exits 77 with this message."""


class Failure(AssertionError):
    """A claim of the test does not hold."""


def now_ns():
    """CLOCK_MONOTONIC in ns: the clock of rov_stream's event timestamps."""
    return time.monotonic_ns()


_T0 = now_ns()


def log(msg):
    print("[%8.3f] %s" % ((now_ns() - _T0) / 1e9, msg), flush=True)


# ---- cleanup ----------------------------------------------------------------

_cleanups = []          # callables, run last-registered first
_cleanup_lock = threading.RLock()


def at_cleanup(fn):
    with _cleanup_lock:
        _cleanups.append(fn)
    return fn


def cancel_cleanup(fn):
    with _cleanup_lock:
        if fn in _cleanups:
            _cleanups.remove(fn)


def run_cleanups():
    with _cleanup_lock:
        while _cleanups:
            fn = _cleanups.pop()
            try:
                fn()
            except Exception as e:  # cleanup must go on
                print("netfault: cleanup %r failed: %s" % (fn, e), file=sys.stderr)


def _on_signal(signum, _frame):
    # Turn the signal into an exception in the main thread, so that every
    # finally block runs; atexit is the second net.
    signal.signal(signum, signal.SIG_DFL)
    raise SystemExit(128 + signum)


atexit.register(run_cleanups)
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_s, _on_signal)

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # Runs in the child between fork and exec.  `ip netns exec` execs the
    # program in place (no fork), so the setting reaches rov_stream.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# ---- commands ---------------------------------------------------------------

def sh(*argv, check=True, input=None, quiet=False):
    """Run a command; return its stdout.  Raise Failure with its stderr."""
    argv = [str(a) for a in argv]
    p = subprocess.run(argv, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if check and p.returncode != 0:
        raise Failure("command failed (exit %d): %s\n%s" % (p.returncode, " ".join(argv),
                                                           p.stderr.strip()))
    if not quiet and os.environ.get("NETFAULT_TRACE"):
        log("$ " + " ".join(argv))
    return p.stdout


def require_root():
    if os.geteuid() != 0:
        raise Skip("needs root (network namespaces, veth, nftables); run as root")


def require_netns(nft=True):
    require_root()
    if not shutil.which("ip"):
        raise Skip("'ip' (iproute2) is not installed")
    p = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise Skip("'ip netns' does not work here: %s" % p.stderr.strip())
    if nft and not shutil.which("nft"):
        raise Skip("'nft' (nftables) is not installed (apt-get install nftables)")


def _pid_alive(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return b"python" in cmd


def netns_list():
    out = sh("ip", "netns", "list", quiet=True)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_kill_all(ns):
    """SIGKILL every process in the namespace (deleting a namespace with
    processes in it only removes its name)."""
    out = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    pids = [int(x) for x in out.split() if x.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def netns_delete(ns):
    netns_kill_all(ns)
    subprocess.run(["ip", "netns", "delete", ns], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def remove_stale_namespaces():
    """Remove rovA-<pid>/rovB-<pid> namespaces whose creator is dead."""
    removed = []
    for ns in netns_list():
        m = re.fullmatch(r"rov[AB]-(\d+)", ns)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            netns_delete(ns)
            removed.append(ns)
    if removed:
        log("removed namespaces left by dead runs: %s" % " ".join(removed))
    return removed


# ---- topology -----------------------------------------------------------------

class Topology:
    """Namespaces A and B joined by the fab and eth veth pairs.

    Side names are "A" (listener) and "B" (connector).  No interface is ever
    created in the initial namespace: each veth pair is created inside A with
    its peer end moved straight into B, so deleting the namespaces removes
    everything.
    """

    DEVS = {"fab": (FAB_A, FAB_B), "eth": (ETH_A, ETH_B)}
    PREFIX = {}   # prefix length per device where not /24 (a subclass's narrower subnets)

    def __init__(self, tag=None):
        tag = tag or str(os.getpid())
        self.ns = {"A": "rovA-" + tag, "B": "rovB-" + tag}
        self.created = False
        self.nft_ready = set()
        self.rules = []   # (side, chain, handle, description)

    @property
    def a(self):
        return self.ns["A"]

    @property
    def b(self):
        return self.ns["B"]

    def create(self):
        remove_stale_namespaces()
        for ns in self.ns.values():
            if ns in netns_list():
                netns_delete(ns)
        at_cleanup(self.destroy)
        self.created = True
        for ns in self.ns.values():
            try:
                sh("ip", "netns", "add", ns)
            except Failure as e:
                raise Skip("cannot create a network namespace: %s" % e)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for dev, (ip_a, ip_b) in self.DEVS.items():
            sh("ip", "-n", self.a, "link", "add", dev, "type", "veth", "peer", "name", dev,
               "netns", self.b)
            plen = "/%d" % self.PREFIX.get(dev, 24)
            sh("ip", "-n", self.a, "addr", "add", ip_a + plen, "dev", dev)
            sh("ip", "-n", self.b, "addr", "add", ip_b + plen, "dev", dev)
            sh("ip", "-n", self.a, "link", "set", dev, "up")
            sh("ip", "-n", self.b, "link", "set", dev, "up")
        # Both ends up and addresses usable (no DAD for IPv4): prove it.
        self.wait_reachable()
        log("namespaces %s (listener) and %s (connector): %s" % (self.a, self.b, ", ".join(
            "%s %s<->%s" % (dev, ip_a, ip_b) for dev, (ip_a, ip_b) in self.DEVS.items())))
        return self

    def wait_reachable(self, timeout=10):
        """Wait for carrier (LOWER_UP) on both ends of both veth pairs."""
        deadline = time.monotonic() + timeout
        for ns in self.ns.values():
            for dev in self.DEVS:
                while "LOWER_UP" not in sh("ip", "-n", ns, "link", "show", "dev", dev,
                                           quiet=True):
                    if time.monotonic() > deadline:
                        raise Failure("no carrier on %s in %s after %ds" % (dev, ns, timeout))
                    time.sleep(0.05)

    def destroy(self):
        if not self.created:
            return
        self.created = False
        cancel_cleanup(self.destroy)
        for ns in self.ns.values():
            netns_delete(ns)

    def __enter__(self):
        return self.create()

    def __exit__(self, *exc):
        self.destroy()

    # -- running things inside ----------------------------------------------

    def exec_argv(self, side, argv):
        return ["ip", "netns", "exec", self.ns[side]] + [str(a) for a in argv]

    def run(self, side, *argv, check=True):
        return sh(*self.exec_argv(side, argv), check=check)

    def sysctl(self, key, value):
        """Set a per-namespace sysctl on both sides."""
        for side in self.ns:
            self.run(side, "sysctl", "-q", "-w", "%s=%s" % (key, value))
        log("%s = %s on both sides" % (key, value))

    def tcp_windows(self, side, local_ip):
        """{(local, remote): (snd_wnd, notsent)} of the established TCP
        sockets on local_ip in side's namespace (ss -tin, which leaves out
        a snd_wnd or notsent of 0)."""
        out = self.run(side, "ss", "-tinH", "state", "established", "src", local_ip)
        socks, key = {}, None
        for line in out.splitlines():
            f = line.split()
            if not line[:1].isspace() and len(f) >= 4:
                key = (f[2], f[3])
                continue
            if key:
                kv = dict(w.split(":", 1) for w in f if re.match(r"^(snd_wnd|notsent):\d+$", w))
                socks[key] = (int(kv.get("snd_wnd", 0)), int(kv.get("notsent", 0)))
                key = None
        return socks

    def windows_closed_both_ways(self):
        """True when some fabric connection has data waiting behind a
        closed window (snd_wnd 0) in both directions."""
        a = self.tcp_windows("A", FAB_A)
        b = self.tcp_windows("B", FAB_B)
        for (la, ra), (wa, na) in a.items():
            wb, nb = b.get((ra, la), (-1, 0))
            if wa == 0 and na > 0 and wb == 0 and nb > 0:
                log("fabric connection %s<->%s: both directions wait behind a closed "
                    "window (%d and %d bytes not sent)" % (la, ra, na, nb))
                return True
        return False

    # -- link rates ------------------------------------------------------------

    def shape(self, dev, rate_bps):
        """dev limited to rate_bps on both ends' egress (tbf; the burst
        max(256 KiB, 1 ms at the rate), above veth's largest GSO packet,
        64 KiB, which tbf must fit whole).  Returns what tc shows."""
        burst = max(256 << 10, rate_bps // 8 // 1000)
        for side in ("A", "B"):
            sh("tc", "-n", self.ns[side], "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", "%dbit" % rate_bps, "burst", str(burst), "latency", "10ms")
        return sh("tc", "-n", self.ns["A"], "qdisc", "show", "dev", dev, quiet=True).strip()

    # -- link faults ---------------------------------------------------------

    def link(self, side, dev, up):
        sh("ip", "-n", self.ns[side], "link", "set", dev, "up" if up else "down")
        log("link %s %s on side %s (%s)" % (dev, "UP" if up else "DOWN", side, self.ns[side]))

    def link_down(self, side="A", dev="fab"):
        self.link(side, dev, False)

    def link_up(self, side="A", dev="fab"):
        self.link(side, dev, True)

    def flap(self, side="A", dev="fab", down_s=0.4, up_s=0.4, times=6, on_cycle=None):
        """Take the link down and up `times` times; leaves it up.  Returns
        the (t_down_ns, t_up_ns) pairs."""
        marks = []
        for i in range(times):
            t0 = now_ns()
            self.link(side, dev, False)
            time.sleep(down_s)
            t1 = now_ns()
            self.link(side, dev, True)
            marks.append((t0, t1))
            if on_cycle:
                on_cycle(i)
            time.sleep(up_s)
        return marks

    # -- nftables --------------------------------------------------------------

    def nft(self, side, script):
        return sh("ip", "netns", "exec", self.ns[side], "nft", "-f", "-", input=script)

    def _nft_setup(self, side):
        if side in self.nft_ready:
            return
        self.nft(side, """
table inet %(t)s {
    chain input  { type filter hook input  priority 0; policy accept; }
    chain output { type filter hook output priority 0; policy accept; }
}
""" % {"t": NFT_TABLE})
        self.nft_ready.add(side)

    def nft_add(self, side, chain, rule, what):
        """Add one rule to chain input|output of `inet rovtest` on a side;
        return a handle object for nft_remove."""
        self._nft_setup(side)
        out = sh("ip", "netns", "exec", self.ns[side], "nft", "--echo", "--handle", "add",
                 "rule", "inet", NFT_TABLE, chain, *rule.split())
        m = re.search(r"# handle (\d+)", out)
        if not m:
            raise Failure("nft printed no rule handle for '%s': %r" % (rule, out))
        r = (side, chain, int(m.group(1)), what)
        self.rules.append(r)
        log("nft %s: %s %s (%s)" % (side, chain, rule, what))
        return r

    def nft_remove(self, rules):
        for r in rules if isinstance(rules, list) else [rules]:
            side, chain, handle, what = r
            sh("ip", "netns", "exec", self.ns[side], "nft", "delete", "rule", "inet", NFT_TABLE,
               chain, "handle", handle)
            self.rules.remove(r)
            log("nft %s: removed %s rule %d (%s)" % (side, chain, handle, what))

    def nft_clear(self, side=None):
        for s in [side] if side else list(self.nft_ready):
            self.nft(s, "flush table inet %s\n" % NFT_TABLE)
            self.rules = [r for r in self.rules if r[0] != s]
            log("nft %s: all rules removed" % s)

    def nft_counters(self, side):
        """Packets counted by each rule: {handle: packets}."""
        out = sh("ip", "netns", "exec", self.ns[side], "nft", "--handle", "list", "table",
                 "inet", NFT_TABLE)
        res = {}
        for line in out.splitlines():
            m = re.search(r"counter packets (\d+) bytes \d+ .*# handle (\d+)", line)
            if m:
                res[int(m.group(2))] = int(m.group(1))
        return res

    @staticmethod
    def peer_fab(side):
        return FAB_B if side == "A" else FAB_A

    def fabric_drop(self, side="A", direction="both"):
        """Drop fabric traffic silently (input, output or both)."""
        peer = self.peer_fab(side)
        rules = []
        if direction in ("in", "both"):
            rules.append(self.nft_add(side, "input", "ip saddr %s counter drop" % peer,
                                      "drop fabric input"))
        if direction in ("out", "both"):
            rules.append(self.nft_add(side, "output", "ip daddr %s counter drop" % peer,
                                      "drop fabric output"))
        return rules

    def fabric_reset(self, side="A", direction="in"):
        """Answer fabric TCP segments with a TCP reset instead of delivering
        (direction "in": the peer gets the resets; "out": local sockets do)."""
        # Match the peer's fabric address only: the reset made for an output
        # rule goes to a local address, which must not match again.
        peer = self.peer_fab(side)
        rules = []
        if direction in ("in", "both"):
            rules.append(self.nft_add(
                side, "input", "ip saddr %s meta l4proto tcp counter reject with tcp reset" %
                peer, "reset fabric TCP input"))
        if direction in ("out", "both"):
            rules.append(self.nft_add(
                side, "output", "ip daddr %s meta l4proto tcp counter reject with tcp reset" %
                peer, "reset fabric TCP output"))
        return rules

    def flow_drop(self, side, local, remote):
        """Drop one TCP 4-tuple both ways on a side.  local/remote: (ip, port)
        as seen from that side."""
        (lip, lport), (rip, rport) = local, remote
        what = "drop %s:%d <-> %s:%d" % (lip, lport, rip, rport)
        return [
            self.nft_add(side, "input", "ip saddr %s ip daddr %s tcp sport %d tcp dport %d "
                         "counter drop" % (rip, lip, rport, lport), what + " (input)"),
            self.nft_add(side, "output", "ip saddr %s ip daddr %s tcp sport %d tcp dport %d "
                         "counter drop" % (lip, rip, lport, rport), what + " (output)"),
        ]


# ---- TCP probes (plumbing self-test) ---------------------------------------------

_PROBE = r"""
import errno, socket, sys
dst, port, src, sport, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.settimeout(timeout)
try:
    if src:
        s.bind((src, sport))
    s.connect((dst, port))
    s.sendall(b"ping\n")
    data = s.recv(16)
    print("ok" if data == b"ping\n" else "bad:%r" % data)
except ConnectionRefusedError:
    print("refused")
except ConnectionResetError:
    print("reset")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("unreachable" if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH) else "error:%s" % e)
"""

_ECHO = r"""
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print("listening", flush=True)
def serve(c):
    try:
        while True:
            d = c.recv(4096)
            if not d:
                break
            c.sendall(d)
    except OSError:
        pass
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def tcp_probe(topo, side, dst, port, src="", sport=0, timeout=2.0):
    """Connect from `side` to dst:port (optionally from src:sport), send a
    line and expect it echoed.  Returns ok, refused, reset, timeout,
    unreachable or error:..."""
    out = topo.run(side, sys.executable, "-c", _PROBE, dst, port, src, sport, timeout,
                   check=False)
    return out.strip() or "error:no output"


def tcp_echo_server(topo, side, ip, port):
    """An echo server inside a namespace (killed at cleanup)."""
    p = subprocess.Popen(topo.exec_argv(side, [sys.executable, "-c", _ECHO, ip, port]),
                         stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)

    def stop():
        cancel_cleanup(stop)
        if p.poll() is None:
            p.kill()
            p.wait()
    at_cleanup(stop)
    if p.stdout.readline().strip() != "listening":
        stop()
        raise Failure("echo server on %s:%d in %s did not start" % (ip, port, topo.ns[side]))
    p.stop = stop
    return p


# ---- parsing ------------------------------------------------------------------

def parse_kv(line):
    """`WORD k=v k=v ...` -> dict (numbers converted)."""
    d = {}
    for tok in line.split()[1:]:
        if "=" not in tok:
            continue
        k, v = tok.split("=", 1)
        d[k] = int(v) if re.fullmatch(r"-?\d+", v) else v
    return d


def parse_reasons(s):
    """`failover.stall:2,peer.failback:1` -> {name: count}."""
    res = {}
    if not isinstance(s, str) or s in ("", "-", "none"):
        return res
    for item in s.split(","):
        if ":" in item:
            k, v = item.rsplit(":", 1)
            res[k] = res.get(k, 0) + int(v)
    return res


def parse_results(text):
    """rov_stream stdout -> {"total": {...}, "conns": {i: {...}}}."""
    total, conns = None, {}
    for line in text.splitlines():
        if line.startswith("ROV_STREAM_RESULT "):
            total = parse_kv(line)
        elif line.startswith("ROV_STREAM_CONN "):
            c = parse_kv(line)
            c["reasons"] = parse_reasons(c.get("reasons", ""))
            conns[c.get("conn")] = c
    return {"total": total, "conns": conns}


def parse_rail(s):
    """`fabric(0)` -> ("fabric", 0)."""
    m = re.fullmatch(r"(.*)\((-?\d+)\)", s or "")
    return (m.group(1), int(m.group(2))) if m else (s, None)


def parse_status(text):
    """`railover status PID` output -> {"process": {...}, "rails": [ {...} ],
    "conns": [ {..., "chans": [ {...} ]} ]}.  A conn's and chan's rail fields
    become rail_name / rail (index)."""
    proc, rails, conns = {}, [], []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("process "):
            proc = parse_kv(s)
        elif s.startswith("rail "):
            rails.append(parse_kv(s))
        elif s.startswith("conn "):
            c = parse_kv(s)
            c["rail_name"], c["rail"] = parse_rail(c.get("rail"))
            c["reasons"] = parse_reasons(c.get("reasons", ""))
            c["chans"] = []
            conns.append(c)
        elif s.startswith("chan ") and conns:
            ch = parse_kv(s)
            ch["rail_name"], ch["rail"] = parse_rail(ch.get("rail"))
            conns[-1]["chans"].append(ch)
    return {"process": proc, "rails": rails, "conns": conns}


def split_addr(s):
    """`192.0.2.1:4242` -> ("192.0.2.1", 4242)."""
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


class JsonLines:
    """Incremental reader of a JSON-lines file still being written."""

    def __init__(self, path):
        self.path = path
        self.off = 0
        self.partial = b""
        self.items = []
        self.bad = []

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read()
        except FileNotFoundError:
            return self.items
        self.off += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            try:
                self.items.append(json.loads(line))
            except ValueError:
                self.bad.append(line.decode(errors="replace"))
        return self.items


def read_rate_csv(path):
    """Rate CSV -> list of row dicts (numbers converted)."""
    rows = []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return rows
    if not lines:
        return rows
    header = [h.strip() for h in lines[0].split(",")]
    if "t_s" not in header:   # no header line: the documented column order
        header = ["t_s", "side", "conn", "rail", "rx_msgs", "rx_bytes", "rx_mb_s", "tx_msgs",
                  "tx_bytes"]
    else:
        lines = lines[1:]
    for line in lines:
        vals = line.split(",")
        if len(vals) != len(header):
            continue          # a line being written
        row = {}
        for k, v in zip(header, vals):
            v = v.strip()
            try:
                row[k] = int(v)
            except ValueError:
                try:
                    row[k] = float(v)
                except ValueError:
                    row[k] = v
        rows.append(row)
    return rows


# ---- the stream pair ------------------------------------------------------------

def common_args(description, extra=None):
    """Argument parser shared by the test scripts."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--rov-stream", default=os.environ.get(
        "ROV_STREAM", os.path.join(root, "build", "tests", "integration", "rov_stream")),
        help="rov_stream program (default: $ROV_STREAM or build/tests/integration/rov_stream)")
    ap.add_argument("--railover", default=os.environ.get(
        "RAILOVER_TOOL", os.path.join(root, "build", "tools", "railover")),
        help="railover tool (default: $RAILOVER_TOOL or build/tools/railover)")
    ap.add_argument("--keep", action="store_true", help="keep the log directory even on success")
    ap.add_argument("--conns", type=int, default=3, help="connections (default 3)")
    ap.add_argument("--seed", type=int, default=None, help="rov_stream --seed (default: random)")
    if extra:
        extra(ap)
    args = ap.parse_args()
    for what, path in (("rov_stream", args.rov_stream), ("railover", args.railover)):
        if not os.access(path, os.X_OK):
            raise SystemExit("%s: %s is not an executable (build first, or pass --%s)" %
                             (os.path.basename(sys.argv[0]), path,
                              "rov-stream" if what == "rov_stream" else "railover"))
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    return args


class Dir:
    def __init__(self, path):
        self.path = path

    def file(self, name):
        return os.path.join(self.path, name)

    def sub(self, name):
        """A subdirectory (e.g. one per phase of a test)."""
        d = Dir(self.file(name))
        os.mkdir(d.path, 0o700)
        return d


class Workdir(Dir):
    """Temporary log directory: removed on success unless --keep, kept (and
    its path printed) on failure."""

    def __init__(self, name, keep=False):
        super().__init__(tempfile.mkdtemp(prefix="rov-fo-%s-" % name))
        os.chmod(self.path, 0o700)
        self.keep = keep
        self.failed = True   # until the test says otherwise
        at_cleanup(self.finish)

    def finish(self):
        cancel_cleanup(self.finish)
        if self.failed or self.keep:
            print("logs kept in %s" % self.path, flush=True)
        else:
            shutil.rmtree(self.path, ignore_errors=True)


class Proc:
    def __init__(self, role, argv, env, out, err, pid_file):
        self.role = role
        self.argv = argv
        self.out_path, self.err_path, self.pid_file = out, err, pid_file
        self._out = open(out, "w")
        self._err = open(err, "w")
        self.p = subprocess.Popen(argv, env=env, stdout=self._out, stderr=self._err,
                                  stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        self.rc = None
        at_cleanup(self.kill)

    @property
    def pid(self):
        """rov_stream's pid (from --pid-file when it wrote one)."""
        try:
            with open(self.pid_file) as f:
                v = f.read().strip()
            if v.isdigit():
                return int(v)
        except (OSError, TypeError):
            pass
        return self.p.pid

    def poll(self):
        if self.rc is None:
            self.rc = self.p.poll()
        return self.rc

    def alive(self):
        return self.poll() is None

    def wait(self, timeout):
        try:
            self.rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.rc

    def kill(self):
        cancel_cleanup(self.kill)
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(3)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.rc = self.p.returncode if self.rc is None else self.rc
        for f in (self._out, self._err):
            if not f.closed:
                f.close()

    def stdout(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def tail(self, n=30):
        lines = []
        for path in (self.err_path, self.out_path):
            try:
                with open(path, errors="replace") as f:
                    lines += ["  " + l.rstrip("\n") for l in f.readlines()[-n:]]
            except OSError:
                pass
        return "\n".join(lines)


def rov_stream_features(prog):
    p = subprocess.run([prog, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return set(re.findall(r"--([a-z][a-z-]+)", p.stdout))


SIDES = ("listener", "connector")


class StreamPair:
    """A rov_stream listener and connector with continuous checksummed
    traffic both ways on `conns` connections, until stop().

    topo: a Topology (listener in A, connector in B) or None for loopback
    (rails from env_l/env_c, default tcp@127.0.0.1,tcp@127.0.0.2).
    """

    def __init__(self, args, wd, topo=None, conns=3, env=None, env_l=None, env_c=None,
                 extra=(), max_size=65536, rate_ms=200, timeout_s=600, stall_s=30,
                 count=None):
        self.args, self.wd, self.topo, self.conns = args, wd, topo, conns
        self.procs = {}
        self.stop_file = wd.file("stop")
        self.addr_file = wd.file("addr")
        self.run_dir = wd.file("run")
        if len(self.run_dir) < RUN_DIR_MAX:
            os.mkdir(self.run_dir, 0o700)
        else:
            # A control socket's path must fit sun_path: a deep log directory
            # (CI's clone) gets its run directory under /tmp instead.
            self.run_dir = tempfile.mkdtemp(prefix="rov-run-")
            at_cleanup(functools.partial(shutil.rmtree, self.run_dir, ignore_errors=True))
        self.events = {s: JsonLines(wd.file(s + ".events")) for s in SIDES}
        self.rate = {s: wd.file(s + ".rate.csv") for s in SIDES}
        self.results = None
        self.marks = []          # (t_ns, label): what the test did when
        base = dict(os.environ)
        for k in list(base):
            if k.startswith("RAILOVER_"):
                del base[k]
        base.update(FAULT_ENV if env is None else env)
        base["RAILOVER_RUN_DIR"] = self.run_dir
        self.env = {"listener": dict(base), "connector": dict(base)}
        self.env["listener"]["RAILOVER_RAILS"] = RAILS_A if topo else "tcp@127.0.0.1,tcp@127.0.0.2"
        self.env["connector"]["RAILOVER_RAILS"] = RAILS_B if topo else "tcp@127.0.0.1,tcp@127.0.0.2"
        self.env["listener"].update(env_l or {})
        self.env["connector"].update(env_c or {})
        self.common = ["--conns", conns, "--stop-file", self.stop_file, "--seed", args.seed,
                       "--max-size", max_size, "--quiet-status", "--stall", stall_s,
                       "--timeout", timeout_s]
        if count:
            self.common += ["--count", count]
        if rate_ms:
            self.common += ["--rate-ms", rate_ms]
        self.rate_ms = rate_ms
        self.extra = list(extra)

    def mark(self, label):
        t = now_ns()
        self.marks.append((t, label))
        with open(self.wd.file("marks.txt"), "a") as f:
            f.write("%d %s\n" % (t, label))
        return t

    def _argv(self, role):
        a = ["--listen" if role == "listener" else "--connect", self.addr_file] + self.common
        a += ["--events", self.events[role].path, "--pid-file", self.wd.file(role + ".pid")]
        if self.rate_ms:
            a += ["--rate-csv", self.rate[role]]
        argv = [self.args.rov_stream] + [str(x) for x in a + self.extra]
        if self.topo:
            argv = self.topo.exec_argv("A" if role == "listener" else "B", argv)
        return argv

    def _start(self, role):
        argv = self._argv(role)
        with open(self.wd.file("commands.txt"), "a") as f:
            env = " ".join("%s=%s" % (k, v) for k, v in sorted(self.env[role].items())
                           if k.startswith("RAILOVER_"))
            f.write("%s %s\n" % (env, " ".join(argv)))
        self.procs[role] = Proc(role, argv, self.env[role], self.wd.file(role + ".out"),
                                self.wd.file(role + ".log"), self.wd.file(role + ".pid"))

    def start(self, ready_timeout=30, on_connector=None):
        """Start both sides; return when every connection is established
        and has delivered messages both ways.  on_connector() is called
        right after the connector started."""
        self._start("listener")
        deadline = time.monotonic() + 30
        while not os.path.exists(self.addr_file):
            self.check_alive("before writing its address")
            if time.monotonic() > deadline:
                raise Failure("listener wrote no address file within 30 s")
            time.sleep(0.05)
        self._start("connector")
        if on_connector:
            on_connector()
        self.wait_until("every connection established and delivering both ways",
                        self._ready, ready_timeout)
        self.mark("ready")
        log("%d connections established, traffic flowing (logs in %s)" %
            (self.conns, self.wd.path))

    def _ready(self):
        for role in SIDES:
            # The listener's "accepted" events carry conn -1 (the index is
            # known only from the connector's hello): count them.
            evs = self.events[role].poll()
            up = [e for e in evs if e.get("ev") in ("established", "accepted")]
            if len(up) < self.conns:
                return False
        if self.rate_ms:
            for role in SIDES:
                rx = self.rx_totals(role)
                if len(rx) < self.conns or not all(v > 0 for v in rx.values()):
                    return False
        return True

    # -- observation -----------------------------------------------------------

    def check_alive(self, when=""):
        for role, p in self.procs.items():
            if p.poll() is not None:
                raise Failure("%s exited early with status %s %s\n%s" %
                              (role, p.rc, when, p.tail()))

    def wait_until(self, what, pred, timeout, poll=0.1, alive=True):
        log("waiting (up to %gs): %s" % (timeout, what))
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            if pred():
                log("  ok after %.2fs: %s" % (time.monotonic() - t0, what))
                return
            if alive:
                self.check_alive("while waiting for: " + what)
            if time.monotonic() > deadline:
                raise Failure("not within %gs: %s\n%s" % (timeout, what, self.describe()))
            time.sleep(poll)

    def log_count(self, role, text):
        """How many lines of role's stderr log contain text."""
        try:
            with open(self.procs[role].err_path, errors="replace") as f:
                return sum(text in line for line in f)
        except FileNotFoundError:
            return 0

    def switches(self, role, conn=None, since_ns=0):
        evs = self.events[role].poll()
        return [e for e in evs if e.get("ev") == "switch" and e.get("t", 0) >= since_ns and
                (conn is None or e.get("conn") == conn)]

    def rail_of(self, role, conn):
        """Current rail of a connection on one side, by its switch events."""
        sw = self.switches(role, conn)
        return sw[-1].get("to") if sw else 0

    def rails(self):
        return {role: [self.rail_of(role, i) for i in range(self.conns)] for role in SIDES}

    def all_on(self, rail, conns=None):
        conns = range(self.conns) if conns is None else conns
        return all(self.rail_of(role, i) == rail for role in SIDES for i in conns)

    def rx_totals(self, role, rail=None, since_s=None):
        """Messages received per connection according to the rate CSV
        (rx_msgs is per interval), optionally only on one rail / after a
        time (t_s of the CSV)."""
        tot = {}
        for r in read_rate_csv(self.rate[role]):
            if r.get("side") != role:
                continue
            if rail is not None and r.get("rail") != rail:
                continue
            if since_s is not None and r.get("t_s", 0) < since_s:
                continue
            c = r.get("conn")
            tot[c] = tot.get(c, 0) + int(r.get("rx_msgs", 0))
        return tot

    def status(self, role):
        """`railover status PID` of one side, parsed."""
        p = self.procs[role]
        out = subprocess.run([self.args.railover, "status", str(p.pid)],
                             env=self.env[role], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        with open(self.wd.file(role + ".status.txt"), "a") as f:
            f.write("# %d railover status %d (exit %d)\n%s%s" %
                    (now_ns(), p.pid, out.returncode, out.stdout, out.stderr))
        if out.returncode != 0:
            raise Failure("railover status %d (%s) failed (exit %d): %s" %
                          (p.pid, role, out.returncode, out.stderr.strip()))
        return parse_status(out.stdout)

    def control(self, role, *words):
        p = self.procs[role]
        out = subprocess.run([self.args.railover] + list(words[:1]) + [str(p.pid)] +
                             list(words[1:]), env=self.env[role], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        if out.returncode != 0:
            raise Failure("railover %s %d failed: %s" % (" ".join(words), p.pid, out.stdout))
        return out.stdout

    def stalled(self, window_s):
        """(side, conn) pairs that received nothing during the last window_s
        seconds of their rate CSV (empty until the CSV spans window_s)."""
        res = []
        for role in SIDES:
            rows = [r for r in read_rate_csv(self.rate[role]) if r.get("side") == role]
            if not rows:
                continue
            end = max(r.get("t_s", 0) for r in rows)
            if end - min(r.get("t_s", 0) for r in rows) < window_s:
                continue
            got = {}
            for r in rows:
                if r.get("t_s", 0) > end - window_s:
                    got[r.get("conn")] = got.get(r.get("conn"), 0) + int(r.get("rx_msgs", 0))
            res += [(role, i) for i in range(self.conns) if got.get(i, 0) == 0]
        return res

    def check_flowing(self, window_s=10):
        """Fail when a direction of a connection has stopped delivering for
        window_s seconds while the program runs (its own --stall watches
        the process as a whole, so one stuck direction goes unnoticed)."""
        bad = self.stalled(window_s)
        if bad:
            raise Failure("no message delivered for %gs on: %s (rate CSV)\n%s" % (
                window_s, ", ".join("%s conn %d (rail by events %s)" %
                                   (role, i, self.rail_of(role, i)) for role, i in bad),
                self.describe()))

    def status_text(self, role):
        """Raw `railover status` of a live side, for failure reports."""
        p = self.procs.get(role)
        if not p or not p.alive():
            return "  (%s not running)" % role
        try:
            out = subprocess.run([self.args.railover, "status", str(p.pid)], env=self.env[role],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=10).stdout
        except subprocess.TimeoutExpired:
            return "  (railover status %d timed out)" % p.pid
        with open(self.wd.file(role + ".status.txt"), "a") as f:
            f.write("# %d railover status %d (failure report)\n%s" % (now_ns(), p.pid, out))
        return "\n".join("  " + l for l in out.splitlines())

    def describe(self):
        """Current state for failure messages."""
        lines = ["  rails now (by events): " + ", ".join(
            "%s %s" % (role, r) for role, r in self.rails().items())]
        for role in SIDES:
            for e in self.switches(role)[-8:]:
                lines.append("  %s conn %s switch %s->%s %s @%.3fs" % (
                    role, e.get("conn"), e.get("from"), e.get("to"), e.get("reason"),
                    (e.get("t", 0) - _T0) / 1e9))
        for role in self.procs:
            lines.append("  --- %s: railover status ---" % role)
            lines.append(self.status_text(role))
        for role, p in self.procs.items():
            lines.append("  --- %s (pid %d, %s): last lines ---" %
                         (role, p.pid, "running" if p.alive() else "exit %s" % p.rc))
            lines.append(p.tail(12))
        return "\n".join(lines)

    # -- the end -----------------------------------------------------------

    def stop(self, timeout=60):
        """Create the stop file; wait for both sides; parse their results."""
        self.mark("stop")
        log("stop file created; waiting for both sides to close")
        with open(self.stop_file, "w"):
            pass
        deadline = time.monotonic() + timeout
        for role in SIDES:
            p = self.procs[role]
            left = max(0.1, deadline - time.monotonic())
            if p.wait(left) is None:
                p.kill()
                raise Failure("%s did not finish within %ds after the stop file\n%s" %
                              (role, timeout, self.describe()))
        self.results = {}
        for role in SIDES:
            self.procs[role].kill()   # closes the log files
            self.results[role] = parse_results(self.procs[role].stdout())
            self.events[role].poll()
        return self.results

    def kill(self):
        for p in self.procs.values():
            p.kill()


# ---- checks -----------------------------------------------------------------------

class Checker:
    """Collects failed claims; each message names the connection and what
    was expected and found."""

    def __init__(self):
        self.errors = []
        self.notes = []

    def check(self, cond, msg):
        if not cond:
            self.errors.append(msg)
            log("CHECK FAILED: " + msg)
        return cond

    def note(self, msg):
        self.notes.append(msg)
        log(msg)

    def done(self):
        if self.errors:
            raise Failure("%d check(s) failed:\n  - %s" % (len(self.errors),
                                                        "\n  - ".join(self.errors)))


def check_stream(ck, pair):
    """Zero loss, zero duplicates, in order: exit status, per-side verdicts,
    and the cross-check of counts (connector.sent == listener.recv and the
    reverse, per connection)."""
    res = pair.results
    for role in SIDES:
        p = pair.procs[role]
        ck.check(p.rc == 0, "%s exited with status %s (0 = every message verified)" %
                 (role, p.rc))
        tot = res[role]["total"]
        if not ck.check(tot is not None, "%s printed no ROV_STREAM_RESULT line" % role):
            continue
        ck.check(tot.get("rc") == 0, "%s: ROV_STREAM_RESULT rc=%s, expected 0" %
                 (role, tot.get("rc")))
        ck.check(tot.get("failures", 0) == 0, "%s: failures=%s, expected 0" %
                 (role, tot.get("failures")))
        for i in range(pair.conns):
            c = res[role]["conns"].get(i)
            if not ck.check(c is not None, "%s printed no ROV_STREAM_CONN line for conn %d" %
                            (role, i)):
                continue
            ck.check(c.get("rc") == 0, "%s conn %d: rc=%s errors=%s, expected rc=0" %
                     (role, i, c.get("rc"), c.get("errors")))
            ck.check(c.get("errors", 0) in (0, "0", "-", "none", ""),
                     "%s conn %d: errors=%s, expected none" % (role, i, c.get("errors")))
    L, C = res["listener"]["conns"], res["connector"]["conns"]
    for i in range(pair.conns):
        l, c = L.get(i), C.get(i)
        if l is None or c is None:
            continue
        for src, dst, sname, dname in ((c, l, "connector", "listener"),
                                       (l, c, "listener", "connector")):
            ck.check(src.get("sent") == dst.get("recv"),
                     "conn %d: %s sent %s messages, %s received %s (lost or duplicated: %s)" %
                     (i, sname, src.get("sent"), dname, dst.get("recv"),
                      _diff(src.get("sent"), dst.get("recv"))))
            if "sent_bytes" in src and "recv_bytes" in dst:
                ck.check(src["sent_bytes"] == dst["recv_bytes"],
                         "conn %d: %s sent %s bytes, %s received %s bytes" %
                         (i, sname, src["sent_bytes"], dname, dst["recv_bytes"]))
            ck.check((src.get("sent") or 0) > 0,
                     "conn %d: %s sent no message at all" % (i, sname))
        log("conn %d: connector sent %s / listener received %s; listener sent %s / connector "
            "received %s; resent %s/%s, dups dropped %s/%s, switches %s/%s, final rail %s/%s, "
            "reasons %s / %s" % (
                i, c.get("sent"), l.get("recv"), l.get("sent"), c.get("recv"),
                l.get("resent"), c.get("resent"), l.get("dups_dropped"), c.get("dups_dropped"),
                l.get("switches"), c.get("switches"), l.get("rail"), c.get("rail"),
                fmt_reasons(l.get("reasons")), fmt_reasons(c.get("reasons"))))
    for role in SIDES:
        ck.check(not pair.events[role].bad, "%s: %d unparsable event lines, first: %r" %
                 (role, len(pair.events[role].bad), (pair.events[role].bad or [""])[0]))


def _diff(a, b):
    try:
        return "%+d" % (a - b)
    except TypeError:
        return "?"


def fmt_reasons(r):
    return ",".join("%s:%d" % kv for kv in sorted((r or {}).items())) or "-"


def is_failover(reason):
    return isinstance(reason, str) and reason.startswith(FAILOVER_PREFIX)


def check_moves(ck, pair, conn, since_ns, until_ns, to, leader_ok, follower_ok, what):
    """Connection `conn` moved to rail `to` between since_ns and until_ns:
    at least one side with a reason accepted by leader_ok, the other side
    with leader_ok or follower_ok."""
    found = {}
    for role in SIDES:
        sw = [e for e in pair.switches(role, conn)
              if since_ns <= e.get("t", 0) <= until_ns and e.get("to") == to]
        found[role] = [e.get("reason") for e in sw]
    log("conn %d %s: listener %s, connector %s" % (conn, what, found["listener"] or "-",
                                                    found["connector"] or "-"))
    lead = [r for r in SIDES if any(leader_ok(x) for x in found[r])]
    ok = bool(lead) and all(any(leader_ok(x) or follower_ok(x) for x in found[r])
                            for r in SIDES)
    ck.check(ok, "conn %d: %s: expected a switch to rail %d with %s; found listener %s, "
             "connector %s" % (conn, what, to, leader_ok.__doc__ or "the leader's reason",
                               found["listener"] or "no switch", found["connector"] or
                               "no switch"))
    return found


def final_rails(ck, pair, rail, conns=None):
    """Every (listed) connection ends on `rail`, by its result line."""
    conns = range(pair.conns) if conns is None else conns
    for role in SIDES:
        for i in conns:
            c = pair.results[role]["conns"].get(i) or {}
            ck.check(c.get("rail") == rail, "%s conn %d: final rail %s, expected %d" %
                     (role, i, c.get("rail"), rail))


def main(test, needs_netns=True, needs_nft=False):
    """Run test() with skip/fail reporting; exit 0, 1 or 77."""
    try:
        if needs_netns:
            require_netns(nft=needs_nft)
        test()
    except Skip as e:
        print("SKIP: %s" % e, flush=True)
        run_cleanups()
        sys.exit(SKIP)
    except Failure as e:
        print("FAIL: %s" % e, flush=True)
        run_cleanups()
        sys.exit(1)
    except SystemExit:
        run_cleanups()
        raise
    except BaseException:
        traceback.print_exc()
        print("FAIL: unexpected exception", flush=True)
        run_cleanups()
        sys.exit(1)
    run_cleanups()
    print("PASS", flush=True)
    sys.exit(0)


# ---- the common scenario: break the fabric, heal it ------------------------------

def stall_reason(reason):
    """failover.stall*"""
    return isinstance(reason, str) and reason.startswith("failover.stall")


def link_reason(reason):
    """failover.link: the kernel said the link went down"""
    return reason == "failover.link"


def error_reason(reason):
    """failover.error*"""
    return isinstance(reason, str) and reason.startswith("failover.error")


def any_failover(reason):
    """failover.*"""
    return is_failover(reason)


def follows_failover(reason):
    """peer.failover"""
    return reason == PEER_FAILOVER or is_failover(reason)


def failback_reason(reason):
    """failback"""
    return reason == FAILBACK


def follows_failback(reason):
    """peer.failback"""
    return reason in (PEER_FAILBACK, FAILBACK)


def check_counts(ck, pair):
    """Every switch is reported once: per side and connection, the switch
    events, the result's switches= and the sum of its reasons= agree."""
    for role in SIDES:
        for i in range(pair.conns):
            c = pair.results[role]["conns"].get(i)
            if not c:
                continue
            n_ev = len(pair.switches(role, i))
            ck.check(c.get("switches") == n_ev,
                     "%s conn %d: switches=%s in the result but %d switch events" %
                     (role, i, c.get("switches"), n_ev))
            ck.check(sum(c["reasons"].values()) == c.get("switches"),
                     "%s conn %d: reasons %s add up to %d, switches=%s" %
                     (role, i, fmt_reasons(c["reasons"]), sum(c["reasons"].values()),
                      c.get("switches")))


def fabric_then_eth_down(topo, pair):
    """Traffic flowing: the fabric goes down on side A, every connection
    moves to rail 1 (the ethernet), then the ethernet goes down too.  The
    time of the first fault (ns, the pair's clock)."""
    time.sleep(1.0)
    t_fault = pair.mark("fab down")
    topo.link_down("A", "fab")
    pair.wait_until("every connection on rail 1 on both sides", lambda: pair.all_on(1), 20)
    pair.mark("eth down")
    topo.link_down("A", "eth")
    return t_fault


def check_rail_traffic(ck, pair, rail, wait_s=2.0, conns=None):
    """Messages keep arriving on `rail`: the rate CSV's rx counts on that
    rail grow, per side and connection, over wait_s seconds."""
    conns = range(pair.conns) if conns is None else conns
    before = {role: pair.rx_totals(role, rail=rail) for role in SIDES}
    time.sleep(wait_s)
    after = {role: pair.rx_totals(role, rail=rail) for role in SIDES}
    for role in SIDES:
        for i in conns:
            b, a = before[role].get(i, 0), after[role].get(i, 0)
            ck.check(a > b, "%s conn %d: no message received on rail %d in %.1f s (rate CSV "
                     "rx_msgs on that rail %d -> %d)" % (role, i, rail, wait_s, b, a))
    log("rail %d carries traffic: rx msgs in %.1fs per conn: %s" % (
        rail, wait_s, "; ".join("%s %s" % (role, [after[role].get(i, 0) - before[role].get(i, 0)
                                                   for i in conns]) for role in SIDES)))


def fault_and_heal(args, name, inject, heal, leader_ok, env=None, conns=None,
                   heal_timeout=60, tcp_rmem=None, after_back=None, before_fault=None):
    """Continuous traffic on every connection; inject() breaks the fabric
    (rail 0), heal() repairs it.  Claims:
      - before the fault nothing switches;
      - after it every connection is on rail 1 on both sides, moved with a
        reason accepted by leader_ok on at least one side (peer.failover or
        a failover.* on the other);
      - messages keep arriving on rail 1 while the fault lasts, and nothing
        moves back before heal();
      - after heal() every connection returns to rail 0 with failback on
        one side and peer.failback (or failback) on the other;
      - zero loss, no duplicate, in order (rov_stream exit 0 and the count
        cross-check), every switch counted once.
    inject(topo, pair) and heal(topo, state) where state is what inject
    returned.  tcp_rmem: net.ipv4.tcp_rmem in both namespaces.
    after_back(ck, pair): further claims once every connection is back;
    before_fault(ck, pair): further claims about the steady state."""
    wd = Workdir(name, args.keep)
    ck = Checker()
    conns = conns or args.conns
    with Topology() as topo:
        if tcp_rmem:
            topo.sysctl("net.ipv4.tcp_rmem", tcp_rmem)
        pair = StreamPair(args, wd, topo, conns=conns, env=env)
        try:
            pair.start()
            time.sleep(1.0)
            early = {role: pair.switches(role) for role in SIDES}
            ck.check(not any(early.values()), "switches before any fault: %s" % early)
            if before_fault:
                before_fault(ck, pair)

            t_fault = pair.mark("fault")
            state = inject(topo, pair)
            pair.wait_until("every connection on rail 1 on both sides", lambda: pair.all_on(1),
                            20)
            t_moved = now_ns()
            for i in range(conns):
                check_moves(ck, pair, i, t_fault, t_moved, 1, leader_ok, follows_failover,
                            "failover")
            check_rail_traffic(ck, pair, 1)
            time.sleep(1.0)
            pair.check_alive("while the fabric is broken")
            back = [(role, e) for role in SIDES for e in pair.switches(role, since_ns=t_moved)]
            ck.check(not back, "switches while the fabric is still broken: %s" %
                     ["%s conn %s %s->%s %s" % (r, e.get("conn"), e.get("from"), e.get("to"),
                                               e.get("reason")) for r, e in back])

            t_heal = pair.mark("heal")
            heal(topo, state)
            pair.wait_until("every connection back on rail 0 on both sides",
                            lambda: pair.all_on(0), heal_timeout)
            t_back = now_ns()
            for i in range(conns):
                check_moves(ck, pair, i, t_heal, t_back, 0, failback_reason, follows_failback,
                            "failback")
            if after_back:
                after_back(ck, pair)
            check_rail_traffic(ck, pair, 0, wait_s=1.0)
            pair.stop()
        finally:
            pair.kill()
        check_stream(ck, pair)
        final_rails(ck, pair, 0)
        check_counts(ck, pair)
    ck.done()
    wd.failed = False


class CycleTally:
    """Cycles per connection, read from both sides' events files as they
    grow, each event once (a soak of 400,000 cycles writes millions: a
    rescan of every event for every connection at every look was quadratic).

    A failover/failback cycle: a switch away from rail 0 with a failover.*
    reason (either side) followed by a switch back to rail 0 with reason
    failback (either side); follower switches (peer.*) are the same moves
    seen from the other side and are not counted.  Switches are taken in
    time order across the sides, up to the latest time both sides' files
    have reached (the rest waits for the next look, or final=True).  With
    bond=True, a rail leaving a connection's bond and joining it again
    counts too, per side (ROV_EVENT_CONN_BOND; each side keeps its own
    members)."""

    def __init__(self, pair, bond=False):
        self.pair, self.bond = pair, bond
        self.read = {role: 0 for role in SIDES}
        self.last_t = {role: 0 for role in SIDES}
        self.pending = []                      # switches not yet in time order
        self.away = {}                         # conn -> a failover seen, no failback yet
        self.out = {role: {} for role in SIDES}  # conn -> rails out of its bond
        self.per = {}

    def _add(self, conn, n=1):
        self.per[conn] = self.per.get(conn, 0) + n

    def update(self, final=False):
        """Read what is new; the total so far."""
        for role in SIDES:
            evs = self.pair.events[role].poll()
            for e in evs[self.read[role]:]:
                self.last_t[role] = max(self.last_t[role], e.get("t", 0))
                kind, conn = e.get("ev"), e.get("conn")
                if kind == "switch":
                    self.pending.append(e)
                elif kind == "bond" and self.bond:
                    out = self.out[role].setdefault(conn, set())
                    if e.get("left", -1) >= 0:
                        out.add(e["left"])
                    elif e.get("joined", -1) in out:
                        out.discard(e["joined"])
                        self._add(conn)
            self.read[role] = len(evs)
        upto = None if final else min(self.last_t.values())
        self.pending.sort(key=lambda e: e.get("t", 0))
        keep = []
        for e in self.pending:
            if upto is not None and e.get("t", 0) > upto:
                keep.append(e)
                continue
            conn, r = e.get("conn"), e.get("reason")
            if is_failover(r) and e.get("to") != 0:
                self.away[conn] = True
            elif r == FAILBACK and e.get("to") == 0 and self.away.get(conn):
                self.away[conn] = False
                self._add(conn)
        self.pending = keep
        return sum(self.per.values())

    def of(self, conn):
        return self.per.get(conn, 0)
