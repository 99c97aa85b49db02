#!/usr/bin/env python3
"""Bonding's measuring ground: one connection over two shaped links (issue 38).

Two network namespaces A and B (tests/failover's netfault Topology) joined
by two fabric veths and an ethernet veth:

    fab0  192.0.2.1/26    <-> 192.0.2.2/26     shaped (tbf, both ends' egress)
    fab1  192.0.2.65/26   <-> 192.0.2.66/26    shaped (tbf, both ends' egress)
    eth   198.51.100.1/24 <-> 198.51.100.2/24  not shaped: bootstrap, Open MPI's
                                               out-of-band traffic

Shapes (--shapes, default 1:1,1:3): with --rate R and a ratio X:Y, fab0 is
shaped to 2R*X/(X+Y) and fab1 to 2R*Y/(X+Y), so the two links always add up
to 2R (1:1: R each; 1:3: R/2 and 3R/2): the same total work for the machine
in every shape.  tbf, one qdisc per device and direction, burst max(256 KiB,
1 ms at the rate) (above veth's largest GSO packet, 64 KiB, which tbf
would otherwise split), queue 10 ms (limit = 10 ms at the rate + burst).

Configurations, servers (and rank 0) in A on cpu 0, clients (rank 1) in B
on cpu 1 (--no-pin: anywhere):

  one-link   `railover perf`, RAILOVER_RAILS=tcp@<fab0 address> both ends
  tcp-one    `railover perf --raw`: plain TCP on fab0 (the kernel's figure)
  mptcp      one MPTCP connection (IPPROTO_MPTCP, this script's own client
             and server) from B's fab0 address to A's; A announces its fab1
             address (`ip mptcp endpoint add ... dev fab1 signal`, limits
             subflows 2 add_addr_accepted 2 both sides), B opens the second
             subflow to it: one subflow per fabric link
  btl-tcp-1  Open MPI, pml ob1, btl self,tcp, btl_tcp_if_include fab0
  btl-tcp-2  the same with btl_tcp_if_include fab0,fab1 (ob1 stripes over
             the two btl modules); bench/mpi-users.c's figures
  rov-bond   `railover perf`, RAILOVER_RAILS=tcp@<fab0>,tcp@<fab1>,
             RAILOVER_BOND=on; skipped (said so) while the library does not
             know RAILOVER_BOND (not in `railover info`'s settings)
  btl-rov-bond  Open MPI, pml ob1, btl self,railover, btl_railover_rails
             tcp@fab0,tcp@fab1, btl_railover_bond on (the --build's
             component): what an MPI user of the bond gets, large messages
             by RDMA get (reads in pieces over the members)
  btl-rov-bond-base  the same with --base-build's component (only when
             given), side by side

Figures (one-way times, bandwidth in MB/s = 10^6 B/s):

  lat 8 B           ping-pong, one-way time: railover perf's median of
                    2000, mpi-users' mean (not for mptcp: a Python loop's
                    latency is not the kernel's)
  stream SIZE       (--sizes, default 64k,1m,4m) one connection's streaming
                    bandwidth: railover perf's bandwidth test (--bw-bytes per
                    repetition, at least 64 messages, median of 3
                    repetitions), mptcp the same stream, mpi-users' windowed
                    bw (64 messages in flight)
  ping-pong 4 MiB   size / mean one-way time of --pp-iters 4 MiB ping-pongs

Paired rounds (--rounds, default 5): per shape, every round runs every
configuration, the order rotating from round to round (as mpi-perf.py
does).  Printed per shape (markdown, also summary.md): each figure's median
over the rounds, the median of the per-round ratios to one-link with their
min-max, for bandwidths the median as a fraction of the two links' summed
rate, and the share of the fabric bytes that crossed fab1 (from the veths'
counters: both subflows, both btl modules, both rails really carry data?).
Numbers, never verdicts: the exit status does not depend on them.

Files in --out DIR: runs.csv (one row per figure and job), jobs.csv (per job:
exit, wall time, bytes sent on fab0, fab1, eth), summary.md, meta.txt
(command, commit, load average, shapes and their tc lines); a failed job's
output stays as job-*.out.

--smoke: 1 round of each shape at --rate 4gbit, 64 KiB streams, small
transfers, every configuration that can run here: proves the benchmark
works (a CI smoke, about 30 s), asserts no number.

Exit: 0 done (configurations that cannot run here are skipped with a
SKIP line), 1 a job failed (output kept), 77 skipped (not root, no ip/netns,
no tc, no railover tool).
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mu = _load("mpi_users", "mpi-users.py")   # its mpi-perf (mp) and netfault (nf) too
mp, nf = mu.mp, mu.nf
log = mp.log

FAB0 = ("192.0.2.1", "192.0.2.2")
FAB1 = ("192.0.2.65", "192.0.2.66")
FABS = ("fab0", "fab1")
IPPROTO_MPTCP = 262

CONFIGS = ("one-link", "tcp-one", "mptcp", "btl-tcp-1", "btl-tcp-2", "rov-bond", "btl-rov-bond",
           "btl-rov-bond-base")
_ROV_BOND = ["--mca", "btl", "self,railover", "--mca", "btl_railover_rails", "tcp@fab0,tcp@fab1",
             "--mca", "btl_railover_bond", "on"]
MPI_CONFIGS = {
    "btl-tcp-1": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "fab0"],
    "btl-tcp-2": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "fab0,fab1"],
    "btl-rov-bond": _ROV_BOND,
    "btl-rov-bond-base": _ROV_BOND,
}
DEFAULT_SIZES = "64k,1m,4m"
PP_SIZE = 4194304
BASE = "one-link"


def figures(sizes):
    """[(name, unit)]: "lat 8 B" and "ping-pong 4 MiB" from ping-pongs,
    "stream SIZE" from streams."""
    return [("lat 8 B", "us")] + [("stream %s" % mp.fmt_size(s), "MB/s") for s in sizes] + \
        [("ping-pong %s" % mp.fmt_size(PP_SIZE), "MB/s")]


class BondTopology(nf.Topology):
    """netfault's two namespaces with two fabric links instead of one."""
    DEVS = {"fab0": FAB0, "fab1": FAB1, "eth": (nf.ETH_A, nf.ETH_B)}
    PREFIX = {"fab0": 26, "fab1": 26}


# ---- MPTCP peer (runs inside a namespace: this script with --mptcp-*) -------

# Request: u32 kind (1 stream, 2 ping-pong, 0 end), u32 0, u64 size, u64 count.
REQ = struct.Struct("<IIQQ")


def recv_exact(sock, buf, n):
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if k == 0:
            raise ConnectionError("peer closed")
        got += k


def recv_bytes(sock, buf, total):
    """Receive and drop total bytes through buf."""
    view = memoryview(buf)
    while total > 0:
        k = sock.recv_into(view, min(total, len(buf)))
        if k == 0:
            raise ConnectionError("peer closed")
        total -= k


def mptcp_serve(addr):
    """Serve one client connecting to ADDR:PORT.  Bound to every address of
    the namespace: the second subflow joins at the announced fab1 address."""
    host, port = addr.rsplit(":", 1)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("", int(port)))
    ls.listen(1)
    print("listening on %s:%d" % (host, ls.getsockname()[1]), flush=True)
    s, _ = ls.accept()
    buf = bytearray(4 << 20)
    hdr = bytearray(REQ.size)
    while True:
        recv_exact(s, hdr, REQ.size)
        kind, _, size, count = REQ.unpack(hdr)
        if kind == 0:
            return 0
        if len(buf) < size:
            buf = bytearray(size)
        if kind == 1:
            recv_bytes(s, buf, size * count)
            s.sendall(b"k")
        else:
            for _ in range(count):
                recv_exact(s, buf, size)
                s.sendall(memoryview(buf)[:size])


def mptcp_client(addr, sizes, bw_bytes, pp_iters, warmup):
    """Stream each size (3 repetitions of bw_bytes, median), then ping-pong
    PP_SIZE; JSON lines as `railover perf --json` prints them."""
    host, port = addr.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    s.connect((host, int(port)))
    buf = bytearray(max(sizes + [PP_SIZE]))
    ack = bytearray(1)

    def stream(size, count):
        s.sendall(REQ.pack(1, 0, size, count))
        view = memoryview(buf)[:size]
        t0 = time.monotonic_ns()
        for _ in range(count):
            s.sendall(view)
        recv_exact(s, ack, 1)
        return time.monotonic_ns() - t0

    stream(1 << 20, 8)   # warm-up: the second subflow joins during the first RTTs
    for size in sizes:
        count = max(64, -(-bw_bytes // size))   # railover perf's count
        mb_s = sorted(count * size * 1e3 / stream(size, count) for _ in range(3))[1]
        print(json.dumps({"test": "bandwidth", "path": "mptcp", "size": size,
                          "mb_s": round(mb_s, 1), "bytes": size * count}), flush=True)
    s.sendall(REQ.pack(2, 0, PP_SIZE, warmup + pp_iters))
    view = memoryview(buf)[:PP_SIZE]
    times = []
    for it in range(warmup + pp_iters):
        t0 = time.monotonic_ns()
        s.sendall(view)
        recv_exact(s, buf, PP_SIZE)
        if it >= warmup:
            times.append((time.monotonic_ns() - t0) / 2000.0)
    print(json.dumps({"test": "latency", "path": "mptcp", "size": PP_SIZE,
                      "mean_us": round(statistics.mean(times), 3),
                      "p50_us": round(statistics.median(times), 3), "iters": pp_iters}),
          flush=True)
    s.sendall(REQ.pack(0, 0, 0, 0))
    s.close()
    return 0


# ---- the benchmark ------------------------------------------------------------

def parse_rate(text):
    """'1gbit', '500mbit', '800000kbit' -> bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)bit", text.strip().lower())
    if not m:
        raise ValueError("%r: a rate like 1gbit or 500mbit" % text)
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)])


def parse_shape(text):
    m = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ValueError("%r: a ratio X:Y of positive integers" % text)
    return int(m.group(1)), int(m.group(2))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="build directory with tools/railover (default: build next to bench/)")
    ap.add_argument("--out", default=None,
                    help="result directory (default ./bond-bench-YYYYmmdd-HHMMSS)")
    ap.add_argument("--rate", default=None,
                    help="per-link rate of the equal shape; every shape's two links add up "
                    "to twice this (default 1gbit; smoke 4gbit, to be quick)")
    ap.add_argument("--shapes", default="1:1,1:3",
                    help="ratios fab0:fab1, comma separated (default 1:1,1:3)")
    ap.add_argument("--rounds", type=int, default=None, help="paired rounds (default 5)")
    ap.add_argument("--configs", default=None,
                    help="a subset of %s (default all)" % ",".join(CONFIGS))
    ap.add_argument("--sizes", default=None,
                    help="streamed message sizes (default %s, smoke 64k)" % DEFAULT_SIZES)
    ap.add_argument("--bw-bytes", default=None,
                    help="bytes per stream repetition (default 48M, smoke 4M)")
    ap.add_argument("--pp-iters", type=int, default=None,
                    help="timed 4 MiB ping-pongs (default 20, smoke 3)")
    ap.add_argument("--mpi-scale", type=float, default=None,
                    help="ROV_MPIU_SCALE of the MPI jobs (default 1, smoke 0.05)")
    ap.add_argument("--job-timeout", type=float, default=None,
                    help="seconds after which a job counts as hung (default 120, smoke 30)")
    ap.add_argument("--base-build", default=None, metavar="DIR",
                    help="another build directory: adds btl-rov-bond-base, btl-rov-bond with "
                    "that build's component, side by side")
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin A's end to cpu 0 and B's to cpu 1")
    ap.add_argument("--smoke", action="store_true",
                    help="1 round, 64 KiB streams, small transfers, faster links: proves the "
                    "benchmark works; explicit options still win")
    # The MPTCP peer, run by the benchmark itself inside a namespace.
    ap.add_argument("--mptcp-serve", metavar="ADDR:PORT", help=argparse.SUPPRESS)
    ap.add_argument("--mptcp-client", metavar="ADDR:PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mptcp_serve or args.mptcp_client:
        args.bw_bytes = int(args.bw_bytes or 0)
        args.sizes = [int(x) for x in (args.sizes or "").split(",") if x]
        return args
    smoke = args.smoke
    args.rounds = args.rounds if args.rounds is not None else (1 if smoke else 5)
    args.pp_iters = args.pp_iters if args.pp_iters is not None else (3 if smoke else 20)
    args.mpi_scale = args.mpi_scale if args.mpi_scale is not None else (0.05 if smoke else 1.0)
    args.job_timeout = args.job_timeout or (30.0 if smoke else 120.0)
    try:
        args.rate = args.rate or ("4gbit" if smoke else "1gbit")
        args.rate_bps = parse_rate(args.rate)
        args.shapes = [parse_shape(s) for s in args.shapes.split(",") if s.strip()]
        args.bw_bytes = mp.parse_sizes(args.bw_bytes or ("4M" if smoke else "48M"))[0]
        args.sizes = mp.parse_sizes(args.sizes or ("64k" if smoke else DEFAULT_SIZES))
    except ValueError as e:
        ap.error(str(e))
    if args.rounds < 1 or args.pp_iters < 1 or not args.mpi_scale > 0 or not args.shapes:
        ap.error("--rounds, --pp-iters and --mpi-scale must be positive, --shapes not empty")
    if args.sizes[0] < 1:
        ap.error("--sizes: sizes from 1 byte")
    if args.bw_bytes < (4 << 20):
        ap.error("--bw-bytes: at least 4M (one 4 MiB message)")
    default = [c for c in CONFIGS if c != "btl-rov-bond-base" or args.base_build]
    args.configs = [c.strip() for c in (args.configs or ",".join(default)).split(",")
                    if c.strip()]
    bad = [c for c in args.configs if c not in CONFIGS]
    if bad or not args.configs:
        ap.error("--configs: a subset of %s" % ",".join(CONFIGS))
    args.configs = [c for c in CONFIGS if c in args.configs]
    if args.out is None:
        args.out = datetime.datetime.now().strftime("bond-bench-%Y%m%d-%H%M%S")
    return args


def link_rates(args, shape):
    """(fab0, fab1) rates in bit/s of a shape X:Y: 2R split X:Y."""
    x, y = shape
    return (2 * args.rate_bps * x // (x + y), 2 * args.rate_bps * y // (x + y))


def fmt_rate(bps):
    return "%g Mbit/s" % (bps / 1e6)


def bond_known(tool):
    """Does the library know RAILOVER_BOND?  `railover info` lists every
    setting it reads, with its effective value."""
    p = subprocess.run([tool, "info"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=dict(os.environ, RAILOVER_BOND="on"))
    return any(line.startswith("RAILOVER_BOND=") for line in p.stdout.splitlines())


def mptcp_works():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP).close()
        return True, ""
    except OSError as e:
        return False, "no MPTCP socket here (%s; net.mptcp.enabled=0 or an old kernel)" % e


class Bench:
    def __init__(self, args, topo, tool):
        self.args = args
        self.topo = topo
        self.tool = tool
        self.out = args.out
        self.runs = []     # one dict per figure and job
        self.jobs = []     # one dict per job
        self.failed = []
        self.shown = set()
        self.mpi = None    # mpi-users' Bench: hosts file, agents, argv

    # -- set-up ------------------------------------------------------------

    def shape(self, shape):
        rates = link_rates(self.args, shape)
        lines = []
        for dev, rate in zip(FABS, rates):
            lines.append("%d:%d %s: %s" % (shape + (dev, self.topo.shape(dev, rate))))
        log("shape %d:%d: fab0 %s, fab1 %s (both ends' egress)" % (
            shape + (fmt_rate(rates[0]), fmt_rate(rates[1]))))
        return rates, lines

    def mptcp_setup(self):
        for side in ("A", "B"):
            nf.sh("ip", "-n", self.topo.ns[side], "mptcp", "limits", "set", "subflows", "2",
                  "add_addr_accepted", "2")
        nf.sh("ip", "-n", self.topo.a, "mptcp", "endpoint", "add", FAB1[0], "dev", "fab1",
              "signal")

    def mpi_setup(self, prog, pkglibdir):
        ns = argparse.Namespace(out=self.out, scale=self.args.mpi_scale, extra=[])
        for cfg, sel in MPI_CONFIGS.items():
            mu.SELECTION[cfg] = sel
        path = "%s:%s" % (pkglibdir, os.path.join(self.args.build, "mpi-btl"))
        self.mpi = mu.Bench(ns, self.topo, path, prog)
        self.mpi.env["RAILOVER_LOG"] = "warn"
        self.mpi_env_base = dict(self.mpi.env, OMPI_MCA_mca_base_component_path="%s:%s" % (
            pkglibdir, os.path.join(self.args.base_build or self.args.build, "mpi-btl")))

    # -- one job -----------------------------------------------------------

    def start_server(self, argv, env, tag):
        out = open(os.path.join(self.out, "server-%s.out" % tag), "w+")
        p = subprocess.Popen(self.topo.exec_argv("A", argv), env=env, stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             preexec_fn=nf._die_with_parent)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out.seek(0)
            m = re.search(r"listening on (\S+)", out.read())
            if m:
                return p, out, m.group(1)
            if p.poll() is not None:
                break
            time.sleep(0.02)
        p.kill()
        p.wait()
        out.seek(0)
        raise nf.Failure("server %s did not start: %s" % (" ".join(argv), out.read()[-2000:]))

    def client_argvs(self, cfg, addr):
        """The client commands of a configuration, run one after the other."""
        a = self.args
        big = ",".join(str(s) for s in sorted(set(a.sizes) | {PP_SIZE}))
        if cfg == "mptcp":
            return [[sys.executable, os.path.abspath(__file__), "--mptcp-client", addr,
                     "--sizes", ",".join(str(s) for s in a.sizes), "--bw-bytes", str(a.bw_bytes),
                     "--pp-iters", str(a.pp_iters)]]
        raw = ["--raw"] if cfg == "tcp-one" else []
        lat_iters = 200 if a.smoke else 2000
        return [[self.tool, "perf", addr, "--json", "--sizes", "8", "--iters", str(lat_iters),
                 "--bw-bytes", "512"] + raw,
                [self.tool, "perf", addr, "--json", "--sizes", big, "--iters", str(a.pp_iters),
                 "--warmup", "2", "--bw-bytes", str(a.bw_bytes)] + raw]

    def pin(self, side):
        """A's end on cpu 0, B's on cpu 1 (mpi-users' pinned 2-rank plan)."""
        if not self.args.pinned:
            return []
        return ["taskset", "-c", dict(mu.PLAN_P2P_PIN)[side]]

    def rov_env(self, cfg, side):
        i = 0 if side == "A" else 1
        rails = "tcp@%s" % FAB0[i]
        env = dict(os.environ, RAILOVER_LOG="warn", RAILOVER_RAILS=rails)
        if cfg == "rov-bond":
            env.update(RAILOVER_RAILS="%s,tcp@%s" % (rails, FAB1[i]), RAILOVER_BOND="on")
        return env

    def run_perf(self, cfg, tag, jobout):
        """railover perf / the MPTCP peer: server in A, client in B."""
        if cfg == "mptcp":
            server = [sys.executable, os.path.abspath(__file__), "--mptcp-serve",
                      "%s:0" % FAB0[0]]
        else:
            # Raw TCP's tests run on the bootstrap socket: on fab0.  Railover's
            # bootstrap is on eth, its connection on the rails.
            listen = FAB0[0] if cfg == "tcp-one" else nf.ETH_A
            server = [self.tool, "perf", "--listen", "%s:0" % listen]
        srv, srv_out, addr = self.start_server(self.pin("A") + server, self.rov_env(cfg, "A"),
                                               tag)
        got, rc = {}, 0
        try:
            with open(jobout, "w") as f:
                for i, argv in enumerate(self.client_argvs(cfg, addr)):
                    full = self.topo.exec_argv("B", self.pin("B") + argv)
                    if (cfg, i) not in self.shown:
                        self.shown.add((cfg, i))
                        log("$ " + " ".join(full))
                    p = subprocess.run(full, env=self.rov_env(cfg, "B"), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True,
                                       timeout=self.args.job_timeout)
                    f.write(p.stdout)
                    rc = rc or p.returncode
                    for line in p.stdout.splitlines():
                        if not line.startswith("{"):
                            continue
                        r = json.loads(line)
                        if r["test"] == "bandwidth" and r["size"] in self.args.sizes:
                            got["stream %s" % mp.fmt_size(r["size"])] = r["mb_s"]
                        elif r["test"] == "latency" and r["size"] == 8 and cfg != "mptcp":
                            got["lat 8 B"] = r["p50_us"]
                        elif r["test"] == "latency" and r["size"] == PP_SIZE:
                            got["ping-pong %s" % mp.fmt_size(PP_SIZE)] = \
                                PP_SIZE / r["mean_us"]
        except subprocess.TimeoutExpired:
            raise nf.Failure("job %s hung (not over after %g s); output in %s" % (
                tag, self.args.job_timeout, jobout))
        finally:
            srv.kill()
            srv.wait()
            srv_out.close()
        return rc, got

    def run_mpi(self, cfg, tag, jobout):
        figs = [("lat", 8), ("lat", PP_SIZE)] + [("bw", s) for s in self.args.sizes]
        argv = self.mpi.argv(cfg, 2, "on" if self.args.pinned else "off", figs)
        if cfg not in self.shown:
            self.shown.add(cfg)
            log("$ " + " ".join(argv))
        with open(jobout, "w") as f:
            p = subprocess.Popen(argv, env=self.mpi_env_base if cfg.endswith("-base")
                                 else self.mpi.env, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
            try:
                rc = p.wait(timeout=self.args.job_timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                raise nf.Failure("job %s hung (not over after %g s); output in %s" % (
                    tag, self.args.job_timeout, jobout))
        got = {}
        with open(jobout) as f:
            for line in f:
                w = line.split()
                if not w or w[0] != "ROV_MPIU":
                    continue
                kv = dict(x.split("=", 1) for x in w[1:] if "=" in x)
                kind, size, value = kv.get("kind"), int(kv.get("size", 0)), \
                    float(kv.get("value", "nan"))
                if kind == "lat" and size == 8:
                    got["lat 8 B"] = value
                elif kind == "lat" and size == PP_SIZE:
                    got["ping-pong %s" % mp.fmt_size(PP_SIZE)] = PP_SIZE / value
                elif kind == "bw":
                    got["stream %s" % mp.fmt_size(size)] = value
        return rc, got

    def run_job(self, shape, rnd, order, cfg):
        tag = "%d-%d-r%d-%s" % (shape + (rnd, cfg))
        jobout = os.path.join(self.out, "job-%s.out" % tag)
        before = mp.tx_bytes(self.topo)
        t0 = time.monotonic()
        if cfg in MPI_CONFIGS:
            rc, got = self.run_mpi(cfg, tag, jobout)
        else:
            rc, got = self.run_perf(cfg, tag, jobout)
        wall = time.monotonic() - t0
        after = mp.tx_bytes(self.topo)
        tx = {dev: sum(after[(s, dev)] - before[(s, dev)] for s in ("A", "B"))
              for dev in self.topo.DEVS}
        shp = "%d:%d" % shape
        want = [f for f, _ in figures(self.args.sizes)
                if not (cfg == "mptcp" and f == "lat 8 B")]
        for fig in want:
            self.runs.append({"shape": shp, "round": rnd, "config": cfg, "figure": fig,
                              "value": got.get(fig), "unit": dict(figures(self.args.sizes))[fig],
                              "exit": rc})
        fab = tx["fab0"] + tx["fab1"]
        self.jobs.append({"shape": shp, "round": rnd, "order": order, "config": cfg,
                          "exit": rc, "wall_s": round(wall, 3), "fab0_tx": tx["fab0"],
                          "fab1_tx": tx["fab1"], "eth_tx": tx["eth"],
                          "fab1_share": round(tx["fab1"] / fab, 4) if fab else ""})
        missing = [f for f in want if f not in got]
        if rc != 0 or missing:
            self.failed.append(tag)
            log("FAIL: job %s (exit %d%s); output in %s" % (
                tag, rc, ", no result for " + ", ".join(missing) if missing else "", jobout))
            return
        os.unlink(jobout)
        server_out = os.path.join(self.out, "server-%s.out" % tag)
        if os.path.exists(server_out):
            os.unlink(server_out)

    def run_shape(self, shape, configs):
        n = len(configs)
        for rnd in range(1, self.args.rounds + 1):
            # Rotate the order from round to round, so that no configuration
            # always runs first.
            shift = rnd % n
            order = [configs[(i + shift) % n] for i in range(n)]
            if rnd % 2:
                order.reverse()
            for i, cfg in enumerate(order):
                self.run_job(shape, rnd, i + 1, cfg)
            fig = "stream %s" % mp.fmt_size(self.args.sizes[-1])
            done = {r["config"]: r["value"] for r in self.runs
                    if r["shape"] == "%d:%d" % shape and r["round"] == rnd and
                    r["figure"] == fig and r["value"] is not None}
            log("shape %d:%d round %d/%d: %s %s" % (
                shape + (rnd, self.args.rounds, fig, ", ".join(
                    "%s %.0f MB/s" % (c, done[c]) for c in configs if c in done))))


# ---- summary --------------------------------------------------------------------

def summary_table(args, bench, shape, rates, configs):
    shp = "%d:%d" % shape
    val = {(r["round"], r["config"], r["figure"]): r["value"] for r in bench.runs
           if r["shape"] == shp and r["value"] is not None and r["exit"] == 0}
    rounds = sorted({k[0] for k in val})
    ceiling = sum(rates) / 8e6   # MB/s, line rate (goodput is about 0.956 of it)
    share = {}
    for c in configs:
        v = [j["fab1_share"] for j in bench.jobs
             if j["shape"] == shp and j["config"] == c and j["fab1_share"] != ""]
        share[c] = statistics.median(v) if v else None
    lines = ["### Shape %s: fab0 %s, fab1 %s (sum %.0f MB/s)" % (
        shp, fmt_rate(rates[0]), fmt_rate(rates[1]), ceiling), "",
        "| configuration | figure | unit | median | /%s (min-max) | /sum of rates | "
        "fab1 share |" % BASE, "| --- " * 7 + "|"]
    for fig, unit in figures(args.sizes):
        for c in configs:
            v = [val[(r, c, fig)] for r in rounds if (r, c, fig) in val]
            if not v:
                continue
            med = statistics.median(v)
            ratios = [val[(r, c, fig)] / val[(r, BASE, fig)] for r in rounds
                      if (r, c, fig) in val and val.get((r, BASE, fig))]
            rcell = "%.3f (%.3f-%.3f)" % (statistics.median(ratios), min(ratios),
                                          max(ratios)) if ratios and c != BASE else "-"
            scell = "%.3f" % (med / ceiling) if unit == "MB/s" else "-"
            fcell = "%.2f" % share[c] if share[c] is not None else "-"
            lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                c, fig, unit, ("%.1f" if unit == "us" else "%.0f") % med, rcell, scell,
                fcell))
    # Does one TCP stream fill one shaped link?  (1448-byte segments in
    # 1514-byte frames carry at most 0.956 of the line rate.)
    fig = "stream %s" % mp.fmt_size(args.sizes[-1])
    v = [val[(r, "tcp-one", fig)] for r in rounds if (r, "tcp-one", fig) in val]
    if v:
        lines += ["", "One TCP stream on fab0 (tcp-one, %s): %.1f-%.1f MB/s, %.3f-%.3f of its "
                  "line rate (%.0f MB/s)." % (fig, min(v), max(v), min(v) / (rates[0] / 8e6),
                                              max(v) / (rates[0] / 8e6), rates[0] / 8e6)]
    lines.append("")
    return lines


def prerequisites(args):
    nf.require_netns(nft=False)
    if not shutil.which("tc"):
        raise nf.Skip("'tc' (iproute2) is not installed")
    tool = os.path.join(os.path.abspath(args.build), "tools", "railover")
    if not os.access(tool, os.X_OK):
        raise nf.Skip("no railover tool in %s/tools (build it, or pass --build DIR)" %
                      args.build)
    return tool


def main():
    args = parse_args()
    if args.mptcp_serve:
        return mptcp_serve(args.mptcp_serve)
    if args.mptcp_client:
        return mptcp_client(args.mptcp_client, args.sizes, args.bw_bytes,
                            args.pp_iters, 1)
    try:
        tool = prerequisites(args)
    except nf.Skip as e:
        print("SKIP: %s" % e, flush=True)
        return nf.SKIP
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)
    args.pinned = not args.no_pin and (os.cpu_count() or 1) >= 2 and bool(shutil.which("taskset"))
    configs, skipped = list(args.configs), {}
    if "rov-bond" in configs and not bond_known(tool):
        skipped["rov-bond"] = "the library does not know RAILOVER_BOND (not in `%s info`)" % tool
    ok, why = mptcp_works()
    if "mptcp" in configs and not ok:
        skipped["mptcp"] = why
    missing = [p for p in ("mpirun", "mpicc", "ompi_info") if not shutil.which(p)]
    why = "%s not found (apt-get install openmpi-bin libopenmpi-dev)" % ", ".join(missing)
    pkglibdir = None
    if not missing:
        try:
            pkglibdir = mp.ompi_pkglibdir()
        except nf.Skip as e:
            why = str(e)
    for c in MPI_CONFIGS:
        if c in configs and pkglibdir is None:
            skipped[c] = why
    for c, build in (("btl-rov-bond", args.build), ("btl-rov-bond-base", args.base_build)):
        so = os.path.join(build or "", "mpi-btl", "mca_btl_railover.so")
        if c in configs and c not in skipped and not (build and os.path.exists(so)):
            skipped[c] = "no %s (%s)" % (so, "--base-build" if c.endswith("-base") else
                                         "a build with Open MPI's development headers")
    for c, why in skipped.items():
        print("SKIP: %s: %s" % (c, why), flush=True)
    configs = [c for c in configs if c not in skipped]
    if BASE not in configs:
        log("warning: %s not run: no ratios" % BASE)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = mp.load1()
    log("bond-bench: %d round(s), rate %s, shapes %s, configurations %s, results in %s" % (
        args.rounds, args.rate, ",".join("%d:%d" % s for s in args.shapes), ",".join(configs),
        args.out))
    if load_before > (os.cpu_count() or 1) / 2:
        log("warning: load average %.2f before the run: other work competes for the cores" %
            load_before)
    rc, bench, tables, tc_lines = 0, None, [], []
    try:
        prog = mu.compile_prog(args.out) if any(c in MPI_CONFIGS for c in configs) else None
        with BondTopology() as topo:
            bench = Bench(args, topo, tool)
            if "mptcp" in configs:
                bench.mptcp_setup()
            if prog:
                bench.mpi_setup(prog, pkglibdir)
            for shape in args.shapes:
                rates, lines = bench.shape(shape)
                tc_lines += lines
                bench.run_shape(shape, configs)
                tables += summary_table(args, bench, shape, rates, configs)
    except nf.Skip as e:
        print("SKIP: %s" % e, flush=True)
        return nf.SKIP
    except nf.Failure as e:
        print("FAIL: %s" % e, flush=True)
        rc = 1
    finally:
        nf.run_cleanups()
    load_after = mp.load1()
    if bench is None:
        return rc or 1
    if bench.failed:
        rc = 1
    keys = ["shape", "round", "config", "figure", "value", "unit", "exit"]
    mp.write_csv(os.path.join(args.out, "runs.csv"), keys,
                 [["" if r[k] is None else r[k] for k in keys] for r in bench.runs])
    jkeys = ["shape", "round", "order", "config", "exit", "wall_s", "fab0_tx", "fab1_tx",
             "eth_tx", "fab1_share"]
    mp.write_csv(os.path.join(args.out, "jobs.csv"), jkeys,
                 [[j[k] for k in jkeys] for j in bench.jobs])
    with open(os.path.join(args.out, "meta.txt"), "w") as f:
        f.write("command: %s\nstarted: %s\nfinished: %s\ncommit: %s\nhost: %s %s, %d cpu\n"
                "load before: %.2f\nload after: %.2f\nrounds: %d\npinned: %s\nrate: %s\n"
                "shapes: %s\n"
                "configurations: %s\nskipped: %s\nbw bytes: %d\npp iters: %d\nmpi scale: %g\n"
                "tc (side A; side B the same):\n  %s\n" % (
                    " ".join(sys.argv), started.isoformat(timespec="seconds"),
                    datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    mp.commit(), platform.node(), platform.release(), os.cpu_count() or 1,
                    load_before, load_after, args.rounds,
                    "A cpu 0, B cpu 1" if args.pinned else "no", args.rate,
                    ",".join("%d:%d" % s for s in args.shapes), ",".join(configs),
                    "; ".join("%s: %s" % kv for kv in skipped.items()) or "-",
                    args.bw_bytes, args.pp_iters, args.mpi_scale, "\n  ".join(tc_lines)))
    text = "\n".join(
        ["Medians of %d paired round(s); /%s: median of the per-round ratios (min-max); "
         "/sum of rates: the median over the two links' summed line rate; fab1 share: "
         "the fraction of the fabric bytes (both directions) sent on fab1." %
         (args.rounds, BASE), ""] + tables)
    if skipped:
        text += "\nSkipped: %s\n" % "; ".join("%s (%s)" % kv for kv in skipped.items())
    if bench.failed:
        text += "\nFailed jobs (no figures from them): %s\n" % ", ".join(bench.failed)
    text += "\nLoad average %.2f before, %.2f after (%d cpu)\n" % (
        load_before, load_after, os.cpu_count() or 1)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
