#!/usr/bin/env python3
"""one_of_many: a fault on one connection's fabric channel moves that
connection and only that one.

Three connections (--conns) stream continuously.  The connector's fabric
ports of one connection are read from `railover status PID` (its chan line
on rail 0, local=192.0.2.2:PORT remote=192.0.2.1:PORT) and exactly that TCP
4-tuple is dropped with nftables in namespace B.  Claims:
  - exactly one rov_stream connection switches (events of both sides);
  - while it is away, `railover status` of the connector shows the chosen
    connection on rail 1 and every other one on rail 0 with switches=0, and
    the listener's status agrees (its connection whose peer id is the chosen
    one is on rail 1);
  - the moved connection left with a failover.* reason (peer.failover or
    failover.* on the other side) and comes back to rail 0 with failback /
    peer.failback — possibly while the rule is still there, since the
    failback connects from a new port (correct behaviour);
  - at the end the other connections report switches=0 on both sides;
  - zero loss, no duplicate, in order.
The failback dwell is 3 s here so that the status can be read while the
connection is away.
"""
import os
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def test():
    args = nf.common_args(__doc__.splitlines()[0], lambda ap: ap.add_argument(
        "--pick", type=int, default=1, help="position in the status list of the connection "
        "to break (default 1, the second)"))
    wd = nf.Workdir("one_of_many", args.keep)
    ck = nf.Checker()
    env = dict(nf.FAULT_ENV, RAILOVER_FAILBACK_DWELL="3s")
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd, topo, conns=args.conns, env=env)
        try:
            pair.start()
            time.sleep(1.0)
            st = pair.status("connector")
            ck.check(len(st["conns"]) == args.conns, "connector status lists %d connections, "
                     "expected %d:\n%s" % (len(st["conns"]), args.conns, st))
            if len(st["conns"]) <= args.pick:
                raise nf.Failure("no connection at position %d in the status" % args.pick)
            victim = st["conns"][args.pick]
            fab = [ch for ch in victim["chans"] if ch.get("rail") == 0]
            if not fab:
                raise nf.Failure("connector status: conn id=%s has no chan line on rail 0: %s" %
                                 (victim.get("id"), victim))
            local, remote = nf.split_addr(fab[0]["local"]), nf.split_addr(fab[0]["remote"])
            ck.check(local[0] == nf.FAB_B and remote[0] == nf.FAB_A,
                     "fabric chan of conn id=%s is %s -> %s, expected %s -> %s" %
                     (victim.get("id"), fab[0]["local"], fab[0]["remote"], nf.FAB_B, nf.FAB_A))
            nf.log("breaking connection id=%s (connector side): fabric %s:%d <-> %s:%d" %
                   (victim.get("id"), local[0], local[1], remote[0], remote[1]))

            t_fault = pair.mark("fault")
            rules = topo.flow_drop("B", local, remote)

            def moved():
                return {i for role in nf.SIDES for i in range(args.conns)
                        if pair.switches(role, i)}
            pair.wait_until("one connection switched on both sides",
                            lambda: any(all(pair.switches(role, i) for role in nf.SIDES)
                                        for i in range(args.conns)), 20)
            # Read the status while it is away (dwell 3 s).
            st_c, st_l = pair.status("connector"), pair.status("listener")
            t_status = nf.now_ns()
            m = moved()
            ck.check(len(m) == 1, "expected exactly one connection to switch, switched: %s" %
                     sorted(m))
            target = min(m) if m else None
            away = [role for role in nf.SIDES if pair.rail_of(role, target) == 1]
            vid = victim.get("id")
            for c in st_c["conns"]:
                if c.get("id") == vid:
                    if len(away) == 2:
                        ck.check(c["rail"] == 1, "connector status: broken conn id=%s on rail "
                                 "%s, expected 1" % (vid, c["rail"]))
                    ck.check(c.get("switches", 0) >= 1, "connector status: broken conn id=%s "
                             "switches=%s, expected >= 1" % (vid, c.get("switches")))
                else:
                    ck.check(c["rail"] == 0 and c.get("switches") == 0,
                             "connector status: untouched conn id=%s on rail %s with "
                             "switches=%s, expected rail 0 and switches=0" %
                             (c.get("id"), c["rail"], c.get("switches")))
            for c in st_l["conns"]:
                peer_id = str(c.get("peer", "")).rpartition(":")[2]
                if peer_id == str(vid):
                    if len(away) == 2:
                        ck.check(c["rail"] == 1, "listener status: broken conn (peer id %s) on "
                                 "rail %s, expected 1" % (vid, c["rail"]))
                else:
                    ck.check(c["rail"] == 0 and c.get("switches") == 0,
                             "listener status: untouched conn id=%s (peer %s) on rail %s with "
                             "switches=%s, expected rail 0 and switches=0" %
                             (c.get("id"), c.get("peer"), c["rail"], c.get("switches")))
            ck.check(sum(1 for c in st_l["conns"]
                         if str(c.get("peer", "")).rpartition(":")[2] == str(vid)) == 1,
                     "listener status: no single connection with peer id %s: %s" %
                     (vid, [c.get("peer") for c in st_l["conns"]]))
            if target is not None:
                nf.check_moves(ck, pair, target, t_fault, t_status, 1, nf.any_failover,
                               nf.follows_failover, "failover of the broken connection")

            pair.wait_until("the broken connection back on rail 0 (failback from a new port, "
                            "or after the rule is removed)", lambda: pair.all_on(0), 30)
            t_heal = pair.mark("heal")
            topo.nft_remove(rules)
            time.sleep(1.0)
            pair.stop()
        finally:
            pair.kill()
        nf.check_stream(ck, pair)
        nf.final_rails(ck, pair, 0)
        nf.check_counts(ck, pair)
        if target is not None:
            nf.check_moves(ck, pair, target, t_fault, t_heal, 0, nf.failback_reason,
                           nf.follows_failback, "failback of the broken connection")
        for role in nf.SIDES:
            for i in range(args.conns):
                if i == target:
                    continue
                c = pair.results[role]["conns"].get(i) or {}
                ck.check(c.get("switches") == 0, "%s conn %d (not broken): switches=%s "
                         "reasons=%s at the end, expected 0" %
                         (role, i, c.get("switches"), nf.fmt_reasons(c.get("reasons"))))
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=True)
