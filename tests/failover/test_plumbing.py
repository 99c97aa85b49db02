#!/usr/bin/env python3
"""Self-test of the harness itself (no failover engine needed).

Proves that what the fault tests rely on does what they think: namespaces and
veth pairs come up and are always removed (normal end, SIGTERM, and a SIGKILLed
run cleaned up by the next one); link down cuts the fabric and only the
fabric; the nftables drop, reject-with-reset and 4-tuple rules hit exactly
the traffic they name and are removed again; and rov_stream runs across the
two namespaces on both rails with every message verified.
"""
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import sys, time
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import netfault as nf
t = nf.Topology().create()
print("NAMES", t.a, t.b, flush=True)
time.sleep(120)
"""


def ns_exist(names):
    have = set(nf.netns_list())
    return [n for n in names if n in have]


def check_cleanup(ck):
    # A topology owner that gets SIGTERM removes its namespaces.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        p = subprocess.Popen([sys.executable, "-c", _CHILD, HERE], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        names = []
        for line in p.stdout:
            if line.startswith("NAMES "):
                names = line.split()[1:]
                break
        ck.check(len(names) == 2 and len(ns_exist(names)) == 2,
                 "child topology not created: %r %s" % (names, p.stderr.read()
                                                       if p.poll() is not None else ""))
        p.send_signal(sig)
        p.wait(20)
        left = ns_exist(names)
        if sig == signal.SIGTERM:
            ck.check(not left, "namespaces %s left after SIGTERM of their owner" % left)
        else:
            ck.check(len(left) == 2, "SIGKILLed owner: expected its namespaces to remain "
                     "until the next run, found %s" % left)
            nf.remove_stale_namespaces()
            left = ns_exist(names)
            ck.check(not left, "namespaces %s of a dead owner not removed by the next run" %
                     left)
        nf.log("cleanup after %s: ok" % signal.Signals(sig).name)


def check_faults(ck, topo):
    probe = nf.tcp_probe
    fab_srv = nf.tcp_echo_server(topo, "A", nf.FAB_A, 5000)
    eth_srv = nf.tcp_echo_server(topo, "A", nf.ETH_A, 5001)
    fab_srv_b = nf.tcp_echo_server(topo, "B", nf.FAB_B, 5002)

    def expect(what, got, want):
        ck.check(got in want, "%s: probe gave %s, expected %s" % (what, got, "/".join(want)))
        nf.log("  %s: %s" % (what, got))

    expect("fabric B->A", probe(topo, "B", nf.FAB_A, 5000), ["ok"])
    expect("ethernet B->A", probe(topo, "B", nf.ETH_A, 5001), ["ok"])
    expect("fabric A->B", probe(topo, "A", nf.FAB_B, 5002), ["ok"])

    # silent drop, both directions on A
    rules = topo.fabric_drop("A", "both")
    expect("fabric B->A with drop on A", probe(topo, "B", nf.FAB_A, 5000, timeout=1),
           ["timeout"])
    expect("fabric A->B with drop on A", probe(topo, "A", nf.FAB_B, 5002, timeout=1),
           ["timeout"])
    expect("ethernet B->A with fabric drop on A", probe(topo, "B", nf.ETH_A, 5001), ["ok"])
    cnt = topo.nft_counters("A")
    ck.check(all(cnt.get(r[2], 0) > 0 for r in rules),
             "drop rules counted no packets: %s" % cnt)
    topo.nft_remove(rules)
    expect("fabric B->A after removing the drop", probe(topo, "B", nf.FAB_A, 5000), ["ok"])

    # drop only on input of B: SYN reaches A, SYN-ACK is lost
    rules = topo.fabric_drop("B", "in")
    expect("fabric B->A with input drop on B", probe(topo, "B", nf.FAB_A, 5000, timeout=1),
           ["timeout"])
    topo.nft_remove(rules)

    # reject with tcp reset: input on A resets the peer; output on A resets A
    rules = topo.fabric_reset("A", "in")
    expect("fabric B->A with reset on A input", probe(topo, "B", nf.FAB_A, 5000),
           ["refused", "reset"])
    expect("ethernet B->A with fabric reset on A", probe(topo, "B", nf.ETH_A, 5001), ["ok"])
    topo.nft_remove(rules)
    rules = topo.fabric_reset("A", "out")
    expect("fabric A->B with reset on A output", probe(topo, "A", nf.FAB_B, 5002),
           ["refused", "reset"])
    topo.nft_remove(rules)
    expect("fabric A->B after removing the reset", probe(topo, "A", nf.FAB_B, 5002), ["ok"])

    # one 4-tuple only
    rules = topo.flow_drop("B", (nf.FAB_B, 40001), (nf.FAB_A, 5000))
    expect("the dropped 4-tuple", probe(topo, "B", nf.FAB_A, 5000, nf.FAB_B, 40001, timeout=1),
           ["timeout"])
    expect("another source port", probe(topo, "B", nf.FAB_A, 5000, nf.FAB_B, 40002), ["ok"])
    topo.nft_remove(rules)
    expect("the 4-tuple after removal",
           probe(topo, "B", nf.FAB_A, 5000, nf.FAB_B, 40003), ["ok"])
    ck.check(not topo.rules, "rules still tracked after removal: %s" % topo.rules)

    # link down on either end cuts the fabric only
    for side in ("A", "B"):
        topo.link_down(side, "fab")
        expect("fabric B->A with fab down on %s" % side,
               probe(topo, "B", nf.FAB_A, 5000, timeout=1), ["timeout", "unreachable"])
        expect("ethernet B->A with fab down on %s" % side,
               probe(topo, "B", nf.ETH_A, 5001), ["ok"])
        topo.link_up(side, "fab")
        topo.wait_reachable()
        expect("fabric B->A after fab up on %s" % side, probe(topo, "B", nf.FAB_A, 5000),
               ["ok"])
    for s in (fab_srv, eth_srv, fab_srv_b):
        s.stop()


def check_stream(ck, args, wd, topo):
    feats = nf.rov_stream_features(args.rov_stream)
    if "stop-file" in feats:
        pair = nf.StreamPair(args, wd, topo, conns=args.conns,
                             env={"RAILOVER_LOG": "info", "RAILOVER_FAILOVER": "off"})
        pair.start()
        time.sleep(1)
        for role in nf.SIDES:
            st = pair.status(role)
            ck.check(len(st["conns"]) == args.conns, "%s status shows %d connections, expected "
                     "%d" % (role, len(st["conns"]), args.conns))
            for c in st["conns"]:
                ck.check(c["rail"] == 0, "%s status: conn %s on rail %s, expected 0" %
                         (role, c.get("id"), c.get("rail")))
        pair.stop()
        nf.check_stream(ck, pair)
        nf.final_rails(ck, pair, 0)
        return
    # The rov_stream of before the failover work: one connection, --count,
    # forced switches between the two rails (fab and eth) from both sides.
    nf.log("rov_stream without --stop-file: single-connection run with forced switches")
    env = dict(os.environ, RAILOVER_LOG="warn")
    addr = wd.file("addr")
    common = ["--count", "30000", "--seed", str(args.seed), "--max-size", "65536",
              "--switch-every", "20", "--timeout", "120"]
    procs = {}
    for role, side, rails in (("listener", "A", nf.RAILS_A), ("connector", "B", nf.RAILS_B)):
        mode = "--listen" if role == "listener" else "--connect"
        argv = topo.exec_argv(side, [args.rov_stream, mode, addr] + common)
        procs[role] = nf.Proc(role, argv, dict(env, RAILOVER_RAILS=rails),
                              wd.file(role + ".out"), wd.file(role + ".log"), None)
        if role == "listener":
            deadline = time.monotonic() + 20
            while not os.path.exists(addr) and time.monotonic() < deadline:
                time.sleep(0.05)
    for role, p in procs.items():
        rc = p.wait(150)
        p.kill()
        res = nf.parse_results(p.stdout())["total"] or {}
        ck.check(rc == 0, "legacy stream %s exited %s\n%s" % (role, rc, p.tail()))
        ck.check(res.get("recv") == 30000 and res.get("switches", 0) > 0,
                 "legacy stream %s: recv=%s switches=%s, expected 30000 and > 0" %
                 (role, res.get("recv"), res.get("switches")))
        nf.log("legacy stream %s: rc %s, sent %s, recv %s, switches %s" %
               (role, rc, res.get("sent"), res.get("recv"), res.get("switches")))


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    wd = nf.Workdir("plumbing", args.keep)
    ck = nf.Checker()
    check_cleanup(ck)
    with nf.Topology() as topo:
        check_faults(ck, topo)
        check_stream(ck, args, wd, topo)
        names = list(topo.ns.values())
    ck.check(not ns_exist(names), "namespaces %s remain after the test" % ns_exist(names))
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=True)
