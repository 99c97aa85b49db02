#!/usr/bin/env python3
"""A job's checkpoint stages: how long cprclient's drain, close, checkpoint and reopen take.

The job of tests/ccp/test_ccp.py, at N ranks: rov_job ranks of one job
(RAILOVER_JOBID a fresh uuid4), the first half in namespace host A, the
rest in B (tests/failover/netfault.py's Topology), each with two TCP rails
(fabric first, Ethernet second), its network control endpoint on its
host's Ethernet address (RAILOVER_CCP_ADDR), the job registry in a
directory of the run (RAILOVER_JOB_DIR) and RAILOVER_CHECKPOINT_CMD.  Every
rank sends checked messages of --sizes bytes to every other as fast as its
windows allow (rov_job --rate 0, --msgs far more than the run sends), so
the windows are full when the drain starts.  The window that binds is
RAILOVER_WINDOW_TIME (what the peers acknowledge in 20 ms, at least 1 MiB
per rank), with at least one message per connection, not
RAILOVER_WINDOW_BYTES: the bytes in flight grow with the number of peers,
and with the message size once one message per connection is more than
the time window.  `--env RAILOVER_WINDOW_TIME=0s` lifts the time bound
(then up to RAILOVER_WINDOW_TOTAL, 256 MiB per rank).

For every number of ranks N and message size S, --runs times (a fresh job
each time; one round runs every (N, S) once, so the configurations are
measured side by side):
  start the job; wait until every rank receives from its peers, then
  --settle seconds more and a fresh progress line of every rank (its
  sent - acked, times S, summed over the ranks: the bytes in flight at
  the drain, as fresh as rov_job's one-a-second line); then in A
      cprclient --timeout T JOBID
  (no stage: drain, close, checkpoint, reopen) and record each stage's
  summary time_s (the slowest rank's), each rank's checkpoint time_s (its
  command's own run time, the runner's ckpt_ms), and the wall time of the
  whole cprclient call (from here, `ip netns exec` included); then kill
  the ranks.

What the times are (docs/ccp.md, ccp/client.c): drain, close and reopen
run from cprclient's request until it saw the rank there (it asks every
5 ms); checkpoint is the checkpoint command's run time as each rank's
runner measured it (the summary: the slowest rank), without the client's
asks and its 20 ms polls of the records; "whole" adds those, the stages'
checks, the client's start and the registry reads.

Prints a table of medians (min-max) in ms per (N, S); never asserts a
time.  Run as root (namespaces).  The default checkpoint command is
`gcore -o %d/core %p` when gdb's gcore is installed, else `cat
/proc/%p/status > %d/status`; the output says which.  Each job's images
are removed after its run (unless --keep).

  bench/ccp-time.py --build build-me --ranks 2,4,8,16 --sizes 4096,262144 --runs 3
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # nothing written into the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "failover"))
sys.path.insert(0, os.path.join(ROOT, "tests", "ccp"))
import netfault as nf  # noqa: E402  (tests/failover/netfault.py)
from test_ccp import Answer, job_dirs, parse_fields  # noqa: E402  (cprclient's output, as the test reads it)

STAGES = ("drain", "close", "checkpoint", "reopen")
CMD_MAX = 255   # RAILOVER_CHECKPOINT_CMD's longest


def log(msg):
    nf.log(msg)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def default_build():
    for b in ("build-bench", "build"):
        if os.access(os.path.join(ROOT, b, "tools", "cprclient"), os.X_OK):
            return os.path.join(ROOT, b)
    return os.path.join(ROOT, "build-bench")


def side_of(r, n):
    """The first half of the ranks in A, the rest in B."""
    return "A" if r < n // 2 else "B"


class Job:
    """N rov_job ranks of one job, streaming all to all at --rate 0."""

    def __init__(self, args, wd, topo, n, size, ckpt_cmd):
        self.args, self.wd, self.topo, self.n, self.size = args, wd, topo, n, size
        self.jobid = str(uuid.uuid4())
        self.job_base, self.run_dir, base = job_dirs(wd)
        self.job_dir = os.path.join(self.job_base, self.jobid)
        self.client_env = dict(base)
        self.env = {}
        for r in range(n):
            side = side_of(r, n)
            e = dict(base)
            e.update(RAILOVER_JOBID=self.jobid, RAILOVER_RANK=str(r),
                     RAILOVER_RAILS=nf.RAILS_A if side == "A" else nf.RAILS_B,
                     RAILOVER_CCP_ADDR=nf.ETH_A if side == "A" else nf.ETH_B,
                     RAILOVER_CHECKPOINT_CMD=ckpt_cmd,
                     RAILOVER_CHECKPOINT_TIMEOUT="%ds" % args.timeout)
            e.update(args.env)
            self.env[r] = e
        self.procs = {}

    def start(self):
        common = ["--size", self.n, "--msgs", self.args.msgs, "--msg-size", self.size,
                  "--rate", 0, "--timeout", self.args.job_timeout]
        for r in range(self.n):
            argv = self.topo.exec_argv(side_of(r, self.n), [self.args.rov_job] + common)
            self.procs[r] = nf.Proc("rank%d" % r, argv, self.env[r], self.wd.file("rank%d.out" % r),
                                    self.wd.file("rank%d.log" % r), None)
        self.wait_until("every rank receiving from its peers",
                        lambda: all(self.counters(r).get("received", 0) > 0
                                    for r in range(self.n)), 60 + 5 * self.n)

    def kill(self):
        for p in self.procs.values():
            p.kill()
        if self.run_dir != self.wd.file("run"):
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def lines(self, r):
        try:
            with open(self.procs[r].err_path, errors="replace") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def counters(self, r):
        """The rank's last progress line: {t, sent, acked, received, stage}."""
        last = {}
        for line in self.lines(r):
            if line.startswith("rank=") and " received=" in line and " event=" not in line:
                last = parse_fields(line)
        return last

    def failures(self):
        """rov_job's own FAIL lines (a message lost, duplicated or corrupt, ...)."""
        return ["rank %d: %s" % (r, line) for r in range(self.n) for line in self.lines(r)
                if line.startswith("FAIL ")]

    def dead(self):
        return [r for r, p in self.procs.items() if p.poll() is not None]

    def wait_until(self, what, pred, timeout, poll=0.1):
        t0 = time.monotonic()
        while not pred():
            gone = self.dead()
            if gone:
                raise nf.Failure("rank %d exited (status %s) while waiting for: %s\n%s" % (
                    gone[0], self.procs[gone[0]].rc, what, self.procs[gone[0]].tail(8)))
            if time.monotonic() - t0 > timeout:
                raise nf.Failure("not within %gs: %s" % (timeout, what))
            time.sleep(poll)
        return time.monotonic() - t0

    def in_flight(self):
        """Bytes sent (taken by the library) and not yet acknowledged, summed
        over the ranks, from a progress line of each printed from now on."""
        wall = time.time()
        self.wait_until("a fresh progress line of every rank",
                        lambda: all(self.counters(r).get("t", 0) > wall for r in range(self.n)),
                        10, poll=0.02)
        c = {r: self.counters(r) for r in range(self.n)}
        return sum(max(0, c[r]["sent"] - c[r]["acked"]) for r in range(self.n)) * self.size

    def client(self):
        argv = self.topo.exec_argv("A", [self.args.cprclient, "--timeout", self.args.timeout,
                                         self.jobid])
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, env=self.client_env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=4 * self.args.timeout + 30)
        except subprocess.TimeoutExpired:
            raise nf.Failure("cprclient did not exit within %d s" % (4 * self.args.timeout + 30))
        wall = time.monotonic() - t0
        ans = Answer([self.jobid], p.returncode, p.stdout, p.stderr)
        with open(self.wd.file("cprclient.txt"), "w") as f:
            f.write("%s\n(%.3f s)\n" % (ans, wall))
        return ans, wall


def one_run(args, wd, topo, n, size, rnd, ckpt_cmd):
    """One job: start, wait, cprclient, kill.  A row (dict); "error" when it failed."""
    row = {"ranks": n, "size": size, "round": rnd}
    sub = wd.sub("n%d-s%d-r%d" % (n, size, rnd))
    job = Job(args, sub, topo, n, size, ckpt_cmd)
    try:
        job.start()
        time.sleep(args.settle)
        row["in_flight"] = job.in_flight()
        ans, wall = job.client()
        row["whole_ms"] = wall * 1e3
        row["rc"] = ans.rc
        for sm, ranks in ans.stages:
            st = sm.get("stage")
            row[st + "_ms"] = sm.get("time_s", 0) * 1e3
            row[st + "_status"] = sm.get("status")
            if st == "checkpoint":
                row["ckpt_rank_ms"] = [d.get("time_s", 0) * 1e3 for d in ranks.values()
                                       if d.get("status") == "ok"]
        got = [sm.get("stage") for sm, _ in ans.stages]
        if ans.rc != 0 or got != list(STAGES):
            err = ans.err.strip().splitlines()
            row["error"] = "cprclient exit %d, stages %s: %s" % (
                ans.rc, got, err[-1] if err else "(no stderr)")
        gone = job.dead()
        if gone:
            row.setdefault("error", "rank(s) %s exited during the stages" % gone)
        fails = job.failures()
        if fails:
            row.setdefault("error", "rov_job reported: %s" % fails[0])
    except nf.Failure as e:
        row["error"] = str(e).splitlines()[0]
    finally:
        job.kill()
        if not args.keep:   # images (cores) can be hundreds of MB per rank
            shutil.rmtree(os.path.join(job.job_dir, "images"), ignore_errors=True)
    if "error" in row:
        log("ranks=%d size=%d round %d: FAILED: %s (logs in %s)" % (n, size, rnd, row["error"],
                                                                   sub.path))
    else:
        log("ranks=%d size=%d round %d: in flight %.1f MiB; drain %.0f, close %.0f, "
            "checkpoint %.0f (per rank %s), reopen %.0f, whole %.0f ms" % (
                n, size, rnd, row["in_flight"] / 2**20, row["drain_ms"], row["close_ms"],
                row["checkpoint_ms"], ",".join("%.0f" % x for x in row["ckpt_rank_ms"]),
                row["reopen_ms"], row["whole_ms"]))
    return row


def fmt_ms(v):
    return "%.0f" % v   # cprclient's time_s has 1 ms resolution


def cell(vals, fmt=fmt_ms):
    if not vals:
        return "-"
    return "%s (%s-%s)" % (fmt(statistics.median(vals)), fmt(min(vals)), fmt(max(vals)))


def fmt_size(b):
    for unit, k in (("MiB", 2**20), ("KiB", 2**10)):
        if b >= k and b % k == 0:
            return "%d %s" % (b // k, unit)
    return "%d B" % b


def table(rows, ranks, sizes):
    head = ["ranks", "msg size", "in flight MiB", "drain ms", "close ms", "checkpoint ms",
            "ckpt cmd per rank ms", "reopen ms", "whole ms", "ok runs"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for n in ranks:
        for s in sizes:
            sel = [r for r in rows if r["ranks"] == n and r["size"] == s]
            ok = [r for r in sel if "error" not in r]

            def col(k):
                return cell([r[k] for r in ok])
            per_rank = [x for r in ok for x in r["ckpt_rank_ms"]]
            out.append("| " + " | ".join([
                str(n), fmt_size(s), cell([r["in_flight"] / 2**20 for r in ok],
                                          lambda v: "%.1f" % v),
                col("drain_ms"), col("close_ms"), col("checkpoint_ms"), cell(per_rank),
                col("reopen_ms"), col("whole_ms"), "%d/%d" % (len(ok), len(sel))]) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default=default_build(),
                    help="build directory: tests/ccp/rov_job and tools/cprclient "
                         "(build-bench, else build)")
    ap.add_argument("--ranks", default="2,4,8,16", help="numbers of ranks (2,4,8,16)")
    ap.add_argument("--sizes", default="4096,262144", help="message sizes in bytes (4096,262144)")
    ap.add_argument("--runs", type=int, default=3, help="jobs per (ranks, size) (3)")
    ap.add_argument("--checkpoint-cmd", default=None,
                    help="RAILOVER_CHECKPOINT_CMD (default: 'gcore -o %%d/core %%p' with gdb's "
                         "gcore, else 'cat /proc/%%p/status > %%d/status')")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds of traffic after every rank receives, before the drain (1)")
    ap.add_argument("--msgs", type=int, default=10000000,
                    help="rov_job --msgs: messages to each peer, more than a run sends (1e7)")
    ap.add_argument("--timeout", type=int, default=120,
                    help="cprclient --timeout, and the ranks' RAILOVER_CHECKPOINT_TIMEOUT (120)")
    ap.add_argument("--job-timeout", type=int, default=900,
                    help="rov_job --timeout, a safety net (900)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="set this in every rank's environment (repeatable), e.g. "
                         "RAILOVER_WINDOW_TIME=0s: in flight up to RAILOVER_WINDOW_TOTAL")
    ap.add_argument("--json", help="write every run's numbers to this file (JSON lines)")
    ap.add_argument("--keep", action="store_true", help="keep the log directory and the images")
    args = ap.parse_args()
    if any("=" not in kv for kv in args.env):
        raise SystemExit("ccp-time.py: --env takes NAME=VALUE")
    args.env = dict(kv.split("=", 1) for kv in args.env)
    args.rov_job = os.path.abspath(os.path.join(args.build, "tests", "ccp", "rov_job"))
    args.cprclient = os.path.abspath(os.path.join(args.build, "tools", "cprclient"))
    for path in (args.rov_job, args.cprclient):
        if not os.access(path, os.X_OK):
            raise SystemExit("ccp-time.py: %s is not an executable (build first, or pass --build)"
                             % path)
    ranks = [int(x) for x in args.ranks.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    if any(n < 2 for n in ranks) or any(s < 20 or s > 1048576 for s in sizes) or args.runs < 1:
        raise SystemExit("ccp-time.py: ranks >= 2, sizes 20..1048576 bytes, runs >= 1")
    if args.checkpoint_cmd:
        ckpt_cmd, why = args.checkpoint_cmd, "--checkpoint-cmd"
    elif shutil.which("gcore"):
        ckpt_cmd, why = "%s -o %%d/core %%p" % shutil.which("gcore"), "gcore found"
    else:
        ckpt_cmd, why = "cat /proc/%p/status > %d/status", "no gcore (gdb) installed"
    if len(ckpt_cmd) > CMD_MAX:
        raise SystemExit("ccp-time.py: the checkpoint command is longer than %d bytes" % CMD_MAX)
    nf.require_netns(nft=False)

    load0 = loadavg()
    t_start = time.time()
    log("load average before: %s; checkpoint command: %s (%s)%s" % (
        load0, ckpt_cmd, why, "".join("; %s=%s" % kv for kv in sorted(args.env.items()))))
    wd = nf.Workdir("ccp-time", keep=args.keep)
    rows = []
    jf = open(args.json, "w") if args.json else None
    try:
        with nf.Topology() as topo:
            for rnd in range(args.runs):
                for n in ranks:
                    for s in sizes:
                        row = one_run(args, wd, topo, n, s, rnd, ckpt_cmd)
                        rows.append(row)
                        if jf:
                            jf.write(json.dumps(row) + "\n")
                            jf.flush()
        wd.failed = any("error" in r for r in rows)
    finally:
        if jf:
            jf.close()
        nf.run_cleanups()
    print()
    print("# %s, %.0f s; load average %s before, %s after (%d cores)" % (
        time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(t_start)), time.time() - t_start,
        load0, loadavg(), os.cpu_count()))
    print("# checkpoint command: %s (%s)%s" % (ckpt_cmd, why, "".join(
        "; %s=%s" % kv for kv in sorted(args.env.items()))))
    print("# median (min-max) over the ok runs of each row; drain, close, reopen: the slowest "
          "rank, request to seen there; checkpoint: the slowest rank's command run time; ckpt "
          "cmd per rank: every rank's command run time; whole: the cprclient call's wall time; "
          "in flight: sent - acked times the size, summed over the ranks, at most ~1 s before "
          "the drain")
    print(table(rows, ranks, sizes))
    bad = [r for r in rows if "error" in r]
    for r in bad:
        print("# FAILED: ranks=%d size=%d round %d: %s" % (r["ranks"], r["size"], r["round"],
                                                           r["error"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
