#!/usr/bin/env python3
"""handshake_drop: every new channel on every rail dies before its handshake.

nftables, on side A's input, answers every TCP segment that carries data
with a reset (SYNs and bare ACKs pass): each channel fails on its next
send, every reconnect completes its TCP handshake and is reset on its
HELLO.  Before issue 19 a connection then bounced between its two rails
tens of thousands of times a second (33,141 switches in 4.5 s), whatever
RAILOVER_FAILBACK_RETRY said.  Claims: while the rule holds (4 s), each
connection switches no more often than its rails' backoff allows (each
of two rails retried at most every 200 ms, RAILOVER_FAILBACK_RETRY_MAX:
at most 60 switches per side and connection), and neither process spends
more than a quarter of a core meanwhile (CPU time from /proc, not wall
clock; the livelock kept one busy); once the rule is gone
every connection recovers within a few backoffs and the stream ends with
zero loss, no duplicate, in order.
"""
import os
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402

HOLD_S = 4.0
MAX_CPU_SHARE = 0.25  # of one core, per process, while the rule holds


def cpu_s(pid):
    """utime + stime of a process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
MAX_SWITCHES = 60  # per side and connection: two rails, each retried every 200 ms at most


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    wd = nf.Workdir("handshake_drop", args.keep)
    ck = nf.Checker()
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd, topo, conns=args.conns)
        try:
            pair.start()
            time.sleep(1.0)
            pids = {role: pair.procs[role].pid for role in nf.SIDES}
            cpu0 = {role: cpu_s(pid) for role, pid in pids.items()}
            t_fault = pair.mark("fault")
            rule = topo.nft_add("A", "input",
                                "meta l4proto tcp ip length > 80 counter reject with tcp reset",
                                "reset every TCP segment with data")
            time.sleep(HOLD_S)
            for role, pid in pids.items():
                used = cpu_s(pid) - cpu0[role]
                nf.log("%s: %.2f s of CPU in %.0f s of reset handshakes" % (role, used, HOLD_S))
                ck.check(used <= MAX_CPU_SHARE * HOLD_S, "%s used %.2f s of CPU in %.0f s (at "
                         "most %.2f: no reconnect storm)" % (role, used, HOLD_S,
                                                              MAX_CPU_SHARE * HOLD_S))
            pair.check_alive("while every handshake is reset")
            for role in nf.SIDES:
                for i in range(args.conns):
                    n = len(pair.switches(role, i, since_ns=t_fault))
                    nf.log("%s conn %d: %d switches in %.0f s of reset handshakes" %
                           (role, i, n, HOLD_S))
                    ck.check(n <= MAX_SWITCHES, "%s conn %d switched %d times in %.0f s (at "
                             "most %d: reconnects go through the backoff)" %
                             (role, i, n, HOLD_S, MAX_SWITCHES))
            ck.check(topo.nft_counters("A").get(rule[2], 0) > 0,
                     "the reset rule matched nothing")
            pair.mark("heal")
            topo.nft_remove(rule)
            t_heal = time.monotonic()
            pair.wait_until("every connection delivering again on both sides",
                            lambda: not pair.stalled(0.5), 30)
            nf.log("traffic flows again %.2f s after the rule was removed" %
                   (time.monotonic() - t_heal))
            pair.stop()
        finally:
            pair.kill()
        nf.check_stream(ck, pair)
        nf.check_counts(ck, pair)
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=True)
