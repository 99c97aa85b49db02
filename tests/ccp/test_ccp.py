#!/usr/bin/env python3
"""ccp: a job's checkpoint stages (cprclient drain|close|checkpoint|reopen|status) under traffic.

Four rov_job ranks of one job (RAILOVER_JOBID a fresh uuid4): ranks 0 and 1
in namespace host A, 2 and 3 in B, each with two TCP rails (fabric first,
Ethernet second), its network control endpoint on its host's Ethernet
address (RAILOVER_CCP_ADDR) and the job registry in a directory of the test
(RAILOVER_JOB_DIR, mode 0700).  Every rank sends checksummed messages to
every other; cprclient runs in A (`ip netns exec`) with the same registry.
Each scenario has a job of its own:
  - traffic: with messages flowing, `list` names the job; `drain` answers
    every rank quiesced (and each rank's callback sees QUIESCED); for a
    second after it no message is received or acknowledged anywhere;
    `status` says quiesced; a second `drain` is done at once; `close`
    answers every rank closed, and then each rank holds no socket but Unix
    ones and its network control endpoint's listener (/proc/PID/fd against
    /proc/PID/net/*, in the rank's namespace); `reopen` answers every rank
    running (RESUMED seen); messages flow again, and every rank ends with
    every message delivered once, in order, intact (rov_job result=ok);
  - computing: every rank in a compute phase that calls nothing of the
    library (rov_job --compute-file): drain, close and reopen all complete
    meanwhile (no rank left its compute phase before); afterwards every
    rank ends with result=ok;
  - moved: after drain and close, the old data ports of ranks 0 and 2
    (both rails) are taken by listeners that never answer, so those ranks
    reopen at new ports; every other rank learns the new addresses from
    the registry (the records are rewritten at the reopen) and reconnects
    there, none of them waits out its connect at the old port, and every
    rank ends with result=ok;
  - checkpoint: every rank's RAILOVER_CHECKPOINT_CMD looks at the rank
    from outside (a probe: its own ancestors, the rank's sockets and
    control socket files) and images it with gcore into %d (core.<pid>;
    without gdb's gcore: copies of /proc/<pid>/maps, status, smaps_rollup
    named by the pid; CRIU is for the VM tier).  `checkpoint` while the job
    runs exits 4 and changes nothing (same control endpoints, no image, no
    checkpoint log, ckpt_count=0).  `cprclient JOBID` with no stage exits 0
    with the summaries drain, close, checkpoint, reopen, each status=ok;
    then each rank's image directory (<job dir>/images/rank.<r>) holds its
    image named by its pid, its ckpt.<r> says status 0, its ckpt.<r>.log
    starts "+ <the command, %p %r %j %d expanded>", its record says
    ckpt_count=1 ckpt_rc=0; the probe ran outside the rank's process tree
    and saw no TCP/UDP socket, no bound Unix socket and no control socket
    file of the rank; the ranks answer `status` at new control endpoints
    (port and socket), RESUMED is seen and messages flow again.  Then
    `checkpoint --suspend` while drained exits 4; after close it exits 0
    (stage=suspend, every rank stopped), every rank is in State T and stays
    there; images and records as above (ckpt_count=2); after SIGCONT
    `status` says closed, `reopen` running, messages flow, and every rank
    ends with result=ok;
  - died: rank 3's stage hook ends it as its drain begins (rov_job
    --die-at quiesce), inside cprclient's request: the drain exits 3 naming
    rank 3, and ranks 0-2, which had begun to drain, are resumed and
    exchange again;
  - bad: an unknown job id exits 2; `close` before a drain exits 4 and
    changes nothing; a second client (this test holding the job's lock)
    exits 6; cprclient run as another user (uid 65534) exits 7, with the
    registry closed to that user (mode 0700) and open to it (0711); forged
    requests on a rank's control endpoint (raw TCP: a malformed proof, a
    proof of the right form but the wrong key, a replay of a good proof
    on a new challenge, a good proof of another request) are refused with
    `error:` and the rank stays running; a record whose pid was changed by
    one character, and one truncated to half, make `status` exit 8; with
    a checkpoint command that fails on rank 2 only (`test %r != 2 || exit
    3`), `cprclient JOBID` (drain, close, checkpoint, reopen) exits 9, its
    stderr's last line naming rank 2 and the command as run, the
    checkpoint stage failed on rank 2 alone, the others ok, every rank
    reopened (status: running) and messages flow again; each ckpt.<r>.log
    starts with "+ <command>" and the records say ckpt_rc=3 for rank 2, 0
    for the others; a rank killed (SIGKILL) makes `drain` exit 3 naming
    it, and the other ranks are running.
Exit codes of cprclient: 0 ok, 2 unknown job, 3 rank dead or unreachable,
4 out of order, 5 timeout, 6 another client, 7 not the owner, 8 registry
tampered with, 9 a checkpoint command failed (the job is reopened), 64
usage, 1 other.
"""
import argparse
import fcntl
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "failover"))
import netfault as nf  # noqa: E402

RANKS = range(4)
SIDE = {0: "A", 1: "A", 2: "B", 3: "B"}
RAILS = {"A": nf.RAILS_A, "B": nf.RAILS_B}
ETH = {"A": nf.ETH_A, "B": nf.ETH_B}
OTHER_UID = 65534
CLIENT_TIMEOUT = 30     # cprclient --timeout of every stage
CKPT_CMD_TIMEOUT = 20   # RAILOVER_CHECKPOINT_TIMEOUT of the ranks with a command

# The network control endpoint's protocol (transport/control.c): a
# challenge line, then "auth <proof> <request>", the proof an HMAC-SHA256
# under the job's secret over "railover control request\0", the challenge's
# bytes and the request (_FORGE makes one to show that the refusals are
# for the proof alone).
CHALLENGE = "railover-control challenge "

# Runs inside namespace A: one connection per step to IP:PORT; prints a
# JSON list of {challenge, sent, answer}.
_FORGE = r"""
import hashlib, hmac, json, socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
key, steps = bytes.fromhex(sys.argv[3]), json.loads(sys.argv[4])
out, last = [], None
for step in steps:
    s = socket.create_connection((ip, port), timeout=5)
    f = s.makefile("rb")
    hello = f.readline().decode(errors="replace")
    if "mac" in step:
        nonce = bytes.fromhex(hello.split()[-1])
        mac = hmac.new(key, b"railover control request\0" + nonce + step["mac"].encode(),
                       hashlib.sha256).hexdigest()
        line = "auth %s %s" % (mac, step.get("request", step["mac"]))
    elif step.get("replay"):
        line = last
    else:
        line = step["send"]
    s.sendall(line.encode() + b"\n")
    s.shutdown(socket.SHUT_WR)
    answer = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            answer += d
    except OSError as e:
        answer += ("<%s>" % e).encode()
    s.close()
    out.append({"challenge": hello.strip(), "sent": line,
                "answer": answer.decode(errors="replace")})
    last = line
print(json.dumps(out))
"""


def parse_fields(line):
    """`rank=0 pid=12 ... status=some text` -> dict (numbers converted); the
    status is the rest of the line (an error text has spaces)."""
    head, sep, status = line.partition(" status=")
    d = {}
    for tok in head.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            if re.fullmatch(r"-?\d+", v):
                v = int(v)
            elif re.fullmatch(r"-?\d+\.\d*", v):
                v = float(v)
            d[k] = v
    if sep:
        d["status"] = status.strip()
    return d


class Answer:
    """cprclient's exit status and output, its per-rank lines parsed."""

    def __init__(self, words, rc, out, err):
        self.words, self.rc, self.out, self.err = words, rc, out, err
        # ranks and summary: the last stage's; stages: [(summary, ranks)] of
        # each stage run (with no stage given: drain, close, checkpoint, reopen)
        self.ranks, self.summary, self.stages = {}, None, []
        cur = {}
        for line in out.splitlines():
            if line.startswith("rank="):
                d = parse_fields(line)
                cur[d.get("rank")] = d
                self.ranks = cur
            elif line.startswith("stage="):
                self.summary = parse_fields(line)
                self.stages.append((self.summary, cur))
                cur = {}

    def __str__(self):
        return "cprclient %s: exit %d\n%s%s" % (" ".join(self.words), self.rc,
                                                self.out, self.err)


def job_dirs(wd):
    """A job's registry (mode 0700) and control run directory in the work
    directory wd, and the ranks' base environment (no RAILOVER_* of the
    caller's): (registry, run directory, environment)."""
    job_base = wd.file("jobs")
    os.mkdir(job_base, 0o700)
    run_dir = wd.file("run")
    if len(run_dir) < nf.RUN_DIR_MAX:
        os.mkdir(run_dir, 0o700)
    else:   # a control socket's path must fit sun_path
        run_dir = tempfile.mkdtemp(prefix="rov-run-")
        nf.at_cleanup(functools.partial(shutil.rmtree, run_dir, ignore_errors=True))
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAILOVER_")}
    base.update(nf.FAULT_ENV)
    base.update(RAILOVER_RUN_DIR=run_dir, RAILOVER_JOB_DIR=job_base)
    return job_base, run_dir, base


class Job:
    """Four rov_job ranks of one job in the namespace hosts of topo."""

    def __init__(self, args, wd, topo, msgs, rate=200, linger=0, timeout=150, compute=False,
                 extra=None):
        self.args, self.wd, self.topo, self.msgs = args, wd, topo, msgs
        self.extra = extra or {}   # {rank: more rov_job arguments}
        self.jobid = str(uuid.uuid4())
        self.job_base, run_dir, base = job_dirs(wd)
        self.job_dir = os.path.join(self.job_base, self.jobid)
        self.run_dir = run_dir
        self.client_env = dict(base)
        # Another user: no run directory of ours (it would refuse it anyway),
        # and a copy of cprclient (args.other_cprclient, copy_for_other()).
        self.other_env = {k: v for k, v in base.items() if k != "RAILOVER_RUN_DIR"}
        self.other_env["LD_LIBRARY_PATH"] = os.path.dirname(args.other_cprclient)
        self.env = {}
        for r in RANKS:
            e = dict(base)
            e.update(RAILOVER_JOBID=self.jobid, RAILOVER_RANK=str(r),
                     RAILOVER_RAILS=RAILS[SIDE[r]], RAILOVER_CCP_ADDR=ETH[SIDE[r]])
            self.env[r] = e
        self.compute = {r: wd.file("compute.%d" % r) for r in RANKS} if compute else {}
        self.common = ["--size", len(RANKS), "--msgs", msgs, "--rate", rate,
                       "--timeout", timeout, "--linger", linger]
        self.procs = {}

    def checkpoint_cmd(self, cmd):
        """Every rank's RAILOVER_CHECKPOINT_CMD (before start())."""
        for r in RANKS:
            self.env[r].update(RAILOVER_CHECKPOINT_CMD=cmd,
                               RAILOVER_CHECKPOINT_TIMEOUT="%ds" % CKPT_CMD_TIMEOUT)

    def set_file(self, s, name):
        """A file of checkpoint set s (ccp/sets.h)."""
        return os.path.join(self.job_dir, "sets", str(s), name)

    def image_dir(self, r, s):
        """Rank r's images in checkpoint set s (each rank is a unit of its own)."""
        return self.set_file(s, "unit.%d" % r)

    def expanded(self, tmpl, r, s):
        """The checkpoint command as rank r runs it in set s (ccp_expand():
        each substitution in single quotes for the shell)."""
        vals = {"p": str(self.procs[r].pid), "r": str(r), "j": self.jobid,
                "d": self.image_dir(r, s)}
        quote = lambda v: "'" + v.replace("'", "'\\''") + "'"  # noqa: E731
        return re.sub(r"%(.)", lambda m: quote(vals[m.group(1)]) if m.group(1) in vals
                      else m.group(1), tmpl)

    def record(self, r):
        """Rank r's registry record: {key: value} (numbers converted)."""
        d = {}
        with open(os.path.join(self.job_dir, "rank.%d" % r), errors="replace") as f:
            for line in f.read().splitlines():
                k, sep, v = line.partition("=")
                if sep:
                    d[k] = int(v) if re.fullmatch(r"-?\d+", v) else v
        return d

    def mark(self, label):
        with open(self.wd.file("marks.txt"), "a") as f:
            f.write("%d %.3f %s\n" % (nf.now_ns(), time.time(), label))
        nf.log("-- " + label)

    def start(self):
        for r in RANKS:
            a = list(self.common) + list(self.extra.get(r, []))
            if self.compute:
                a += ["--compute-file", self.compute[r]]
            argv = self.topo.exec_argv(SIDE[r], [self.args.rov_job] + [str(x) for x in a])
            with open(self.wd.file("commands.txt"), "a") as f:
                f.write("%s %s\n" % (" ".join("%s=%s" % (k, v) for k, v in
                                              sorted(self.env[r].items())
                                              if k.startswith("RAILOVER_")), " ".join(argv)))
            self.procs[r] = nf.Proc("rank%d" % r, argv, self.env[r], self.wd.file("rank%d.out" % r),
                                    self.wd.file("rank%d.log" % r), None)
        self.wait_until("every rank receiving from its peers",
                        lambda: all(self.counters(r).get("received", 0) > 0 for r in RANKS), 40)
        nf.log("job %s: 4 ranks streaming (logs in %s)" % (self.jobid, self.wd.path))

    def kill(self):
        for p in self.procs.values():
            p.kill()

    # -- observation -----------------------------------------------------------

    def lines(self, r):
        try:
            with open(self.procs[r].err_path, errors="replace") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def log_count(self, r, text):
        return sum(text in line for line in self.lines(r))

    def counters(self, r):
        """The rank's last progress line: {t, sent, acked, received, stage}."""
        last = {}
        for line in self.lines(r):
            if line.startswith("rank=") and " received=" in line and " event=" not in line:
                last = parse_fields(line)
        return last

    def check_alive(self, when="", ranks=RANKS):
        for r in ranks:
            p = self.procs[r]
            if p.poll() is not None:
                raise nf.Failure("rank %d exited early with status %s %s\n%s" %
                                 (r, p.rc, when, p.tail()))

    def describe(self):
        out = []
        for r in RANKS:
            p = self.procs.get(r)
            if p:
                out.append("rank %d (pid %d, %s):\n%s" % (
                    r, p.pid, "running" if p.alive() else "exit %s" % p.rc, p.tail(8)))
        return "\n".join(out)

    def wait_until(self, what, pred, timeout, poll=0.1, ranks=RANKS, quiet=False):
        if not quiet:
            nf.log("waiting (up to %gs): %s" % (timeout, what))
        t0 = time.monotonic()
        while not pred():
            self.check_alive("while waiting for: " + what, ranks)
            if time.monotonic() - t0 > timeout:
                raise nf.Failure("not within %gs: %s\n%s" % (timeout, what, self.describe()))
            time.sleep(poll)
        if not quiet:
            nf.log("  ok after %.2fs: %s" % (time.monotonic() - t0, what))

    # -- the client ------------------------------------------------------------

    def client(self, *words, timeout=CLIENT_TIMEOUT, other_user=False, env=None):
        """cprclient in namespace A (env: more of its environment): an Answer."""
        argv = [self.args.other_cprclient if other_user else self.args.cprclient]
        if words[0] != "list":
            argv += ["--timeout", str(timeout)]
        argv += list(words)
        if other_user:
            argv = ["setpriv", "--reuid=%d" % OTHER_UID, "--regid=%d" % OTHER_UID,
                    "--clear-groups"] + argv
        argv = self.topo.exec_argv("A", argv)
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, env=dict(self.other_env if other_user else self.client_env,
                                              **(env or {})),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            raise nf.Failure("cprclient %s did not exit within %d s (its --timeout is %d)" %
                             (" ".join(words), timeout + 30, timeout))
        ans = Answer(words, p.returncode, p.stdout, p.stderr)
        with open(self.wd.file("cprclient.txt"), "a") as f:
            f.write("# %d %s%s (%.3f s)\n%s\n" % (nf.now_ns(), "as uid %d: " % OTHER_UID
                                                 if other_user else "", ans,
                                                 time.monotonic() - t0, "-" * 40))
        nf.log("cprclient %s%s: exit %d%s" % (" ".join(words), " (uid %d)" % OTHER_UID
                                              if other_user else "", ans.rc,
                                              ": " + ans.err.strip() if ans.rc else ""))
        return ans

    def expect(self, ck, ans, rc, stage=None, ranks=RANKS):
        """Exit status rc; with stage, every rank of ranks there with status ok;
        a failure says why in one line `cprclient: ...` on stderr."""
        ok = ck.check(ans.rc == rc, "expected exit %d from %s" % (rc, ans))
        if rc != 0:
            errs = ans.err.strip().splitlines()
            ok &= ck.check(len(errs) >= 1 and errs[-1].startswith("cprclient: "),
                           "expected one line 'cprclient: <message>' on stderr: %s" % ans)
        if stage:
            for r in ranks:
                d = ans.ranks.get(r)
                ok &= ck.check(d is not None and d.get("stage") == stage and
                               d.get("status") == "ok",
                               "rank %d: expected stage=%s status=ok, got %s\n%s" %
                               (r, stage, d, ans))
                if d and self.procs.get(r):
                    ok &= ck.check(d.get("pid") == self.procs[r].pid,
                                   "rank %d: cprclient says pid %s, it is %d" %
                                   (r, d.get("pid"), self.procs[r].pid))
                if d:   # the network endpoint, on RAILOVER_CCP_ADDR
                    ok &= ck.check(str(d.get("ctl", "")).startswith(ETH[SIDE[r]] + ":"),
                                   "rank %d: control endpoint ctl=%s, expected %s:PORT" %
                                   (r, d.get("ctl"), ETH[SIDE[r]]))
        verb = ans.words[-1]
        if rc == 0 and verb in ("drain", "close", "reopen", "status"):
            s = ans.summary or {}
            ok &= ck.check(s.get("stage") == verb and s.get("ranks") == len(RANKS) and
                           s.get("status") == "ok",
                           "expected the summary line 'stage=%s ranks=%d ... status=ok': %s" %
                           (verb, len(RANKS), ans))
        return ok

    def ctl(self, r, ans):
        """Rank r's network control endpoint (IP, port), as cprclient printed it."""
        d = ans.ranks.get(r) or {}
        m = re.fullmatch(r"\[?([0-9a-fA-F.:]+?)\]?:(\d+)", str(d.get("ctl", "")))
        if not m:
            raise nf.Failure("no ctl=IP:PORT for rank %d in: %s" % (r, ans))
        return m.group(1), int(m.group(2))

    # -- the end -----------------------------------------------------------------

    def verify(self, ck, timeout=90):
        """Every rank ends with result=ok: each message delivered once, in
        order, intact, and acknowledged."""
        deadline = time.monotonic() + timeout
        for r in RANKS:
            p = self.procs[r]
            rc = p.wait(max(0.1, deadline - time.monotonic()))
            if rc is None:
                c = self.counters(r)
                p.kill()
                ck.check(False, "rank %d not done within %d s (last: %s)\n%s" %
                         (r, timeout, c, p.tail()))
                continue
            p.kill()
            res = {}
            for line in p.stdout().splitlines():
                if line.startswith("rank=") and "result=" in line:
                    res = parse_fields(line)
            n = self.msgs * (len(RANKS) - 1)
            ck.check(rc == 0 and res.get("result") == "ok" and res.get("sent") == n and
                     res.get("received") == n and
                     all(res.get(k) == 0 for k in ("bad", "lost", "dup", "ooo")),
                     "rank %d: exit %s, expected 0 with sent=received=%d and no bad, lost, "
                     "dup or ooo message: %s\n%s" % (r, rc, n, res, p.tail()))
        nf.log("every rank: %d messages to and from each peer, intact, once, in order" %
               self.msgs)


# ---- checks -------------------------------------------------------------------------

def proc_sockets(pid):
    """{inode: description} of the socket tables in pid's namespace, and
    the inodes of pid's descriptors that are sockets."""
    kinds = {}
    for table in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                next(f)
                for line in f:
                    x = line.split()
                    port = int(x[1].rsplit(":", 1)[1], 16)
                    kinds[x[9]] = (table, port, x[3])
        except OSError:
            pass
    for table, col in (("unix", 6), ("netlink", -1), ("packet", -1)):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                next(f)
                for line in f:
                    kinds[line.split()[col]] = (table, None, None)
        except OSError:
            pass
    fds = {}
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            fds[fd] = target[8:-1]
        elif target.startswith("/dev/infiniband"):
            fds[fd] = target
    return kinds, fds


def stray_sockets(pid, ctl_port):
    """What pid holds beyond Unix sockets and its control endpoint's
    listener (TCP, LISTEN, on ctl_port)."""
    kinds, fds = proc_sockets(pid)
    stray = []
    for fd, inode in sorted(fds.items(), key=lambda i: int(i[0])):
        table, port, state = kinds.get(inode, ("unknown", None, None))
        if table == "unix":
            continue
        if table in ("tcp", "tcp6") and state == "0A" and port == ctl_port:
            continue
        stray.append("fd %s: %s %s%s" % (fd, table, inode,
                                          "" if port is None else " port %d state %s" %
                                          (port, state)))
    return stray


def check_closed_sockets(ck, job, ans):
    """After `close`: no rank holds a socket of a rail (the connection a
    client just closed may take a moment to go)."""
    for r in RANKS:
        _, port = job.ctl(r, ans)
        pid = job.procs[r].pid
        deadline = time.monotonic() + 3
        while True:
            stray = stray_sockets(pid, port)
            if not stray or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        ck.check(not stray, "rank %d (pid %d) holds sockets after close besides Unix ones "
                 "and its control listener (port %d): %s" % (r, pid, port, stray))
    nf.log("after close no rank holds a socket but Unix ones and its control listener")


def flowing(job, since):
    """Whether every rank received messages after the counters `since`."""
    return all(job.counters(r).get("received", 0) > since[r].get("received", 0) for r in RANKS)


def flowing_from_now(job, timeout=20):
    """Wait until every rank received messages after now: more in a later
    progress line than in its first line printed from now on (a line
    printed before a stage's answer may count what came before it)."""
    wall = time.time()
    job.wait_until("a progress line of every rank after %.3f" % wall,
                   lambda: all(job.counters(r).get("t", 0) > wall for r in RANKS), 5,
                   poll=0.05, quiet=True)
    since = {r: job.counters(r) for r in RANKS}
    job.wait_until("messages flowing again on every rank", lambda: flowing(job, since),
                   timeout)


def check_still(ck, job, seconds=1.2):
    """Nothing received or acknowledged anywhere for `seconds`: between
    each rank's first progress line (about one a second) printed from now
    on and its first printed `seconds` later."""
    def line_after(r, wall):
        job.wait_until("a progress line of rank %d after %.3f" % (r, wall),
                       lambda: job.counters(r).get("t", 0) > wall, 3, poll=0.05, quiet=True)
        return job.counters(r)

    # From a moment after the stage's answer: the owners' progress has run
    # the callbacks of what the drain acknowledged.
    wall = time.time() + 0.2
    c0 = {r: line_after(r, wall) for r in RANKS}
    c1 = {r: line_after(r, c0[r]["t"] + seconds) for r in RANKS}
    for r in RANKS:
        for k in ("received", "acked"):
            ck.check(c1[r].get(k) == c0[r].get(k),
                     "rank %d: %s went from %s to %s between %.3f and %.3f, while the job was "
                     "drained" % (r, k, c0[r].get(k), c1[r].get(k), c0[r]["t"], c1[r]["t"]))
    nf.log("nothing received or acknowledged for %.1f s or more on any rank (%s)" %
           (seconds, ", ".join("%d: %d/%d" % (r, c1[r].get("received", -1),
                                              c1[r].get("acked", -1)) for r in RANKS)))


# ---- scenarios ------------------------------------------------------------------------

def traffic(args, wd, ck):
    with nf.Topology() as topo:
        job = Job(args, wd.sub("traffic"), topo, msgs=4000, rate=200)
        try:
            job.start()
            st = os.stat(job.job_dir)
            ck.check(st.st_mode & 0o777 == 0o700, "job directory %s has mode %o, expected 700" %
                     (job.job_dir, st.st_mode & 0o777))
            sec = os.path.join(job.job_dir, "secret")
            if os.path.exists(sec):
                ck.check(os.stat(sec).st_mode & 0o077 == 0,
                         "the job's secret %s is open to others (mode %o)" %
                         (sec, os.stat(sec).st_mode & 0o777))

            ans = job.client("list")
            ck.check(ans.rc == 0 and job.jobid in ans.out, "expected the job %s in: %s" %
                     (job.jobid, ans))

            job.mark("drain")
            job.expect(ck, job.client(job.jobid, "drain"), 0, "quiesced")
            job.wait_until("every rank's callback saw QUIESCED",
                           lambda: all(job.log_count(r, "event=quiesced") >= 1 for r in RANKS), 5)
            check_still(ck, job)
            job.expect(ck, job.client(job.jobid, "status"), 0, "quiesced")
            job.mark("drain again")
            job.expect(ck, job.client(job.jobid, "drain"), 0, "quiesced")

            job.mark("close")
            ans = job.client(job.jobid, "close")
            if job.expect(ck, ans, 0, "closed"):
                check_closed_sockets(ck, job, ans)
            check_still(ck, job)

            job.mark("reopen")
            before = {r: job.counters(r) for r in RANKS}
            job.expect(ck, job.client(job.jobid, "reopen"), 0, "running")
            job.wait_until("every rank's callback saw RESUMED",
                           lambda: all(job.log_count(r, "event=resumed") >= 1 for r in RANKS), 10)
            job.wait_until("messages flowing again on every rank",
                           lambda: flowing(job, before), 20)
            job.mark("verify")
            job.verify(ck)
        finally:
            job.kill()


def start_computing(job):
    """Every rank of job (compute=True) in its compute phase: no library call."""
    for r in RANKS:
        open(job.compute[r], "w").close()
    job.wait_until("every rank computing (no library call)",
                   lambda: all(job.log_count(r, "computing (no library call)") == 1
                               for r in RANKS), 10)


def end_computing(job):
    """Every rank out of its compute phase, and messages flowing again."""
    before = {r: job.counters(r) for r in RANKS}
    for r in RANKS:
        os.unlink(job.compute[r])
    job.wait_until("every rank out of its compute phase",
                   lambda: all(job.log_count(r, "computed ") == 1 for r in RANKS), 10)
    job.wait_until("messages flowing again on every rank", lambda: flowing(job, before), 20)


def computing(args, wd, ck):
    with nf.Topology() as topo:
        job = Job(args, wd.sub("computing"), topo, msgs=2000, rate=200, compute=True)
        try:
            job.start()
            start_computing(job)
            job.mark("every rank computing: drain")
            job.expect(ck, job.client(job.jobid, "drain"), 0, "quiesced")
            job.mark("close")
            ans = job.client(job.jobid, "close")
            if job.expect(ck, ans, 0, "closed"):
                check_closed_sockets(ck, job, ans)
            job.mark("reopen")
            job.expect(ck, job.client(job.jobid, "reopen"), 0, "running")
            for r in RANKS:
                ck.check(job.log_count(r, "computed ") == 0,
                         "rank %d left its compute phase before the stages completed" % r)
            job.mark("compute phase over")
            end_computing(job)
            job.verify(ck)
        finally:
            job.kill()


def data_ports(pid, ctl_port):
    """The TCP ports pid listens on besides its control endpoint: its rails'."""
    kinds, fds = proc_sockets(pid)
    out = set()
    for inode in fds.values():
        table, port, state = kinds.get(inode, (None, None, None))
        if table in ("tcp", "tcp6") and state == "0A" and port != ctl_port:
            out.add(port)
    return sorted(out)


# Runs in a namespace: listen on each IP:PORT given and never accept, so
# that a connect there succeeds and its handshake never comes.
_SQUAT = r"""
import socket, sys, time
socks = []
for ipport in sys.argv[1:]:
    ip, port = ipport.rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, int(port)))
    s.listen(64)
    socks.append(s)
print("squatting", flush=True)
time.sleep(600)
"""


def moved(args, wd, ck):
    with nf.Topology() as topo:
        job = Job(args, wd.sub("moved"), topo, msgs=3000, rate=200)
        squatters = []
        try:
            job.start()
            ans = job.client(job.jobid, "status")
            job.expect(ck, ans, 0, "running")
            old = {r: data_ports(job.procs[r].pid, job.ctl(r, ans)[1]) for r in (0, 2)}
            ck.check(all(old.values()), "no data listener found for ranks 0 and 2: %s" % old)
            job.expect(ck, job.client(job.jobid, "drain"), 0, "quiesced")
            job.expect(ck, job.client(job.jobid, "close"), 0, "closed")
            for r in (0, 2):
                side = SIDE[r]
                addrs = ["%s:%d" % (ip, port) for port in old[r]
                         for ip in (nf.Topology.DEVS["fab"][0 if side == "A" else 1],
                                    ETH[side])]
                p = subprocess.Popen(topo.exec_argv(side, [sys.executable, "-c", _SQUAT] +
                                                    addrs), stdout=subprocess.PIPE, text=True)
                squatters.append(p)
                ck.check(p.stdout.readline().strip() == "squatting",
                         "cannot take rank %d's old ports %s" % (r, addrs))
            job.mark("reopen with the old ports of ranks 0 and 2 taken")
            before = {r: job.counters(r) for r in RANKS}
            t0 = time.monotonic()
            job.expect(ck, job.client(job.jobid, "reopen"), 0, "running")
            took = time.monotonic() - t0
            ans = job.client(job.jobid, "status")
            for r in (0, 2):
                now = data_ports(job.procs[r].pid, job.ctl(r, ans)[1])
                ck.check(now and not set(now) & set(old[r]),
                         "rank %d listens on %s after the reopen, its old ports were %s" %
                         (r, now, old[r]))
            moved_to = sum(job.log_count(r, "at a new address (registry)") for r in RANKS)
            ck.check(moved_to > 0, "no rank reconnected to an address read from the registry")
            # A connect left at a squatter would wait for the handshake's
            # timeout (RAILOVER_CONNECT_TIMEOUT, seconds): the registry's
            # address replaces it within a look (200 ms) of the reopen.
            nf.log("reopen with moved ports: %.2f s; %d reconnect(s) to a registry address" %
                   (took, moved_to))
            job.wait_until("messages flowing again on every rank",
                           lambda: flowing(job, before), 20)
            job.verify(ck)
        finally:
            for p in squatters:
                p.kill()
            job.kill()


def forge(job, r, ip, port, steps):
    """Requests on rank r's control endpoint from namespace A, one
    connection per step (see _FORGE)."""
    try:
        with open(os.path.join(job.job_dir, "secret")) as f:
            key = f.read().strip()
    except OSError as e:
        raise nf.Failure("cannot read the job's secret to make the proofs: %s" % e)
    out = job.topo.run("A", sys.executable, "-c", _FORGE, ip, port, key, json.dumps(steps),
                       check=False)
    with open(job.wd.file("forged.txt"), "a") as f:
        f.write("# rank %d %s:%d\n%s\n" % (r, ip, port, out))
    try:
        return json.loads(out)
    except ValueError:
        raise nf.Failure("the forged requests to rank %d at %s:%d gave no answer: %r" %
                         (r, ip, port, out))


def bad(args, wd, ck):
    with nf.Topology() as topo:
        job = Job(args, wd.sub("bad"), topo, msgs=1000000, rate=100, linger=120, timeout=600)
        job.checkpoint_cmd(CKPT_FAIL_CMD)
        try:
            job.start()
            ans = job.client(job.jobid, "status")
            job.expect(ck, ans, 0, "running")

            job.mark("unknown job id")
            job.expect(ck, job.client(str(uuid.uuid4()), "status"), 2)

            job.mark("close before a drain")
            job.expect(ck, job.client(job.jobid, "close"), 4)
            job.expect(ck, job.client(job.jobid, "status"), 0, "running")

            job.mark("another client holds the lock")
            fd = os.open(os.path.join(job.job_dir, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                job.expect(ck, job.client(job.jobid, "drain"), 6)
            finally:
                os.close(fd)
            job.expect(ck, job.client(job.jobid, "status"), 0, "running")

            other_user(job, ck)
            forged(job, ck, ans)
            tampered(job, ck)
            ckpt_failed(job, ck)

            job.mark("rank 3 killed, then drain")
            os.kill(job.procs[3].pid, signal.SIGKILL)
            job.procs[3].wait(5)
            ans = job.client(job.jobid, "drain")
            if job.expect(ck, ans, 3):
                ck.check(re.search(r"rank[ =]3\b", ans.err),
                         "the error does not name rank 3: %s" % ans.err.strip())
            ans = job.client(job.jobid, "status")
            job.expect(ck, ans, 3, "running", ranks=(0, 1, 2))
            job.check_alive("after the drain with rank 3 dead", ranks=(0, 1, 2))
        finally:
            job.kill()


def died(args, wd, ck):
    """Rank 3 dies (its stage hook exits) as its drain begins, inside
    cprclient's request: the drain fails naming rank 3 (exit 3), and the
    other ranks, which had begun to drain, are resumed and run on."""
    with nf.Topology() as topo:
        job = Job(args, wd.sub("died"), topo, msgs=1000000, rate=100, linger=120, timeout=600,
                  extra={3: ["--die-at", "quiesce"]})
        try:
            job.start()
            job.mark("drain; rank 3 dies as its drain begins")
            ans = job.client(job.jobid, "drain")
            if job.expect(ck, ans, 3):
                ck.check(re.search(r"rank[ =]3\b", ans.err),
                         "the error does not name rank 3: %s" % ans.err.strip())
            job.procs[3].wait(5)
            ck.check(job.procs[3].rc == 3 and job.log_count(3, "dying as quiesce begins") == 1,
                     "rank 3 did not die in its stage hook (exit %s)" % job.procs[3].rc)
            ans = job.client(job.jobid, "status")
            job.expect(ck, ans, 3, "running", ranks=(0, 1, 2))
            before = {r: job.counters(r) for r in (0, 1, 2)}
            job.wait_until("ranks 0-2 exchanging again after the undone drain",
                           lambda: all(job.counters(r).get("received", 0) >
                                       before[r].get("received", 0) for r in (0, 1)), 20,
                           ranks=(0, 1, 2))
            job.check_alive("after the undone drain", ranks=(0, 1, 2))
        finally:
            job.kill()


def other_user(job, ck):
    """cprclient as uid 65534: the job is not theirs (exit 7), whether or
    not they can reach the registry's directory; nothing changes."""
    job.mark("cprclient as uid %d, registry mode 0700" % OTHER_UID)
    ans = job.client(job.jobid, "drain", other_user=True)
    if ans.rc in (126, 127) or "setpriv" in ans.err:
        raise nf.Failure("cannot run %s as uid %d: %s" % (job.args.cprclient, OTHER_UID, ans))
    job.expect(ck, ans, 7)
    # Open the way to the registry (not the job's own directory): the
    # secret itself must keep them out.
    dirs = []
    d = job.job_base
    while d not in ("/", "/tmp") and len(dirs) < 4:
        dirs.append((d, os.stat(d).st_mode & 0o777))
        d = os.path.dirname(d)
    try:
        for d, mode in dirs:
            os.chmod(d, mode | 0o011)
        job.mark("cprclient as uid %d, registry mode 0711" % OTHER_UID)
        job.expect(ck, job.client(job.jobid, "drain", other_user=True), 7)
        job.expect(ck, job.client(job.jobid, "status", other_user=True), 7)
    finally:
        for d, mode in dirs:
            os.chmod(d, mode)
    job.expect(ck, job.client(job.jobid, "status"), 0, "running")


def forged(job, ck, ans):
    """Requests without the job's proof on rank 2's network control
    endpoint (from host A, as any host could): each refused with error:."""
    ip, port = job.ctl(2, ans)
    job.mark("forged requests to rank 2 at %s:%d" % (ip, port))
    steps = [
        {"send": "auth 00 quiesce"},                          # malformed proof
        {"send": "auth %s quiesce" % ("00" * 32)},            # the form, not the key
        {"send": "quiesce"},                                  # no proof at all
        {"mac": "stage"},                                     # good: the test's own proof
        {"replay": True},                                     # that line on a new challenge
        {"mac": "stage", "request": "quiesce"},               # a proof of another request
    ]
    res = forge(job, 2, ip, port, steps)
    ck.check(len(res) == len(steps), "forged requests: %d answers for %d" %
             (len(res), len(steps)))
    for i, (step, r) in enumerate(zip(steps, res)):
        ck.check(r["challenge"].startswith(CHALLENGE),
                 "rank 2's endpoint did not open with a challenge: %r" % r["challenge"])
        if "mac" in step and "request" not in step:
            # The control: a proof made with the secret, the way control.c
            # checks it, is taken (else the refusals below prove nothing).
            ck.check("stage=running" in r["answer"] and
                     r["answer"].rstrip().endswith("ok"),
                     "a good proof was not taken (does this test still compute the proof as "
                     "transport/control.c does?): %r" % r["answer"])
            continue
        lines = r["answer"].strip().splitlines()
        ck.check(len(lines) >= 1 and lines[0].startswith("error:") and
                 not any(l.strip() == "ok" for l in lines),
                 "forged request %r: expected a refusal 'error: ...', got %r" %
                 (r["sent"][:90], r["answer"]))
    job.expect(ck, job.client(job.jobid, "status"), 0, "running")


def tampered(job, ck):
    """A record changed by one character, or cut short, is refused as a whole."""
    for r, how in ((1, "pid"), (2, "truncated")):
        path = os.path.join(job.job_dir, "rank.%d" % r)
        if not os.path.exists(path):
            raise nf.Failure("no record %s (found: %s)" % (path, sorted(os.listdir(job.job_dir))))
        shutil.copy2(path, job.wd.file("rank.%d.saved" % r))
        with open(path, "rb") as f:
            orig = f.read()
        if how == "pid":
            m = re.search(rb"(?m)^pid=(\d+)$", orig)
            if not m:
                raise nf.Failure("no pid= line in the record %s: %r" % (path, orig))
            i = m.end(1) - 1
            digit = b"%d" % ((orig[i] - ord("0") + 1) % 10)
            data = orig[:i] + digit + orig[i + 1:]
            what = "rank %d's record with pid %s instead of %s" % (
                r, data[m.start(1):m.end(1)].decode(), m.group(1).decode())
        else:
            data = orig[:len(orig) // 2]
            what = "rank %d's record cut to %d of %d bytes" % (r, len(data), len(orig))
        job.mark(what)
        try:
            with open(path, "wb") as f:
                f.write(data)
            job.expect(ck, job.client(job.jobid, "status"), 8)
        finally:
            with open(path, "wb") as f:
                f.write(orig)
        job.expect(ck, job.client(job.jobid, "status"), 0, "running")


def ckpt_failed(job, ck):
    """The checkpoint command fails on rank 2 only (RAILOVER_CHECKPOINT_CMD
    CKPT_FAIL_CMD): the full cycle exits 9 naming rank 2 and the command,
    the job is reopened and runs on."""
    job.mark("drain, close, checkpoint (rank 2's command fails), reopen")
    ans = job.client(job.jobid)
    if job.expect(ck, ans, 9, "running"):
        last = ans.err.strip().splitlines()[-1]
        cmd2 = job.expanded(CKPT_FAIL_CMD, 2, 1)
        ck.check(re.search(r"rank[ =]2\b", last) and cmd2 in last,
                 "stderr's last line does not name rank 2 and its command %r: %r" % (cmd2, last))
    stages = [(sm.get("stage"), sm.get("status")) for sm, _ in ans.stages]
    ck.check([st for st, _ in stages] == ["drain", "close", "checkpoint", "reopen"] and
             [x == "ok" for _, x in stages] == [True, True, False, True],
             "expected drain, close, reopen ok and checkpoint failed: %s\n%s" % (stages, ans))
    for sm, ranks in ans.stages:
        if sm.get("stage") == "checkpoint":
            for r in RANKS:
                d = ranks.get(r) or {}
                ck.check((d.get("status") == "ok") == (r != 2),
                         "checkpoint stage, rank %d: expected status=%s, got %s" %
                         (r, "ok" if r != 2 else "<error>", d))
    ck.check(not os.path.exists(job.set_file(1, "manifest")),
             "a set whose checkpoint failed on a rank has a manifest: %s" %
             job.set_file(1, "manifest"))
    ans = job.client(job.jobid, "status")
    job.expect(ck, ans, 0, "running")
    ck.check(re.search(r"(?m)^set=1 incomplete", ans.out),
             "cprclient status does not list set 1 as incomplete: %s" % ans)
    for r in RANKS:
        log = job.set_file(1, "unit.%d.log" % r)
        try:
            with open(log, errors="replace") as f:
                first = f.readline().rstrip("\n")
            with open(job.set_file(1, "status.%d" % r)) as f:
                rc = int(f.read().split()[1])  # (set, exit status, milliseconds)
            rec = job.record(r)
        except (OSError, ValueError, IndexError) as e:
            ck.check(False, "rank %d: no checkpoint log, status or record: %s" % (r, e))
            continue
        ck.check(first == "+ " + job.expanded(CKPT_FAIL_CMD, r, 1),
                 "%s: first line %r, expected '+ %s'" % (log, first,
                                                        job.expanded(CKPT_FAIL_CMD, r, 1)))
        want = 3 if r == 2 else 0
        ck.check(rc == want and rec.get("ckpt_rc") == want and rec.get("ckpt_count") == 1,
                 "rank %d: checkpoint status file says %s, record ckpt_rc=%s ckpt_count=%s; "
                 "expected %d, %d, 1" % (r, rc, rec.get("ckpt_rc"), rec.get("ckpt_count"),
                                         want, want))
    flowing_from_now(job)


# The imaging side of the checkpoint command: before the imager, this
# looks at the rank (argv: pid, image directory, run directory) from
# outside and appends what it saw to <image dir>/probe.jsonl: its own
# ancestors (the rank must not be one), the rank's TCP/UDP sockets and its
# Unix sockets bound to a path, and the control socket files of its pid in
# the run directory.
_PROBE = r"""
import glob, json, os, sys
pid, out, run_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def status(p):
    with open("/proc/%d/status" % p) as f:
        return dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
inodes = set()
for fd in os.listdir("/proc/%d/fd" % pid):
    try:
        t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
    except OSError:
        continue
    if t.startswith("socket:["):
        inodes.add(t[8:-1])
inet, unix = [], []
for table in ("tcp", "tcp6", "udp", "udp6"):
    with open("/proc/%d/net/%s" % (pid, table)) as f:
        for l in list(f)[1:]:
            x = l.split()
            if x[9] in inodes:
                inet.append([table, int(x[1].rsplit(":", 1)[1], 16), x[3]])
with open("/proc/%d/net/unix" % pid) as f:
    for l in list(f)[1:]:
        x = l.split()
        if x[6] in inodes and len(x) > 7:
            unix.append(x[7])
anc, p = [], os.getppid()
while p > 1 and len(anc) < 64:
    anc.append(p)
    p = int(status(p)["PPid"])
res = {"pid": pid, "ancestors": anc, "inet": inet, "unix_bound": unix,
       "sock_files": sorted(glob.glob(os.path.join(run_dir, "%d.*.sock" % pid))),
       "state": status(pid)["State"].strip()}
with open(os.path.join(out, "probe.jsonl"), "a") as f:
    f.write(json.dumps(res) + "\n")
"""

# A command that fails on rank 2 only (scenario bad).
CKPT_FAIL_CMD = "test %r != 2 || exit 3"


class Imager:
    """RAILOVER_CHECKPOINT_CMD of scenario checkpoint: _PROBE, then a core
    image of the rank by gcore (gdb) into %d, core.<pid>; without gcore,
    copies of the rank's /proc maps, status and smaps_rollup (named by its
    pid) and 0.2 s of sleep.  CRIU does not run on every host's kernel; the
    VM tier tests it."""

    def __init__(self, job):
        self.job = job
        self.probe = job.wd.file("probe.py")
        with open(self.probe, "w") as f:
            f.write(_PROBE)
        self.gcore = shutil.which("gcore")
        # A core of an AddressSanitizer process would hold its terabytes of
        # shadow mappings: not under ASan.
        ldd = subprocess.run(["ldd", job.args.rov_job], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout
        if "libasan" in ldd:
            self.gcore = None
        look = "%s %s %%p %%d %s" % (sys.executable, self.probe, job.run_dir)
        if self.gcore:
            self.cmd = "%s && %s -o %%d/core %%p" % (look, self.gcore)
        else:
            self.cmd = ("%s && for f in maps status smaps_rollup; do cat /proc/%%p/$f > "
                        "%%d/$f.%%p || exit; done && sleep 0.2" % look)
        if len(self.cmd) > 255:
            raise nf.Failure("checkpoint command longer than RAILOVER_CHECKPOINT_CMD takes "
                             "(255): %s" % self.cmd)
        job.checkpoint_cmd(self.cmd)
        nf.log("checkpoint command: %s" % self.cmd)

    def images(self, r):
        """What rank r's image directory should hold: {name: check(bytes) -> why|None}."""
        pid = self.job.procs[r].pid
        if self.gcore:
            def core(data):
                if data[:4] != b"\x7fELF" or int.from_bytes(data[16:18], "little") != 4:
                    return "not an ELF core file (%r...)" % data[:18]
            return {"core.%d" % pid: core}
        return {"maps.%d" % pid: lambda d: None if d.strip() else "empty",
                "status.%d" % pid: lambda d: None if re.search(rb"(?m)^Pid:\s*%d$" % pid, d)
                else "no 'Pid: %d' line" % pid,
                "smaps_rollup.%d" % pid: lambda d: None if b"Rss:" in d else "no Rss: line"}

    def check(self, ck, r, count, old_port):
        """After checkpoint number `count` (set `count`): rank r's images, its
        log and status file, its record, the set's manifest, and what _PROBE
        saw while it ran."""
        job, pid = self.job, self.job.procs[r].pid
        d = job.image_dir(r, count)
        for name, check in self.images(r).items():
            try:
                with open(os.path.join(d, name), "rb") as f:
                    why = check(f.read())
            except OSError as e:
                why = str(e)
            ck.check(why is None, "rank %d: image %s/%s: %s (found: %s)" %
                     (r, d, name, why, sorted(os.listdir(d)) if os.path.isdir(d) else "-"))
        log = job.set_file(count, "unit.%d.log" % r)
        want = "+ " + job.expanded(self.cmd, r, count)
        try:
            with open(log, errors="replace") as f:
                first = f.readline().rstrip("\n")
            with open(job.set_file(count, "status.%d" % r)) as f:
                status = f.read().split()
            with open(job.set_file(count, "manifest")) as f:
                manifest = f.read()
        except OSError as e:
            first, status, manifest = str(e), [], ""
        ck.check(first == want, "%s: first line %r, expected %r" % (log, first, want))
        ck.check(status[:2] == [str(count), "0"],
                 "rank %d: checkpoint status file %s, expected '%d 0 MS' (set, exit status, "
                 "milliseconds)" % (r, status, count))
        ck.check(re.search(r"(?m)^rank=%d pid=%d tree=%d unit=%d " % (r, pid, pid, r), manifest),
                 "set %d's manifest has no line for rank %d (pid %d, its own unit): %s" %
                 (count, r, pid, manifest))
        rec = job.record(r)
        ck.check(rec.get("ckpt_count") == count and rec.get("ckpt_rc") == 0,
                 "rank %d: record ckpt_count=%s ckpt_rc=%s, expected %d and 0" %
                 (r, rec.get("ckpt_count"), rec.get("ckpt_rc"), count))
        try:
            with open(os.path.join(d, "probe.jsonl")) as f:
                seen = [json.loads(l) for l in f.read().splitlines()]
        except (OSError, ValueError) as e:
            ck.check(False, "rank %d: no probe.jsonl from the checkpoint command: %s" % (r, e))
            return
        ck.check(len(seen) == 1, "rank %d: the command ran %d times into set %d, expected once" %
                 (r, len(seen), count))
        p = seen[-1] if seen else {}
        ck.check(p.get("pid") == pid and pid not in p.get("ancestors", [pid]),
                 "rank %d (pid %d): the command ran for pid %s, inside the rank's process "
                 "tree? (its ancestors: %s)" % (r, pid, p.get("pid"), p.get("ancestors")))
        ck.check(not p.get("inet") and not p.get("unix_bound") and not p.get("sock_files"),
                 "rank %d: a control endpoint was open while its checkpoint command ran "
                 "(old port %d): sockets %s, bound %s, files %s" %
                 (r, old_port, p.get("inet"), p.get("unix_bound"), p.get("sock_files")))
        return p


def checkpoint(args, wd, ck):
    with nf.Topology() as topo:
        job = Job(args, wd.sub("checkpoint"), topo, msgs=6000, rate=200)
        imager = Imager(job)
        try:
            job.start()
            ans = job.client(job.jobid, "status")
            job.expect(ck, ans, 0, "running")
            old = {r: job.ctl(r, ans) for r in RANKS}
            old_path = {r: job.record(r).get("ctl_path") for r in RANKS}

            job.mark("checkpoint while running")
            ans = job.client(job.jobid, "checkpoint")
            if job.expect(ck, ans, 4):
                ck.check("out of order" in ans.err, "expected 'out of order': %s" % ans)
            ans = job.client(job.jobid, "status")
            job.expect(ck, ans, 0, "running")
            ck.check({r: job.ctl(r, ans) for r in RANKS} == old,
                     "control endpoints moved after a refused checkpoint: %s" % ans)
            left = [n for n in os.listdir(job.job_dir) if n.startswith("sets")]
            ck.check(not left, "a refused checkpoint left %s in %s" % (left, job.job_dir))
            ck.check(all(job.record(r).get("ckpt_count") == 0 for r in RANKS),
                     "a refused checkpoint counted in a record")

            job.mark("drain, close, checkpoint, reopen")
            ans = job.client(job.jobid)
            job.expect(ck, ans, 0, "running")
            stages = [(sm.get("stage"), sm.get("ranks"), sm.get("status")) for sm, _ in ans.stages]
            ck.check(stages == [(st, len(RANKS), "ok") for st in
                                ("drain", "close", "checkpoint", "reopen")],
                     "expected the summaries drain, close, checkpoint, reopen, each ranks=%d "
                     "status=ok: %s\n%s" % (len(RANKS), stages, ans))
            for sm, ranks in ans.stages:
                if sm.get("stage") == "checkpoint":
                    for r in RANKS:
                        d = ranks.get(r) or {}
                        ck.check(d.get("stage") == "closed" and d.get("status") == "ok" and
                                 d.get("pid") == job.procs[r].pid,
                                 "checkpoint stage, rank %d: expected stage=closed status=ok "
                                 "pid=%d: %s" % (r, job.procs[r].pid, d))
            for r in RANKS:
                imager.check(ck, r, 1, old[r][1])
                ck.check(job.log_count(r, "checkpoint taken") == 1,
                         "rank %d did not log 'checkpoint taken' once" % r)
            ans = job.client(job.jobid, "status")
            job.expect(ck, ans, 0, "running")
            for r in RANKS:
                ip, port = job.ctl(r, ans)
                path = job.record(r).get("ctl_path")
                ck.check(port != old[r][1] and path != old_path[r] and os.path.exists(path),
                         "rank %d: control endpoint %s:%d and socket %s after the checkpoint, "
                         "%s:%d and %s before: expected new ones" %
                         (r, ip, port, path, old[r][0], old[r][1], old_path[r]))
            nf.log("every rank imaged (%s) with no control endpoint open meanwhile, and "
                   "reachable at a new one after it" % ("gcore" if imager.gcore else "/proc"))
            mid = {r: job.ctl(r, ans) for r in RANKS}
            job.wait_until("every rank's callback saw RESUMED",
                           lambda: all(job.log_count(r, "event=resumed") >= 1 for r in RANKS), 10)
            flowing_from_now(job)

            job.mark("drain; checkpoint --suspend while drained")
            job.expect(ck, job.client(job.jobid, "drain"), 0, "quiesced")
            job.expect(ck, job.client(job.jobid, "checkpoint", "--suspend"), 4)
            job.expect(ck, job.client(job.jobid, "status"), 0, "quiesced")
            job.expect(ck, job.client(job.jobid, "close"), 0, "closed")
            job.mark("checkpoint --suspend")
            ans = job.client(job.jobid, "checkpoint", "--suspend")
            job.expect(ck, ans, 0, "stopped")
            stages = [(sm.get("stage"), sm.get("ranks"), sm.get("status")) for sm, _ in ans.stages]
            ck.check(stages == [("suspend", len(RANKS), "ok")],
                     "expected one summary 'stage=suspend ranks=%d ... status=ok': %s" %
                     (len(RANKS), ans))
            job.wait_until("every rank stopped (State: T)",
                           lambda: all(proc_state(job.procs[r].pid) == "T" for r in RANKS), 3,
                           poll=0.02)
            time.sleep(0.5)
            ck.check(all(proc_state(job.procs[r].pid) == "T" for r in RANKS),
                     "a rank left its stop by itself: %s" %
                     {r: proc_state(job.procs[r].pid) for r in RANKS})
            for r in RANKS:
                imager.check(ck, r, 2, mid[r][1])
            job.mark("SIGCONT, reopen")
            for r in RANKS:
                os.kill(job.procs[r].pid, signal.SIGCONT)
            job.expect(ck, job.client(job.jobid, "status"), 0, "closed")
            job.expect(ck, job.client(job.jobid, "reopen"), 0, "running")
            flowing_from_now(job)
            job.mark("verify")
            job.verify(ck)
        finally:
            for p in job.procs.values():
                if p.alive():
                    os.kill(p.pid, signal.SIGCONT)
            job.kill()


def take_pid(pid):
    """A process (sleep) at process id pid, made by setting the kernel's last
    pid just below it: None when that cannot be set (not root), else the
    process, or a Failure when other processes got the id 50 times.  The
    kernel's last pid is put back afterwards: the processes the machine
    starts meanwhile would otherwise get the ids just above pid, those of
    the job's killed ranks, which a later restart needs free."""
    last = "/proc/sys/kernel/ns_last_pid"
    try:
        with open(last) as f:
            before = int(f.read())
    except (OSError, ValueError):
        return None
    try:
        for _ in range(50):
            try:
                with open(last, "w") as f:
                    f.write(str(pid - 1))
            except OSError:
                return None
            p = subprocess.Popen(["sleep", "120"])
            if p.pid == pid:
                return p
            p.kill()
            p.wait()
    finally:
        try:
            with open(last, "w") as f:
                f.write(str(before))
        except OSError:
            pass
    raise nf.Failure("could not start a process at pid %d in 50 tries (a busy machine?)" % pid)


def restart(args, wd, ck):
    """Checkpoint sets and `cprclient JOBID restart` refusing what it must
    (CRIU itself is the VM tier's: ccp_criu).  The ranks' command writes
    %p into %d unless a flag file exists."""
    with nf.Topology() as topo:
        job = Job(args, wd.sub("restart"), topo, msgs=1000000, rate=100, linger=120, timeout=600)
        flag = wd.file("fail-the-checkpoint")
        job.checkpoint_cmd("test ! -e %s && echo %%p > %%d/pid" % flag)
        restore = {"RAILOVER_RESTORE_CMD": "%s %%a %%d" % args.restore}
        sleeper = None
        try:
            job.start()
            job.mark("three checkpoints, --keep 2")
            for n in (1, 2, 3):
                job.expect(ck, job.client("--keep", "2", job.jobid), 0, "running")
            sets = sorted(os.listdir(os.path.join(job.job_dir, "sets")))
            ck.check(sets == ["2", "3"], "after 3 checkpoints with --keep 2: sets %s, expected "
                     "['2', '3']" % sets)
            for r in RANKS:
                with open(os.path.join(job.image_dir(r, 3), "pid")) as f:
                    ck.check(f.read().strip() == str(job.procs[r].pid),
                             "set 3: rank %d's unit imaged another pid" % r)
            ans = job.client(job.jobid, "status")
            job.expect(ck, ans, 0, "running")
            ck.check(re.search(r"(?m)^set=2 complete ranks=4 ", ans.out) and
                     re.search(r"(?m)^set=3 complete ranks=4 ", ans.out),
                     "status does not list sets 2 and 3 complete: %s" % ans)
            ans = job.client("list")
            ck.check(ans.rc == 0 and re.search(r"(?m)^%s ranks=4 checkpoints=2 newest=3$" %
                                               job.jobid, ans.out),
                     "list does not say 2 checkpoints, newest 3: %s" % ans)

            job.mark("a checkpoint that fails: set 4 incomplete, sets 2 and 3 kept")
            open(flag, "w").close()
            job.expect(ck, job.client(job.jobid), 9, "running")
            os.unlink(flag)
            ans = job.client(job.jobid, "status")
            ck.check(re.search(r"(?m)^set=4 incomplete", ans.out) and
                     re.search(r"(?m)^set=3 complete", ans.out),
                     "status: expected set 3 complete and set 4 incomplete: %s" % ans)

            job.mark("restart while the job runs")
            ans = job.client(job.jobid, "restart", env=restore)
            if job.expect(ck, ans, 15):
                ck.check("is running" in ans.err, "expected 'is running': %s" % ans)

            job.mark("every rank killed")
            for r in RANKS:
                os.kill(job.procs[r].pid, signal.SIGKILL)
            for r in RANKS:
                job.procs[r].wait(5)
            manifest = job.set_file(3, "manifest")

            job.mark("restart from an incomplete set, and from a tampered manifest")
            ans = job.client(job.jobid, "restart", "--set", "4", env=restore)
            if job.expect(ck, ans, 11):
                ck.check("no complete checkpoint set 4" in ans.err, "set 4: %s" % ans)
            with open(manifest) as f:
                good = f.read()
            with open(manifest, "w") as f:
                f.write(good.replace("ranks=4", "ranks=3", 1))
            ans = job.client(job.jobid, "restart", "--set", "3", env=restore)
            job.expect(ck, ans, 11)
            os.unlink(manifest)
            ans = job.client(job.jobid, "status")
            ck.check(re.search(r"(?m)^set=3 incomplete", ans.out),
                     "a set without its manifest is not listed incomplete: %s" % ans)
            with open(manifest, "w") as f:
                f.write(good)
            os.chmod(manifest, 0o600)

            job.mark("restart on hosts that do not answer, or misnamed")
            ans = job.client(job.jobid, "restart", "--map", "0=nowhere",
                             env=dict(restore, RAILOVER_CCP_AGENT="false"))
            if job.expect(ck, ans, 12):
                ck.check("host nowhere does not answer" in ans.err, "unreachable: %s" % ans)
            ans = job.client(job.jobid, "restart", "--hosts", "a,b", env=restore)
            job.expect(ck, ans, 64)
            ans = job.client(job.jobid, "restart", "--map", "9=a", env=restore)
            job.expect(ck, ans, 64)

            job.mark("restart with a process id taken")
            sleeper = take_pid(job.procs[1].pid)
            if sleeper is None:
                nf.log("SKIPPED: the taken-pid case needs root (/proc/sys/kernel/ns_last_pid)")
            else:
                ans = job.client(job.jobid, "restart", env=restore)
                if job.expect(ck, ans, 13):
                    ck.check("process id %d is taken" % sleeper.pid in ans.err,
                             "expected 'process id %d is taken': %s" % (sleeper.pid, ans))
                sleeper.kill()
                sleeper.wait()

            job.mark("restart while another client holds the lock")
            fd = os.open(os.path.join(job.job_dir, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                job.expect(ck, job.client(job.jobid, "restart", env=restore), 6)
            finally:
                os.close(fd)

            job.mark("restart whose restore fails (these are not CRIU images)")
            ans = job.client(job.jobid, "restart", env=restore)
            if job.expect(ck, ans, 14):
                ck.check(re.search(r"restore of rank \d+'s unit on \S+ failed", ans.err) and
                         "holds no CRIU images" in ans.err,
                         "expected the failed restore named, with its output: %s" % ans)
            ck.check(os.path.exists(job.set_file(3, "restore.0.out")),
                     "no restore.0.out in set 3")
        finally:
            if sleeper:
                sleeper.kill()
            job.kill()
        restart_tree(args, wd, ck, topo)
        restart_cut(args, wd, ck, topo)


def restart_tree(args, wd, ck, topo):
    """RAILOVER_CHECKPOINT_TREE=parent: the four ranks (children of this
    test, on one host name) are one unit, imaged once with their parent's
    tree by rank 0, after every rank closed its control endpoints; every
    rank's status says so, the manifest puts all in unit 0; a restart finds
    the tree's root (this test) alive: its process id is taken."""
    job = Job(args, wd.sub("tree"), topo, msgs=1000000, rate=100, linger=120, timeout=600)
    job.checkpoint_cmd("echo %p >> %d/pid && ls %d/.. > %d/seen")
    for r in RANKS:
        job.env[r]["RAILOVER_CHECKPOINT_TREE"] = "parent"
    try:
        job.start()
        job.mark("one unit of four ranks: one command")
        job.expect(ck, job.client(job.jobid), 0, "running")
        unit = job.image_dir(0, 1)
        with open(os.path.join(unit, "pid")) as f:
            pids = f.read().split()
        ck.check(pids == [str(os.getpid())],
                 "the unit's command ran %s, expected once for the ranks' parent %d" %
                 (pids, os.getpid()))
        with open(os.path.join(unit, "seen")) as f:
            seen = f.read().split()
        ck.check(all("ready.%d" % r in seen for r in RANKS),
                 "the unit's command ran before every rank was ready: %s" % seen)
        ck.check(sorted(n for n in os.listdir(job.set_file(1, "")) if n.startswith("unit.")) ==
                 ["unit.0", "unit.0.log"], "set 1 holds other units: %s" %
                 os.listdir(job.set_file(1, "")))
        with open(job.set_file(1, "manifest")) as f:
            manifest = f.read()
        for r in RANKS:
            with open(job.set_file(1, "status.%d" % r)) as f:
                ck.check(f.read().split()[:2] == ["1", "0"], "rank %d: no status 0 in set 1" % r)
            ck.check(re.search(r"(?m)^rank=%d pid=%d tree=%d unit=0 " %
                               (r, job.procs[r].pid, os.getpid()), manifest),
                     "manifest: rank %d not in unit 0 with tree %d: %s" %
                     (r, os.getpid(), manifest))
        job.mark("the unit's root is alive: restart refused (pid taken)")
        for r in RANKS:
            os.kill(job.procs[r].pid, signal.SIGKILL)
            job.procs[r].wait(5)
        ans = job.client(job.jobid, "restart",
                         env={"RAILOVER_RESTORE_CMD": "%s %%a %%d" % args.restore})
        if job.expect(ck, ans, 13):
            ck.check("process id %d is taken" % os.getpid() in ans.err, "pid taken: %s" % ans)
    finally:
        job.kill()


def restart_cut(args, wd, ck, topo):
    """railover-criu-tree's cut (docs/ccp.md, "Restarting an MPI job"): each
    rank's unit runs it as CRIU's post-dump would (its own environment from
    the runner: RAILOVER_CKPT_SET, _UNIT, _END), rank 3's two seconds late.
    No unit's command ends before every rank of the set is imaged
    (dumped.<r> for each), and the set completes; then rank 3's command
    fails before it: every other unit's fails too, naming rank 3, and the
    set stays incomplete while the job runs on; then rank 3's command
    succeeds without the cut: the others fail, saying so.  (CRIU itself, which
    freezes the tree around the script, is ccp_mpi_criu's, in the VMs.)"""
    tool = os.path.join(os.path.dirname(args.restore), "railover-criu-tree")
    cut = wd.sub("cut")
    fail, nocut = cut.file("fail"), cut.file("nocut")
    with open(cut.file("cut.sh"), "w") as f:   # (RANK IMAGES PID)
        f.write('if [ "$1" = 3 ]; then sleep 2; [ -e %s ] && exit 3; [ -e %s ] && exit 0; fi\n'
                'CRTOOLS_SCRIPT_ACTION=post-dump CRTOOLS_IMAGE_DIR="$2" CRTOOLS_INIT_PID="$3" '
                'RAILOVER_CRIU_FILES=%s exec %s\n' % (fail, nocut, wd.sub("cut-files").path, tool))
    job = Job(args, cut, topo, msgs=1000000, rate=100, linger=120, timeout=600)
    job.checkpoint_cmd("sh %s %%r %%d %%p" % cut.file("cut.sh"))
    try:
        job.start()
        job.mark("four units, rank 3's late: none ends before all are imaged")
        job.expect(ck, job.client(job.jobid), 0, "running")
        with open(job.set_file(1, "ranks")) as f:
            ck.check(f.read().split() == [str(r) for r in RANKS],
                     "set 1's ranks file does not list ranks %s" % RANKS)
        dumped = {}
        for r in RANKS:
            try:
                dumped[r] = os.stat(job.set_file(1, "dumped.%d" % r)).st_mtime_ns
            except OSError as e:
                ck.check(False, "rank %d: no dumped mark in set 1: %s" % (r, e))
        for r in RANKS:
            if 3 not in dumped:
                break
            ended = os.stat(job.set_file(1, "status.%d" % r)).st_mtime_ns
            ck.check(ended >= dumped[3], "rank %d's unit ended before rank 3's was imaged" % r)
            with open(job.set_file(1, "unit.%d.log" % r), errors="replace") as f:
                ck.check("every unit of the set imaged" in f.read(),
                         "rank %d's unit log does not say the cut was reached" % r)
        ck.check(os.path.exists(job.set_file(1, "manifest")), "set 1 has no manifest")

        job.mark("rank 3's command fails before its image: every unit's dump fails")
        with open(fail, "w"):
            pass
        ans = job.client(job.jobid)
        job.expect(ck, ans, 9, "running")
        for s, why in ((2, "rank 3 (exit status 3)"), (3, "rank 3 (imaged without the cut)")):
            if s == 3:
                job.mark("rank 3's command succeeds without the cut: the others fail")
                os.unlink(fail)
                with open(nocut, "w"):
                    pass
                job.expect(ck, job.client(job.jobid), 9, "running")
            ck.check(not os.path.exists(job.set_file(s, "manifest")), "set %d has a manifest" % s)
            for r in RANKS[:-1]:
                with open(job.set_file(s, "status.%d" % r)) as f:
                    rc = f.read().split()[1]
                with open(job.set_file(s, "unit.%d.log" % r), errors="replace") as f:
                    log = f.read()
                ck.check(rc == "1" and why in log and
                         not os.path.exists(job.set_file(s, "dumped.%d" % r)),
                         "set %d, rank %d: status %s, expected 1, %r named and its mark "
                         "removed: %s" % (s, r, rc, why, log[-300:]))
        flowing_from_now(job)
    finally:
        job.kill()


def proc_state(pid):
    """The state letter of /proc/PID/status ('T' stopped), or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            m = re.search(r"(?m)^State:\s*(\S)", f.read())
    except OSError:
        return None
    return m and m.group(1)


SCENARIOS = {"traffic": traffic, "computing": computing, "moved": moved,
             "checkpoint": checkpoint, "bad": bad, "died": died, "restart": restart}
# (restart is a test of its own: ccp_restart)
DEFAULT_SCENARIOS = [n for n in SCENARIOS if n != "restart"]


def copy_for_other(prog):
    """A copy of the build tree's program prog and of the librailover it
    loads, in a new directory every user can read (mode 0755; removed at
    the end): the build tree may be where another uid cannot go (a clone in
    root's home, mode 0700).  Returns the copy's path; run it with
    LD_LIBRARY_PATH set to its directory."""
    d = tempfile.mkdtemp(prefix="rov-other-")
    nf.at_cleanup(functools.partial(shutil.rmtree, d, ignore_errors=True))
    os.chmod(d, 0o755)
    copy = os.path.join(d, os.path.basename(prog))
    shutil.copy(prog, copy)
    os.chmod(copy, 0o755)
    # "librailover.so.0 => /path/librailover.so.0 (0x...)"
    ldd = subprocess.run(["ldd", prog], stdout=subprocess.PIPE, text=True).stdout
    for m in re.finditer(r"^\s*(librailover\S*) => (/\S+)", ldd, re.M):
        lib = os.path.join(d, m.group(1))
        shutil.copy(m.group(2), lib)   # (follows the link: the file itself)
        os.chmod(lib, 0o644)
    return copy


def test():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rov-job", default=os.environ.get(
        "ROV_JOB", os.path.join(root, "build", "tests", "ccp", "rov_job")),
        help="rov_job program (default: $ROV_JOB or build/tests/ccp/rov_job)")
    ap.add_argument("--cprclient", default=os.environ.get(
        "CPRCLIENT", os.path.join(root, "build", "tools", "cprclient")),
        help="cprclient (default: $CPRCLIENT or build/tools/cprclient)")
    ap.add_argument("--keep", action="store_true", help="keep the log directory even on success")
    ap.add_argument("--restore", default=os.environ.get(
        "RAILOVER_RESTORE", os.path.join(root, "build", "tools", "railover-restore")),
        help="railover-restore (default: build/tools/railover-restore)")
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                    help="comma-separated subset, in order")
    args = ap.parse_args()
    for opt, path in (("--rov-job", args.rov_job), ("--cprclient", args.cprclient)):
        if not os.access(path, os.X_OK):
            raise SystemExit("test_ccp.py: %s is not an executable (build first, or pass %s)" %
                             (path, opt))
    args.rov_job = os.path.abspath(args.rov_job)
    args.cprclient = os.path.abspath(args.cprclient)
    args.other_cprclient = copy_for_other(args.cprclient)
    names = args.scenarios.split(",")
    for name in names:
        if name not in SCENARIOS:
            raise SystemExit("test_ccp.py: no scenario %r (have: %s)" %
                             (name, ", ".join(SCENARIOS)))
    if "bad" in names and not shutil.which("setpriv"):
        raise nf.Skip("setpriv (util-linux) is not installed: cannot act as another user")
    run_scenarios("ccp", args, SCENARIOS, names)


def run_scenarios(tag, args, scenarios, names):
    """Each of names in order, in one work directory (nf.Workdir(tag));
    nf.Failure at the end if a check failed."""
    wd = nf.Workdir(tag, args.keep)
    ck = nf.Checker()
    for name in names:
        nf.log("=== %s" % name)
        t0 = time.monotonic()
        scenarios[name](args, wd, ck)
        nf.log("=== %s: %.1f s" % (name, time.monotonic() - t0))
    ck.done()
    wd.failed = False


if __name__ == "__main__":
    nf.main(test, needs_netns=True, needs_nft=False)
