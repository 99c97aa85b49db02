#!/usr/bin/env python3
"""nft_drop: nftables silently drops the fabric under traffic, then lets it
through again.

The drop (input and output of side A by default, `--direction in|out|both`,
`--side A|B`) gives no error to anyone: the lack-of-progress timer must move
every connection to rail 1 (failover.stall* on at least one side,
peer.failover or failover.* on the other); traffic goes on over rail 1;
after the rule is removed and the dwell every connection is back on rail 0
(failback / peer.failback).  Zero loss, no duplicate, in order.
"""
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def opts(ap):
    ap.add_argument("--side", choices=("A", "B"), default="A")
    ap.add_argument("--direction", choices=("in", "out", "both"), default="both")


def test():
    args = nf.common_args(__doc__.splitlines()[0], opts)
    nf.fault_and_heal(args, "nft_drop",
                      inject=lambda topo, _pair: topo.fabric_drop(args.side, args.direction),
                      heal=lambda topo, rules: topo.nft_remove(rules),
                      leader_ok=nf.stall_reason)


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=True)
