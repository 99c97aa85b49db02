#!/usr/bin/env python3
"""ccp_cue: the checkpointer's signal cue (RAILOVER_CHECKPOINT_SIGNAL) with real processes.

Four rov_job ranks of one job, as test_ccp.py starts them (ranks 0 and 1 in
namespace host A, 2 and 3 in B, two TCP rails each, the registry in the
test's directory), every one with RAILOVER_CHECKPOINT_SIGNAL=USR2 (ccp/cue.c):
  - one: under traffic, SIGUSR2 to rank 1 alone: it drains and closes by
    itself (`railover status` says stage=closed cue=idle, its registry
    record stage=closed, it holds no socket but Unix ones and its network
    control endpoint's listener), receives and acknowledges nothing for a
    second while ranks 0, 2 and 3 exchange on among themselves; a second
    SIGUSR2: it reopens (stage=running) and messages from its peers reach
    it again; then the same for rank 0 (so that the connection between 0
    and 1 has been reopened from either side once);
  - computing: every rank in a compute phase that calls nothing of the
    library (rov_job --compute-file), SIGUSR2 to all four: each gets to
    closed (the progress helper does the work: the signal handler only
    counts it), holds no rail socket, its record says closed; a second
    SIGUSR2 to all: each is running again, and none left its compute phase
    meanwhile; then messages flow again;
  - each job ends with every message delivered once, in order, intact
    (rov_job result=ok);
  - bad: RAILOVER_CHECKPOINT_SIGNAL=KILL, STOP, SEGV, 0 and NOSUCH are
    refused when the configuration is read: rov_job exits 1 before it
    connects, its error naming the setting, the value and why.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ccp as tc  # noqa: E402
from test_ccp import nf  # noqa: E402

SIGNAL = "USR2"


class CueJob(tc.Job):
    """A test_ccp job whose ranks take SIGUSR2 as their cue."""

    def __init__(self, args, wd, topo, **kw):
        super().__init__(args, wd, topo, **kw)
        for r in tc.RANKS:
            self.env[r]["RAILOVER_CHECKPOINT_SIGNAL"] = SIGNAL

    def signal(self, ranks):
        self.mark("SIG%s to rank(s) %s" % (SIGNAL, ",".join(map(str, ranks))))
        for r in ranks:
            os.kill(self.procs[r].pid, getattr(signal, "SIG" + SIGNAL))

    def status(self, r):
        """{stage, cue, cue_signal} of rank r's `railover status` (its
        control socket)."""
        p = subprocess.run([self.args.railover, "status", str(self.procs[r].pid)],
                           env=self.client_env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=15)
        d = {}
        for k in ("stage", "cue", "cue_signal"):
            m = re.search(r" %s=(\S+)" % k, p.stdout)
            if m:
                d[k] = m.group(1)
        return d

    def wait_stage(self, ranks, stage, timeout):
        self.wait_until("rank(s) %s %s (railover status, the registry)" %
                        (",".join(map(str, ranks)), stage),
                        lambda: all(self.status(r).get("stage") == stage and
                                    self.status(r).get("cue") == "idle" and
                                    self.record(r).get("stage") == stage for r in ranks),
                        timeout, poll=0.2)


def ctl_port(job, r):
    """Rank r's network control endpoint's port, from its record."""
    return int(str(job.record(r)["ctl_net"]).rsplit(":", 1)[1])


def check_no_rails(ck, job, ranks):
    for r in ranks:
        stray = tc.stray_sockets(job.procs[r].pid, ctl_port(job, r))
        ck.check(not stray, "rank %d holds sockets while closed besides Unix ones and its "
                 "control listener: %s" % (r, stray))


def received(job, r):
    return job.counters(r).get("received", 0)


def one(args, wd, ck):
    with nf.Topology() as topo:
        job = CueJob(args, wd.sub("one"), topo, msgs=4000, rate=200)
        try:
            job.start()
            ck.check(job.status(1).get("cue_signal") == SIGNAL,
                     "rank 1's status does not show cue_signal=%s: %s" % (SIGNAL, job.status(1)))
            job.signal([1])
            job.wait_stage([1], "closed", 15)
            check_no_rails(ck, job, [1])
            for r in (0, 2, 3):
                ck.check(job.status(r).get("stage") == "running",
                         "rank %d is %s while only rank 1 was signalled" %
                         (r, job.status(r).get("stage")))
            # Rank 1 takes nothing in; the others exchange on among themselves.
            wall = time.time() + 0.2
            job.wait_until("progress lines after %.3f" % wall,
                           lambda: all(job.counters(r).get("t", 0) > wall for r in tc.RANKS),
                           5, quiet=True)
            before = {r: job.counters(r) for r in tc.RANKS}
            time.sleep(1.5)
            job.wait_until("a later progress line of every rank",
                           lambda: all(job.counters(r).get("t", 0) > before[r]["t"] + 1.2
                                       for r in tc.RANKS), 5, quiet=True)
            for k in ("received", "acked"):
                ck.check(job.counters(1).get(k) == before[1].get(k),
                         "rank 1 (closed) %s went from %s to %s" %
                         (k, before[1].get(k), job.counters(1).get(k)))
            for r in (0, 2, 3):
                ck.check(received(job, r) > before[r].get("received", 0),
                         "rank %d received nothing while only rank 1 was closed" % r)
            nf.log("rank 1 closed by its signal: it takes nothing in, ranks 0, 2, 3 exchange on")
            job.signal([1])
            job.wait_stage([1], "running", 20)
            since = received(job, 1)
            job.wait_until("messages reaching rank 1 again",
                           lambda: received(job, 1) > since, 20)
            # Then its peer, rank 0, alone: each connection between them
            # has now been reopened from either side once.
            job.signal([0])
            job.wait_stage([0], "closed", 15)
            job.signal([0])
            job.wait_stage([0], "running", 20)
            since = {r: received(job, r) for r in tc.RANKS}
            job.wait_until("messages reaching every rank after rank 0's reopen",
                           lambda: all(received(job, r) > since[r] for r in tc.RANKS), 20)
            job.verify(ck)
        finally:
            job.kill()


def computing(args, wd, ck):
    with nf.Topology() as topo:
        job = CueJob(args, wd.sub("computing"), topo, msgs=2000, rate=200, compute=True)
        try:
            job.start()
            tc.start_computing(job)
            job.signal(list(tc.RANKS))
            job.wait_stage(list(tc.RANKS), "closed", 20)
            check_no_rails(ck, job, tc.RANKS)
            job.signal(list(tc.RANKS))
            job.wait_stage(list(tc.RANKS), "running", 30)
            for r in tc.RANKS:
                ck.check(job.log_count(r, "computed ") == 0,
                         "rank %d left its compute phase before its cue was done" % r)
            nf.log("every rank closed and reopened by its signal while computing")
            tc.end_computing(job)
            job.verify(ck)
        finally:
            job.kill()


def bad(args, wd, ck):
    w = wd.sub("bad")
    _, _, base = tc.job_dirs(w)
    for value, why in (("KILL", "SIGKILL cannot be caught"), ("STOP", "SIGSTOP cannot be caught"),
                       ("SEGV", "SIGSEGV is raised by a fault"), ("0", "no signal 0"),
                       ("NOSUCH", "not a signal")):
        env = dict(base, RAILOVER_JOBID="bad-signal", RAILOVER_RANK="0",
                   RAILOVER_RAILS="tcp@127.0.0.1", RAILOVER_CHECKPOINT_SIGNAL=value)
        p = subprocess.run([args.rov_job, "--size", "2", "--msgs", "1", "--timeout", "10"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=30)
        want = "RAILOVER_CHECKPOINT_SIGNAL='%s': %s" % (value, why)
        ck.check(p.returncode == 1 and want in p.stderr,
                 "RAILOVER_CHECKPOINT_SIGNAL=%s: expected exit 1 and '%s' on stderr, got exit "
                 "%d:\n%s" % (value, want, p.returncode, p.stderr))
    nf.log("bad signals refused with the configuration")


SCENARIOS = {"one": one, "computing": computing, "bad": bad}


def test():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rov-job", default=os.path.join(root, "build", "tests", "ccp", "rov_job"))
    ap.add_argument("--cprclient", default=os.path.join(root, "build", "tools", "cprclient"))
    ap.add_argument("--railover", default=os.path.join(root, "build", "tools", "railover"))
    ap.add_argument("--keep", action="store_true", help="keep the log directory even on success")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="comma-separated subset, in order")
    args = ap.parse_args()
    for opt in ("rov_job", "cprclient", "railover"):
        path = os.path.abspath(getattr(args, opt))
        if not os.access(path, os.X_OK):
            raise SystemExit("test_cue.py: %s is not an executable (build first)" % path)
        setattr(args, opt, path)
    args.other_cprclient = args.cprclient   # (no scenario here acts as another user)
    names = args.scenarios.split(",")
    for name in names:
        if name not in SCENARIOS:
            raise SystemExit("test_cue.py: no scenario %r (have: %s)" %
                             (name, ", ".join(SCENARIOS)))
    tc.run_scenarios("ccp-cue", args, SCENARIOS, names)


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
