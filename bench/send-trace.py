#!/usr/bin/env python3
"""send-trace.py: how long each process's large socket sends take, from the
kernel's syscall trace events (tracefs), while a command runs.

    bench/send-trace.py [--comm mpi-users] [--min-bytes 1048576] [--len 32] -- COMMAND...

Traces sendto, sendmsg and writev of the processes named --comm (every
thread: the filter is the task's comm), runs COMMAND, and prints per
process: the sends that returned at least --min-bytes (count, median, 10th
and 90th percentile of their duration, in microseconds; the first five
left out as warm-up) and how many sends of exactly --len bytes it made
(Railover's stand-alone ACK frame is 32 bytes).  A send on a socket of a
veth pair also runs the receiver's TCP input on the sending CPU, so its
duration is the transfer's: the time from the first byte to the peer's
socket to the last.  Tracepoints cost far less than strace, which made
Railover's transfers look faster than btl tcp's.

Needs root and tracefs (/sys/kernel/tracing).  Used in bench/README.md
("The kernel's congestion control, and an ack inside a read's answer"),
e.g. around bench/mpi-users.py --rounds 1 --p2p lat:1048576.
"""
import argparse
import re
import statistics
import subprocess
import sys

T = "/sys/kernel/tracing"
CALLS = ("sendto", "sendmsg", "writev")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def events(on, comm):
    for call in CALLS:
        for d in ("enter", "exit"):
            e = "%s/events/syscalls/sys_%s_%s" % (T, d, call)
            write(e + "/filter", 'comm == "%s"' % comm if on else "0")
            write(e + "/enable", "1" if on else "0")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--comm", default="mpi-users", help="process name traced (default mpi-users)")
    ap.add_argument("--min-bytes", type=int, default=1 << 20,
                    help="sends returning at least this many bytes are timed (default 1 MiB)")
    ap.add_argument("--len", type=int, default=32,
                    help="sends of exactly this many bytes are counted (default 32)")
    ap.add_argument("--buffer-kb", type=int, default=65536, help="trace buffer per cpu")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command")
    try:
        write(T + "/tracing_on", "0")
        write(T + "/trace", "")
        write(T + "/buffer_size_kb", str(args.buffer_kb))
        events(True, args.comm)
    except OSError as e:
        print("send-trace: cannot use %s (root, tracefs): %s" % (T, e), file=sys.stderr)
        return 77
    try:
        write(T + "/tracing_on", "1")
        rc = subprocess.call(cmd)
    finally:
        write(T + "/tracing_on", "0")
        events(False, args.comm)
    line_re = re.compile(r"\s*(.+)-(\d+)\s+\[\d+\]\s+\S+\s+([\d.]+): sys_(\w+)(\(| -> )(.*)")
    start, durs, small = {}, {}, {}
    with open(T + "/trace") as f:
        for line in f:
            m = line_re.match(line)
            if not m or m.group(4) not in CALLS:
                continue
            pid, t = m.group(2), float(m.group(3))
            if m.group(5) == "(":
                start[pid] = t
                continue
            ret = int(m.group(6), 16)
            if ret >= 1 << 63:
                continue  # an error (EAGAIN)
            if ret >= args.min_bytes and pid in start:
                durs.setdefault(pid, []).append((t - start[pid]) * 1e6)
            if ret == args.len:
                small[pid] = small.get(pid, 0) + 1
    for pid in sorted(set(durs) | set(small), key=int):
        d = sorted(durs.get(pid, [])[5:])
        big = ("sends>=%d: %d, median %.0f us, p10 %.0f, p90 %.0f" % (
            args.min_bytes, len(d), statistics.median(d), d[len(d) // 10], d[len(d) * 9 // 10])
            if d else "sends>=%d: none" % args.min_bytes)
        print("SEND_TRACE pid=%s %s; sends of %d B: %d" % (pid, big, args.len, small.get(pid, 0)))
    return rc


if __name__ == "__main__":
    sys.exit(main())
