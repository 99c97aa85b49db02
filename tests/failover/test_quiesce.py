#!/usr/bin/env python3
"""quiesce: quiesce, close the rails and reopen one process under traffic.

Two namespace hosts, the connector's process driven through its control
socket (`railover ctl PID quiesce|close-rails|reopen|stage`), while every
connection streams checksummed messages both ways:
  - a close of the rails before the quiesce is refused with a clear error;
  - quiesce: the stage reaches `quiesced`; the listener's connections
    quiesce with it (its end markers came); no message flows on either side
    meanwhile; a second quiesce is harmless;
  - close-rails: the connector holds no socket of a rail (/proc/PID/fd:
    only its control socket, a Unix one) and no connection failed or moved
    on either side;
  - reopen: every connection reconnects (a switch with reason `reopen`
    here; the listener's connections stay on their rail) and delivers
    again both ways.
Zero loss, no duplicate, in order (rov_stream checks every message); every
switch counted once.  Then, each with a pair of its own:
  - preferred_gone: the connector's fabric link is down when it reopens:
    its connections reconnect on the next rail (Ethernet), and move back
    to the fabric once the link is up again;
  - both: both processes quiesce and close their rails (each then holds
    no rail socket), the listener reopens, then the connector: each rail
    listens on its previous port again, so the two find each other, and
    every connection delivers again, nothing lost;
  - computing: both processes in a compute phase that calls nothing of the
    library (rov_stream --compute-file): each is asked through its control
    socket to quiesce, close its rails and reopen (as ccp/ will ask every
    process of a job), and each stage completes all the same, by each
    process's progress helper (helper_passes > 0); when the compute phase
    ends, every message is delivered, in order, once;
  - peer_killed: the listener is stopped (SIGSTOP), the connector asked to
    quiesce, then the listener killed: every connection of the connector
    fails with a reason and the quiesce completes all the same (stage
    quiesced, failed=N); the connector lives on.
"""
import contextlib
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netfault as nf  # noqa: E402


def ctl(pair, role, verb, check=True):
    """`railover ctl PID verb`: (exit status, output)."""
    p = pair.procs[role]
    out = subprocess.run([pair.args.railover, "ctl", str(p.pid), verb], env=pair.env[role],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(pair.wd.file(role + ".ctl.txt"), "a") as f:
        f.write("# %d railover ctl %d %s (exit %d)\n%s" % (nf.now_ns(), p.pid, verb,
                                                           out.returncode, out.stdout))
    if check and out.returncode != 0:
        raise nf.Failure("railover ctl %d %s failed: %s" % (p.pid, verb, out.stdout))
    return out.returncode, out.stdout


def stage(pair, role):
    """The stage line's fields, e.g. {'stage': 'quiesced', 'quiesced': 3, ...}."""
    _, out = ctl(pair, role, "stage")
    for line in out.splitlines():
        if line.startswith("context stage="):
            return nf.parse_kv(line)
    raise nf.Failure("no stage line in: %r" % out)


def rail_sockets(pid):
    """Inodes of pid's sockets that are not Unix sockets (a rail's: TCP,
    UDP, netlink, ...), by /proc/PID/fd and /proc/PID/net/unix."""
    unix = set()
    with open("/proc/%d/net/unix" % pid) as f:
        next(f)
        for line in f:
            unix.add(line.split()[6])
    found = []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] not in unix:
            found.append("fd %s: %s" % (fd, target))
        if target.startswith("/dev/infiniband"):
            found.append("fd %s: %s" % (fd, target))
    return found


@contextlib.contextmanager
def streaming(args, wd, name, n, **kw):
    """A pair in two fresh namespace hosts, streaming on n connections."""
    with nf.Topology() as topo:
        pair = nf.StreamPair(args, wd.sub(name), topo, conns=n, **kw)
        try:
            pair.start()
            time.sleep(0.5)
            yield topo, pair
        finally:
            pair.kill()


def verified(ck, pair, final_rail=0):
    """Stop the pair; every message delivered once, in order; every switch
    counted once; every connection ended on final_rail (None: any)."""
    pair.stop()
    pair.kill()
    nf.check_stream(ck, pair)
    if final_rail is not None:
        nf.final_rails(ck, pair, final_rail)
    nf.check_counts(ck, pair)


def quiesce(pair, role):
    ctl(pair, role, "quiesce")
    pair.wait_until("the %s quiesced" % role,
                    lambda: stage(pair, role)["stage"] == "quiesced", 20)


def cycle(args, wd, ck, n):
    with streaming(args, wd, "cycle", n) as (topo, pair):
        time.sleep(0.5)
        pid = pair.procs["connector"].pid

        rc, out = ctl(pair, "connector", "close-rails", check=False)
        ck.check(rc != 0 and "not quiesced" in out,
                 "close-rails before a quiesce: expected a refusal naming the cause, got "
                 "exit %d: %s" % (rc, out.strip()))

        t0 = pair.mark("quiesce")
        quiesce(pair, "connector")
        pair.wait_until("the listener's connections quiesced with it",
                        lambda: stage(pair, "listener").get("quiesced") == n, 10)
        st = stage(pair, "listener")
        ck.check(st["stage"] == "running", "listener stage %s, expected running (only its "
                 "connections quiesce)" % st["stage"])
        _, out = ctl(pair, "connector", "quiesce")
        ck.check("stage=quiesced" in out, "a second quiesce: %s" % out.strip())
        time.sleep(0.5)
        rx0 = {r: pair.rx_totals(r) for r in nf.SIDES}
        time.sleep(1.5)
        rx1 = {r: pair.rx_totals(r) for r in nf.SIDES}
        for r in nf.SIDES:
            moved = {c: rx1[r].get(c, 0) - rx0[r].get(c, 0) for c in rx1[r]}
            ck.check(not any(moved.values()), "%s received messages while quiesced: %s" %
                     (r, moved))

        t1 = pair.mark("close-rails")
        _, out = ctl(pair, "connector", "close-rails")
        ck.check("stage=closed" in out, "close-rails: %s" % out.strip())
        left = rail_sockets(pid)
        ck.check(not left, "the connector still holds rail descriptors after close-rails: "
                 "%s" % left)
        nf.log("after close-rails the connector holds no rail socket (%d descriptors)" %
               len(os.listdir("/proc/%d/fd" % pid)))
        time.sleep(2.0)   # the listener's channels ended: no failover, no failure
        pair.check_alive("while the connector's rails were closed")
        for r in nf.SIDES:
            sw = pair.switches(r, since_ns=t0)
            ck.check(not sw, "%s moved while quiesced: %s" % (
                r, ["conn %s %s->%s %s" % (e.get("conn"), e.get("from"), e.get("to"),
                                           e.get("reason")) for e in sw]))
        ck.check(stage(pair, "listener").get("failed") == 0,
                 "a listener connection failed while the connector's rails were closed")

        t2 = pair.mark("reopen")
        ctl(pair, "connector", "reopen")
        pair.wait_until("the connector running again",
                        lambda: stage(pair, "connector")["stage"] == "running", 20)
        pair.wait_until("the listener's connections running again",
                        lambda: stage(pair, "listener").get("quiesced") == 0, 10)
        rx2 = {r: pair.rx_totals(r) for r in nf.SIDES}
        time.sleep(2.0)
        pair.wait_until("every connection delivering both ways after the reopen",
                        lambda: all(pair.rx_totals(r).get(c, 0) > rx2[r].get(c, 0)
                                    for r in nf.SIDES for c in range(n)), 20)
        for i in range(n):
            sw_c = pair.switches("connector", i, since_ns=t2)
            sw_l = pair.switches("listener", i, since_ns=t2)
            ck.check(any(e.get("reason") == "reopen" for e in sw_c),
                     "connector conn %d: no switch with reason reopen after the reopen: %s"
                     % (i, [e.get("reason") for e in sw_c]))
            # The listener moves only if the reconnect came on another rail.
            ck.check(all(e.get("reason") == "peer.reopen" for e in sw_l),
                     "listener conn %d: switches other than peer.reopen after the "
                     "reopen: %s" % (i, [e.get("reason") for e in sw_l]))
        nf.log("quiesced to closed in %.0f ms" % ((t1 - t0) / 1e6))
        time.sleep(0.5)
        verified(ck, pair)


def preferred_gone(args, wd, ck, n):
    with streaming(args, wd, "preferred_gone", n) as (topo, pair):
        quiesce(pair, "connector")
        ctl(pair, "connector", "close-rails")
        topo.link_down("B", "fab")
        t0 = pair.mark("reopen with the fabric down")
        ctl(pair, "connector", "reopen")
        pair.wait_until("the connector running again",
                        lambda: stage(pair, "connector")["stage"] == "running", 30)
        pair.wait_until("every connection on rail 1 on both sides",
                        lambda: pair.all_on(1), 20)
        for i in range(n):
            sw = pair.switches("connector", i, since_ns=t0)
            ck.check(sw and sw[-1].get("to") == 1,
                     "connector conn %d after the reopen: %s" % (
                         i, ["%s->%s %s" % (e.get("from"), e.get("to"), e.get("reason"))
                             for e in sw]))
        rx = {r: pair.rx_totals(r) for r in nf.SIDES}
        pair.wait_until("delivering both ways on the fallback",
                        lambda: all(pair.rx_totals(r).get(c, 0) > rx[r].get(c, 0)
                                    for r in nf.SIDES for c in range(n)), 20)
        topo.link_up("B", "fab")
        pair.wait_until("every connection back on rail 0 on both sides",
                        lambda: pair.all_on(0), 30)
        time.sleep(0.5)
        verified(ck, pair)


def both(args, wd, ck, n):
    with streaming(args, wd, "both", n) as (topo, pair):
        for role in ("connector", "listener"):
            quiesce(pair, role)
        for role in ("connector", "listener"):
            ctl(pair, role, "close-rails")
            left = rail_sockets(pair.procs[role].pid)
            ck.check(not left, "%s still holds rail descriptors after close-rails: %s" %
                     (role, left))
        time.sleep(0.5)
        rx = {r: pair.rx_totals(r) for r in nf.SIDES}
        t0 = pair.mark("reopen listener, then connector")
        ctl(pair, "listener", "reopen")
        time.sleep(0.3)   # its reconnects find the connector closed: they retry
        ctl(pair, "connector", "reopen")
        for role in nf.SIDES:
            pair.wait_until("the %s running again" % role,
                            lambda: stage(pair, role)["stage"] == "running", 20)
        pair.wait_until("every connection delivering both ways after both reopened",
                        lambda: all(pair.rx_totals(r).get(c, 0) > rx[r].get(c, 0)
                                    for r in nf.SIDES for c in range(n)), 20)
        nf.log("both reopened and delivering %.0f ms after the first reopen" %
               ((nf.now_ns() - t0) / 1e6))
        time.sleep(0.5)
        verified(ck, pair, None)


def computing(args, wd, ck, n):
    flag = wd.file("computing.flag")
    with streaming(args, wd, "computing", n, extra=["--compute-file", flag]) as (topo, pair):
        rx = {r: pair.rx_totals(r) for r in nf.SIDES}
        open(flag, "w").close()
        pair.wait_until("both computing (rov_stream says so)",
                        lambda: all(pair.log_count(r, "computing (no library call)") == 1
                                    for r in nf.SIDES), 10)
        t0 = pair.mark("both computing")
        for role in nf.SIDES:   # as ccp/ will: each process of the job quiesces
            ctl(pair, role, "quiesce")
        for role in nf.SIDES:
            pair.wait_until("the %s quiesced while computing" % role,
                            lambda: stage(pair, role)["stage"] == "quiesced", 20)
        t1 = pair.mark("both quiesced while computing")
        for role in nf.SIDES:
            _, out = ctl(pair, role, "close-rails")
            ck.check("stage=closed" in out, "%s close-rails while computing: %s" %
                     (role, out.strip()))
            left = rail_sockets(pair.procs[role].pid)
            ck.check(not left, "%s holds rail descriptors after close-rails: %s" % (role, left))
        ctl(pair, "listener", "reopen")
        ctl(pair, "connector", "reopen")
        for role in nf.SIDES:
            pair.wait_until("the %s running again (computing)" % role,
                            lambda: stage(pair, role)["stage"] == "running", 20)
        for role in nf.SIDES:
            st = stage(pair, role)
            ck.check(st.get("helper") == "on" and st.get("helper_passes", 0) > 0,
                     "%s: the progress helper did not run: %s" % (role, st))
            # Every stage above completed inside the one compute phase.
            ck.check(pair.log_count(role, "computed ") == 0,
                     "%s left its compute phase before the stages completed" % role)
        nf.log("both quiesced %.0f ms after the request, while computing" %
               ((t1 - t0) / 1e6))
        os.unlink(flag)
        pair.mark("computing over")
        pair.wait_until("both out of the compute phase",
                        lambda: all(pair.log_count(r, "computed ") == 1 for r in nf.SIDES), 10)
        pair.wait_until("every connection delivering both ways after the compute phase",
                        lambda: all(pair.rx_totals(r).get(c, 0) > rx[r].get(c, 0)
                                    for r in nf.SIDES for c in range(n)), 20)
        time.sleep(0.5)
        verified(ck, pair, None)


def peer_killed(args, wd, ck, n):
    with streaming(args, wd, "peer_killed", n, extra=["--linger", "30"]) as (topo, pair):
        lpid = pair.procs["listener"].pid
        os.kill(lpid, signal.SIGSTOP)
        pair.mark("listener stopped; quiesce")
        ctl(pair, "connector", "quiesce")
        time.sleep(0.5)
        st = stage(pair, "connector")
        ck.check(st["stage"] == "quiescing", "connector stage %s with its peer stopped, "
                 "expected quiescing" % st["stage"])
        pair.mark("listener killed")
        os.kill(lpid, signal.SIGKILL)
        pair.wait_until("the connector quiesced, its connections failed",
                        lambda: stage(pair, "connector")["stage"] == "quiesced", 30,
                        alive=False)
        st = stage(pair, "connector")
        ck.check(st.get("failed") == n, "connector: %s connections failed, expected %d" %
                 (st.get("failed"), n))
        ck.check(pair.procs["connector"].alive(), "the connector died with its peer")
        errs = [e for e in pair.events["connector"].poll() if e.get("ev") == "error"]
        ck.check(len(errs) == n and all(e.get("text") for e in errs),
                 "connector: %d error events (with reasons: %s), expected %d" %
                 (len(errs), [e.get("text") for e in errs], n))


SCENARIOS = {"cycle": cycle, "preferred_gone": preferred_gone, "both": both,
             "computing": computing, "peer_killed": peer_killed}


def test():
    args = nf.common_args(__doc__.splitlines()[0], extra=lambda ap: ap.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated subset, in order"))
    wd = nf.Workdir("quiesce", args.keep)
    ck = nf.Checker()
    for name in args.scenarios.split(","):
        nf.log("=== %s" % name)
        SCENARIOS[name](args, wd, ck, args.conns)
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
