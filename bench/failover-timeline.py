#!/usr/bin/env python3
"""Merge what happened in a failover-time (or plot) run into one timeline.

    bench/failover-timeline.py DIR/stream [--from LABEL] [--span MS]

Reads marks.txt (what the benchmark did, CLOCK_MONOTONIC), both sides'
*.events (JSON lines, CLOCK_MONOTONIC) and *.log (library log lines, stamped
with CLOCK_REALTIME; mapped with clock.txt, written by failover-time.py) and
prints them in time order, in ms relative to the previous benchmark mark.
--from LABEL starts at the first mark containing LABEL; --span MS stops that
long after it.  Run the benchmark with --log-level debug to see the
engine's retries and channel closes.
"""
import argparse
import json
import os
import re
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("dir")
ap.add_argument("--from", dest="start", default=None)
ap.add_argument("--span", type=float, default=None)
ap.add_argument("--offset-ns", type=int, default=None,
                help="CLOCK_REALTIME - CLOCK_MONOTONIC (default: clock.txt, else now)")
args = ap.parse_args()

off = args.offset_ns
clock = os.path.join(args.dir, "clock.txt")
if off is None and os.path.exists(clock):
    with open(clock) as f:
        off = int(f.read().split()[-1])
if off is None:
    off = time.time_ns() - time.monotonic_ns()

items = []
with open(os.path.join(args.dir, "marks.txt")) as f:
    for line in f:
        t, label = line.rstrip("\n").split(" ", 1)
        items.append((int(t), "bench", "MARK " + label))
for side in ("listener", "connector"):
    p = os.path.join(args.dir, side + ".events")
    if os.path.exists(p):
        with open(p) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("ev") in ("start",):
                    continue
                rest = " ".join("%s=%s" % (k, v) for k, v in e.items()
                                if k not in ("t", "side", "ev", "conn"))
                items.append((e["t"], side[:4], "ev %s %s" % (e["ev"], rest)))
    p = os.path.join(args.dir, side + ".log")
    if os.path.exists(p):
        with open(p, errors="replace") as f:
            for line in f:
                m = re.match(r"\[(\d+)\.(\d{6})\] railover\[\d+\] (.*)", line.rstrip("\n"))
                if m:
                    t = int(m.group(1)) * 10**9 + int(m.group(2)) * 1000 - off
                    items.append((t, side[:4], "log " + m.group(3)))
items.sort(key=lambda x: x[0])
ref = None
t_start = None
for t, who, what in items:
    if args.start and t_start is None:
        if who == "bench" and args.start in what:
            t_start = t
        else:
            continue
    if args.span is not None and t_start is not None and t > t_start + args.span * 1e6:
        break
    if who == "bench":
        ref = t
    rel = "%+10.3f" % ((t - ref) / 1e6) if ref is not None else "%10s" % "-"
    print("%s ms  %-5s %s" % (rel, who, what))
