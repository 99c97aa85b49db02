#!/usr/bin/env python3
"""both_down: the fallback rail dies too while the fabric is down; no
connection goes back to the fabric until the fabric has passed a probe.

Continuous traffic on every connection.  `ip link set fab down` moves every
connection to rail 1; then `eth` goes down as well, for 3 s, with the fabric
still down.  Claims:
  - while the fabric is down, no switch on either side goes to rail 0 (a
    move onto a rail known down: before, each connection moved back to the
    dead fabric after its retry time and bounced between the two, about
    1,150 switches per side in 32 s at 256 connections);
  - while both are down each connection reconnects rail 1 (rail 1 -> 1,
    after its backoff) at most a few times, not once per tick;
  - after `eth` comes back, messages flow on rail 1 on every connection;
  - after `fab` comes back, every connection returns to rail 0 (failback);
  - zero loss, no duplicate, in order, every switch counted once.
"""
import os
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402

BOTH_DOWN_S = 3.0
# Reconnects of rail 1 per connection and side while both links are down:
# the backoff (50 ms doubling to 200 ms in FAULT_ENV) allows about 15 in 3 s;
# a reconnect per tick would be hundreds.
MAX_RECONNECTS = 20


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    wd = nf.Workdir("both_down", args.keep)
    ck = nf.Checker()
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd, topo, conns=args.conns)
        try:
            pair.start()
            t_fault = nf.fabric_then_eth_down(topo, pair)
            time.sleep(BOTH_DOWN_S)
            pair.check_alive("with both links down")
            pair.mark("eth up")
            topo.link_up("A", "eth")
            nf.check_rail_traffic(ck, pair, 1, wait_s=3.0)
            onto0 = [(role, e) for role in nf.SIDES for e in pair.switches(role, since_ns=t_fault)
                     if e.get("to") == 0]
            ck.check(not onto0, "switches onto the fabric while it was down: %s" %
                     ["%s conn %s %s->%s %s" % (r, e.get("conn"), e.get("from"), e.get("to"),
                                               e.get("reason")) for r, e in onto0])
            for role in nf.SIDES:
                for i in range(pair.conns):
                    n = len([e for e in pair.switches(role, i, t_fault)
                             if e.get("from") == 1 and e.get("to") == 1])
                    ck.check(n <= MAX_RECONNECTS, "%s conn %d reconnected rail 1 %d times "
                             "while both links were down (at most %d)" %
                             (role, i, n, MAX_RECONNECTS))
            nf.log("switches per side while the fabric was down: %s" %
                   {role: len(pair.switches(role, since_ns=t_fault)) for role in nf.SIDES})
            pair.mark("fab up")
            topo.link_up("A", "fab")
            pair.wait_until("every connection back on rail 0 on both sides",
                            lambda: pair.all_on(0), 60)
            nf.check_rail_traffic(ck, pair, 0, wait_s=1.0)
            pair.stop()
        finally:
            pair.kill()
        nf.check_stream(ck, pair)
        nf.final_rails(ck, pair, 0)
        nf.check_counts(ck, pair)
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
