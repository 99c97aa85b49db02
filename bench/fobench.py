"""Shared pieces of the failover benchmarks (bench/failover-time.py).

The namespaces, the rov_stream pair and the event/rate readers come from
tests/failover/netfault.py (imported, never copied).  What the tests do not
need and a benchmark does lives here: fault injection that records when the
nft rule was in place (monotonic time before and after the command), the
extraction of switch / rail_down / first_rx timelines from the events, and
order statistics.

Only the Python standard library is used.
"""

import os
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

class Faults:
    """nft rules in table `inet rovbench` of one namespace of a netfault
    Topology.  Every change returns (t_before, t_after): CLOCK_MONOTONIC
    right before the command and right after it returned; the rule is in
    place (or gone) somewhere in between, certainly by t_after."""

    def __init__(self, topo):
        self.topo = topo
        self.ready = set()

    def _nft(self, side, args, input=None):
        argv = self.topo.exec_argv(side, ["nft"] + args)
        p = subprocess.run(argv, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if p.returncode != 0:
            raise netfault.Failure("nft failed: %s\n%s" % (" ".join(argv), p.stderr.strip()))
        return p.stdout

    def setup(self, side):
        if side in self.ready:
            return
        self._nft(side, ["-f", "-"], input="""
table inet %(t)s {
    chain input  { type filter hook input  priority 0; policy accept; }
    chain output { type filter hook output priority 0; policy accept; }
}
""" % {"t": NFT_TABLE})
        self.ready.add(side)

    def add(self, side, rules):
        """rules: [(chain, rule text)], added in one nft transaction."""
        self.setup(side)
        script = "".join("add rule inet %s %s %s\n" % (NFT_TABLE, c, r) for c, r in rules)
        t0 = now_ns()
        self._nft(side, ["-f", "-"], input=script)
        t1 = now_ns()
        return t0, t1

    def clear(self, side):
        t0 = now_ns()
        self._nft(side, ["flush", "table", "inet", NFT_TABLE])
        t1 = now_ns()
        return t0, t1

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
