#!/usr/bin/env python3
"""How long traffic stops when the fabric fails, and when it heals.

Two network namespaces joined by a "fabric" veth (rail 0, preferred) and an
"ethernet" veth (rail 1), built by tests/failover/netfault.py.  One
rov_stream connection streams both ways continuously (--max-size 65536);
every run breaks the fabric in namespace A (the listener's) with nftables
and heals it again:

  a. reset: `reject with tcp reset` on A's input from B's fabric address
     (B's socket gets the reset: a provider error).  Measured: the rule in
     place (monotonic time when nft confirmed the commit) -> the
     first message delivered on rail 1 after the switch, on both sides (the
     later of the two); and the detecting side's rail_down event -> the same.
  b. drop: silent drop of A's fabric traffic both ways.  Measured: the rule
     in place -> first delivery on rail 1 on both sides, minus the
     configured RAILOVER_FAILOVER_TIMEOUT.
  c. heal: the rule removed -> first delivery on rail 0 on both sides, minus
     RAILOVER_FAILBACK_DWELL (reported after each kind of fault).

Per metric: median, min, p90, max over the runs.  Every run is one row of
DIR/runs.csv; DIR/summary.json has the statistics and the configuration;
DIR/stream/ keeps both sides' events, logs and the nft timing marks.
--plot also makes the throughput picture (DIR/throughput.csv, .png).

Numbers, never verdicts: the goals are printed next to the medians; the
exit status says only whether the runs completed and the stream verified
(no loss, duplicate or reordering), never whether a time met its goal.
Needs root, ip, nft.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fobench  # noqa: E402
from fobench import MS, SIDES, log, ms, netfault, now_ns  # noqa: E402

GOALS = {"a": 10.0, "b": 10.0, "c": 100.0}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="runs of every fault (default 10; "
                    "0 with --plot: only the plot)")
    ap.add_argument("--out", default=None, help="result directory (default "
                    "./failover-time-YYYYmmdd-HHMMSS)")
    ap.add_argument("--faults", default="reset,drop",
                    help="fault kinds per run, in order (default reset,drop)")
    ap.add_argument("--timeout", default="250ms", help="RAILOVER_FAILOVER_TIMEOUT (250ms)")
    ap.add_argument("--keepalive", default="100ms", help="RAILOVER_KEEPALIVE (100ms)")
    ap.add_argument("--dwell", default="1s", help="RAILOVER_FAILBACK_DWELL (1s)")
    ap.add_argument("--retry", default="20ms", help="RAILOVER_FAILBACK_RETRY (20ms)")
    ap.add_argument("--retry-max", default="50ms", help="RAILOVER_FAILBACK_RETRY_MAX (50ms)")
    ap.add_argument("--log-level", default="info", help="RAILOVER_LOG (info; debug to see "
                    "retries in DIR/stream/*.log)")
    ap.add_argument("--env", action="append", default=[], metavar="RAILOVER_X=V",
                    help="extra library setting for both sides (repeatable), e.g. "
                    "RAILOVER_WINDOW_BYTES=1M")
    ap.add_argument("--hold", type=float, default=0.5,
                    help="seconds the fault stays after traffic moved (default 0.5)")
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds on rail 0 after a failback before the next fault (default "
                    "9 dwells: the engine counts a failure within 4 dwells of a failback as "
                    "a flap and doubles the dwell, and forgets that after 8 dwells)")
    ap.add_argument("--plot", action="store_true",
                    help="also run the throughput plot (DIR/throughput.csv, .png)")
    ap.add_argument("--plot-rate-ms", type=int, default=20, help="rate interval of the plot "
                    "run (default 20)")
    ap.add_argument("--rov-stream", default=fobench.default_bin(
        "ROV_STREAM", "tests/integration/rov_stream"))
    ap.add_argument("--railover", default=fobench.default_bin("RAILOVER_TOOL", "tools/railover"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.keep = True
    if args.runs < 0 or (args.runs == 0 and not args.plot):
        ap.error("--runs must be positive (or 0 with --plot)")
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    for f in args.faults:
        if f not in ("reset", "drop"):
            ap.error("unknown fault '%s' (reset, drop)" % f)
    fobench.check_common_args(ap, args, "failover-time")
    args.retry_max_ns = fobench.parse_duration_ns(args.retry_max)
    return args


def lib_env(args):
    env = {
        "RAILOVER_LOG": args.log_level,
        "RAILOVER_FAILOVER": "on",
        "RAILOVER_FAILOVER_TIMEOUT": args.timeout,
        "RAILOVER_KEEPALIVE": args.keepalive,
        "RAILOVER_FAILBACK": "on",
        "RAILOVER_FAILBACK_DWELL": args.dwell,
        "RAILOVER_FAILBACK_RETRY": args.retry,
        "RAILOVER_FAILBACK_RETRY_MAX": args.retry_max,
    }
    env.update(kv.split("=", 1) for kv in args.env)
    return env


def write_clock(path):
    """CLOCK_REALTIME - CLOCK_MONOTONIC, for failover-timeline.py (the
    library stamps its log lines with the real-time clock)."""
    with open(os.path.join(path, "clock.txt"), "w") as f:
        f.write("realtime_minus_monotonic_ns %d\n" % (time.time_ns() - time.monotonic_ns()))


# ---- one fault -----------------------------------------------------------------

def one_fault(args, pair, faults, kind, run):
    """Break the fabric, wait for traffic on rail 1, hold, heal, wait for
    traffic on rail 0.  Returns the row for runs.csv."""
    row = {"run": run, "fault": kind}
    inject = faults.fabric_reset if kind == "reset" else faults.fabric_drop
    pair.mark("%s.%d inject" % (kind, run))
    t0, t1 = inject("A")
    pair.mark("%s.%d rule in place" % (kind, run))
    row["nft_ms"] = ms(t1 - t0)
    arr = fobench.wait_arrival(pair, 1, t0, 10 + args.timeout_ns / 1e9)
    rx = {role: arr[role][1]["t"] for role in SIDES}
    sw = {role: arr[role][0] for role in SIDES}
    t_rx = max(rx.values())
    for role in SIDES:
        row["fo_rx_%s_ms" % role] = ms(rx[role] - t1)
        row["fo_reason_%s" % role] = sw[role].get("reason")
    row["fo_ms"] = ms(t_rx - t1)
    row["fo_excess_ms"] = ms(t_rx - t1 - (args.timeout_ns if kind == "drop" else 0))

    # The detecting side: the one that moved for a failover.* reason first
    # (the other follows with peer.failover, or detected it too).
    det = min((r for r in SIDES if netfault.is_failover(sw[r].get("reason"))),
              key=lambda r: sw[r]["t"], default=None)
    row["detector"] = det or "-"
    downs = sorted((e for role in SIDES for e in fobench.between(pair, role, "rail_down", t0,
                                                                  t_rx)
                    if e.get("rail") == 0), key=lambda e: e["t"])
    down = next((e for e in downs if e.get("side") == det), downs[0] if downs else None)
    row["down_side"] = down.get("side") if down else "-"
    row["down_reason"] = down.get("reason") if down else "-"
    row["rule_to_down_ms"] = ms(down["t"] - t1) if down else None
    row["down_to_rx_ms"] = ms(t_rx - down["t"]) if down else None
    if det:
        other = SIDES[1 - SIDES.index(det)]
        row["rule_to_switch_ms"] = ms(sw[det]["t"] - t1)
        row["switch_lag_ms"] = ms(sw[other]["t"] - sw[det]["t"])
        row["switch_to_rx_ms"] = ms(t_rx - sw[det]["t"])
    t_moved = now_ns()

    time.sleep(args.hold)
    stray = [(r, e) for r in SIDES for e in fobench.between(pair, r, "switch", t_rx + 1,
                                                            now_ns())]
    row["switches_during_fault"] = len(stray)

    pair.mark("%s.%d heal" % (kind, run))
    h0, h1 = faults.clear("A")
    pair.mark("%s.%d rule removed" % (kind, run))
    row["heal_nft_ms"] = ms(h1 - h0)
    back = fobench.wait_arrival(pair, 0, h0, 16 * args.dwell_ns / 1e9 + 20)
    bsw = {role: back[role][0] for role in SIDES}
    brx = {role: back[role][1]["t"] for role in SIDES}
    b_rx = max(brx.values())
    leader = next((r for r in SIDES if bsw[r].get("reason") == netfault.FAILBACK), None)
    row["fb_leader"] = leader or "-"
    for role in SIDES:
        row["fb_reason_%s" % role] = bsw[role].get("reason")
    row["fb_ms"] = ms(b_rx - h1)
    row["fb_excess_ms"] = ms(b_rx - h1 - args.dwell_ns)
    if leader:
        row["heal_to_fb_switch_minus_dwell_ms"] = ms(bsw[leader]["t"] - h1 - args.dwell_ns)
        row["fb_switch_to_rx_ms"] = ms(b_rx - bsw[leader]["t"])
    log("run %d %-5s: rule->rx(rail 1) %.2f ms (%s %s, down->rx %s ms); heal->rx(rail 0) "
        "%.1f ms = dwell %+.1f ms (leader %s)" % (
            run, kind, row["fo_ms"], row["detector"], row["fo_reason_" + (det or "listener")],
            "%.2f" % row["down_to_rx_ms"] if row["down_to_rx_ms"] is not None else "-",
            row["fb_ms"], row["fb_excess_ms"], row["fb_leader"]))
    return row, b_rx, t_moved


COLUMNS = ["run", "fault", "nft_ms", "fo_ms", "fo_excess_ms", "fo_rx_listener_ms",
           "fo_rx_connector_ms", "detector", "fo_reason_listener", "fo_reason_connector",
           "down_side", "down_reason", "rule_to_down_ms", "down_to_rx_ms", "rule_to_switch_ms",
           "switch_lag_ms", "switch_to_rx_ms", "switches_during_fault", "heal_nft_ms",
           "fb_ms", "fb_excess_ms", "fb_leader", "fb_reason_listener", "fb_reason_connector",
           "heal_to_fb_switch_minus_dwell_ms", "fb_switch_to_rx_ms"]

# (key, title, fault kind, row column, goal key)
METRICS = [
    ("a_reset_rule_to_rx", "a reset: rule in place -> rx on rail 1, both sides", "reset",
     "fo_ms", "a"),
    ("a_reset_down_to_rx", "a reset: detector's rail_down -> rx on rail 1, both", "reset",
     "down_to_rx_ms", "a"),
    ("b_drop_rule_to_rx_minus_timeout", "b drop: rule -> rx on rail 1, both, - timeout",
     "drop", "fo_excess_ms", "b"),
    ("c_heal_after_reset_minus_dwell", "c heal (after reset): -> rx on rail 0 - dwell",
     "reset", "fb_excess_ms", "c"),
    ("c_heal_after_drop_minus_dwell", "c heal (after drop): -> rx on rail 0 - dwell",
     "drop", "fb_excess_ms", "c"),
    ("c_heal_all_minus_dwell", "c heal (all runs): -> rx on rail 0 - dwell", None,
     "fb_excess_ms", "c"),
]
BREAKDOWN = [
    ("nft_cmd", "nft request -> commit confirmed (rule lands in it)", None, "nft_ms"),
    ("reset_rule_to_down", "reset: rule -> rail_down (detector)", "reset", "rule_to_down_ms"),
    ("reset_switch_lag", "reset: detector switch -> follower switch", "reset", "switch_lag_ms"),
    ("drop_rule_to_rx_raw", "drop: rule -> rx on rail 1, both (raw)", "drop", "fo_ms"),
    ("drop_rule_to_down_minus_timeout", "drop: rule -> rail_down - timeout", "drop",
     "rule_to_down_ms"),
    ("drop_down_to_rx", "drop: rail_down -> rx on rail 1, both", "drop", "down_to_rx_ms"),
    ("drop_switch_lag", "drop: detector switch -> follower switch", "drop", "switch_lag_ms"),
    ("heal_to_fb_switch_reset", "heal (reset): -> leader's failback switch - dwell", "reset",
     "heal_to_fb_switch_minus_dwell_ms"),
    ("heal_to_fb_switch_drop", "heal (drop): -> leader's failback switch - dwell", "drop",
     "heal_to_fb_switch_minus_dwell_ms"),
    ("fb_switch_to_rx", "failback switch -> rx on rail 0, both", None, "fb_switch_to_rx_ms"),
]


def select(rows, kind, col, adjust=None):
    vals = [r.get(col) for r in rows if kind is None or r["fault"] == kind]
    vals = [v for v in vals if v is not None]
    return [adjust(v) for v in vals] if adjust else vals


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def report(args, rows, cfg, out):
    timeout_ms = args.timeout_ns / 1e6
    summary = {"config": cfg, "metrics": {}, "breakdown": {}}
    print()
    print("# failover-time: %d run(s) x %s; %s" % (args.runs, "+".join(args.faults), " ".join(
        "%s=%s" % kv for kv in sorted(cfg["env"].items()) if kv[0] != "RAILOVER_LOG")))
    print("# times in ms; 'both sides' = the later side's first delivery after its switch;"
          " t0 = monotonic when nft confirmed the commit")
    hdr = "%-53s %3s %8s %8s %8s %8s  %s" % ("metric", "n", "median", "min", "p90", "max",
                                              "goal")
    print(hdr)
    print("-" * len(hdr))
    for key, title, kind, col, goal in METRICS:
        s = fobench.summarize(select(rows, kind, col))
        summary["metrics"][key] = dict(s, title=title, goal_ms=GOALS[goal],
                                       median_meets_goal=None if s["median"] is None
                                       else s["median"] < GOALS[goal],
                                       max_meets_goal=None if s["max"] is None
                                       else s["max"] < GOALS[goal])
        if s["n"]:
            print("%-53s %3d %8s %8s %8s %8s  < %g" % (title, s["n"], fmt(s["median"]),
                                                     fmt(s["min"]), fmt(s["p90"]),
                                                     fmt(s["max"]), GOALS[goal]))
    print()
    print("%-53s %3s %8s %8s %8s %8s" % ("where the time goes", "n", "median", "min", "p90",
                                         "max"))
    print("-" * len(hdr))
    for key, title, kind, col in BREAKDOWN:
        adjust = (lambda v: v - timeout_ms) if key == "drop_rule_to_down_minus_timeout" else None
        s = fobench.summarize(select(rows, kind, col, adjust))
        summary["breakdown"][key] = dict(s, title=title)
        if s["n"]:
            print("%-53s %3d %8s %8s %8s %8s" % (title, s["n"], fmt(s["median"]), fmt(s["min"]),
                                                 fmt(s["p90"]), fmt(s["max"])))
    print()
    counts = {}
    for r in rows:
        for k in ("detector", "fo_reason_listener", "fo_reason_connector", "fb_leader"):
            counts.setdefault((r["fault"], k), {}).setdefault(r.get(k), 0)
            counts[(r["fault"], k)][r.get(k)] += 1
    summary["who"] = {"%s.%s" % k: v for k, v in counts.items()}
    for kind in args.faults:
        print("# %s: detector %s; listener moved for %s; connector for %s; failback led by %s"
              % (kind, counts.get((kind, "detector")), counts.get((kind, "fo_reason_listener")),
                 counts.get((kind, "fo_reason_connector")), counts.get((kind, "fb_leader"))))
    stray = sum(r.get("switches_during_fault", 0) for r in rows)
    summary["switches_while_broken"] = stray
    print("# switches while the fabric was still broken (should be 0): %d" % stray)
    return summary


# ---- the plot run ------------------------------------------------------------------

def plot_run(args, topo, out, env):
    wd = netfault.Dir(os.path.join(out, "plot-stream"))
    os.makedirs(wd.path, exist_ok=True)
    pair = netfault.StreamPair(args, wd, topo, conns=1, env=env, max_size=65536,
                               rate_ms=args.plot_rate_ms, timeout_s=600, stall_s=30)
    faults = fobench.Faults(topo)
    marks = {}
    try:
        faults.shell("A")
        pair.start()
        write_clock(wd.path)
        marks["ready"] = now_ns()
        time.sleep(1.5)
        t0, t1 = faults.fabric_drop("A")
        marks["fault"] = t1
        arr = fobench.wait_arrival(pair, 1, t0, 10 + args.timeout_ns / 1e9)
        marks["moved"] = max(arr[r][1]["t"] for r in SIDES)
        time.sleep(2.0)
        h0, h1 = faults.clear("A")
        marks["heal"] = h1
        back = fobench.wait_arrival(pair, 0, h0, 16 * args.dwell_ns / 1e9 + 20)
        marks["back"] = max(back[r][1]["t"] for r in SIDES)
        time.sleep(1.5)
        pair.stop()
    finally:
        pair.kill()
        faults.close()
    return write_plot(args, pair, out, marks)


def png_terminal():
    """pngcairo where gnuplot has it (gnuplot-nox does), else libgd's png."""
    if shutil.which("gnuplot"):
        p = subprocess.run(["gnuplot", "-e", "set terminal pngcairo"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if p.returncode == 0:
            return 'pngcairo font "sans,10"'
    return "png"


def write_plot(args, pair, out, marks):
    origin = marks["ready"]
    rate_s = args.plot_rate_ms / 1000.0
    start = {}
    for role in SIDES:
        for e in pair.events[role].poll():
            if e.get("ev") == "start":
                start[role] = e["t"]
    csv_path = os.path.join(out, "throughput.csv")
    n = 0
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "side", "rail", "rx_mb_s", "rx_msgs", "rx_bytes", "tx_msgs",
                    "tx_bytes"])
        for role in SIDES:
            for r in netfault.read_rate_csv(pair.rate[role]):
                # t_s is the end of the interval since that process started:
                # plotted at the interval's centre, on the common clock.
                t = (start[role] - origin) / 1e9 + r["t_s"] - rate_s / 2
                if t < -0.2:
                    continue
                w.writerow(["%.4f" % t, role, r["rail"], r["rx_mb_s"], r["rx_msgs"],
                            r["rx_bytes"], r["tx_msgs"], r["tx_bytes"]])
                n += 1
    ev_path = os.path.join(out, "throughput-events.csv")
    evs = []
    with open(ev_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "side", "ev", "from", "to", "rail", "reason"])
        for label in ("fault", "moved", "heal", "back"):
            w.writerow(["%.4f" % ((marks[label] - origin) / 1e9), "bench", label, "", "", "", ""])
        for role in SIDES:
            for e in pair.events[role].poll():
                if e.get("ev") in ("switch", "rail_down", "first_rx") and e["t"] >= origin:
                    t = (e["t"] - origin) / 1e9
                    w.writerow(["%.4f" % t, role, e["ev"], e.get("from", ""), e.get("to", ""),
                                e.get("rail", ""), e.get("reason", "")])
                    evs.append((t, role, e))
    rel = {k: (v - origin) / 1e9 for k, v in marks.items()}
    gp = os.path.join(out, "throughput.gp")
    png = os.path.join(out, "throughput.png")
    lines = [
        'set terminal %s noenhanced size 1400,900' % png_terminal(),
        'set output "%s"' % png,
        'set datafile separator ","',
        'set multiplot layout 2,1 title "Railover: one connection streaming both ways (64 KiB '
        'max), fabric dropped silently, then healed\\nRAILOVER_FAILOVER_TIMEOUT=%s '
        'KEEPALIVE=%s FAILBACK_DWELL=%s RETRY=%s..%s; rate interval %d ms"' % (
            args.timeout, args.keepalive, args.dwell, args.retry, args.retry_max,
            args.plot_rate_ms),
        'set grid', 'set key outside right top', 'set xlabel "seconds since the stream was up"',
        'set ylabel "MB/s received"', 'set yrange [0:*]',
        'set lmargin 10', 'set rmargin 28',   # both panels on one time axis
        'set xrange [-0.2:%.3f]' % (rel["back"] + 1.6),
    ]
    for i, role in enumerate(SIDES):
        lines.append("unset object")
        lines.append("unset arrow")
        lines.append("unset label")
        lines.append('set object 1 rect from %.4f, graph 0 to %.4f, graph 1 fc rgb "#f8d0d0" '
                     'fs solid 0.5 noborder behind' % (rel["fault"], rel["heal"]))
        lines.append('set object 2 rect from %.4f, graph 0 to %.4f, graph 1 fc rgb "#fff0c0" '
                     'fs solid 0.5 noborder behind' % (rel["heal"], rel["back"]))
        lines.append('set label 1 "fabric broken (nft drop)" at %.4f, graph 0.96 '
                     'front' % (rel["fault"] + 0.03))
        lines.append('set label 2 "healed: retry + dwell" at %.4f, graph 0.96 front' % (
            rel["heal"] + 0.03))
        k = 10
        for t, side, e in evs:
            if side != role or e.get("ev") != "switch":
                continue
            lines.append('set arrow %d from %.4f, graph 0 to %.4f, graph 1 nohead lw 1.5 '
                         'dt 2 lc rgb "#404040" front' % (k, t, t))
            lines.append('set label %d "switch %s->%s\\n%s" at %.4f, graph 0.86 front '
                         'font ",8"' % (k, e.get("from"), e.get("to"), e.get("reason"),
                                        t + 0.02))
            k += 1
        lines.append('set title "received by the %s (namespace %s)"' % (
            role, fobench.SIDE_NS[role]))
        sel = 'strcol(2) eq "%s"' % role
        lines.append(
            'plot "%s" using 1:(%s ? $4 : NaN) with lines lw 1 lc rgb "#b0b0b0" title "all", '
            '"" using 1:(%s && $3 == 0 ? $4 : NaN) with points pt 7 ps 0.6 lc rgb "#1f5fbf" '
            'title "on rail 0 (fabric)", '
            '"" using 1:(%s && $3 == 1 ? $4 : NaN) with points pt 7 ps 0.6 lc rgb "#e07000" '
            'title "on rail 1 (ethernet)"' % (csv_path, sel, sel, sel))
    lines.append("unset multiplot")
    with open(gp, "w") as f:
        f.write("\n".join(lines) + "\n")
    if not shutil.which("gnuplot"):
        log("gnuplot not installed (apt-get install -y gnuplot-nox): %s not drawn; script in %s"
            % (png, gp))
        return None
    p = subprocess.run(["gnuplot", gp], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        raise netfault.Failure("gnuplot failed:\n%s" % p.stdout)
    log("plot: %s (%d rate rows, data %s, events %s, script %s)" % (png, n, csv_path, ev_path,
                                                                     gp))
    return {"png": png, "csv": csv_path, "events": ev_path, "gnuplot": gp,
            "marks_s": rel}


# ---- main -------------------------------------------------------------------------

def main():
    args = parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    env = lib_env(args)
    netfault.require_netns(nft=True)
    cfg = {"env": env, "runs": args.runs, "faults": args.faults, "hold_s": args.hold,
           "settle_s": args.settle, "fault_side": "A (listener)", "conns": 1,
           "max_size": 65536, "rov_stream": args.rov_stream, "kernel": platform.release(),
           "loadavg_start": fobench.load_note(),
           "started": datetime.datetime.now().isoformat(timespec="seconds")}
    log("failover-time: %d run(s) of %s; results in %s; settle %.1fs after each failback" %
        (args.runs, "+".join(args.faults), out, args.settle))
    rows = []
    with netfault.Topology() as topo:
        if args.runs:
            wd = netfault.Dir(os.path.join(out, "stream"))
            os.makedirs(wd.path, exist_ok=True)
            pair = netfault.StreamPair(args, wd, topo, conns=1, env=env, max_size=65536,
                                       rate_ms=100, timeout_s=3600, stall_s=60)
            faults = fobench.Faults(topo)
            try:
                faults.shell("A")     # nft ready before the first fault
                pair.start()
                write_clock(wd.path)
                time.sleep(1.0)
                last_back = now_ns()
                for run in range(1, args.runs + 1):
                    for kind in args.faults:
                        wait = last_back + int(args.settle * 1e9) - now_ns()
                        if wait > 0:
                            time.sleep(wait / 1e9)
                        if not pair.all_on(0):
                            raise netfault.Failure("not on rail 0 before run %d\n%s" %
                                                   (run, pair.describe()))
                        row, last_back, _ = one_fault(args, pair, faults, kind, run)
                        rows.append(row)
                        with open(os.path.join(out, "runs.csv"), "w", newline="") as f:
                            w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
                            w.writeheader()
                            for r in rows:
                                w.writerow({k: (round(v, 4) if isinstance(v, float) else v)
                                            for k, v in r.items()})
                res = pair.stop()
            finally:
                pair.kill()
                faults.close()
            ck = netfault.Checker()
            netfault.check_stream(ck, pair)
            cfg["stream_verified"] = not ck.errors
            cfg["stream_errors"] = ck.errors
            cfg["stream_result"] = {role: res[role]["conns"].get(0) for role in SIDES}
            cfg["loadavg_end"] = fobench.load_note()
            summary = report(args, rows, cfg, out)
            print("# stream check (no loss, no duplicate, in order): %s" %
                  ("ok" if cfg["stream_verified"] else "FAILED: " +
                   "; ".join(cfg["stream_errors"])))
            for role in SIDES:
                c = cfg["stream_result"][role] or {}
                print("#   %s: sent %s recv %s resent %s dups_dropped %s switches %s reasons %s"
                      % (role, c.get("sent"), c.get("recv"), c.get("resent"),
                         c.get("dups_dropped"), c.get("switches"),
                         netfault.fmt_reasons(c.get("reasons"))))
            print("# load average: %s at start, %s at end (2 shared cores: compare medians)" % (
                cfg["loadavg_start"], cfg["loadavg_end"]))
            save(out, summary)
            print("# results: %s/runs.csv, %s/summary.json" % (out, out), flush=True)
        else:
            summary = {"config": cfg}
        if args.plot:
            summary["plot"] = plot_run(args, topo, out, env)
            save(out, summary)
            if summary["plot"]:
                print("# plot: %s" % summary["plot"]["png"])
    return 0 if not rows or cfg["stream_verified"] else 1


def save(out, summary):
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except netfault.Skip as e:
        print("SKIP: %s" % e, flush=True)
        netfault.run_cleanups()
        sys.exit(netfault.SKIP)
    except netfault.Failure as e:
        print("FAILED: %s" % e, flush=True)
        netfault.run_cleanups()
        sys.exit(1)
