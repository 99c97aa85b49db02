#!/usr/bin/env python3
"""Running out of descriptors on connect is a local problem, not an
unreachable peer (issue 19, part 6).

A rov_stream connector with RLIMIT_NOFILE 32 opens 64 connections to a live
listener: a connect's socket() fails with EMFILE part-way.  Before, the TCP
rail logged "socket: Too many open files" and returned an I/O error, and
rov_conn_connect() reported "peer unreachable".  Checked: the log names
EMFILE and the limit, and the status rov_conn_connect() returned (rov_stream
prints it) is not "peer unreachable".

usage: res_connect_emfile.py ROV_STREAM
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import res_lib as L  # noqa: E402

NOFILE = 32
CONNS = 64


def main():
    stream = sys.argv[1]
    work = tempfile.mkdtemp(prefix="rov_res_connect_")
    addr = os.path.join(work, "addr")
    env = L.stream_env()
    args = ["--count", "10", "--max-size", "64", "--conns", str(CONNS), "--timeout", "30",
            "--quiet-status"]
    lis = L.Proc([stream, "--listen", addr] + args, env, log=os.path.join(work, "listener.log"))
    if not L.wait_file(addr, lis):
        L.fail("listener wrote no address:\n" + lis.text())
        return
    con = L.Proc([stream, "--connect", addr] + args, env, nofile=NOFILE,
                 log=os.path.join(work, "connector.log"))
    rc = con.wait(30)
    text = con.text()
    L.note("connector exited with %s" % rc)
    if rc == 0:
        L.fail("the connector opened %d connections with RLIMIT_NOFILE %d: the test proves "
               "nothing" % (CONNS, NOFILE))
        return
    named = [ln for ln in text.splitlines() if "out of file descriptors" in ln]
    if not named or "EMFILE" not in named[0] or "RLIMIT_NOFILE %d" % NOFILE not in named[0]:
        L.fail("no log line names EMFILE and the limit:\n" + text[-3000:])
    else:
        L.note("logged: " + named[0])
    m = re.search(r"rov_conn_connect \(connection \d+\): (.*)", text)
    if not m:
        L.fail("rov_conn_connect did not fail:\n" + text[-3000:])
    elif "unreachable" in m.group(1):
        L.fail("out of descriptors reported as '%s'" % m.group(1))
    else:
        L.note("rov_conn_connect returned: " + m.group(1))


if __name__ == "__main__":
    try:
        main()
    finally:
        L.Proc.kill_all()
    L.finish("res_connect_emfile")
