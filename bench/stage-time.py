#!/usr/bin/env python3
"""Checkpoint stages: how long quiesce, close-rails and reopen take for N connections.

The two network namespaces of the failover tests (tests/failover/netfault.py:
a fabric veth, rail 0, and an Ethernet veth, rail 1); one rov_stream pair,
listener in A, connector in B, streaming checksummed messages (up to
--max-size bytes) both ways on N connections.  For every N of --counts, in
one pair, --runs rounds on the connector's process, through its control
socket (`railover ctl PID ...`), each once traffic flows again:

  quiesce: request -> the connector's ROV_EVENT_CONTEXT_QUIESCED (its
     "quiesced" event; both clocks CLOCK_MONOTONIC): every connection has
     sent what it had, had it acknowledged and exchanged end markers.
  close: the `close-rails` request's round trip through the tool (the
     close is synchronous), with the round trip of a `stage` request beside
     it (the tool's own cost: a process start and a connect).
  reopen: request -> ROV_EVENT_CONTEXT_RESUMED: rails opened, listeners
     bound, every connection reconnected and handshaken.
  flowing: request to reopen -> every connection delivering both ways again
     (the rate CSV, so as coarse as --rate-ms).

With --computing, both processes are in a compute phase during each round
(rov_stream --compute-file: no library call at all) and both are asked to
quiesce, as ccp/ asks every process of a job; the stages then complete by
each process's progress helper (RAILOVER_PROGRESS_THREAD), the events wait
for the compute phase's end, so quiesce and reopen are measured by polling
the `stage` command instead (request -> both report quiesced / running;
as coarse as the tool's round trip).

With --computing --helper off (RAILOVER_PROGRESS_THREAD=off), the same
round shows what a process without the helper does: the quiesce request
is not answered while it computes (the tool gives up after 5 s); the
round then ends the compute phase and times the quiesce from there.

Prints a table of medians (and min / max) per N; every pair's stream is
verified at the end (no loss, duplicate or reordering).  Run as root
(namespaces).  Timing varies with the machine's load: compare medians
taken side by side.

  bench/stage-time.py --counts 1,16,64 --runs 5
  bench/stage-time.py --counts 1,16,64 --runs 5 --computing
  bench/stage-time.py --counts 1 --runs 3 --computing --helper off
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fobench  # noqa: E402
from fobench import SIDES, log, netfault as nf, now_ns  # noqa: E402


def ctl(pair, role, verb):
    p = pair.procs[role]
    t0 = now_ns()
    out = subprocess.run([pair.args.railover, "ctl", str(p.pid), verb], env=pair.env[role],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t1 = now_ns()
    if out.returncode != 0:
        raise nf.Failure("railover ctl %d %s: %s" % (p.pid, verb, out.stdout.strip()))
    return t0, t1, out.stdout


def event_after(pair, role, name, t0, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in pair.events[role].poll():
            if e.get("ev") == name and e.get("t", 0) >= t0:
                return e["t"]
        pair.check_alive("waiting for %s" % name)
        time.sleep(0.005)
    raise nf.Failure("no %s event within %gs" % (name, timeout))


def flowing_after(pair, n, rx0, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rx = {r: pair.rx_totals(r) for r in SIDES}
        if all(rx[r].get(c, 0) > rx0[r].get(c, 0) for r in SIDES for c in range(n)):
            return now_ns()
        time.sleep(0.01)
    raise nf.Failure("not delivering again within %gs" % timeout)


def stage_of(pair, role):
    _, _, out = ctl(pair, role, "stage")
    for line in out.splitlines():
        if line.startswith("context stage="):
            return nf.parse_kv(line)["stage"]
    raise nf.Failure("no stage line: %r" % out)


def until_stage(pair, stage, timeout):
    """Both sides report stage: the time of the last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(stage_of(pair, r) == stage for r in SIDES):
            return now_ns()
        time.sleep(0.002)
    raise nf.Failure("not %s within %gs" % (stage, timeout))


def enter_compute(pair, flag):
    """Start a compute phase on both sides; return once both say they compute."""
    before = {r: pair.log_count(r, "computing (no library call)") for r in SIDES}
    open(flag, "w").close()
    pair.wait_until("both computing", lambda: all(
        pair.log_count(r, "computing (no library call)") > before[r] for r in SIDES), 10)


def unhelped_round(args, pair, n, r, flag):
    """--helper off: the request goes unanswered while the process computes."""
    enter_compute(pair, flag)
    t0 = now_ns()
    out = subprocess.run([pair.args.railover, "ctl", str(pair.procs["connector"].pid),
                          "quiesce"], env=pair.env["connector"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    t1 = now_ns()
    log("n=%d round %d (computing, no helper): quiesce request: exit %d after %.1f s: %s" % (
        n, r, out.returncode, (t1 - t0) / 1e9, out.stdout.strip()))
    os.unlink(flag)
    t_c = now_ns()
    if out.returncode != 0:   # the tool gave up: ask again now (a second quiesce is harmless)
        ctl(pair, "connector", "quiesce")
    t_qd = until_stage_of(pair, "connector", "quiesced", 30)
    ctl(pair, "connector", "reopen")
    until_stage_of(pair, "connector", "running", 30)
    return {"n": n, "round": r, "quiesce_ms": (t_qd - t_c) / 1e6, "close_ms": 0.0,
            "tool_ms": 0.0, "reopen_ms": 0.0, "flowing_ms": 0.0,
            "unanswered_s": (t1 - t0) / 1e9 if out.returncode else 0.0}


def until_stage_of(pair, role, stage, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stage_of(pair, role) == stage:
            return now_ns()
        time.sleep(0.002)
    raise nf.Failure("%s not %s within %gs" % (role, stage, timeout))


def computing_round(args, pair, n, r, flag):
    if args.helper == "off":
        return unhelped_round(args, pair, n, r, flag)
    enter_compute(pair, flag)
    t_q = now_ns()
    for role in SIDES:
        ctl(pair, role, "quiesce")
    t_qd = until_stage(pair, "quiesced", 30)
    c0, _, _ = ctl(pair, "connector", "close-rails")
    _, c1, _ = ctl(pair, "listener", "close-rails")
    s0, s1, _ = ctl(pair, "connector", "stage")
    t_r = now_ns()
    for role in ("listener", "connector"):
        ctl(pair, role, "reopen")
    t_rd = until_stage(pair, "running", 30)
    rx0 = {s: pair.rx_totals(s) for s in SIDES}
    os.unlink(flag)
    t_c = now_ns()
    t_f = flowing_after(pair, n, rx0, 30)
    return {"n": n, "round": r, "quiesce_ms": (t_qd - t_q) / 1e6,
            "close_ms": (c1 - c0) / 2e6, "tool_ms": (s1 - s0) / 1e6,
            "reopen_ms": (t_rd - t_r) / 1e6, "flowing_ms": (t_f - t_c) / 1e6}


def one_count(args, wd, n):
    rows = []
    with nf.Topology() as topo:
        env = dict(nf.FAULT_ENV)
        env["RAILOVER_LOG"] = args.log_level
        env["RAILOVER_PROGRESS_THREAD"] = args.helper
        sub = wd.sub("n%d" % n)
        flag = os.path.join(sub.path, "computing.flag")
        pair = nf.StreamPair(args, sub, topo, conns=n, env=env,
                             max_size=args.max_size, rate_ms=args.rate_ms,
                             extra=["--compute-file", flag] if args.computing else [])
        try:
            pair.start(ready_timeout=60)
            time.sleep(1.0)
            for r in range(args.runs):
                if args.computing:
                    row = computing_round(args, pair, n, r, flag)
                    rows.append(row)
                    log("n=%d round %d (computing): quiesce %.1f ms, close %.1f ms, reopen "
                        "%.1f ms, flowing %.0f ms after the compute phase" % (
                            n, r, row["quiesce_ms"], row["close_ms"], row["reopen_ms"],
                            row["flowing_ms"]))
                    time.sleep(args.settle)
                    continue
                t_q, _, _ = ctl(pair, "connector", "quiesce")
                t_qd = event_after(pair, "connector", "quiesced", t_q, 30)
                s0, s1, _ = ctl(pair, "connector", "stage")
                c0, c1, out = ctl(pair, "connector", "close-rails")
                if "stage=closed" not in out:
                    raise nf.Failure("close-rails: %s" % out.strip())
                time.sleep(0.2)
                rx0 = {s: pair.rx_totals(s) for s in SIDES}
                t_r, _, _ = ctl(pair, "connector", "reopen")
                t_rd = event_after(pair, "connector", "resumed", t_r, 30)
                t_f = flowing_after(pair, n, rx0, 30)
                row = {"n": n, "round": r, "quiesce_ms": (t_qd - t_q) / 1e6,
                       "close_ms": (c1 - c0) / 1e6, "tool_ms": (s1 - s0) / 1e6,
                       "reopen_ms": (t_rd - t_r) / 1e6, "flowing_ms": (t_f - t_r) / 1e6}
                rows.append(row)
                log("n=%d round %d: quiesce %.1f ms, close %.1f ms (tool %.1f), reopen %.1f ms, "
                    "flowing %.0f ms" % (n, r, row["quiesce_ms"], row["close_ms"],
                                         row["tool_ms"], row["reopen_ms"], row["flowing_ms"]))
                time.sleep(args.settle)
            pair.stop()
        finally:
            pair.kill()
        ck = nf.Checker()
        nf.check_stream(ck, pair)
        ck.done()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,16,64", help="connection counts (1,16,64)")
    ap.add_argument("--runs", type=int, default=5, help="rounds per count (5)")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds of traffic between rounds (1)")
    ap.add_argument("--max-size", type=int, default=65536, help="largest message (65536)")
    ap.add_argument("--rate-ms", type=int, default=20, help="rov_stream --rate-ms (20)")
    ap.add_argument("--log-level", default="info", help="RAILOVER_LOG (info)")
    ap.add_argument("--keep", action="store_true", help="keep the log directory")
    ap.add_argument("--rov-stream", default=fobench.default_bin(
        "ROV_STREAM", "tests/integration/rov_stream"))
    ap.add_argument("--railover", default=fobench.default_bin("RAILOVER_TOOL", "tools/railover"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--helper", default="on", choices=("on", "off"),
                    help="RAILOVER_PROGRESS_THREAD (on)")
    ap.add_argument("--computing", action="store_true",
                    help="both processes compute (call nothing) during each round; both quiesce")
    args = ap.parse_args()
    nf.require_netns(nft=False)
    wd = nf.Workdir("stage-time", keep=args.keep)
    rows = []
    try:
        for n in [int(x) for x in args.counts.split(",")]:
            rows += one_count(args, wd, n)
        wd.failed = False
    finally:
        nf.run_cleanups()
    print("# load average: %s" % open("/proc/loadavg").read().split()[0])
    print("# median (min-max) over %d rounds; close = the tool's round trip, tool = a `stage` "
          "round trip (the tool's own cost)" % args.runs)
    if args.computing and args.helper == "off":
        print("# --computing --helper off: the connector's quiesce request while it computes "
              "(unanswered s), then the quiesce timed from the compute phase's end")
        for r in rows:
            print("conns %d round %d: request unanswered for %.1f s; quiesced %.1f ms after "
                  "the compute phase" % (r["n"], r["round"], r["unanswered_s"],
                                         r["quiesce_ms"]))
        return
    if args.computing:
        print("# --computing: both processes computing, both quiesced; quiesce and reopen by "
              "polling `stage` on both (each poll two tool round trips); close = mean of "
              "the two; flowing = after the compute phase ended")
    print("%6s %22s %22s %14s %22s %22s" % ("conns", "quiesce ms", "close ms", "tool ms",
                                            "reopen ms", "flowing again ms"))
    for n in sorted({r["n"] for r in rows}):
        sel = [r for r in rows if r["n"] == n]

        def f(k):
            v = [r[k] for r in sel]
            return "%.1f (%.1f-%.1f)" % (statistics.median(v), min(v), max(v))
        print("%6d %22s %22s %14s %22s %22s" % (n, f("quiesce_ms"), f("close_ms"),
                                                "%.1f" % statistics.median(
                                                    [r["tool_ms"] for r in sel]),
                                                f("reopen_ms"), f("flowing_ms")))


if __name__ == "__main__":
    main()
