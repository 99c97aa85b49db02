#!/usr/bin/env python3
"""A listener out of descriptors must not spin, and must let a legitimate
connection in once the flood is over (issue 19, part 3).

The listening rov_stream runs with RLIMIT_NOFILE 64; 300 raw connections
are made to its TCP rail and held.  accept() then fails with EMFILE while
connections wait in the backlog, and the listener stays readable: before the
TCP rail handled that, the process spun at 100% CPU.  Checked: the
listener's CPU time (utime + stime from /proc) over a few seconds of the
flood stays a small fraction of them (a loose bound; no wall-clock timing),
it warns about the descriptors, at most about once a second, naming the
limit (EMFILE in accept(), or the flood's oldest channels closed before it,
rov_rail_fd_short()); after the flood ends, a real rov_stream connector gets in and
the stream completes.

usage: res_accept_emfile.py ROV_STREAM
"""
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import res_lib as L  # noqa: E402

NOFILE = 64
FLOOD = 300
MEASURE_S = 3.0
CPU_MAX_S = 0.6  # of MEASURE_S; spinning takes all of it


def main():
    stream = sys.argv[1]
    work = tempfile.mkdtemp(prefix="rov_res_emfile_")
    env = L.stream_env()
    args = ["--count", "2000", "--max-size", "4096", "--timeout", "60", "--quiet-status"]
    started = L.start_listener(stream, work, args, env, nofile=NOFILE)
    if not started:
        return
    lis, addr = started
    port = L.one_port(lis)
    if port is None:
        return
    L.note("listener pid %d, port %d, %d descriptors open, limit %d" %
           (lis.pid, port, L.nfds(lis.pid), NOFILE))

    flood = []
    for _ in range(FLOOD):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        flood.append(s)
    time.sleep(1.0)
    L.note("flood of %d connections made; listener has %d descriptors" %
           (FLOOD, L.nfds(lis.pid)))
    c0 = L.cpu_s(lis.pid)
    time.sleep(MEASURE_S)
    cpu = L.cpu_s(lis.pid) - c0
    L.note("listener CPU during %.0f s of the flood: %.2f s" % (MEASURE_S, cpu))
    if cpu > CPU_MAX_S:
        L.fail("listener used %.2f s of CPU in %.0f s with its descriptors exhausted "
               "(bound %.2f s): accept() spins" % (cpu, MEASURE_S, CPU_MAX_S))
    if not lis.alive():
        L.fail("listener died during the flood:\n" + lis.text())
        return
    warn = [ln for ln in lis.text().splitlines() if "out of file descriptors" in ln]
    if not warn:
        L.fail("no warning about the descriptors:\n" + lis.text()[-2000:])
    elif "RLIMIT_NOFILE %d" % NOFILE not in warn[0]:
        L.fail("the warning does not name the limit: " + warn[0])
    if len(warn) > MEASURE_S + 3:
        L.fail("%d descriptor warnings in about %.0f s: not rate-limited" % (len(warn),
                                                                          MEASURE_S + 1))

    for s in flood:
        s.close()
    time.sleep(0.5)
    con = L.Proc([stream, "--connect", addr] + args, env,
                 log=os.path.join(work, "connector.log"))
    rc_c = con.wait(60)
    rc_l = lis.wait(10)
    if rc_c != 0 or rc_l != 0:
        L.fail("after the flood the stream did not complete (connector rc %s, listener rc %s)"
               "\n--- listener\n%s\n--- connector\n%s" %
               (rc_c, rc_l, lis.text()[-3000:], con.text()[-3000:]))
    else:
        L.note("after the flood: stream completed")


if __name__ == "__main__":
    try:
        main()
    finally:
        L.Proc.kill_all()
    L.finish("res_accept_emfile")
