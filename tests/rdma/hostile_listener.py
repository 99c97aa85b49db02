#!/usr/bin/env python3
"""Strangers against an RDMA rail's listener (issue 35, part 4), in a VM.

A rov_stream listens with one rail (verbs, out-of-band setup; or UCX) and
nothing else.  A stranger opens HALF_OPEN connections to the rail's TCP
listener that send nothing, SLOW that send one byte at a time (slowloris)
and GARBAGE that send random bytes, and holds them.  Checked:

  - nothing of the device is made for them: the listener's pinned memory
    (VmPin: registered receive rings, pinned by ibv_reg_mr) grows by less
    than PIN_GROWTH_MAX_KIB (verbs; before the listener challenged for the
    address key it created a QP, a CQ and registered rings for every TCP
    connection), and its RSS by less than RSS_GROWTH_MAX_KIB;
  - (verbs) every one of them is closed by the listener within the
    handshake timeout and a margin: the transport's one deadline for
    unauthenticated peers covers the rail's setup too;
  - a real connector, started while they are held, streams and finishes.

usage: hostile_listener.py ROV_STREAM verbs|ucx RAILS
"""
import os
import random
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hostile"))
import res_lib as L  # noqa: E402

HALF_OPEN = 100
SLOW = 10
GARBAGE = 10
PIN_GROWTH_MAX_KIB = 1024
RSS_GROWTH_MAX_KIB = 16 * 1024
HELLO_TIMEOUT_S = 5.0      # context.c: HELLO_TIMEOUT_NS (the connect timeout is 2 s here)
CLOSE_MARGIN_S = 10.0      # TCG: timers and wake-ups run late


def main():
    stream, kind, rails = sys.argv[1], sys.argv[2], sys.argv[3]
    work = tempfile.mkdtemp(prefix="rov_hostile_listener_", dir=os.environ.get("VMOUT"))
    env = L.stream_env(rails, RAILOVER_CONNECT_TIMEOUT="2s")
    args = ["--count", "300", "--max-size", "65536", "--timeout", "240", "--quiet-status"]
    started = L.start_listener(stream, work, args, env, wait=120)
    if not started:
        return
    lis, addr = started
    targets = L.listen_addrs(lis.pid)
    if not targets:
        L.fail("the %s listener has no TCP listening socket" % kind)
        return
    target = targets[0]
    time.sleep(1.0)
    pin0, rss0 = L.status_kib(lis.pid, "VmPin"), L.status_kib(lis.pid, "VmRSS")
    L.note("listener pid %d on %s:%d; VmPin %d KiB, RSS %d KiB" %
           (lis.pid, target[0], target[1], pin0, rss0))

    rnd = random.Random(35)
    held = []   # (kind, socket, opened at)
    for i in range(HALF_OPEN + SLOW + GARBAGE):
        try:
            s = socket.create_connection(target, timeout=10)
        except OSError as e:
            L.note("connect %d: %s" % (i, e))
            continue
        what = "half-open" if i < HALF_OPEN else "slow" if i < HALF_OPEN + SLOW else "garbage"
        try:
            if what == "garbage":
                s.sendall(bytes(rnd.getrandbits(8) for _ in range(200)))
            elif what == "slow":
                s.send(b"\x52")
        except OSError:
            pass
        held.append([what, s, time.monotonic(), None])
    L.note("opened %d connections (%d half-open, %d slow, %d garbage)" %
           (len(held), HALF_OPEN, SLOW, GARBAGE))

    # The slow ones trickle a byte every 0.3 s until they are closed.
    end = time.monotonic() + HELLO_TIMEOUT_S + CLOSE_MARGIN_S
    pin1 = rss1 = 0
    measured = False
    while time.monotonic() < end:
        now = time.monotonic()
        for h in held:
            if h[3] is None and L.closed_by_peer(h[1], 0):
                h[3] = now - h[2]
            elif h[3] is None and h[0] == "slow":
                try:
                    h[1].send(b"\x00")
                except OSError:
                    h[3] = now - h[2]
        if not measured and now - held[0][2] >= 2.0:
            pin1, rss1 = L.status_kib(lis.pid, "VmPin"), L.status_kib(lis.pid, "VmRSS")
            measured = True
        if all(h[3] is not None for h in held) or not lis.alive():
            break
        time.sleep(0.3)
    if not measured:
        pin1, rss1 = L.status_kib(lis.pid, "VmPin"), L.status_kib(lis.pid, "VmRSS")
    L.note("2 s into the attack: VmPin %d -> %d KiB, RSS %d -> %d KiB" % (pin0, pin1, rss0, rss1))
    if not lis.alive():
        L.fail("the listener died under the attack:\n" + lis.text()[-3000:])
        return
    if pin1 - pin0 > PIN_GROWTH_MAX_KIB:
        L.fail("pinned memory grew by %d KiB for %d strangers (bound %d KiB): the rail "
               "registers memory for peers that proved nothing" %
               (pin1 - pin0, len(held), PIN_GROWTH_MAX_KIB))
    if rss1 - rss0 > RSS_GROWTH_MAX_KIB:
        L.fail("RSS grew by %d KiB for %d strangers (bound %d KiB)" %
               (rss1 - rss0, len(held), RSS_GROWTH_MAX_KIB))
    still = [h for h in held if h[3] is None]
    times = sorted(h[3] for h in held if h[3] is not None)
    L.note("closed by the listener: %d of %d%s" %
           (len(held) - len(still), len(held),
            ", after %.1f-%.1f s" % (times[0], times[-1]) if times else ""))
    if kind == "verbs" and still:
        L.fail("%d of %d strangers' connections still open %.0f s after they were made "
               "(%s): no deadline on the rail's setup" %
               (len(still), len(held), HELLO_TIMEOUT_S + CLOSE_MARGIN_S,
                ", ".join(sorted(set(h[0] for h in still)))))

    # A real peer while strangers still hold connections.
    more = []
    for i in range(20):
        try:
            more.append(socket.create_connection(target, timeout=10))
        except OSError:
            break
    con = L.Proc([stream, "--connect", addr] + args, env, log=os.path.join(work, "connector.log"))
    L.stream_done(lis, con, "a real connector streamed while strangers held connections")
    for s in more:
        s.close()
    for h in held:
        h[1].close()


if __name__ == "__main__":
    try:
        main()
    finally:
        L.Proc.kill_all()
    L.finish("hostile_listener")
