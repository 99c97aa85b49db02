#!/usr/bin/env python3
"""NetPIPE over Open MPI between two "hosts": btl tcp against btl railover.

Issue 21's benchmark (TCP part).  Two network namespaces joined by a fabric
veth (192.0.2.0/24) and an ethernet veth (198.51.100.0/24), tests/failover's
netfault Topology; mpirun launches one rank into each (a plm_rsh_agent, as
tests/mpi/netns_failover.py does), Open MPI's own out-of-band traffic on
the ethernet link (oob_tcp_if_include), the measured traffic on the fabric.
Debian's NetPIPE for Open MPI (`NPopenmpi`, package netpipe-openmpi) runs a
ping-pong of one message size per job (`-l SIZE -u SIZE -p 0 -n REPEATS`)
under three selections:

  tcp       --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include 192.0.2.0/24
  rov       --mca pml ob1 --mca btl self,railover --mca btl_railover_rails tcp@fab
  rov-fooff the same with --mca btl_railover_failover off

in paired rounds: every round runs, for every size, the three one after the
other (a job is an mpirun of about half a second to a second), the order
rotating from size to size and round to round (as perf-compare.sh rotates),
so that a drift in the machine's load hits the three alike.  The repeat
count per size comes from a fixed model (--trial-ms, about 100 ms per
trial) and is the same for the three.  Every job runs with the same
environment (the railover component on the component path for all three;
it declines where it is not named).  With 2+ cores each rank is pinned to
its own core (the agent starts each host's orted under taskset; --bind-to
none keeps that), as perf-compare.sh pins its two ends.

NetPIPE's figure per size is the time of half a round trip (t); from it:
latency = t (us), bandwidth = size / t (MB/s, 10^6 bytes).  So per size the
bandwidth ratio is the inverse of the latency ratio: a ping-pong bandwidth,
not a stream's.

Printed (a markdown table on stdout) per size: the median over the rounds
of each selection's latency and bandwidth, and the median of the per-round
ratios rov/tcp and rov/rov-fooff (failover on against off) with their
spread (min-max); latency ratio above 1 is slower, bandwidth ratio below 1
is slower.  Then the issue's goals, each said met or not met from the
median ratios, with the spread beside them.  Numbers, never verdicts: the
exit status does not depend on them.

Files in --out DIR: runs.csv (one row per job: round, size, order, mode,
repeats, latency, bandwidth, exit, wall time, bytes sent on the fabric and
on the ethernet link by each namespace), ratios.csv (per round and size),
summary.csv (per size: medians, ratio medians, min, quartiles, max),
summary.md (what was printed), meta.txt (command, time, commit, load); a
failed job's output stays as job-*.out.

Exit: 0 done, 1 a job failed (its output is kept), 77 skipped (not root, no
ip/netns, no mpirun, ompi_info or NPopenmpi, no component in --build).
"""

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "failover"))
import netfault as nf  # noqa: E402

DEFAULT_SIZES = [1, 8, 64, 1024, 8192, 65536, 1048576, 4194304]
QUICK_SIZES = [1, 8, 64, 1024, 8192, 65536, 1048576]
SMALL_MAX = 64          # "small-message latency": sizes up to this
JOB_TIMEOUT_S = 300     # a job that is not over by then hangs

MODES = ("tcp", "rov", "rov-fooff")
SELECTION = {
    "tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", nf.FAB_NET],
    "rov": ["--mca", "btl", "self,railover", "--mca", "btl_railover_rails", "tcp@fab",
            "--mca", "btl_railover_failover", "on"],
    "rov-fooff": ["--mca", "btl", "self,railover", "--mca", "btl_railover_rails", "tcp@fab",
                  "--mca", "btl_railover_failover", "off"],
}

# plm_rsh_agent: "agent HOST CMD..." runs CMD in the namespace of HOST (the
# hosts are named by their ethernet addresses: no name lookup), on that
# host's core when pinned.
AGENT = """#!/bin/sh
case $1 in
%s) ns=%s; cpu=%s ;;
%s) ns=%s; cpu=%s ;;
*) echo "agent: unknown host $1" >&2; exit 1 ;;
esac
shift
if [ -n "$cpu" ]; then
    exec ip netns exec "$ns" taskset -c "$cpu" /bin/sh -c "$*"
fi
exec ip netns exec "$ns" /bin/sh -c "$*"
"""


def log(msg):
    print("# " + msg, file=sys.stderr, flush=True)


def parse_sizes(text):
    out = []
    for w in text.split(","):
        w = w.strip().lower()
        mult = 1
        if w.endswith("k"):
            mult, w = 1024, w[:-1]
        elif w.endswith("m"):
            mult, w = 1 << 20, w[:-1]
        out.append(int(w) * mult)
    return sorted(set(out))


def fmt_size(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n >= 1024 and n % 1024 == 0:
        return "%d KiB" % (n >> 10)
    return "%d B" % n


def load1():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError):
        return float("nan")


def quartiles(v):
    v = sorted(v)
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="build directory with mpi-btl/mca_btl_railover.so (default: build "
                    "next to bench/)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="paired rounds of tcp, rov, rov-fooff (default 5, --quick 2)")
    ap.add_argument("--sizes", default=None,
                    help="message sizes, e.g. 1,8,64,1k,8k,64k,1m,4m (the default; --quick "
                    "up to 1m); one NetPIPE job per size and selection")
    ap.add_argument("--quick", action="store_true",
                    help="2 rounds, sizes up to 1 MiB, trials of 30 ms; explicit options still "
                    "win")
    ap.add_argument("--out", default=None,
                    help="result directory (default ./mpi-perf-YYYYmmdd-HHMMSS)")
    ap.add_argument("--trial-ms", type=float, default=None,
                    help="about this long per NetPIPE trial: sets its -n (round trips) per "
                    "size from a fixed model, the same for the three selections (default 100, "
                    "--quick 30)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="NetPIPE -n for every size instead (a small value makes a fast smoke "
                    "run, not a measurement)")
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin the ranks to cores 0 and 1")
    ap.add_argument("--np", default=shutil.which("NPopenmpi") or "NPopenmpi",
                    help="the NetPIPE binary (default NPopenmpi in PATH)")
    args = ap.parse_args()
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    if args.trial_ms is None:
        args.trial_ms = 30.0 if args.quick else 100.0
    if args.trial_ms <= 0:
        ap.error("--trial-ms must be positive")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    try:
        args.sizes = parse_sizes(args.sizes) if args.sizes else (
            QUICK_SIZES if args.quick else DEFAULT_SIZES)
    except ValueError:
        ap.error("--sizes: a comma-separated list of sizes (k and m suffixes allowed)")
    if args.sizes[0] < 1:
        ap.error("--sizes: sizes from 1 byte")
    if args.out is None:
        args.out = datetime.datetime.now().strftime("mpi-perf-%Y%m%d-%H%M%S")
    return args


def prerequisites(args):
    """Raise nf.Skip when the benchmark cannot run here; return (component
    path, system pkglibdir)."""
    nf.require_netns(nft=False)
    for prog in ("mpirun", "ompi_info"):
        if not shutil.which(prog):
            raise nf.Skip("%s not found (apt-get install openmpi-bin)" % prog)
    if not (os.path.isfile(args.np) and os.access(args.np, os.X_OK)):
        raise nf.Skip("NetPIPE for Open MPI (%s) not found (apt-get install netpipe-openmpi)" %
                      args.np)
    btl_dir = os.path.join(os.path.abspath(args.build), "mpi-btl")
    if not os.path.isfile(os.path.join(btl_dir, "mca_btl_railover.so")):
        raise nf.Skip("no railover BTL component in %s (build it, or pass --build DIR)" % btl_dir)
    pkglibdir = ompi_pkglibdir()
    return "%s:%s" % (pkglibdir, btl_dir), pkglibdir


def ompi_pkglibdir():
    """Open MPI's own component directory (`ompi_info --path pkglibdir`);
    nf.Skip when it names none."""
    p = subprocess.run(["ompi_info", "--path", "pkglibdir"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    pkglibdir = p.stdout.split(":", 1)[1].strip() if ":" in p.stdout else ""
    if p.returncode != 0 or not os.path.isdir(pkglibdir):
        raise nf.Skip("ompi_info --path pkglibdir gave no directory: %r" % p.stdout.strip())
    return pkglibdir


def tx_bytes(topo):
    """Bytes sent so far per (side, device) on the topology's links."""
    res = {}
    for side in ("A", "B"):
        out = nf.sh("ip", "-n", topo.ns[side], "-j", "-s", "link", "show", quiet=True)
        for link in json.loads(out):
            if link.get("ifname") in topo.DEVS:
                res[(side, link["ifname"])] = int(link["stats64"]["tx"]["bytes"])
    return res


def repeats_for(size, trial_s):
    """Round trips per trial so that a trial takes about trial_s, from a
    rough model of a round trip here (2 x (8 us + size / 1 GB/s)): the
    repeat count is the same for the three selections, whatever each one's
    speed."""
    rtt = 2 * (8e-6 + size / 1e9)
    return max(10, int(trial_s / rtt))


class Bench:
    def __init__(self, args, topo, component_path):
        self.args = args
        self.topo = topo
        self.out = args.out
        ncpu = os.cpu_count() or 1
        self.pinned = not args.no_pin and ncpu >= 2 and shutil.which("taskset")
        cpus = ("0", "1") if self.pinned else ("", "")
        self.hosts = os.path.join(self.out, "hosts")
        with open(self.hosts, "w") as f:
            f.write("%s slots=1\n%s slots=1\n" % (nf.ETH_A, nf.ETH_B))
        self.agent = os.path.join(self.out, "agent")
        with open(self.agent, "w") as f:
            f.write(AGENT % (nf.ETH_A, topo.a, cpus[0], nf.ETH_B, topo.b, cpus[1]))
        os.chmod(self.agent, 0o700)
        self.env = dict(os.environ, OMPI_MCA_mca_base_component_path=component_path,
                        RAILOVER_LOG="warn")
        self.jobs = []   # one dict per job (round, size, mode): the results
        self.shown = set()

    def argv(self, mode, size, repeats, npout):
        return self.topo.exec_argv("A", [
            "mpirun", "--allow-run-as-root", "--hostfile", self.hosts, "-np", "2",
            "--map-by", "node", "--bind-to", "none",
            "--mca", "plm_rsh_agent", self.agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "oob_tcp_if_include", nf.ETH_NET,
            "--mca", "pml", "ob1"] + SELECTION[mode] + [
            self.args.np, "-l", str(size), "-u", str(size), "-p", "0", "-n", str(repeats),
            "-o", npout])

    def run_job(self, rnd, size, order, mode):
        tag = "r%d-%d-%s" % (rnd, size, mode)
        npout = os.path.join(self.out, "np-%s.out" % tag)
        jobout = os.path.join(self.out, "job-%s.out" % tag)
        repeats = self.args.repeats or repeats_for(size, self.args.trial_ms / 1000.0)
        argv = self.argv(mode, size, repeats, npout)
        if mode not in self.shown:
            self.shown.add(mode)
            log("$ " + " ".join(argv))
        before = tx_bytes(self.topo)
        t0 = time.monotonic()
        with open(jobout, "w") as f:
            job = subprocess.Popen(argv, env=self.env, stdout=f, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
            try:
                rc = job.wait(timeout=JOB_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
                raise nf.Failure("job %s hung (not over after %d s); output in %s" %
                                 (tag, JOB_TIMEOUT_S, jobout))
        wall = time.monotonic() - t0
        after = tx_bytes(self.topo)
        d = {k: after[k] - before[k] for k in after}
        t = None
        if os.path.exists(npout):
            with open(npout) as f:
                for line in f:
                    w = line.split()
                    if len(w) >= 3 and int(w[0]) == size and float(w[2]) > 0:
                        t = float(w[2])
        job = {"round": rnd, "size": size, "order": order, "mode": mode, "repeats": repeats,
               "latency_us": t * 1e6 if t else None, "mb_s": size / t / 1e6 if t else None,
               "exit": rc, "wall_s": round(wall, 3),
               "fab_tx_A": d[("A", "fab")], "fab_tx_B": d[("B", "fab")],
               "eth_tx_A": d[("A", "eth")], "eth_tx_B": d[("B", "eth")]}
        self.jobs.append(job)
        if rc != 0 or t is None:
            raise nf.Failure("job %s failed (exit %d%s); output in %s" % (
                tag, rc, "" if t else ", no result", jobout))
        fab = d[("A", "fab")] + d[("B", "fab")]
        eth = d[("A", "eth")] + d[("B", "eth")]
        if fab < 2 * size * repeats or eth > fab:
            log("warning: job %s sent %d B on the fabric and %d B on the ethernet link: "
                "not all of its traffic was on the fabric" % (tag, fab, eth))
        os.unlink(npout)
        os.unlink(jobout)

    def run(self):
        n = len(MODES)
        for rnd in range(1, self.args.rounds + 1):
            for k, size in enumerate(self.args.sizes):
                # Rotate the order from size to size and round to round, so
                # that no selection always runs first.
                shift = (rnd + k) % n
                order = [MODES[(i + shift) % n] for i in range(n)]
                if (rnd + k) % 2:
                    order.reverse()
                for i, mode in enumerate(order):
                    self.run_job(rnd, size, i + 1, mode)
            done = [j for j in self.jobs if j["round"] == rnd]
            small, big = min(self.args.sizes), max(self.args.sizes)
            log("round %d/%d: %s" % (rnd, self.args.rounds, ", ".join(
                "%s %s %s" % (m, "%.2f us" % j["latency_us"] if j["size"] == small else
                              "%.0f MB/s" % j["mb_s"], fmt_size(j["size"]))
                for m in MODES for j in done if j["mode"] == m and j["size"] in (small, big))))


def summarize(args, rows):
    """Per size: medians per mode, per-round ratios and their statistics."""
    val = {}   # (round, mode, size) -> (lat, bw)
    for rnd, mode, size, lat, bw in rows:
        val[(rnd, mode, size)] = (lat, bw)
    rounds = sorted({r[0] for r in rows})
    ratios = []   # (round, size, rov/tcp lat, rov/tcp bw, on/off lat, on/off bw)
    summary = []
    for size in args.sizes:
        per = {}
        for mode in MODES:
            v = [val[(r, mode, size)] for r in rounds if (r, mode, size) in val]
            per[mode] = (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
        rr = {"lat_rov_tcp": [], "bw_rov_tcp": [], "lat_on_off": [], "bw_on_off": []}
        for r in rounds:
            t, o, f = (val.get((r, m, size)) for m in MODES)
            if not (t and o and f):
                continue
            row = (r, size, o[0] / t[0], o[1] / t[1], o[0] / f[0], o[1] / f[1])
            ratios.append(row)
            for k, x in zip(("lat_rov_tcp", "bw_rov_tcp", "lat_on_off", "bw_on_off"), row[2:]):
                rr[k].append(x)
        stats = {}
        for k, v in rr.items():
            q1, q3 = quartiles(v)
            stats[k] = (statistics.median(v), min(v), q1, q3, max(v))
        summary.append((size, per, stats))
    return ratios, summary


def spread(st):
    med, lo, _q1, _q3, hi = st
    return "%.3f (%.3f-%.3f)" % (med, lo, hi)


def markdown(args, summary, nrounds):
    lines = []
    lines.append("Medians of %d paired round(s); ratio = median of the per-round ratios "
                 "(min-max over the rounds)." % nrounds)
    lines.append("")
    lines.append("| size | tcp us | rov us | rov fo-off us | tcp MB/s | rov MB/s | "
                 "rov fo-off MB/s | latency rov/tcp | bandwidth rov/tcp | "
                 "latency fo on/off | bandwidth fo on/off |")
    lines.append("| --- " * 11 + "|")
    for size, per, st in summary:
        lines.append("| %s | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %s | %s | %s | %s |" % (
            fmt_size(size), per["tcp"][0], per["rov"][0], per["rov-fooff"][0],
            per["tcp"][1], per["rov"][1], per["rov-fooff"][1],
            spread(st["lat_rov_tcp"]), spread(st["bw_rov_tcp"]),
            spread(st["lat_on_off"]), spread(st["bw_on_off"])))
    lines.append("")
    # The goals (issue 21), judged on the medians of the per-round ratios.
    small = [(s, st) for s, _p, st in summary if s <= SMALL_MAX]
    lines.append("Goals (judged on the median ratios; the spread is beside them):")
    lines.append("")
    if small:
        worst = max(small, key=lambda x: x[1]["lat_rov_tcp"][0])
        ok = all(st["lat_rov_tcp"][0] <= 1.05 for _s, st in small)
        lines.append("- small-message latency (<= %d B) within 5%% of btl tcp: %s (worst %s: "
                     "%s)" % (SMALL_MAX, "met" if ok else "NOT met", fmt_size(worst[0]),
                              spread(worst[1]["lat_rov_tcp"])))
    worst = min(summary, key=lambda x: x[2]["bw_rov_tcp"][0])
    ok = all(st["bw_rov_tcp"][0] >= 1.0 for _s, _p, st in summary)
    short = [fmt_size(s) for s, _p, st in summary if st["bw_rov_tcp"][0] < 1.0]
    lines.append("- bandwidth at least btl tcp's at every size: %s (lowest %s: %s%s)" % (
        "met" if ok else "NOT met", fmt_size(worst[0]), spread(worst[2]["bw_rov_tcp"]),
        "; below 1 at %s" % ", ".join(short) if short else ""))
    dev = max(summary, key=lambda x: abs(x[2]["lat_on_off"][0] - 1))
    ok = all(abs(st["lat_on_off"][0] - 1) < 0.02 for _s, _p, st in summary)
    lines.append("- failover on against off within 2%% at every size: %s (largest deviation "
                 "%s: latency %s)" % ("met" if ok else "NOT met", fmt_size(dev[0]),
                                       spread(dev[2]["lat_on_off"])))
    return "\n".join(lines)


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def commit():
    p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return p.stdout.strip() or "?"


def main():
    args = parse_args()
    try:
        component_path, _pkglibdir = prerequisites(args)
    except nf.Skip as e:
        print("SKIP: %s" % e, flush=True)
        return nf.SKIP
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = load1()
    log("mpi-perf: %d round(s), sizes %s, results in %s" % (
        args.rounds, ",".join(map(str, args.sizes)), args.out))
    if load_before > (os.cpu_count() or 1) / 2:
        log("warning: load average %.2f before the run: other work competes for the cores; "
            "compare ratios, rerun when idle" % load_before)
    rc = 0
    bench = None
    try:
        with nf.Topology() as topo:
            bench = Bench(args, topo, component_path)
            log("ranks %s" % ("pinned: host A on cpu 0, host B on cpu 1" if bench.pinned
                              else "not pinned"))
            bench.run()
    except nf.Skip as e:
        print("SKIP: %s" % e, flush=True)
        return nf.SKIP
    except nf.Failure as e:
        print("FAIL: %s" % e, flush=True)
        rc = 1
    finally:
        nf.run_cleanups()
    load_after = load1()
    if bench is None:
        return rc or 1
    keys = ["round", "size", "order", "mode", "repeats", "latency_us", "mb_s", "exit", "wall_s",
            "fab_tx_A", "fab_tx_B", "eth_tx_A", "eth_tx_B"]
    write_csv(os.path.join(args.out, "runs.csv"), keys,
              [["" if j[k] is None else ("%.4f" % j[k] if isinstance(j[k], float) else j[k])
                for k in keys] for j in bench.jobs])
    with open(os.path.join(args.out, "meta.txt"), "w") as f:
        f.write("command: %s\nstarted: %s\nfinished: %s\ncommit: %s\nhost: %s %s, %d cpu\n"
                "load before: %.2f\nload after: %.2f\nrounds: %d\nsizes: %s\npinned: %s\n"
                "NetPIPE: %s -l SIZE -u SIZE -p 0 -n %s\n" % (
                    " ".join(sys.argv), started.isoformat(timespec="seconds"),
                    datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    commit(), platform.node(), platform.release(), os.cpu_count() or 1,
                    load_before, load_after, args.rounds, ",".join(map(str, args.sizes)),
                    bool(bench.pinned), args.np,
                    args.repeats or "(about %g ms per trial)" % args.trial_ms))
    if rc:
        return rc
    rows = [(j["round"], j["mode"], j["size"], j["latency_us"], j["mb_s"]) for j in bench.jobs]
    ratios, summary = summarize(args, rows)
    write_csv(os.path.join(args.out, "ratios.csv"),
              ["round", "size", "lat_rov_tcp", "bw_rov_tcp", "lat_on_off", "bw_on_off"],
              [(r, s) + tuple("%.4f" % x for x in v) for r, s, *v in ratios])
    header = ["size"]
    for mode in MODES:
        header += ["%s_latency_us" % mode, "%s_mb_s" % mode]
    for k in ("lat_rov_tcp", "bw_rov_tcp", "lat_on_off", "bw_on_off"):
        header += ["%s_%s" % (k, x) for x in ("median", "min", "q1", "q3", "max")]
    out = []
    for size, per, st in summary:
        row = [size]
        for mode in MODES:
            row += ["%.4f" % per[mode][0], "%.3f" % per[mode][1]]
        for k in ("lat_rov_tcp", "bw_rov_tcp", "lat_on_off", "bw_on_off"):
            row += ["%.4f" % x for x in st[k]]
        out.append(row)
    write_csv(os.path.join(args.out, "summary.csv"), header, out)
    text = markdown(args, summary, args.rounds)
    text += "\n\nLoad average %.2f before, %.2f after (%d cpu); %s\n" % (
        load_before, load_after, os.cpu_count() or 1,
        "ranks pinned to cpu 0 and 1" if bench.pinned else "ranks not pinned")
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
