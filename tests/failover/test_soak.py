#!/usr/bin/env python3
"""soak: a thousand failover/failback cycles under traffic, zero loss.

Runs on loopback (no namespaces, no root): RAILOVER_RAILS=tcp@127.0.0.1,
tcp@127.0.0.2, with the library's own fault injection on rail 0 in both
processes (RAILOVER_FAULT=rail=0,mode=M,after=50,every=N, a different seed
per side) and a very short failback dwell and retry (5 ms, 1 ms .. 10 ms),
so connections fail over and back continuously.  Two phases, one process
pair each: mode=error (the channel fails with an error; 75% of the cycles),
then mode=silent (frames dropped both ways, found only by the
lack-of-progress timer: RAILOVER_FAILOVER_TIMEOUT=50ms, KEEPALIVE=20ms).

A cycle is a failover.* switch away from rail 0 followed by a failback
switch back to it, on the same connection, by either side (the follower's
peer.* switches are the same moves and are not counted); cycles are counted
from both sides' events files while the phase runs, and the phase ends
(stop file, graceful close) once it has its share of --cycles.

Claims per phase: zero loss (count cross-check per connection), no
duplicate and in order (rov_stream exit 0), every switch counted once
(events = switches= = sum of reasons=), and no direction of any connection
stuck (nothing delivered for 20 s, from the rate CSV: rov_stream's own
--stall only notices a process where nothing moves at all), and the cycling
never stops (no cycle completed for 120 s fails).  Connections may end on
rail 1 when a fault hit them at the close (printed).  Prints cycles/s and
totals; time is never asserted (only --budget, if given, bounds a run).
--long: 20000 cycles, for a hand-started run.

--bond: RAILOVER_BOND=on (messages from 1 KiB spread over both rails), the
listener's faults on rail 0 and the connector's on rail 1, so that every
rail fails; a cycle is then also a rail leaving a connection's bond and
joining it again (ROV_EVENT_CONN_BOND, counted per side), and the phase
ends once failover/failback and bond cycles together reach its share.
bench/README.md has the long run (`--bond --cycles 400000`).
"""
import math
import os
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402

BASE_ENV = {
    "RAILOVER_LOG": "warn",
    "RAILOVER_FAILOVER": "on",
    "RAILOVER_FAILBACK": "on",
    "RAILOVER_FAILBACK_DWELL": "5ms",
    "RAILOVER_FAILBACK_RETRY": "1ms",
    "RAILOVER_FAILBACK_RETRY_MAX": "10ms",
}
PHASE_ENV = {
    "error": dict(BASE_ENV, RAILOVER_FAILOVER_TIMEOUT="250ms", RAILOVER_KEEPALIVE="100ms"),
    "silent": dict(BASE_ENV, RAILOVER_FAILOVER_TIMEOUT="50ms", RAILOVER_KEEPALIVE="20ms"),
}
BOND_ENV = {"RAILOVER_BOND": "on", "RAILOVER_BOND_MIN": "1KiB"}
FAULT = "rail=%d,mode=%s,after=%d,every=%d,seed=%d"
STUCK_S = 20   # a direction of a connection delivering nothing this long is stuck
IDLE_S = 120   # no new cycle for this long: the cycling has stopped


def opts(ap):
    ap.add_argument("--cycles", type=int, default=None, help="cycles in all (default 1000)")
    ap.add_argument("--long", action="store_true", help="20000 cycles, longer budget")
    ap.add_argument("--budget", type=float, default=None,
                    help="give up after this many seconds in all (default: no limit; a phase "
                    "fails when no cycle completes for %d s)" % IDLE_S)
    ap.add_argument("--modes", default="error,silent",
                    help="fault modes, one phase each, in order (default error,silent)")
    ap.add_argument("--silent-share", type=float, default=0.25,
                    help="share of the cycles made with silent faults (default 0.25)")
    ap.add_argument("--every", type=int, default=200,
                    help="RAILOVER_FAULT every= (data frames on rail 0 per process between "
                    "faults, randomised in [N/2, 3N/2]; default 200: a fault soon after "
                    "most failbacks)")
    ap.add_argument("--max-size", type=int, default=4096,
                    help="rov_stream --max-size (default 4096: more cycles per second)")
    ap.add_argument("--bond", action="store_true",
                    help="bonded: faults on rail 0 (listener) and rail 1 (connector); bond "
                    "leave/rejoin cycles count too")
    ap.set_defaults(conns=4)


def phase(args, wd, ck, mode, target, budget=None):
    env = dict(PHASE_ENV[mode], **BOND_ENV) if args.bond else PHASE_ENV[mode]
    pair = nf.StreamPair(
        args, wd.sub(mode), None, conns=args.conns, env=env,
        env_l={"RAILOVER_FAULT": FAULT % (0, mode, 50, args.every, args.seed)},
        env_c={"RAILOVER_FAULT": FAULT % (1 if args.bond else 0, mode, 50, args.every,
                                          args.seed + 1)},
        rate_ms=500, timeout_s=int(budget) + 120 if budget else 0, stall_s=30,
        max_size=args.max_size)
    nf.log("%s phase: %d cycles wanted%s" % (mode, target,
                                             " within %.0f s" % budget if budget else ""))
    t0 = time.monotonic()
    tally = nf.CycleTally(pair, bond=args.bond)
    try:
        pair.start()
        last, seen, seen_t = 0, 0, t0
        while True:
            n = tally.update()
            now = time.monotonic()
            el = now - t0
            if n >= target:
                break
            if n != seen:
                seen, seen_t = n, now
            elif now - seen_t > IDLE_S:
                raise nf.Failure("%s phase: no failover/failback cycle completed for %d s (%d of "
                                 "%d so far)\n%s" % (mode, IDLE_S, n, target, pair.describe()))
            if budget and el > budget:
                raise nf.Failure("%s phase: only %d of %d cycles within the --budget of %.0f s"
                                 "\n%s" % (mode, n, target, budget, pair.describe()))
            if el - last >= 10:
                nf.log("%s phase: %d/%d cycles after %.0f s" % (mode, n, target, el))
                last = el
            pair.check_alive("during the %s phase" % mode)
            pair.check_flowing(STUCK_S)
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        pair.stop(timeout=120)
    finally:
        pair.kill()
    nf.check_stream(ck, pair)
    nf.check_counts(ck, pair)
    tally.update(final=True)
    per = [tally.of(i) for i in range(args.conns)]
    reasons = {}
    for role in nf.SIDES:
        for c in pair.results[role]["conns"].values():
            for k, v in c["reasons"].items():
                reasons[k] = reasons.get(k, 0) + v
    conns = [c for role in nf.SIDES for c in pair.results[role]["conns"].values()]
    msgs = sum((pair.results[role]["total"] or {}).get("recv", 0) or 0 for role in nf.SIDES)
    nf.log("%s phase: %d cycles (per connection %s) in %.1f s = %.2f cycles/s; %d messages "
           "verified, %d resent, %d duplicates dropped; reasons (both sides) %s" %
           (mode, sum(per), per, elapsed, sum(per) / elapsed, msgs,
            sum(c.get("resent", 0) or 0 for c in conns),
            sum(c.get("dups_dropped", 0) or 0 for c in conns), nf.fmt_reasons(reasons)))
    ck.check(any(k.startswith(nf.FAILOVER_PREFIX) for k in reasons),
             "%s phase: no failover.* reason at all: %s" % (mode, nf.fmt_reasons(reasons)))
    for role in nf.SIDES:
        for i in range(args.conns):
            c = pair.results[role]["conns"].get(i) or {}
            if c.get("rail") != 0:
                nf.log("note: %s conn %d ended on rail %s (a fault hit it at the close)" %
                       (role, i, c.get("rail")))
    return sum(per), msgs


def test():
    args = nf.common_args(__doc__.splitlines()[0], opts)
    total = args.cycles or (20000 if args.long else 1000)
    budget = args.budget
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in PHASE_ENV:
            raise SystemExit("test_soak.py: unknown mode %r (error, silent)" % m)
    if len(modes) > 1 and "silent" in modes:
        share = {m: (args.silent_share if m == "silent" else
                     (1 - args.silent_share) / (len(modes) - 1)) for m in modes}
    else:
        share = {m: 1.0 / len(modes) for m in modes}
    targets = {m: max(1, int(math.ceil(total * share[m]))) for m in modes}
    wd = nf.Workdir("soak", args.keep)
    ck = nf.Checker()
    t0 = time.monotonic()
    done, msgs = {}, 0
    for k, m in enumerate(modes):
        share_budget = None
        if budget:
            left = budget - (time.monotonic() - t0)
            share_budget = max(30, left * targets[m] / sum(targets[x] for x in modes[k:]))
        done[m], nm = phase(args, wd, ck, m, targets[m], share_budget)
        msgs += nm
    el = time.monotonic() - t0
    n = sum(done.values())
    nf.log("soak: %d %scycles (%s) in %.1f s (%.2f cycles/s including set-up), "
           "%d messages verified, target %d" %
           (n, "failover/failback and bond " if args.bond else "failover/failback ",
            ", ".join("%d %s" % (done[m], m) for m in modes), el, n / el, msgs, total))
    ck.check(n >= total, "only %d cycles, expected at least %d" % (n, total))
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=False)
