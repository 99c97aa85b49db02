#!/usr/bin/env python3
"""cross_connect: two processes connect to each other at once while the
fabric silently drops everything arriving at B (`iifname "fab" drop`, set
before they start), and keep one connection, as the Open MPI BTL does: the
connection the lower name made wins (rov_cross, tests/integration/cross.c).

A (name 1) gives its fabric connect up after the 250 ms connect timeout
and comes in on ethernet; B (name 2) waits longer on its own (its SYN-ACKs
are dropped; RAILOVER_CONNECT_TIMEOUT 2s), so its connection is still
connecting when A's arrives and loses the race while it holds B's first
sends.  Both phases: every message of both directions delivered once, in
order, and acknowledged, well before the kernel's SYN retries (127 s) end
a connect nobody times.

Phase `hand_over`: B hands what it sent on its connection to A's
(rov_conn_hand_over()).
Phase `close`: B closes its connection instead (rov_conn_close(), what the
BTL does with a connection that had connected): the close still times its
connect, moves to ethernet and delivers there.  Until stop 40 nothing timed
the connect of a connection closed before it was established, and the
sends on it waited for the SYN retries.
"""
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402

BOUND_S = 60   # a hang, not a timing: the bug waited for the SYN retries (127 s)
COUNT = 400


def phase(cross, wd, ck, name, close_only):
    d = wd.sub(name)
    with nf.Topology() as topo:
        topo.nft_add("B", "input", 'iifname "fab" counter drop', "drop all fabric input")
        procs = {}
        for side, me, them, rails, extra in (
                ("A", 1, 2, nf.RAILS_A, {}),
                ("B", 2, 1, nf.RAILS_B, {"RAILOVER_CONNECT_TIMEOUT": "2s"})):
            env = dict(os.environ, **nf.FAULT_ENV)
            env.update(extra, RAILOVER_RAILS=rails, RAILOVER_LOG="debug",
                       RAILOVER_RUN_DIR=d.file("run-" + side))
            os.mkdir(env["RAILOVER_RUN_DIR"], 0o700)
            argv = [cross, "--name", me, "--addr-file", d.file("addr%d" % me),
                    "--peer-file", d.file("addr%d" % them), "--count", COUNT,
                    "--timeout", BOUND_S] + (["--close-only"] if close_only else [])
            procs[side] = nf.Proc(side, topo.exec_argv(side, argv), env, d.file(side + ".out"),
                                  d.file(side + ".log"), None)
        results = {}
        for side, p in procs.items():
            rc = p.wait(BOUND_S + 20)
            with open(p.out_path) as f:
                line = f.read().strip()
            nf.log("%s: %s: exit %s: %s" % (name, side, rc, line))
            results[side] = dict(kv.split("=", 1) for kv in line.split()[1:]) if line else {}
            if rc != 0:
                with open(p.err_path) as f:
                    tail = f.read().splitlines()[-15:]
                ck.check(False, "%s: side %s exited %s (3: not done within %d s):\n  %s" %
                         (name, side, rc, BOUND_S, "\n  ".join(tail)))
        b = results.get("B", {})
        if close_only:
            ck.check(b.get("closed_own") == "1",
                     "%s: B did not lose the race with its own connection open (%s)" % (name, b))
        else:
            ck.check(b.get("handed_over") == "1",
                     "%s: B did not hand its connection's sends over (%s): the race went "
                     "another way" % (name, b))


def test():
    args = nf.common_args(__doc__.splitlines()[0])
    cross = os.path.join(os.path.dirname(args.rov_stream), "rov_cross")
    if not os.access(cross, os.X_OK):
        raise SystemExit("%s is not an executable (build first)" % cross)
    wd = nf.Workdir("cross_connect", args.keep)
    ck = nf.Checker()
    phase(cross, wd, ck, "hand_over", False)
    phase(cross, wd, ck, "close", True)
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=True)
