#!/usr/bin/env python3
"""flap: the fabric link goes down and up repeatedly under traffic.

`ip link set fab down` for 400 ms, up for 400 ms, 6 times (--down-ms,
--up-ms, --flaps, --side), then it stays up.  Claims:
  - the flaps hit the traffic: at least one connection left rail 0 with a
    failover.* reason (when the flaps are longer than the failover timeout,
    250 ms; shorter blips need not move anything; a connection with nothing
    unacknowledged on the fabric during an outage has nothing to time out);
  - after the flapping stops every connection ends on rail 0, the last move
    being failback / peer.failback;
  - no ping-pong: per connection and side at most 2 switches per flap plus 2
    (the actual counts are printed);
  - zero loss, no duplicate, in order; every switch counted once.
"""
import os
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def opts(ap):
    ap.add_argument("--side", choices=("A", "B"), default="A")
    ap.add_argument("--flaps", type=int, default=6)
    ap.add_argument("--down-ms", type=int, default=400)
    ap.add_argument("--up-ms", type=int, default=400)


def test():
    args = nf.common_args(__doc__.splitlines()[0], opts)
    wd = nf.Workdir("flap", args.keep)
    ck = nf.Checker()
    bound = 2 * args.flaps + 2
    timeout_ms = int(nf.FAULT_ENV["RAILOVER_FAILOVER_TIMEOUT"].rstrip("ms"))
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd, topo, conns=args.conns)
        try:
            pair.start()
            time.sleep(1.0)
            t_fault = pair.mark("flapping")
            topo.flap(args.side, "fab", args.down_ms / 1000, args.up_ms / 1000, args.flaps,
                      on_cycle=lambda i: pair.check_alive("during flap %d" % (i + 1)))
            t_up = pair.mark("link stays up")
            # The engine may lengthen the dwell after failures soon after a
            # failback (hysteresis), hence the generous deadline.
            pair.wait_until("every connection on rail 0 on both sides after the flapping",
                            lambda: pair.all_on(0), 90)
            time.sleep(1.0)
            pair.stop()
        finally:
            pair.kill()
        nf.check_stream(ck, pair)
        nf.final_rails(ck, pair, 0)
        nf.check_counts(ck, pair)
        # A connection with nothing in flight for a whole outage has nothing
        # to time out (its keepalive may fall into the up phase): at least
        # one connection must have felt the flaps, not necessarily each.
        if args.down_ms > timeout_ms:
            felt = [i for i in range(args.conns)
                    if any(nf.is_failover(e.get("reason"))
                           for role in nf.SIDES for e in pair.switches(role, i))]
            ck.check(bool(felt), "no connection failed over during %d flaps of %d ms "
                     "(failover timeout %d ms)" % (args.flaps, args.down_ms, timeout_ms))
        for i in range(args.conns):
            last = [pair.switches(role, i)[-1].get("reason") if pair.switches(role, i) else None
                    for role in nf.SIDES]
            ck.check(last == [None, None] or
                     (nf.FAILBACK in last and all(r in (nf.FAILBACK, nf.PEER_FAILBACK)
                                                  for r in last)),
                     "conn %d: last switches (listener, connector) %s, expected failback "
                     "and peer.failback" % (i, last))
            for role in nf.SIDES:
                c = pair.results[role]["conns"].get(i) or {}
                n = c.get("switches")
                after = len(pair.switches(role, i, since_ns=t_up))
                nf.log("conn %d %s: %s switches (%d after the flapping stopped), bound %d, "
                       "reasons %s" % (i, role, n, after, bound, nf.fmt_reasons(c.get("reasons"))))
                ck.check(isinstance(n, int) and n <= bound,
                         "%s conn %d: %s switches for %d flaps, expected at most %d "
                         "(ping-pong?): %s" % (role, i, n, args.flaps, bound,
                                               [(e.get("to"), e.get("reason"))
                                                for e in pair.switches(role, i)]))
        early = [e for role in nf.SIDES for e in pair.switches(role) if e.get("t", 0) < t_fault]
        ck.check(not early, "switches before the flapping started: %s" % early)
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
