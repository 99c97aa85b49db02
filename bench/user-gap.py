#!/usr/bin/env python3
"""User-space time between the system calls of an 8-byte ping-pong.

Builds bench/gapprobe.c (an LD_PRELOAD probe on recv()/send()), starts
`railover perf --listen` (TCP rail on loopback, server on cpu 0), and runs
the client (cpu 1) with the probe: raw TCP, Railover, and with --base a
second build, alternately for --rounds rounds.  Prints the median over the
rounds of each run's medians, in microseconds:

  recv->send   a message's recv() returning to the reply's send(): the
               receiving side's reaction, library and application
  empty-user   one idle poll, system call excluded
  empty-iter   one idle poll, system call included
  rtt          round trip

With --base, a last line gives the median of the per-round differences
railover - base (the two run side by side in every round).

Timing of a whole round trip drifts with the machine by more than the
library costs; these segments do not include the kernel and the peer, so a
change of a few tens of nanoseconds in the library shows.  Machine-readable
lines follow the table.

usage: bench/user-gap.py [--bin PATH] [--base PATH] [--rounds N] [--iters N]
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fobench  # noqa: E402  (bench/fobench.py: default_bin)

SEGMENTS = ("recv->send", "empty-user", "empty-iter", "rtt")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(cpu):
    return ["taskset", "-c", str(cpu)] if (os.cpu_count() or 1) >= 2 and shutil.which(
        "taskset") else []


def main():
    script_dir = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=fobench.default_bin("RAILOVER_BIN", "tools/railover"))
    ap.add_argument("--base", help="a second railover tool (another build)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iters", type=int, default=20000)
    args = ap.parse_args()
    if not args.bin or not os.access(args.bin, os.X_OK):
        sys.exit("user-gap: railover tool not found; build it or pass --bin PATH")
    if args.base and not os.access(args.base, os.X_OK):
        sys.exit(f"user-gap: --base {args.base} is not an executable")
    if os.uname().machine != "x86_64":
        sys.exit("user-gap: the probe reads the x86 TSC")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("user-gap: needs a C compiler")

    work = tempfile.mkdtemp()
    probe = os.path.join(work, "gapprobe.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", probe,
                    os.path.join(script_dir, "gapprobe.c"), "-ldl"], check=True)
    env = dict(os.environ, RAILOVER_RAILS="tcp@lo")
    servers = []
    paths = [("raw", args.bin, ["--raw"]), ("railover", args.bin, [])]
    if args.base:
        paths.append(("base", args.base, []))
    addr = {}
    try:
        for tool in sorted({p[1] for p in paths}):
            port = free_port()
            servers.append(subprocess.Popen(pin(0) + [tool, "perf", "--listen",
                                                      f"127.0.0.1:{port}"], env=env,
                                            stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
            addr[tool] = f"127.0.0.1:{port}"
        time.sleep(0.5)
        got = {p[0]: {s: [] for s in SEGMENTS} for p in paths}
        for r in range(args.rounds):
            for name, tool, extra in (paths if r % 2 == 0 else paths[::-1]):
                run = subprocess.run(pin(1) + [tool, "perf", addr[tool], "--sizes", "8",
                                               "--iters", str(args.iters), "--bw-bytes", "1"]
                                     + extra, env=dict(env, LD_PRELOAD=probe),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
                line = [l for l in run.stderr.splitlines() if l.startswith("GAPPROBE")]
                if run.returncode != 0 or not line:
                    sys.exit(f"user-gap: the {name} client failed:\n{run.stderr[-2000:]}")
                for seg, val in re.findall(r"(\S+) ([0-9.]+)", line[0][len("GAPPROBE"):]):
                    got[name][seg].append(float(val))
                print(f"# round {r + 1}/{args.rounds}: {name}", file=sys.stderr)
    finally:
        for s in servers:
            s.kill()
            s.wait()
        shutil.rmtree(work)

    med = {n: {s: statistics.median(v) for s, v in segs.items() if v} for n, segs in got.items()}
    print("# medians of %d rounds, us; load %s" % (args.rounds, open("/proc/loadavg").read().split()[0]))
    print("%-10s" % "path" + "".join("%12s" % s for s in SEGMENTS))
    for n in med:
        print("%-10s" % n + "".join("%12.3f" % med[n].get(s, float("nan")) for s in SEGMENTS))
    for n in med:
        if n != "raw":
            print("%-10s" % (n + "-raw") + "".join(
                "%12.3f" % (med[n][s] - med["raw"][s]) for s in SEGMENTS))
    if "base" in got:
        # The same rounds paired: drift between rounds cancels.
        print("%-10s" % "paired" + "".join(
            "%12.3f" % statistics.median(a - b for a, b in zip(got["railover"][s], got["base"][s]))
            for s in SEGMENTS) + "   (railover - base, median of the per-round differences)")
    for n in med:
        print(json.dumps({"test": "user-gap", "path": n, "rounds": args.rounds,
                          **{s.replace("->", "_to_").replace("-", "_") + "_us": round(med[n][s], 3)
                             for s in med[n]}}, separators=(",", ":")))


if __name__ == "__main__":
    main()
