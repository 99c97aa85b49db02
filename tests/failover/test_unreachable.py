#!/usr/bin/env python3
"""unreachable: every rail stays down; after RAILOVER_UNREACHABLE_TIMEOUT
each connection fails as unreachable, naming each rail and its last
failure, instead of reconnecting for ever.

Continuous traffic on every connection, RAILOVER_UNREACHABLE_TIMEOUT=2s on
both sides.  `ip link set fab down` moves every connection to rail 1; then
`eth` goes down too and both stay down.  Claims:
  - both processes stay alive for the first second with both links down
    (a short outage of every path is ridden out: the connections wait);
  - then connections on both sides report ROV_EVENT_CONN_ERROR with status
    "peer unreachable" and a reason naming both rails and
    RAILOVER_UNREACHABLE_TIMEOUT (what an MPI job shows its user), within
    30 s (the timeout counts from the last rail's failure: rail 1's stall
    verdict), and no other error (rov_stream then ends, exit 2);
  - no connection goes back to the fabric while it is down.
"""
import os
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402

TIMEOUT = "2s"


def errors(pair, role):
    return [e for e in pair.events[role].poll() if e.get("ev") == "error"]


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    wd = nf.Workdir("unreachable", args.keep)
    ck = nf.Checker()
    env = dict(nf.FAULT_ENV, RAILOVER_UNREACHABLE_TIMEOUT=TIMEOUT)
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd, topo, conns=args.conns, env=env)
        try:
            pair.start()
            t_fault = nf.fabric_then_eth_down(topo, pair)
            time.sleep(1.0)
            for role in nf.SIDES:
                ck.check(not errors(pair, role), "%s: a connection failed within 1 s of both "
                         "links going down: %s" % (role, errors(pair, role)[:1]))
            # rov_stream ends (exit 2) at its first failed connection.
            pair.wait_until("a connection failed as unreachable and the process ended, on "
                            "both sides",
                            lambda: all(errors(pair, role) and pair.procs[role].poll() is not None
                                        for role in nf.SIDES), 30, alive=False)
            # Each side names its own rails (the listener is host A).
            rails = {"listener": nf.RAILS_A.split(","), "connector": nf.RAILS_B.split(",")}
            for role in nf.SIDES:
                ck.check(pair.procs[role].rc == 2, "%s exited with %s, not 2 (a failed "
                         "connection)" % (role, pair.procs[role].rc))
                for e in errors(pair, role):
                    text = e.get("text") or ""
                    ck.check(e.get("status") == "peer unreachable" and
                             "RAILOVER_UNREACHABLE_TIMEOUT" in text and
                             all(r + ": " in text for r in rails[role]),
                             "%s conn %s: error %r (%r): not unreachable naming %s" %
                             (role, e.get("conn"), e.get("status"), text, rails[role]))
                nf.log("%s: %s" % (role, errors(pair, role)[0].get("text")))
            onto0 = [(role, e) for role in nf.SIDES for e in pair.switches(role, since_ns=t_fault)
                     if e.get("to") == 0]
            ck.check(not onto0, "switches onto the fabric while it was down: %d" % len(onto0))
        finally:
            pair.kill()
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
