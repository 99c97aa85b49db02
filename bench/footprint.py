#!/usr/bin/env python3
"""What one small message costs the library, counted rather than timed.

Runs `railover perf` (TCP rail on loopback) with the client under
valgrind's callgrind, N 8-byte ping-pongs, and prints per message:

  - instructions: rov_conn_send() per call and rov_rail_recv() per frame,
    inclusive (the send path; the receive path from a whole frame in the
    rail's buffer on, the application's callback included), and
    rov_progress() per message (varies with the idle polls in between);
  - hot code lines and pages: distinct 64-byte lines and 4 KiB pages of code
    executed at least once per message, per object (library, tool, libc).

Both are deterministic for a given binary.  The second is the one that
tracks time on these machines: every system call evicts the first-level
caches, so each line of code (or data) the path touches between two calls
is fetched again, about 4.4 ns apiece here (bench/README.md, "What a
message costs"); how many instructions run on a line matters much less.

usage: bench/footprint.py [--bin PATH] [--iters N] [--keep FILE]
"""
import argparse
import collections
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fobench  # noqa: E402  (bench/fobench.py: default_bin)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(path):
    """Executions per instruction address, with its object and function, and
    (calls, inclusive cost) per called function, from a callgrind file
    written with --dump-instr=yes."""
    execs = collections.Counter()
    where = {}
    calls = collections.Counter()
    incl = collections.Counter()
    names = {"ob": {}, "fn": {}}
    ob = fn = cfn = None
    addr = 0
    call_pending = None

    def pos(tok, cur):
        if tok[0] == "+":
            return cur + int(tok[1:], 0)
        if tok[0] == "-":
            return cur - int(tok[1:], 0)
        if tok == "*":
            return cur
        return int(tok, 0)

    name_re = re.compile(r"(c?)(ob|fn)=\((\d+)\)(?: (.*))?$")
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            m = name_re.match(line)
            if m:
                called, kind, ident, name = m.groups()
                if name:
                    names[kind][ident] = name
                if kind == "ob" and not called:
                    ob = names["ob"][ident]
                elif kind == "fn":
                    if called:
                        cfn = names["fn"][ident]
                    else:
                        fn = names["fn"][ident]
                continue
            if line.startswith("calls="):
                call_pending = int(line.split("=")[1].split()[0])
                continue
            if line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                addr = pos(parts[0], addr)
                cost = int(parts[-1]) if len(parts) > 1 else 0
                if call_pending is not None:
                    calls[cfn] += call_pending
                    incl[cfn] += cost
                    call_pending = None
                else:
                    execs[(ob, addr)] += cost
                    where[(ob, addr)] = fn
    return execs, where, calls, incl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=fobench.default_bin("RAILOVER_BIN", "tools/railover"))
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--keep", help="keep the callgrind file here")
    args = ap.parse_args()
    if not args.bin or not os.access(args.bin, os.X_OK):
        sys.exit("footprint: railover tool not found; build it or pass --bin PATH")
    if not shutil.which("valgrind"):
        sys.exit("footprint: needs valgrind (apt-get install valgrind)")

    env = dict(os.environ, RAILOVER_RAILS="tcp@lo")
    port = free_port()
    work = tempfile.mkdtemp()
    out = args.keep or os.path.join(work, "callgrind.out")
    server = subprocess.Popen([args.bin, "perf", "--listen", f"127.0.0.1:{port}"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        rc = subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes",
                             f"--callgrind-out-file={out}", args.bin, "perf",
                             f"127.0.0.1:{port}", "--sizes", "8", "--iters", str(args.iters),
                             "--bw-bytes", "1"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
        if rc.returncode != 0:
            sys.exit("footprint: the client failed:\n" + rc.stderr[-2000:])
    finally:
        server.kill()
        server.wait()

    execs, where, calls, incl = parse(out)
    msgs = calls.get("rov_conn_send", 0)
    if msgs == 0:
        sys.exit("footprint: no rov_conn_send() calls in the profile")
    # Executed about once per message or more (the latency loop dominates).
    thresh = int(msgs * 0.9)
    lines = collections.defaultdict(set)
    pages = collections.defaultdict(set)
    per_fn = collections.defaultdict(set)
    for (ob, a), n in execs.items():
        if n >= thresh:
            lines[ob].add(a >> 6)
            pages[ob].add(a >> 12)
            if "librailover" in (ob or ""):
                per_fn[where[(ob, a)]].add(a >> 6)
    print(f"# footprint: {args.bin}, {msgs} messages sent (8 B ping-pong, TCP rail)")
    for fn in ("rov_conn_send", "rov_rail_recv"):
        if calls.get(fn):
            print(f"instructions per call, inclusive: {fn} {incl[fn] / calls[fn]:.0f}"
                  f" ({calls[fn]} calls)")
    print(f"instructions per message: rov_progress {incl['rov_progress'] / msgs:.0f}"
          f" ({calls['rov_progress']} calls)")
    total = 0
    for ob, s in sorted(lines.items(), key=lambda kv: -len(kv[1])):
        print(f"hot code lines: {len(s):4d}  pages: {len(pages[ob]):2d}  "
              f"{os.path.basename(ob or '?')}")
        total += len(s)
    print(f"hot code lines: {total:4d}  total")
    for fn, s in sorted(per_fn.items(), key=lambda kv: -len(kv[1])):
        print(f"    {len(s):4d}  {fn}")
    lib = sum(len(s) for ob, s in lines.items() if "librailover" in (ob or ""))
    lib_pages = sum(len(s) for ob, s in pages.items() if "librailover" in (ob or ""))
    print('{"test":"footprint","send_instr":%.0f,"recv_instr":%.0f,"lib_lines":%d,'
          '"lib_pages":%d,"total_lines":%d}' % (
              incl["rov_conn_send"] / msgs, incl["rov_rail_recv"] / max(calls["rov_rail_recv"], 1),
              lib, lib_pages, total))
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
