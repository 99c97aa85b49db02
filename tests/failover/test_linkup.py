#!/usr/bin/env python3
"""linkup: a link that comes back says so; connections do not wait out their backoff.

The fabric link goes down under traffic (the connections leave it at once,
failover.link) with a failback retry interval of 20 s
(RAILOVER_FAILBACK_RETRY; the first retry of a failed rail is due 10 to 20 s
after its failure), and comes up again about a second after every
connection moved to rail 1.  Both ends see the link come back (the veth
peer's carrier returns with it), and their TCP rails say so
(transport/netlink.c: "link fab is up again"): every connection must be back
on rail 0 within 7 s of the heal, before any retry of its own was due, and
both logs must name the link.  Zero loss, no duplicate, in order, as in
linkdown.
"""
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402

RETRY_S = 20  # failover.c jitters the first step to [RETRY_S / 2, RETRY_S]


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    env = dict(nf.FAULT_ENV, RAILOVER_FAILBACK_RETRY="%ds" % RETRY_S,
               RAILOVER_FAILBACK_RETRY_MAX="60s")

    def named_link(ck, pair):
        for role in nf.SIDES:
            with open(pair.wd.file(role + ".log"), errors="replace") as f:
                ck.check("link fab is up again" in f.read(),
                         "%s: no 'link fab is up again' in its log" % role)

    # The heal comes about 2.5 s after the fault (move, 1 s of traffic on
    # rail 1, the checks); back within 7 s of it is before any connection's
    # own retry (at least RETRY_S / 2 after its failure).
    nf.fault_and_heal(args, "linkup", inject=lambda topo, _pair: topo.link_down("A", "fab"),
                      heal=lambda topo, _: topo.link_up("A", "fab"),
                      leader_ok=nf.link_reason, env=env, heal_timeout=RETRY_S / 2 - 3,
                      after_back=named_link)


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
