#!/usr/bin/env python3
"""Half-open connections near the descriptor limit must not keep a real peer
out (issue 35, item 3).

The listening rov_stream runs with a small RLIMIT_NOFILE (NOFILE); a flood of
FLOOD raw connections that never send a HELLO is made to its TCP rail and
kept up: every one the listener closes is opened again at once, so the
listener sits at its descriptor limit with connections waiting in its
backlog.  While the flood goes on, a real rov_stream connector opens CONNS
connections to it and streams.  Before the listener sized its admission by
its descriptors, it ran into EMFILE and closed whatever it accepted next,
the real connections among them, until the connector gave up ("no rail
reaches the peer ... connection reset"); now the channel that has waited
longest for its handshake makes room, and a descriptor reserve stays free.

Checked: the stream completes on every connection with the flood running
(exit status 0 on both sides); while only the flood is there, the
listener's descriptors (from /proc) leave its reserve free; it says why it closed flood connections.  No timing is
asserted (the connector's own timeout is generous).

usage: res_halfopen_nofile.py ROV_STREAM
"""
import os
import select
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import res_lib as L  # noqa: E402

NOFILE = 160
FLOOD = 400
CONNS = 8
RESERVE = 16  # context.c: FD_RESERVE_MIN (a sixteenth of NOFILE is less)


class Flood(threading.Thread):
    """FLOOD half-open connections to port, each reopened once the peer ends it."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop = False
        self.reopened = 0
        self.socks = []

    def open_one(self):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", self.port))
        return s

    def run(self):
        self.socks = [self.open_one() for _ in range(FLOOD)]
        while not self.stop:
            try:
                r, _, _ = select.select(self.socks, [], [], 0.05)
            except (ValueError, OSError):
                r = []
            for s in r:
                try:
                    gone = s.recv(64) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    i = self.socks.index(s)
                    s.close()
                    self.socks[i] = self.open_one()
                    self.reopened += 1
        for s in self.socks:
            s.close()


def main():
    stream = sys.argv[1]
    work = tempfile.mkdtemp(prefix="rov_res_halfopen_")
    env = L.stream_env()
    args = ["--conns", str(CONNS), "--count", "200", "--max-size", "4096", "--timeout", "60",
            "--quiet-status"]
    started = L.start_listener(stream, work, args, env, nofile=NOFILE)
    if not started:
        return
    lis, addr = started
    port = L.one_port(lis)
    if port is None:
        return
    L.note("listener pid %d, port %d, %d descriptors open, RLIMIT_NOFILE %d" %
           (lis.pid, port, L.nfds(lis.pid), NOFILE))

    flood = Flood(port)
    flood.start()
    time.sleep(1.5)
    fds = L.nfds(lis.pid)
    L.note("flood of %d half-open connections kept up: listener has %d descriptors, "
           "%d flood connections reopened so far" % (FLOOD, fds, flood.reopened))

    if fds > NOFILE - RESERVE // 2:
        L.fail("the flood took the listener to %d descriptors of %d: no reserve of %d kept "
               "for connects and reconnects" % (fds, NOFILE, RESERVE))
    con = L.Proc([stream, "--connect", addr] + args, env, log=os.path.join(work, "connector.log"))
    peak = 0
    while con.alive():
        peak = max(peak, L.nfds(lis.pid) if lis.alive() else 0)
        time.sleep(0.1)
    rc_c = con.wait(1)
    rc_l = lis.wait(15)
    reopened = flood.reopened
    flood.stop = True
    flood.join(5)
    L.note("connector rc %s, listener rc %s; listener descriptors at most %d of %d during the "
           "stream; %d flood connections closed by the listener and reopened" %
           (rc_c, rc_l, peak, NOFILE, reopened))
    if rc_c != 0 or rc_l != 0:
        L.fail("a real peer did not get in past %d half-open connections at the descriptor "
               "limit (connector rc %s, listener rc %s)\n--- listener\n%s\n--- connector\n%s" %
               (FLOOD, rc_c, rc_l, lis.text()[-3000:], con.text()[-3000:]))
    if peak >= NOFILE:
        L.fail("the listener used all %d descriptors" % NOFILE)
    shed = [ln for ln in lis.text().splitlines()
            if "out of file descriptors" in ln or "waited longest" in ln]
    if not shed:
        L.fail("the listener never said why it closed flood connections:\n" + lis.text()[-2000:])
    else:
        L.note("listener: " + shed[0].strip())


if __name__ == "__main__":
    try:
        main()
    finally:
        L.Proc.kill_all()
    L.finish("res_halfopen_nofile")
