#!/usr/bin/env python3
"""linkdown: `ip link set fab down` under traffic, then up again.

A downed link loses frames silently (no error reaches the sockets), so the
lack-of-progress timer must move every connection to rail 1 (failover.stall*
on at least one side, peer.failover or failover.* on the other); traffic goes
on over rail 1 while the link is down; after `link up` and the dwell every
connection is back on rail 0 (failback / peer.failback).  Zero loss, no
duplicate, in order.  --side A|B picks the end that goes down (A = listener).
"""
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def test():
    args = nf.common_args(__doc__.splitlines()[0], lambda ap: ap.add_argument(
        "--side", choices=("A", "B"), default="A", help="end of the fab link to take down"))
    nf.fault_and_heal(args, "linkdown" + args.side,
                      inject=lambda topo: topo.link_down(args.side, "fab"),
                      heal=lambda topo, _: topo.link_up(args.side, "fab"),
                      leader_ok=nf.stall_reason)


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
