#!/usr/bin/env python3
"""bond: RAILOVER_BOND=on over the fabric and the ethernet link, the fabric
taken down under traffic and brought back.

Both links carry the stream while both work (each one's veth sends at
least a tenth of the bytes of a second of traffic: the bond spreads
messages from RAILOVER_BOND_MIN, 4 KiB here, over its members).  When the
fabric goes down, every connection leaves it at once (failover.link), what
was in flight on it goes again on the ethernet link, and the stream goes on
there; after `link up` and the dwell every connection is back on rail 0 and
the fabric rejoins the bond (both links carry again).  Zero loss, no
duplicate, in order, as in linkdown.
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


def both_carry(topo, when):
    """A check: over a second, each link carries at least a tenth of the
    bytes of both, on each side."""
    def check(ck, _pair):
        before = {side: tx_bytes(topo, side) for side in ("A", "B")}
        time.sleep(1.0)
        for side in ("A", "B"):
            after = tx_bytes(topo, side)
            d = {dev: after[dev] - before[side][dev] for dev in ("fab", "eth")}
            total = sum(d.values())
            nf.log("%s: side %s sent fab %d B, eth %d B in 1 s" % (when, side, d["fab"], d["eth"]))
            ck.check(total > 0 and min(d.values()) >= total / 10,
                     "%s: side %s: both links should carry the bond's traffic: fab %d B, "
                     "eth %d B in 1 s" % (when, side, d["fab"], d["eth"]))
    return check


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    env = dict(nf.FAULT_ENV, RAILOVER_BOND="on", RAILOVER_BOND_MIN="4KiB")
    nf.fault_and_heal(args, "bond", inject=lambda topo, _pair: topo.link_down("A", "fab"),
                      heal=lambda topo, _: topo.link_up("A", "fab"),
                      leader_ok=nf.link_reason, env=env,
                      before_fault=lambda ck, pair: both_carry(pair.topo, "bonded")(ck, pair),
                      after_back=lambda ck, pair: both_carry(pair.topo, "rejoined")(ck, pair))


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
