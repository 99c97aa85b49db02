#!/usr/bin/env python3
"""linkdown: `ip link set fab down` under traffic, then up again.

A downed link loses frames silently (no error reaches the sockets), but the
kernel says that the link stopped running (netlink), on both ends of the veth:
every connection leaves rail 0 at once on that news (failover.link on at
least one side, peer.failover or failover.* on the other), without waiting
for the lack-of-progress timer; traffic goes on over rail 1 while the link is
down; after `link up` and the dwell every connection is back on rail 0
(failback / peer.failback).  Zero loss, no duplicate, in order.  --side A|B
picks the end that goes down (A = listener); its log says "link fab is
down" and its `railover status` counts the link's going down and up again
(rail 0: link=up link_downs=1 link_ups=1).

--frozen: both processes are stopped (SIGSTOP, as a rank that computes for a
while without reading) until the data in flight has closed the TCP receive
windows both ways, the fabric is then dropped with nftables on A while they
are stopped (silently: no link event tells), then both go on.  Each side then
has data waiting behind the peer's closed window and nothing in flight, and
the window update that each sends once it reads is lost: only unanswered
window probes tell that the path is gone (failover.stall*).  Small receive
buffers in both namespaces (tcp_rmem) make the windows close.
"""
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def opts(ap):
    ap.add_argument("--side", choices=("A", "B"), default="A",
                    help="end of the fab link to take down")
    ap.add_argument("--frozen", action="store_true",
                    help="drop the fabric while both processes are stopped with "
                         "their receive windows closed")


def frozen_drop(topo, pair, side, tries=40):
    """Stop both processes; once the data in flight has closed the windows
    both ways on some connection, drop the fabric, then let both go on.
    Whether the windows close depends on what each had queued when it
    stopped: try again after a moment of traffic, up to `tries` times."""
    pids = [pair.procs[role].pid for role in nf.SIDES]
    for attempt in range(1, tries + 1):
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 1.0
            while not topo.windows_closed_both_ways() and time.monotonic() < deadline:
                time.sleep(0.05)
            if time.monotonic() < deadline:
                rules = topo.fabric_drop(side)
                nf.log("fabric dropped with both processes stopped (attempt %d)" % attempt)
                return rules
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        pair.check_alive("after SIGCONT")
        time.sleep(0.3)
    raise nf.Failure("no fabric connection was blocked by a closed window both ways "
                     "in %d stops of both processes" % tries)


def link_counted(side):
    """The side whose link went down logged it, and its status counts it."""
    role = nf.SIDES[0] if side == "A" else nf.SIDES[1]

    def check(ck, pair):
        with open(pair.wd.file(role + ".log"), errors="replace") as f:
            ck.check("link fab is down: its connections leave it" in f.read(),
                     "%s: no 'link fab is down' in its log" % role)
        rail0 = [r for r in pair.status(role)["rails"] if r.get("index") == 0]
        ck.check(rail0 and rail0[0].get("link") == "up" and
                 rail0[0].get("link_downs") == 1 and rail0[0].get("link_ups") == 1,
                 "%s: railover status should show rail 0 link=up link_downs=1 link_ups=1: %s"
                 % (role, rail0))
    return check


def test():
    args = nf.common_args(__doc__.splitlines()[0], opts)
    env = None
    if args.frozen:
        name, small = "linkdown_frozen", "4096 32768 65536"
        inject = lambda topo, pair: frozen_drop(topo, pair, args.side)  # noqa: E731
        # Both windows closed needs more queued than RAILOVER_WINDOW_TIME
        # lets a stream keep in flight (none in 20 stops with it): the
        # state comes from an application that itself stops reading (a
        # peer computing for minutes), which this test makes by stopping
        # both processes; the byte bounds alone let the queue build up.
        env = dict(nf.FAULT_ENV, RAILOVER_WINDOW_TIME="0s")
        heal = lambda topo, rules: topo.nft_remove(rules)  # noqa: E731
        leader_ok = nf.stall_reason
    else:
        name, small = "linkdown" + args.side, None
        inject = lambda topo, _pair: topo.link_down(args.side, "fab")  # noqa: E731
        heal = lambda topo, _: topo.link_up(args.side, "fab")  # noqa: E731
        leader_ok = nf.link_reason
    nf.fault_and_heal(args, name, inject=inject, heal=heal, leader_ok=leader_ok,
                      tcp_rmem=small, env=env,
                      after_back=None if args.frozen else link_counted(args.side))


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft="--frozen" in sys.argv)
