#!/usr/bin/env python3
"""bond: RAILOVER_BOND=on over the fabric and the ethernet link, the fabric
taken down under traffic and brought back.

Both links carry the stream while both work (each one's veth sends at
least a tenth of the bytes of a second of traffic: the bond spreads
messages from RAILOVER_BOND_MIN, 4 KiB here, over its members).  When the
fabric goes down, every connection leaves it at once (failover.link), what
was in flight on it goes again on the ethernet link, and the stream goes on
there; after `link up` and the dwell every connection is back on rail 0 and
the fabric rejoins the bond (both links carry again; both sides' events
say it left and joined again).  Zero loss, no duplicate, in order, as in
linkdown.

--gap: no fault, unequal links (the fabric shaped to a third of the
ethernet link's rate), and a listener whose reorder buffer (64 KiB) is far
smaller than what the connector has in flight (its window, 16 MiB): early
frames beyond it are dropped all the time.  A dropped frame that was itself
a resend leaves a gap no arriving frame shows again; the receiver must ask
for it once the gap has made no progress for RAILOVER_FAILOVER_TIMEOUT (a
stream that waited for it forever, every channel healthy, is what
bond-bench's rov-bond hung on).  Every message of a fixed count arrives,
once, in order, and the listener logged the gap asked for again.

--shaped: both links rate-limited with tc, first equal (200 Mbit/s each),
then unequal (fabric 100, ethernet 300 Mbit/s), messages up to 256 KiB
(large ones in fragments over both members).  On each shape the fabric is
taken down and brought back, then blocked with nftables (silent: found by
the stall timer) and unblocked, under the stream: each time every
connection's fabric leaves the bond on both sides, the ethernet link alone
carries every connection both ways, and after the heal and the dwell the
fabric joins again and both links carry.  Zero loss, no duplicate, in
order, over all four faults.
"""
import json
import os
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def tx_bytes(topo, side):
    """Bytes side's fab and eth veths have sent so far."""
    out = nf.sh("ip", "-n", topo.ns[side], "-j", "-s", "link", "show", quiet=True)
    return {link["ifname"]: int(link["stats64"]["tx"]["bytes"]) for link in json.loads(out)
            if link.get("ifname") in ("fab", "eth")}


def both_carry(topo, when, seconds=1.0):
    """A check: over seconds, each link carries at least a tenth of the
    bytes of both, on each side."""
    def check(ck, _pair):
        before = {side: tx_bytes(topo, side) for side in ("A", "B")}
        time.sleep(seconds)
        for side in ("A", "B"):
            after = tx_bytes(topo, side)
            d = {dev: after[dev] - before[side][dev] for dev in ("fab", "eth")}
            total = sum(d.values())
            nf.log("%s: side %s sent fab %d B, eth %d B in %g s" % (when, side, d["fab"],
                                                                    d["eth"], seconds))
            ck.check(total > 0 and min(d.values()) >= total / 10,
                     "%s: side %s: both links should carry the bond's traffic: fab %d B, "
                     "eth %d B in %g s" % (when, side, d["fab"], d["eth"], seconds))
    return check


GAP_LOG = "still missing after RAILOVER_FAILOVER_TIMEOUT"


def test_gap(args):
    wd = nf.Workdir("bond_gap", args.keep)
    ck = nf.Checker()
    env = dict(nf.FAULT_ENV, RAILOVER_BOND="on", RAILOVER_BOND_MIN="4KiB")
    small = {"RAILOVER_REORDER_BYTES": "64KiB", "RAILOVER_WINDOW_BYTES": "64KiB"}
    with nf.Topology() as topo:
        nf.log("fab: %s" % topo.shape("fab", 200 * 1000 * 1000))
        nf.log("eth: %s" % topo.shape("eth", 600 * 1000 * 1000))
        pair = nf.StreamPair(args, wd, topo, conns=2, env=env, env_l=small,
                             max_size=256 << 10, count=args.count, stall_s=20)
        try:
            pair.start()
            # (3 s: the listener's 64 KiB window lets it send little, in
            # bursts; one second of it once split 92/8 on a loaded machine)
            both_carry(topo, "bonded", 3.0)(ck, pair)
            pair.wait_until("%d messages received each way on every connection" % args.count,
                            lambda: all(len(t) == pair.conns and min(t.values()) >= args.count
                                        for t in (pair.rx_totals(r) for r in nf.SIDES)), 200)
            pair.stop()
        finally:
            pair.kill()
        nf.check_stream(ck, pair)
        asked = pair.log_count("listener", GAP_LOG)
        ck.check(asked > 0, "the listener never asked again for a gap (\"%s\" not logged): "
                 "the drops this test makes did not happen, or were never asked for" % GAP_LOG)
        nf.log("the listener asked again for %d gap(s)" % asked)
    ck.done()
    wd.failed = False


def bond_news(pair, role, since_ns, key, rail=0):
    """Connections of role whose events since since_ns say rail left the
    bond (key "left") or joined it (key "joined")."""
    return {e.get("conn") for e in pair.events[role].poll()
            if e.get("ev") == "bond" and e.get("t", 0) >= since_ns and e.get(key) == rail}


def all_bond_news(pair, since_ns, key):
    return all(len(bond_news(pair, role, since_ns, key)) == pair.conns for role in nf.SIDES)


def test_shaped(args):
    wd = nf.Workdir("bond_shaped", args.keep)
    ck = nf.Checker()
    env = dict(nf.FAULT_ENV, RAILOVER_BOND="on", RAILOVER_BOND_MIN="4KiB")
    faults = (("link down", lambda topo: topo.link_down("A", "fab"),
               lambda topo, _: topo.link_up("A", "fab")),
              ("nftables drop", lambda topo: topo.fabric_drop("A"),
               lambda topo, rules: topo.nft_remove(rules)))
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd, topo, conns=2, env=env, max_size=256 << 10, stall_s=20)
        try:
            pair.start()
            for fab, eth in ((200, 200), (100, 300)):
                nf.log("fab: %s" % topo.shape("fab", fab * 1000 * 1000))
                nf.log("eth: %s" % topo.shape("eth", eth * 1000 * 1000))
                shape = "%d:%d Mbit/s" % (fab, eth)
                both_carry(topo, "bonded, %s" % shape)(ck, pair)
                for name, inject, heal in faults:
                    what = "%s, %s" % (name, shape)
                    t0 = nf.now_ns()
                    pair.mark("fault: " + what)
                    held = inject(topo)
                    pair.wait_until("every connection's fabric left the bond on both sides "
                                    "(%s)" % what, lambda: all_bond_news(pair, t0, "left"), 30)
                    left_ms = (nf.now_ns() - t0) / 1e6
                    before = {r: pair.rx_totals(r) for r in nf.SIDES}
                    time.sleep(1.5)
                    for r in nf.SIDES:
                        after = pair.rx_totals(r)
                        for i in range(pair.conns):
                            ck.check(after.get(i, 0) > before[r].get(i, 0),
                                     "%s: %s conn %d received nothing in 1.5 s on the ethernet "
                                     "link alone" % (what, r, i))
                    t1 = nf.now_ns()
                    pair.mark("heal: " + what)
                    heal(topo, held)
                    pair.wait_until("every connection's fabric joined the bond again on both "
                                    "sides (%s)" % what, lambda: all_bond_news(pair, t1, "joined"),
                                    60)
                    nf.log("%s: every fabric left the bond within %.0f ms, joined again "
                           "%.0f ms after the heal" % (what, left_ms, (nf.now_ns() - t1) / 1e6))
                    both_carry(topo, "rejoined after %s" % what)(ck, pair)
            pair.stop()
        finally:
            pair.kill()
        nf.check_stream(ck, pair)
        nf.check_counts(ck, pair)
    ck.done()
    wd.failed = False


def left_and_rejoined(ck, pair):
    """Every connection's events (both sides) say the fabric (rail 0) left
    the bond and joined it again after that (ROV_EVENT_CONN_BOND)."""
    for role in nf.SIDES:
        evs = [e for e in pair.events[role].poll() if e.get("ev") == "bond"]
        for i in range(pair.conns):
            mine = [e for e in evs if e.get("conn") == i]
            left = [e["t"] for e in mine if e.get("left") == 0]
            back = [e["t"] for e in mine if e.get("joined") == 0 and left and e["t"] > left[0]]
            nf.log("%s conn %d: bond events %s" % (role, i, ["%s%s" % (
                "+" if e.get("joined", -1) >= 0 else "-",
                e.get("joined") if e.get("joined", -1) >= 0 else e.get("left")) for e in mine]))
            ck.check(left and back, "%s conn %d: the fabric should leave the bond and join it "
                     "again (ROV_EVENT_CONN_BOND): %d left, %d joined after" %
                     (role, i, len(left), len(back)))


def test():
    args = nf.common_args(__doc__.splitlines()[0], extra=lambda ap: (
        ap.add_argument("--gap", action="store_true", help="the persistent-gap case (above)"),
        ap.add_argument("--shaped", action="store_true", help="faults on shaped links (above)"),
        ap.add_argument("--count", type=int, default=3000, help="--gap: messages per direction "
                        "and connection (default 3000)")))
    if args.gap:
        return test_gap(args)
    if args.shaped:
        return test_shaped(args)
    env = dict(nf.FAULT_ENV, RAILOVER_BOND="on", RAILOVER_BOND_MIN="4KiB")
    nf.fault_and_heal(args, "bond", inject=lambda topo, _pair: topo.link_down("A", "fab"),
                      heal=lambda topo, _: topo.link_up("A", "fab"),
                      leader_ok=nf.link_reason, env=env,
                      before_fault=lambda ck, pair: both_carry(pair.topo, "bonded")(ck, pair),
                      after_back=lambda ck, pair: (both_carry(pair.topo, "rejoined")(ck, pair),
                                                   left_and_rejoined(ck, pair)))


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
