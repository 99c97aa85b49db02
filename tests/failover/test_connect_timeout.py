#!/usr/bin/env python3
"""connect_timeout: the fabric silently drops everything while the
connections are first made.

Phase `long` (RAILOVER_CONNECT_TIMEOUT=10s, failover timeout 250 ms): the
drop is removed 0.5 s after the connector starts.  The first connects on the
fabric (rail 0) wait through it (TCP sends its SYN again after 1 s), so every
connection comes up on rail 0: the status of both sides shows rail 0, and no
connection switched on either side.
Phase `default` (RAILOVER_CONNECT_TIMEOUT unset: the failover timeout): the
same drop, kept until the connections deliver, makes every connection start
on rail 1 (its first connect on rail 0 gives up after 250 ms); after the
drop is removed, they fail back to rail 0.
Both phases: zero loss, no duplicate, in order.
"""
import os
import sys
import threading

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def phase(args, wd, ck, name, connect_timeout):
    env = dict(nf.FAULT_ENV)
    if connect_timeout:
        env["RAILOVER_CONNECT_TIMEOUT"] = connect_timeout
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd.sub(name), topo, conns=args.conns, env=env)
        rules = topo.fabric_drop("A", "both")
        healer = None
        try:
            if connect_timeout:
                healer = threading.Timer(0.5, topo.nft_remove, (rules,))
            pair.start(on_connector=healer.start if healer else None)
            for role in nf.SIDES:
                rails = [c["rail"] for c in pair.status(role)["conns"]]
                nf.log("%s: %s: rails %s" % (name, role, rails))
                want = 0 if connect_timeout else 1
                ck.check(len(rails) == args.conns and all(r == want for r in rails),
                         "%s: %s: connections on rails %s, expected all on rail %d" %
                         (name, role, rails, want))
            if connect_timeout:
                moved = [(role, e) for role in nf.SIDES for e in pair.switches(role)]
                ck.check(not moved, "%s: switches although the first connects could wait: %s"
                         % (name, ["%s conn %s %s->%s %s" % (r, e.get("conn"), e.get("from"),
                                                              e.get("to"), e.get("reason"))
                                   for r, e in moved]))
            else:
                topo.nft_remove(rules)
                pair.wait_until("every connection on rail 0 on both sides (status)",
                                lambda: all(c["rail"] == 0 for role in nf.SIDES
                                            for c in pair.status(role)["conns"]), 60)
            nf.check_rail_traffic(ck, pair, 0, wait_s=1.0)
            pair.stop()
        finally:
            if healer:
                healer.cancel()
            pair.kill()
        nf.check_stream(ck, pair)


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    wd = nf.Workdir("connect_timeout", args.keep)
    ck = nf.Checker()
    phase(args, wd, ck, "long", "10s")
    phase(args, wd, ck, "default", None)
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=True)
