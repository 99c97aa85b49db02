#!/usr/bin/env python3
"""What MPI users run, btl tcp against btl railover, between two "hosts".

The OSU-style figures of bench/mpi-users.c (ping-pong latency, windowed
bandwidth and message rate, MPI_Allreduce, MPI_Alltoall) over Open MPI in
the two network namespaces of bench/mpi-perf.py (tests/failover's netfault
Topology: fabric veth 192.0.2.0/24, ethernet veth 198.51.100.0/24; mpirun
in A, a plm_rsh_agent starts B's orted, Open MPI's out-of-band traffic on
the ethernet link), under these selections (mpi_yield_when_idle 1):

  tcp    --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include 192.0.2.0/24
  rov1   --mca pml ob1 --mca btl self,railover --mca btl_railover_rails tcp@fab
  rov2   --mca pml ob1 --mca btl self,railover --mca btl_railover_rails tcp@fab,tcp@eth
  ucx    --mca pml ucx (pml_ucx_tls and pml_ucx_devices any: Open MPI 4.1
         declines UCX over TCP alone otherwise) -x UCX_TLS=tcp,self
         -x UCX_NET_DEVICES=fab: Open MPI's other PML on the same link

(the railover component is on the component path for all of them; it
declines where it is not named; --extra-mca adds to rov1 and rov2 only).

Per round, pinning and selection two jobs: a 2-rank job (one rank per host)
running the point-to-point figures (--p2p) and a 4-rank job (two ranks per
host, ranks 0 and 2 in A) running the collectives (--coll).  Pinned (--pin
on): the 2-rank job's rank 0 on cpu 0 and rank 1 on cpu 1 (mpirun, whose
node is A and which starts A's ranks itself, under taskset -c 0; the agent
starts B's orted under taskset -c 1; --bind-to none); the 4-rank job
through an mpirun rankfile: rank 0 A cpu 0, rank 1 B cpu 1, rank 2 A cpu 1,
rank 3 B cpu 0 (each host's two ranks on different cores, each core one
rank of each host).  Unpinned (--pin off): --bind-to none, no taskset.
Every job reports each rank's namespace and allowed cpus
(ROV_MPIU_AFFINITY); the binding is checked against this plan and a
deviation is printed and noted in the summary.

Paired rounds: every round runs every selection for each pinning, the order
rotating from round to round (as mpi-perf.py rotates), so a drift of the
machine's load hits all selections alike.  The iteration counts of a
figure come from a fixed model in mpi-users.c (about 0.3 s per figure on a
TCP link of a few GB/s), the same for all selections, times --scale; only
where the warm-up shows the model's count would take more than about 1 s
(x scale) is it cut (runs.csv's iters is the count used).

Printed (markdown, also summary.md) per pinning and figure: the median over
the rounds of each selection's value and the median of the per-round
ratios rov1/tcp and rov2/tcp with their min-max.  A ratio is "better or
equal" (marked ok) when >= 1 for bandwidth and message rate and <= 1 for
times; one worse than btl tcp is marked WORSE.  Numbers, never verdicts:
the exit status does not depend on them.

Files in --out DIR: mpi-users (the program, unless --prog), runs.csv (one
row per figure and job, with the iteration count used), jobs.csv (per job: exit, wall time, binding seen,
bytes sent on fab and eth), summary.md, meta.txt (command, time, commit,
load); a failed job's output stays as job-*.out.

--smoke: 1 round, unpinned, --scale 0.05, every selection: proves that
the benchmark works (a CI smoke), asserts no number.

Exit: 0 done, 1 a job failed (output kept), 77 skipped (not root, no
ip/netns, no mpirun/mpicc/ompi_info, no component in --build).
"""

import argparse
import csv
import datetime
import importlib.util
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


def _load_mpi_perf():
    """bench/mpi-perf.py as a module (its name has a dash): its netfault,
    agent template and small helpers."""
    spec = importlib.util.spec_from_file_location("mpi_perf", os.path.join(HERE, "mpi-perf.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mp = _load_mpi_perf()
nf = mp.nf
log, load1, tx_bytes, commit, write_csv = mp.log, mp.load1, mp.tx_bytes, mp.commit, mp.write_csv

SOURCE = os.path.join(HERE, "mpi-users.c")
DEFAULT_P2P = "lat:8,lat:1024,lat:65536,lat:1048576,lat:4194304," \
              "bw:65536,bw:262144,bw:1048576,bw:4194304,rate:8"
DEFAULT_COLL = "allreduce:8,allreduce:1048576,alltoall:1024,alltoall:65536"
KINDS = {"lat": "us", "bw": "MB/s", "rate": "msg/s", "allreduce": "us", "alltoall": "us"}
HIGHER_BETTER = ("MB/s", "msg/s")
P2P_KINDS = ("lat", "bw", "rate")
COLL_NP = 4

MODES = ("tcp", "rov1", "rov2", "rov1-base", "ucx")
OB1 = ["--mca", "pml", "ob1"]
SELECTION = {
    "tcp": OB1 + ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", nf.FAB_NET],
    "rov1": OB1 + ["--mca", "btl", "self,railover", "--mca", "btl_railover_rails", "tcp@fab"],
    "rov2": OB1 + ["--mca", "btl", "self,railover", "--mca", "btl_railover_rails",
                   "tcp@fab,tcp@eth"],
    # UCX's own TCP transport on the fabric veth (no RDMA here): what a user
    # of Open MPI's other PML gets on these links.
    "ucx": ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices",
            "any", "--mca", "btl", "self", "-x", "UCX_TLS=tcp,self",
            "-x", "UCX_NET_DEVICES=fab"],
}
# rov1-base: rov1 with the component (and so the library) of --base-build.
SELECTION["rov1-base"] = SELECTION["rov1"]

# Where each rank should run: (side, cpus) per rank; cpus None = not pinned
# (all cpus allowed).
PLAN_P2P_PIN = [("A", "0"), ("B", "1")]
PLAN_COLL_PIN = [("A", "0"), ("B", "1"), ("A", "1"), ("B", "0")]


def parse_figures(text, allowed):
    figs = []
    for w in text.replace(" ", ",").split(","):
        if not w:
            continue
        kind, _, size = w.partition(":")
        if kind not in allowed:
            raise ValueError("%s: kind must be one of %s" % (w, ", ".join(allowed)))
        size = size.lower()
        mult = 1
        if size.endswith("k"):
            mult, size = 1024, size[:-1]
        elif size.endswith("m"):
            mult, size = 1 << 20, size[:-1]
        n = int(size) * mult
        if n < (8 if kind == "allreduce" else 1):
            raise ValueError("%s: size too small" % w)
        figs.append((kind, n))
    return figs


def parse_extra_mca(items):
    """'a=1,b=x,y' -> [--mca a 1 --mca b x,y]: a piece without '=' belongs
    to the value before it."""
    pairs = []
    for item in items or []:
        for piece in item.split(","):
            if "=" in piece:
                pairs.append(piece.split("=", 1))
            elif pairs:
                pairs[-1][1] += "," + piece
            elif piece:
                raise ValueError("%r: name=value expected" % piece)
    out = []
    for name, value in pairs:
        out += ["--mca", name.strip(), value.strip()]
    return out


def fig_name(kind, size):
    return "%s %s" % (kind, mp.fmt_size(size))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="build directory with mpi-btl/mca_btl_railover.so (default: build "
                    "next to bench/)")
    ap.add_argument("--out", default=None,
                    help="result directory (default ./mpi-users-YYYYmmdd-HHMMSS)")
    ap.add_argument("--prog", default=None,
                    help="a built mpi-users program (default: compile bench/mpi-users.c with "
                    "mpicc into --out)")
    ap.add_argument("--rounds", type=int, default=None, help="paired rounds (default 5)")
    ap.add_argument("--modes", default=None,
                    help="selections, a subset of %s (default all)" % ",".join(MODES))
    ap.add_argument("--pin", choices=("both", "on", "off"), default=None,
                    help="pinned, unpinned or both (default both)")
    ap.add_argument("--p2p", default=DEFAULT_P2P,
                    help="figures of the 2-rank job, KIND:SIZE,... (kinds lat, bw, rate; "
                    "empty: no such job; default %s)" % DEFAULT_P2P)
    ap.add_argument("--coll", default=DEFAULT_COLL,
                    help="figures of the %d-rank job (kinds allreduce, alltoall; empty: no "
                    "such job; default %s)" % (COLL_NP, DEFAULT_COLL))
    ap.add_argument("--scale", type=float, default=None,
                    help="ROV_MPIU_SCALE: multiplies every iteration count (default 1)")
    ap.add_argument("--extra-mca", action="append", default=None, metavar="NAME=VALUE,...",
                    help="MCA parameters for the railover selections only (repeatable)")
    ap.add_argument("--job-timeout", type=float, default=None,
                    help="seconds after which a job counts as hung (default 180, smoke 40); "
                    "a hung job ends the run")
    ap.add_argument("--smoke", action="store_true",
                    help="1 round, unpinned, scale 0.05, all selections: proves the benchmark "
                    "works; explicit options still win")
    ap.add_argument("--base-build", default=None, metavar="DIR",
                    help="another build directory (an older commit, say): adds the "
                    "selection rov1-base, rov1 with that build's component, side by side")
    ap.add_argument("--summarize", metavar="RUNS_CSV", default=None,
                    help="only print the tables of a runs.csv (this script's, or "
                    "bench/mpi-users-vm.sh's), ratios against --base")
    ap.add_argument("--base", default="tcp",
                    help="the selection the others are compared with (default tcp)")
    args = ap.parse_args()
    if args.summarize:
        return args
    if args.rounds is None:
        args.rounds = 1 if args.smoke else 5
    if args.pin is None:
        args.pin = "off" if args.smoke else "both"
    if args.scale is None:
        args.scale = 0.05 if args.smoke else 1.0
    if args.job_timeout is None:
        args.job_timeout = 40.0 if args.smoke else 180.0
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not args.scale > 0:
        ap.error("--scale must be positive")
    allowed = [m for m in MODES if args.base_build or m != "rov1-base"]
    args.modes = [m.strip() for m in (args.modes or ",".join(allowed)).split(",")
                  if m.strip()]
    bad = [m for m in args.modes if m not in allowed]
    if bad or not args.modes or len(set(args.modes)) != len(args.modes):
        ap.error("--modes: a subset of %s" % ",".join(allowed))
    args.modes = [m for m in MODES if m in args.modes]
    try:
        args.p2p = parse_figures(args.p2p, P2P_KINDS)
        args.coll = parse_figures(args.coll, ("allreduce", "alltoall"))
    except ValueError as e:
        ap.error("--p2p/--coll: %s" % e)
    if not args.p2p and not args.coll:
        ap.error("no figures (--p2p and --coll both empty)")
    try:
        args.extra = parse_extra_mca(args.extra_mca)
    except ValueError as e:
        ap.error("--extra-mca: %s" % e)
    args.pins = {"both": ["on", "off"], "on": ["on"], "off": ["off"]}[args.pin]
    if args.out is None:
        args.out = datetime.datetime.now().strftime("mpi-users-%Y%m%d-%H%M%S")
    return args


def prerequisites(args):
    """Raise nf.Skip when the benchmark cannot run here; return the
    component path."""
    nf.require_netns(nft=False)
    for prog in ("mpirun", "ompi_info") + (() if args.prog else ("mpicc",)):
        if not shutil.which(prog):
            raise nf.Skip("%s not found (apt-get install openmpi-bin libopenmpi-dev)" % prog)
    if args.prog and not os.access(args.prog, os.X_OK):
        raise nf.Skip("--prog %s is not an executable" % args.prog)
    btl_dir = os.path.join(os.path.abspath(args.build), "mpi-btl")
    if not os.path.isfile(os.path.join(btl_dir, "mca_btl_railover.so")):
        raise nf.Skip("no railover BTL component in %s (build it, or pass --build DIR)" % btl_dir)
    pkglibdir = mp.ompi_pkglibdir()
    if args.base_build:
        base = os.path.join(os.path.abspath(args.base_build), "mpi-btl")
        if not os.path.isfile(os.path.join(base, "mca_btl_railover.so")):
            raise nf.Skip("no railover BTL component in %s (--base-build)" % base)
        args.base_path = "%s:%s" % (pkglibdir, base)
    if "ucx" in args.modes and not os.path.isfile(os.path.join(pkglibdir, "mca_pml_ucx.so")):
        print("# no pml ucx in %s: selection ucx left out" % pkglibdir, flush=True)
        args.modes.remove("ucx")
    return "%s:%s" % (pkglibdir, btl_dir)


def compile_prog(out):
    prog = os.path.join(out, "mpi-users")
    argv = ["mpicc", "-std=c11", "-O2", "-Wall", "-Wextra", "-o", prog, SOURCE]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0 or p.stdout.strip():
        raise nf.Failure("%s: %s\n%s" % (" ".join(argv), "failed" if p.returncode else
                                         "warnings", p.stdout.strip()))
    return prog


class Bench:
    def __init__(self, args, topo, component_path, prog):
        self.args = args
        self.topo = topo
        self.out = args.out
        self.prog = prog
        self.hosts = os.path.join(self.out, "hosts")
        with open(self.hosts, "w") as f:
            f.write("%s slots=2\n%s slots=2\n" % (nf.ETH_A, nf.ETH_B))
        # Two agents: one starting B's orted on cpu 1 (pinned 2-rank jobs;
        # A's line is never used, A is mpirun's node), one without taskset.
        self.agent = {}
        for name, cpus in (("pin", ("0", "1")), ("free", ("", ""))):
            path = os.path.join(self.out, "agent-" + name)
            with open(path, "w") as f:
                f.write(mp.AGENT % (nf.ETH_A, topo.a, cpus[0], nf.ETH_B, topo.b, cpus[1]))
            os.chmod(path, 0o700)
            self.agent[name] = path
        self.rankfile = os.path.join(self.out, "rankfile")
        with open(self.rankfile, "w") as f:
            for r, (side, cpu) in enumerate(PLAN_COLL_PIN):
                f.write("rank %d=%s slot=%s\n" % (r, nf.ETH_A if side == "A" else nf.ETH_B, cpu))
        self.inode = {os.stat("/run/netns/" + topo.ns[s]).st_ino: s for s in ("A", "B")}
        self.env = dict(os.environ, OMPI_MCA_mca_base_component_path=component_path,
                        RAILOVER_LOG="warn", ROV_MPIU_SCALE=repr(args.scale),
                        ROV_MPIU_AFFINITY="1")
        self.env_base = dict(self.env, OMPI_MCA_mca_base_component_path=getattr(
            args, "base_path", component_path))
        self.runs = []       # one dict per figure and job
        self.jobs = []       # one dict per job
        self.bad_binding = []
        self.failed = []
        self.shown = set()

    def binding(self, np, pin):
        """mpirun options and the plan [(side, cpus or None)] per rank."""
        if pin == "on" and np == 2:
            return (["--map-by", "node", "--bind-to", "none"], self.agent["pin"], PLAN_P2P_PIN)
        if pin == "on":
            return (["--rankfile", self.rankfile], self.agent["free"], PLAN_COLL_PIN)
        return (["--map-by", "node", "--bind-to", "none"], self.agent["free"],
                [("A" if r % 2 == 0 else "B", None) for r in range(np)])

    def argv(self, mode, np, pin, figs):
        opts, agent, _plan = self.binding(np, pin)
        # Host A's ranks are mpirun's own children (A is the local node: no
        # agent, no orted): pinning host A means pinning mpirun.
        pin_a = ["taskset", "-c", PLAN_P2P_PIN[0][1]] if agent == self.agent["pin"] else []
        return self.topo.exec_argv("A", pin_a + [
            "mpirun", "--allow-run-as-root", "--hostfile", self.hosts, "-np", str(np)] + opts + [
            "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "oob_tcp_if_include", nf.ETH_NET,
            "--mca", "mpi_yield_when_idle", "1"] + SELECTION[mode] +
            (self.args.extra if mode.startswith("rov") else []) +
            [self.prog] + ["%s:%d" % f for f in figs])

    def check_binding(self, tag, pin, plan, aff):
        """Compare the ranks' namespace and cpus with the plan; return a
        short description (rank@side:cpus ...)."""
        allcpus = "0-%d" % ((os.cpu_count() or 1) - 1) if (os.cpu_count() or 1) > 1 else "0"
        seen, wrong = [], []
        for r, (side, cpus) in enumerate(plan):
            a = aff.get(r)
            if a is None:
                wrong.append("rank %d did not report" % r)
                continue
            got_side = self.inode.get(int(a.get("netns", "0")), "?")
            seen.append("%d@%s:%s" % (r, got_side, a.get("cpus")))
            want = cpus if cpus is not None else allcpus
            if got_side != side or a.get("cpus") != want:
                wrong.append("rank %d in %s on cpus %s (planned %s on %s)" % (
                    r, got_side, a.get("cpus"), side, want))
        if wrong:
            self.bad_binding.append("%s: %s" % (tag, "; ".join(wrong)))
            log("warning: job %s: binding not as planned: %s" % (tag, "; ".join(wrong)))
        return " ".join(seen)

    def run_job(self, rnd, pin, order, mode, np, figs):
        tag = "r%d-pin%s-%s-np%d" % (rnd, pin, mode, np)
        jobout = os.path.join(self.out, "job-%s.out" % tag)
        argv = self.argv(mode, np, pin, figs)
        key = (mode, np, pin)
        if key not in self.shown:
            self.shown.add(key)
            log("$ " + " ".join(argv))
        before = tx_bytes(self.topo)
        t0 = time.monotonic()
        with open(jobout, "w") as f:
            job = subprocess.Popen(argv, env=self.env_base if mode.endswith("-base") else
                                   self.env, stdout=f, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
            try:
                rc = job.wait(timeout=self.args.job_timeout)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
                raise nf.Failure("job %s hung (not over after %g s); output in %s" %
                                 (tag, self.args.job_timeout, jobout))
        wall = time.monotonic() - t0
        after = tx_bytes(self.topo)
        d = {k: after[k] - before[k] for k in after}
        got, aff = {}, {}
        with open(jobout) as f:
            for line in f:
                w = line.split()
                if not w or w[0] not in ("ROV_MPIU", "ROV_MPIU_AFFINITY"):
                    continue
                kv = dict(x.split("=", 1) for x in w[1:] if "=" in x)
                try:
                    if w[0] == "ROV_MPIU":
                        got[(kv["kind"], int(kv["size"]))] = (float(kv["value"]), kv["unit"],
                                                               int(kv.get("iters", 0)))
                    else:
                        aff[int(kv["rank"])] = kv
                except (KeyError, ValueError):
                    pass
        _opts, _agent, plan = self.binding(np, pin)
        seen = self.check_binding(tag, pin, plan, aff)
        for kind, size in figs:
            v = got.get((kind, size))
            self.runs.append({"round": rnd, "pin": pin, "mode": mode, "np": np, "kind": kind,
                              "size": size, "value": v[0] if v else None,
                              "unit": v[1] if v else KINDS[kind], "exit": rc,
                              "wall_s": round(wall, 3), "iters": v[2] if v else None})
        missing = [fig_name(*fg) for fg in figs if fg not in got]
        fab = d[("A", "fab")] + d[("B", "fab")]
        eth = d[("A", "eth")] + d[("B", "eth")]
        self.jobs.append({"round": rnd, "pin": pin, "order": order, "mode": mode, "np": np,
                          "exit": rc, "wall_s": round(wall, 3), "binding": seen,
                          "fab_tx": fab, "eth_tx": eth})
        if rc != 0 or missing:
            self.failed.append(tag)
            log("FAIL: job %s (exit %d%s); output in %s" % (
                tag, rc, ", no result for " + ", ".join(missing) if missing else "", jobout))
            return
        if mode != "rov2" and eth > fab:
            log("warning: job %s sent %d B on the fabric and %d B on the ethernet link: not "
                "all of its traffic was on the fabric" % (tag, fab, eth))
        os.unlink(jobout)

    def run(self):
        modes = self.args.modes
        n = len(modes)
        jobs = [(2, self.args.p2p), (COLL_NP, self.args.coll)]
        for rnd in range(1, self.args.rounds + 1):
            pins = self.args.pins[rnd % len(self.args.pins):] + \
                self.args.pins[:rnd % len(self.args.pins)]
            for p, pin in enumerate(pins):
                for k, (np, figs) in enumerate(jobs):
                    if not figs:
                        continue
                    # Rotate the order from round to round (and job to job),
                    # so that no selection always runs first.
                    s = rnd + p + k
                    order = [modes[(i + s) % n] for i in range(n)]
                    if s % 2:
                        order.reverse()
                    for i, mode in enumerate(order):
                        self.run_job(rnd, pin, i + 1, mode, np, figs)
            done = [r for r in self.runs if r["round"] == rnd and r["value"] is not None]
            first = [r for r in done if (r["kind"], r["size"]) in (
                (self.args.p2p or self.args.coll)[0], (self.args.p2p or self.args.coll)[-1])]
            log("round %d/%d: %s" % (rnd, self.args.rounds, ", ".join(
                "%s pin %s %s %s" % (r["mode"], r["pin"], fig_name(r["kind"], r["size"]),
                                    fmt_value(r["value"], r["unit"])) for r in first)))


def fmt_value(v, unit):
    if v is None:
        return "-"
    if unit == "us":
        return "%.2f us" % v if v < 1000 else "%.0f us" % v
    return "%.0f %s" % (v, unit)


def better(ratio, unit):
    return ratio >= 1.0 if unit in HIGHER_BETTER else ratio <= 1.0


def summarize(args, runs):
    """[(pin, kind, size, unit, {mode: median}, {mode: ratios vs tcp})]."""
    val = {}
    for r in runs:
        if r["value"] is not None and r["exit"] == 0:
            val[(r["round"], r["pin"], r["mode"], r["kind"], r["size"])] = r["value"]
    rounds = sorted({r["round"] for r in runs})
    out = []
    for pin in args.pins:
        for kind, size in args.p2p + args.coll:
            med, ratios = {}, {}
            for mode in args.modes:
                v = [val[k] for k in ((r, pin, mode, kind, size) for r in rounds) if k in val]
                med[mode] = statistics.median(v) if v else None
                base = args.base
                if mode == base or base not in args.modes:
                    continue
                ratios[mode] = [val[(r, pin, mode, kind, size)] / val[(r, pin, base, kind, size)]
                                for r in rounds if (r, pin, mode, kind, size) in val and
                                val.get((r, pin, base, kind, size))]
            if any(v is not None for v in med.values()):
                out.append((pin, kind, size, KINDS[kind], med, ratios))
    return out


def ratio_cell(v, unit):
    if not v:
        return "-"
    med = statistics.median(v)
    text = "%.3f (%.3f-%.3f)" % (med, min(v), max(v))
    return ("ok " + text) if better(med, unit) else ("**WORSE %s**" % text)


def markdown(args, summary, bench):
    nrounds = len({r["round"] for r in bench.runs})
    base = args.base
    others = [m for m in args.modes if m != base] if base in args.modes else []
    lines = ["Medians of %d paired round(s); ratio = median of the per-round ratios "
             "selection/%s (min-max over the rounds): `ok` when better than or equal to %s "
             "(>= 1 for MB/s and msg/s, <= 1 for times), **WORSE** otherwise." %
             (nrounds, base, base), ""]
    head = ["pin", "figure", "unit"] + args.modes + ["%s/%s" % (m, base) for m in others]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("| --- " * len(head) + "|")
    for pin, kind, size, unit, med, ratios in summary:
        cells = [pin, fig_name(kind, size), unit]
        cells += [fmt_value(med[m], unit).split()[0] for m in args.modes]
        cells += [ratio_cell(ratios.get(m), unit) for m in others]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if args.summarize:
        return "\n".join(lines)
    lines.append("Binding: " + binding_text(args, bench))
    if bench.bad_binding:
        lines.append("Binding NOT as planned in %d job(s): %s" % (
            len(bench.bad_binding), " | ".join(bench.bad_binding)))
    if bench.failed:
        lines.append("Failed jobs (no figures from them): %s" % ", ".join(bench.failed))
    return "\n".join(lines)


def congestion_control():
    """The kernel's default TCP congestion control (new namespaces start with it)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def binding_text(args, bench):
    parts = []
    if "on" in args.pins:
        parts.append("pin on: 2-rank jobs rank 0 in A on cpu 0, rank 1 in B on cpu 1 "
                     "(mpirun under taskset -c 0, B's orted under taskset -c 1, --bind-to "
                     "none); 4-rank jobs by rankfile: rank 0 A cpu 0, 1 B cpu 1, 2 A cpu 1, "
                     "3 B cpu 0")
    if "off" in args.pins:
        parts.append("pin off: --bind-to none, no taskset (ranks alternate A, B)")
    return "; ".join(parts) + ("; checked per job from each rank's sched_getaffinity and "
                               "network namespace")


def summarize_only(args):
    """--summarize: the tables of an earlier run's runs.csv."""
    with open(args.summarize, newline="") as f:
        runs = list(csv.DictReader(f))
    for r in runs:
        r["round"], r["size"], r["exit"] = int(r["round"]), int(r["size"]), int(r["exit"])
        r["value"] = float(r["value"]) if r["value"] else None
    seen = lambda key: list(dict.fromkeys(r[key] for r in runs))  # noqa: E731
    args.modes, args.pins = seen("mode"), seen("pin")
    args.p2p = list(dict.fromkeys((r["kind"], r["size"]) for r in runs))
    args.coll = []
    bench = argparse.Namespace(runs=runs)
    print(markdown(args, summarize(args, runs), bench), flush=True)
    return 0


def main():
    args = parse_args()
    if args.summarize:
        return summarize_only(args)
    try:
        component_path = prerequisites(args)
    except nf.Skip as e:
        print("SKIP: %s" % e, flush=True)
        return nf.SKIP
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)
    if "on" in args.pins and not ((os.cpu_count() or 1) >= 2 and shutil.which("taskset")):
        log("warning: pinning needs 2 cpus and taskset: running unpinned only")
        args.pins = ["off"]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = load1()
    log("mpi-users: %d round(s), modes %s, pin %s, scale %g, results in %s" % (
        args.rounds, ",".join(args.modes), ",".join(args.pins), args.scale, args.out))
    if load_before > (os.cpu_count() or 1) / 2:
        log("warning: load average %.2f before the run: other work competes for the cores; "
            "compare ratios, rerun when idle" % load_before)
    rc = 0
    bench = None
    try:
        prog = os.path.abspath(args.prog) if args.prog else compile_prog(args.out)
        with nf.Topology() as topo:
            bench = Bench(args, topo, component_path, prog)
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
    if bench.failed:
        rc = 1
    keys = ["round", "pin", "mode", "np", "kind", "size", "value", "unit", "exit", "wall_s",
            "iters"]
    write_csv(os.path.join(args.out, "runs.csv"), keys,
              [["" if r[k] is None else r[k] for k in keys] for r in bench.runs])
    jkeys = ["round", "pin", "order", "mode", "np", "exit", "wall_s", "binding", "fab_tx",
             "eth_tx"]
    write_csv(os.path.join(args.out, "jobs.csv"), jkeys,
              [[j[k] for k in jkeys] for j in bench.jobs])
    cc = congestion_control()
    with open(os.path.join(args.out, "meta.txt"), "w") as f:
        f.write("command: %s\nstarted: %s\nfinished: %s\ncommit: %s\nhost: %s %s, %d cpu\n"
                "load before: %.2f\nload after: %.2f\nrounds: %d\nmodes: %s\npin: %s\n"
                "scale: %g\nextra mca (railover): %s\np2p: %s\ncoll: %s\nbinding: %s\n"
                "program: %s\ntcp congestion control: %s\n" % (
                    " ".join(sys.argv), started.isoformat(timespec="seconds"),
                    datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    commit(), platform.node(), platform.release(), os.cpu_count() or 1,
                    load_before, load_after, args.rounds, ",".join(args.modes),
                    ",".join(args.pins), args.scale, " ".join(args.extra) or "-",
                    " ".join("%s:%d" % f for f in args.p2p),
                    " ".join("%s:%d" % f for f in args.coll), binding_text(args, bench),
                    bench.prog, cc))
    summary = summarize(args, bench.runs)
    text = markdown(args, summary, bench)
    text += "\n\nLoad average %.2f before, %.2f after (%d cpu); scale %g; TCP congestion " \
        "control %s (net.ipv4.tcp_congestion_control, inherited by the hosts' namespaces: " \
        "under BBR both transports are paced, bench/README.md)\n" % (
            load_before, load_after, os.cpu_count() or 1, args.scale, cc)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
