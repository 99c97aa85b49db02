"""Shared pieces of the failover benchmarks (bench/failover-time.py).

The namespaces, the rov_stream pair and the event/rate readers come from
tests/failover/netfault.py (imported, never copied).  What the tests do not
need and a benchmark does lives here: fault injection that records when the
nft rule was in place (monotonic time before and after the command), the
extraction of switch / rail_down / first_rx timelines from the events, and
order statistics.

Only the Python standard library is used.
"""

import ctypes
import datetime
import os
import select
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "failover"))

import netfault  # noqa: E402  (tests/failover/netfault.py)

now_ns = netfault.now_ns
log = netfault.log
SIDES = netfault.SIDES            # ("listener", "connector")
SIDE_NS = {"listener": "A", "connector": "B"}
NFT_TABLE = "rovbench"
CLONE_NEWNET = 0x40000000

MS = 1000000


def default_bin(env_var, rel):
    """$env_var, else the first build directory next to bench/ that has it
    (build-bench first, as the README's build command makes it)."""
    if os.environ.get(env_var):
        return os.environ[env_var]
    for b in ("build-bench", "build"):
        p = os.path.join(ROOT, b, rel)
        if os.access(p, os.X_OK):
            return p
    return os.path.join(ROOT, "build-bench", rel)


def parse_duration_ns(s):
    """`250ms`, `1s`, `200us`, `5` (seconds) -> ns, as the library reads them."""
    s = s.strip()
    for suf, mult in (("ns", 1), ("us", 1000), ("ms", MS), ("s", 1000 * MS)):
        if s.endswith(suf) and s[:-len(suf)].replace(".", "", 1).isdigit():
            return int(float(s[:-len(suf)]) * mult)
    return int(float(s) * 1e9)


# ---- statistics ----------------------------------------------------------------

def quantile(vals, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    v = sorted(vals)
    if not v:
        return None
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize(vals):
    vals = [x for x in vals if x is not None]
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "p90": None}
    return {"n": len(vals), "median": statistics.median(vals), "min": min(vals),
            "max": max(vals), "p90": quantile(vals, 0.9)}


def ms(t_ns):
    return None if t_ns is None else t_ns / 1e6


# ---- faults with timestamps ------------------------------------------------------

class NftShell:
    """One `nft --echo --handle -i` process inside a namespace, fed one line
    per change: a rule lands within about a millisecond of the request,
    where a fresh `ip netns exec ... nft` takes 10-20 ms on a busy host (and
    the moment the fault starts would be that vague)."""

    def __init__(self, topo, side):
        path = "/run/netns/" + topo.ns[side]
        self.fd = os.open(path, os.O_RDONLY)
        libc = ctypes.CDLL(None, use_errno=True)
        fd = self.fd

        def enter():
            if libc.setns(fd, CLONE_NEWNET) != 0:
                os._exit(127)
            libc.prctl(1, 9, 0, 0, 0)   # PR_SET_PDEATHSIG, SIGKILL

        self.p = subprocess.Popen(["nft", "--echo", "--handle", "-i"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                                  preexec_fn=enter, pass_fds=(fd,))
        netfault.at_cleanup(self.close)

    def close(self):
        netfault.cancel_cleanup(self.close)
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def do(self, lines, done, timeout=5.0):
        """Write the lines; read until the output ends with `done` (bytes).
        Returns (t_before_write, t_after_done, output)."""
        out = b""
        t0 = now_ns()
        self.p.stdin.write(("".join(l + "\n" for l in lines)).encode())
        deadline = time.monotonic() + timeout
        while not out.endswith(done):
            left = deadline - time.monotonic()
            r, _, _ = select.select([self.p.stdout, self.p.stderr], [], [], max(0, left))
            if not r:
                raise netfault.Failure("nft -i: no answer within %gs to %r; got %r" %
                                       (timeout, lines, out))
            for f in r:
                d = os.read(f.fileno(), 65536)
                if not d:
                    raise netfault.Failure("nft -i exited; output %r" % out)
                if f is self.p.stderr:
                    time.sleep(0.05)
                    try:
                        d += os.read(f.fileno(), 65536)
                    except BlockingIOError:
                        pass
                    raise netfault.Failure("nft -i: %r -> %s" % (lines, d.decode(errors="replace")))
                out += d
        return t0, now_ns(), out.decode(errors="replace")


COMMITTED = b" (nft)\n"      # end of the echo's "# new generation N by process P (nft)"
LISTED = b"}\n}\n"           # end of `list chain`


class Faults:
    """nft rules in table `inet rovbench` of a namespace of a netfault
    Topology, through an NftShell.  Every change returns (t_before, t_after):
    CLOCK_MONOTONIC right before the request and right after nft confirmed
    the commit (the echo of the new generation, or for removal a listing
    made after it); the rule is in place, or gone, by t_after."""

    def __init__(self, topo):
        self.topo = topo
        self.shells = {}

    def shell(self, side):
        if side not in self.shells:
            sh = NftShell(self.topo, side)
            # Idempotent (the table may be left from an earlier shell), so
            # completion is seen by a listing, not by an echo.
            sh.do(["add table inet %s; " % NFT_TABLE + "; ".join(
                "add chain inet %s %s { type filter hook %s priority 0; policy accept; }; "
                "flush chain inet %s %s" % (NFT_TABLE, c, c, NFT_TABLE, c)
                for c in ("input", "output")), "list chain inet %s output" % NFT_TABLE], LISTED)
            self.shells[side] = sh
        return self.shells[side]

    def add(self, side, rules):
        """rules: [(chain, rule text)], added in one nft transaction."""
        line = "; ".join("add rule inet %s %s %s" % (NFT_TABLE, c, r) for c, r in rules)
        t0, t1, _ = self.shell(side).do([line], COMMITTED)
        return t0, t1

    def clear(self, side):
        t0, t1, _ = self.shell(side).do(
            ["flush chain inet %s input; flush chain inet %s output" % (NFT_TABLE, NFT_TABLE),
             "list chain inet %s output" % NFT_TABLE], LISTED)
        return t0, t1

    def close(self):
        for sh in self.shells.values():
            sh.close()
        self.shells = {}

    def fabric_reset(self, side="A"):
        """TCP from the peer's fabric address is answered with a reset (the
        peer's socket errors; this side's socket sees nothing)."""
        peer = self.topo.peer_fab(side)
        return self.add(side, [("input", "ip saddr %s meta l4proto tcp counter reject with "
                                "tcp reset" % peer)])

    def fabric_drop(self, side="A"):
        """Everything to and from the peer's fabric address vanishes."""
        peer = self.topo.peer_fab(side)
        return self.add(side, [("input", "ip saddr %s counter drop" % peer),
                               ("output", "ip daddr %s counter drop" % peer)])


# ---- timelines from events ----------------------------------------------------------

def events(pair, role):
    return [e for e in pair.events[role].poll() if e.get("conn", -1) != -1 or
            e.get("ev") in ("start", "stop")]


def arrival(pair, role, to, since_ns):
    """The first switch to rail `to` at or after since_ns and the first
    first_rx on that rail after it: (switch event, first_rx event or None)."""
    sw = None
    for e in events(pair, role):
        if e.get("t", 0) < since_ns:
            continue
        if sw is None:
            if e.get("ev") == "switch" and e.get("to") == to:
                sw = e
        elif e.get("ev") == "first_rx" and e.get("rail") == to:
            return sw, e
    return sw, None


def between(pair, role, ev, t0, t1):
    return [e for e in events(pair, role) if e.get("ev") == ev and t0 <= e.get("t", 0) <= t1]


def wait_arrival(pair, to, since_ns, timeout_s):
    """Wait until both sides switched to `to` after since_ns and delivered a
    message after that switch.  Returns {role: (switch, first_rx)}."""
    deadline = time.monotonic() + timeout_s
    while True:
        res = {role: arrival(pair, role, to, since_ns) for role in SIDES}
        if all(r[1] is not None for r in res.values()):
            return res
        pair.check_alive("while waiting for traffic on rail %d" % to)
        if time.monotonic() > deadline:
            raise netfault.Failure("no switch + delivery on rail %d on both sides within %gs: "
                                   "%s\n%s" % (to, timeout_s, {r: (v[0] is not None,
                                                                   v[1] is not None)
                                                              for r, v in res.items()},
                                               pair.describe()))
        time.sleep(0.005)


def load_note():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def check_common_args(ap, args, name):
    """What failover-time.py and failover-scale.py check and derive alike:
    the programs are executables, --env entries are RAILOVER_NAME=VALUE,
    the timeout and dwell in ns, the settle (9 dwells) and the result
    directory (NAME-YYYYmmdd-HHMMSS) when not given."""
    for what, path in (("--rov-stream", args.rov_stream), ("--railover", args.railover)):
        if not os.access(path, os.X_OK):
            ap.error("%s %s is not executable: build first (see bench/README.md)" % (what, path))
    for kv in args.env:
        if not kv.startswith("RAILOVER_") or "=" not in kv:
            ap.error("--env takes RAILOVER_NAME=VALUE, not '%s'" % kv)
    args.timeout_ns = parse_duration_ns(args.timeout)
    args.dwell_ns = parse_duration_ns(args.dwell)
    if args.settle is None:
        args.settle = 9 * args.dwell_ns / 1e9
    if not args.out:
        args.out = name + "-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
