#!/usr/bin/env python3
"""nft_reset: nftables answers fabric TCP with `reject with tcp reset`, then
lets it through again.

With the rule on side A's input (default; `--side`, `--direction in|out|both`)
every fabric segment B sends is answered with a reset, so B's sockets fail
with ECONNRESET: a failover.error* reason on at least one side (the one that
gets the reset), peer.failover or failover.* on the other; traffic goes on
over rail 1 (reconnects to the fabric are refused while the rule is there);
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
    ap.add_argument("--direction", choices=("in", "out", "both"), default="in")


def test():
    args = nf.common_args(__doc__.splitlines()[0], opts)
    nf.fault_and_heal(args, "nft_reset",
                      inject=lambda topo, _pair: topo.fabric_reset(args.side, args.direction),
                      heal=lambda topo, rules: topo.nft_remove(rules),
                      leader_ok=nf.error_reason)


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=True)
