#!/usr/bin/env python3
"""admin: `railover force` / `railover release` under traffic (no fault).

On the connector's process (namespace B): `railover force PID` moves
every connection to rail 1 (admin.force on the connector, peer.admin on the
listener); status shows forced=yes on the connector and peer_forced=yes on
the listener; nothing moves back while forced, even after several dwells;
`railover release PID` brings them back to rail 0 (admin.release or
failback on one side, peer.admin or peer.failback on the other).  Then
`force PID conn ID` for one connection (ID from the status): exactly that
connection moves, and `release PID conn ID` brings it back.  Zero loss, no
duplicate, in order; every switch counted once.
"""
import os
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def forced_by_operator(reason):
    """admin.force"""
    return reason == "admin.force"


def follows_admin(reason):
    """peer.admin"""
    return reason in ("peer.admin", "admin.force", "admin.release")


def released(reason):
    """admin.release or failback"""
    return reason in ("admin.release", nf.FAILBACK)


def follows_release(reason):
    """peer.admin or peer.failback"""
    return reason in ("peer.admin", nf.PEER_FAILBACK, "admin.release", nf.FAILBACK)


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    wd = nf.Workdir("admin", args.keep)
    ck = nf.Checker()
    n = args.conns
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd, topo, conns=n)
        try:
            pair.start()
            time.sleep(1.0)

            t0 = pair.mark("force all")
            nf.log("railover force %d: %s" % (pair.procs["connector"].pid,
                                                  pair.control("connector", "force")
                                                  .strip()))
            pair.wait_until("every connection on rail 1 on both sides", lambda: pair.all_on(1), 20)
            t1 = nf.now_ns()
            for i in range(n):
                nf.check_moves(ck, pair, i, t0, t1, 1, forced_by_operator, follows_admin,
                               "force")
            st_c, st_l = pair.status("connector"), pair.status("listener")
            for c in st_c["conns"]:
                ck.check(c.get("forced") == "yes" and c["rail"] == 1,
                         "connector status: conn id=%s forced=%s rail=%s, expected forced=yes "
                         "rail 1" % (c.get("id"), c.get("forced"), c["rail"]))
            for c in st_l["conns"]:
                ck.check(c.get("peer_forced") == "yes" and c["rail"] == 1,
                         "listener status: conn id=%s peer_forced=%s rail=%s, expected "
                         "peer_forced=yes rail 1" % (c.get("id"), c.get("peer_forced"),
                                                     c["rail"]))
            time.sleep(3.0)   # three dwells: a forced connection must stay
            moved = [(r, e) for r in nf.SIDES for e in pair.switches(r, since_ns=t1)]
            ck.check(not moved, "switches while forced: %s" % [
                "%s conn %s %s->%s %s" % (r, e.get("conn"), e.get("from"), e.get("to"),
                                          e.get("reason")) for r, e in moved])

            t2 = pair.mark("release all")
            pair.control("connector", "release")
            pair.wait_until("every connection back on rail 0 on both sides",
                            lambda: pair.all_on(0), 30)
            t3 = nf.now_ns()
            for i in range(n):
                nf.check_moves(ck, pair, i, t2, t3, 0, released, follows_release, "release")

            # one connection only
            st_c = pair.status("connector")
            cid = st_c["conns"][min(1, len(st_c["conns"]) - 1)].get("id")
            time.sleep(0.5)
            t4 = pair.mark("force conn %s" % cid)
            pair.control("connector", "force", "conn", str(cid))
            pair.wait_until("one connection on rail 1 on both sides",
                            lambda: any(pair.rail_of("listener", i) == 1 and
                                        pair.rail_of("connector", i) == 1 for i in range(n)), 20)
            time.sleep(0.5)
            t5 = nf.now_ns()
            away = [i for i in range(n) if pair.switches("connector", i, since_ns=t4) or
                    pair.switches("listener", i, since_ns=t4)]
            ck.check(len(away) == 1, "force conn %s: expected exactly one connection to move, "
                     "moved: %s" % (cid, away))
            st_c = pair.status("connector")
            for c in st_c["conns"]:
                want = 1 if c.get("id") == cid else 0
                ck.check(c["rail"] == want, "connector status after force conn %s: conn id=%s "
                         "on rail %s, expected %d" % (cid, c.get("id"), c["rail"], want))
            t6 = pair.mark("release conn %s" % cid)
            pair.control("connector", "release", "conn", str(cid))
            pair.wait_until("every connection on rail 0 on both sides", lambda: pair.all_on(0),
                            30)
            t7 = nf.now_ns()
            for i in away:
                nf.check_moves(ck, pair, i, t4, t5, 1, forced_by_operator, follows_admin,
                               "force conn")
                nf.check_moves(ck, pair, i, t6, t7, 0, released, follows_release,
                               "release conn")
            time.sleep(0.5)
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
