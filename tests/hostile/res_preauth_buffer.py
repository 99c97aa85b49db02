#!/usr/bin/env python3
"""Nothing is buffered for a peer that has not authenticated (issue 19,
part 4).

Four raw sockets connect to a listening rov_stream's TCP rail and each sends
a DATA header announcing a 64 MiB - 1 payload (within RAILOVER_MAX_MSG)
before any HELLO, then as much of the payload as the listener takes.  Before
the rail bounded what it buffers by rov_chan_rx_max_payload(), it reserved a
64 MiB frame buffer per socket and read the payload into it (RSS 11 -> 218
MB in the issue).  Checked: each socket is closed by the listener at once
(within 2 s of the header: a loose bound), the listener's RSS grows by less
than 4 MiB over the four, and a real connector's stream afterwards completes
(the buffers grow once the peer has authenticated).

usage: res_preauth_buffer.py ROV_STREAM SOURCE_DIR
"""
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import res_lib as L  # noqa: E402

SOCKETS = 4
PAYLOAD = 64 * 1024 * 1024 - 1
SEND_EACH = 16 * 1024 * 1024
RSS_GROWTH_MAX_KIB = 4 * 1024


def main():
    stream, src = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="rov_res_preauth_")
    env = L.stream_env()
    args = ["--count", "3000", "--max-size", "262144", "--timeout", "60", "--quiet-status"]
    started = L.start_listener(stream, work, args, env)
    if not started:
        return
    lis, addr = started
    port = L.listen_ports(lis.pid)[0]
    time.sleep(0.3)
    rss0 = L.rss_kib(lis.pid)
    L.note("listener pid %d, port %d, RSS %d KiB" % (lis.pid, port, rss0))

    hdr = L.frame_header(src, "DATA", PAYLOAD)
    chunk = b"\x5a" * (1024 * 1024)
    socks = []
    for i in range(SOCKETS):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(hdr)
        socks.append(s)
    for i, s in enumerate(socks):
        if not L.closed_by_peer(s, 2.0):
            L.fail("socket %d: still open 2 s after a DATA header of %d bytes before any "
                   "HELLO" % (i, PAYLOAD))
    # Whatever is still open gets the payload, as far as the listener takes it.
    for s in socks:
        s.settimeout(0.5)
        sent = 0
        try:
            while sent < SEND_EACH:
                sent += s.send(chunk)
        except (OSError, socket.timeout):
            pass
    time.sleep(0.5)
    rss1 = L.rss_kib(lis.pid)
    L.note("listener RSS after the headers and payload: %d KiB (+%d)" % (rss1, rss1 - rss0))
    if rss1 - rss0 > RSS_GROWTH_MAX_KIB:
        L.fail("listener RSS grew by %d KiB for %d unauthenticated sockets (bound %d KiB)" %
               (rss1 - rss0, SOCKETS, RSS_GROWTH_MAX_KIB))
    for s in socks:
        s.close()
    if not lis.alive():
        L.fail("listener died:\n" + lis.text())
        return

    con = L.Proc([stream, "--connect", addr] + args, env, log=os.path.join(work, "connector.log"))
    rc_c = con.wait(60)
    rc_l = lis.wait(10)
    if rc_c != 0 or rc_l != 0:
        L.fail("the stream after the attack did not complete (connector rc %s, listener rc %s)"
               "\n--- listener\n%s\n--- connector\n%s" %
               (rc_c, rc_l, lis.text()[-3000:], con.text()[-3000:]))
    else:
        L.note("stream of messages up to 256 KiB after the attack: completed")


if __name__ == "__main__":
    try:
        main()
    finally:
        L.Proc.kill_all()
    L.finish("res_preauth_buffer")
