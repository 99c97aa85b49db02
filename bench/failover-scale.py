#!/usr/bin/env python3
"""Mass failover: how long N connections take to leave a dead fabric, and to come back.

failover-time.py's benchmark for many connections at once (issue 20).  The
same two network namespaces (tests/failover/netfault.py): a "fabric" veth
(rail 0, preferred) and an "ethernet" veth (rail 1); one rov_stream pair,
listener in A, connector in B, streaming checksummed messages (up to
--max-size bytes) both ways on N connections.  For every N of --counts:

  wire-up: connector started -> every connection established and
     delivering both ways (StreamPair.start's readiness test; its poll and
     the rate interval make it coarse, about 0.1 s + --rate-ms).  A pair
     that does not get there within --wireup-wait is a result: how many
     came up is recorded, and the script goes on with the next N.

then, in the same pair, --runs episodes of every fault in --faults, one
after the other, each once every connection is back on rail 0 and --settle
seconds have passed:

  linkdown: `ip link set fab down` in A (silent: only the stall detector
     finds it); t = monotonic right after `ip` returned.
  reset: nft `reject with tcp reset` of B's fabric TCP on A's input (a
     provider error on B's sockets); t = when nft confirmed the commit
     (fobench.Faults).

  moved, per connection: t -> the later of the two sides' first switch to
     rail 1 (their switch events); median / p90 / max over connections and
     how many moved within --wait.
  back, per connection, after the heal (link up, or the rule removed, --hold
     seconds after the last connection moved): heal -> the later side's
     first switch to rail 0; the dwell (RAILOVER_FAILBACK_DWELL) is printed
     beside it, nothing is subtracted.
  switches per side from the fault until every connection was back, and
     switches to rail 0 while the fault was still in place ("onto a down
     rail": must be 0).

A pair whose connections are not all back within --wait (or whose process
died) is stopped, and the next episode starts in a new pair.  Every pair is
stopped through rov_stream's stop file at the end and its stream verified
(no loss, duplicate or reordering, netfault.check_stream); a pair with a
process that died is not (rov_stream exits at its first failed connection,
and the other side, killed, leaves no result to compare with).

Files in DIR: runs.csv (one row per N, fault, run), conns.csv (one row per
N, fault, run, connection), summary.json (configuration, statistics, every
pair's wire-up and stream check), stream-N*/ (each pair's events, logs, rate
CSVs, marks), move.png / back.png (gnuplot, when installed: median and max
against N, log axes, one colour per fault) with their .csv and .gp.

Numbers, never verdicts: the exit status is 1 only when a run did not
complete (a wire-up short of N, connections that did not move or come back
within --wait, a process that died) or a stream failed its check; never
because of a time.  77: no root, ip or nft.
"""

import argparse
import contextlib
import csv
import datetime
import importlib.util
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fobench  # noqa: E402
from fobench import SIDES, log, netfault, now_ns  # noqa: E402


def _failover_time():
    """bench/failover-time.py as a module (its name has a dash): its library
    settings, clock file, gnuplot terminal and summary writer are reused."""
    spec = importlib.util.spec_from_file_location("failover_time",
                                                  os.path.join(HERE, "failover-time.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ft = _failover_time()

FAULTS = ("linkdown", "reset")
SMOKE = {"counts": "1,32", "runs": 1, "faults": "linkdown,reset", "wait": 15.0,
         "wireup_wait": 20.0, "hold": 0.2}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default=None,
                    help="connection counts, one pair each (default 1,16,64,256,1024; "
                    "rov_stream takes at most 1024)")
    ap.add_argument("--faults", default=None, help="faults per pair, in order (default "
                    "linkdown,reset)")
    ap.add_argument("--runs", type=int, default=None, help="episodes of every fault per count "
                    "(default 3)")
    ap.add_argument("--wait", type=float, default=None, help="seconds to wait for every "
                    "connection to move, and again to come back (default 30)")
    ap.add_argument("--wireup-wait", type=float, default=None, help="seconds to wait for "
                    "every connection to be up and delivering (default 60)")
    ap.add_argument("--hold", type=float, default=None, help="seconds the fault stays after "
                    "the last connection moved (default 0.5)")
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds on rail 0 after the last failback before the next fault "
                    "(default 9 dwells: a failure within 4 dwells of a failback is a flap "
                    "and doubles the dwell; the engine forgets it after 8)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI run: counts 1,32, 1 run of linkdown,reset, waits of 15 s (20 s "
                    "for the wire-up), hold 0.2 s; explicit options still win")
    ap.add_argument("--out", default=None, help="result directory (default "
                    "./failover-scale-YYYYmmdd-HHMMSS)")
    ap.add_argument("--timeout", default="250ms", help="RAILOVER_FAILOVER_TIMEOUT (250ms)")
    ap.add_argument("--keepalive", default="100ms", help="RAILOVER_KEEPALIVE (100ms)")
    ap.add_argument("--dwell", default="500ms", help="RAILOVER_FAILBACK_DWELL (500ms)")
    ap.add_argument("--retry", default="20ms", help="RAILOVER_FAILBACK_RETRY (20ms)")
    ap.add_argument("--retry-max", default="50ms", help="RAILOVER_FAILBACK_RETRY_MAX (50ms)")
    ap.add_argument("--max-size", type=int, default=2048, help="largest message (2048)")
    ap.add_argument("--rate-ms", type=int, default=100, help="rov_stream --rate-ms: the "
                    "wire-up's delivery test reads it (default 100)")
    ap.add_argument("--log-level", default="info", help="RAILOVER_LOG (info)")
    ap.add_argument("--env", action="append", default=[], metavar="RAILOVER_X=V",
                    help="extra library setting for both sides (repeatable)")
    ap.add_argument("--rov-stream", default=fobench.default_bin(
        "ROV_STREAM", "tests/integration/rov_stream"))
    ap.add_argument("--railover", default=fobench.default_bin("RAILOVER_TOOL", "tools/railover"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    defaults = {"counts": "1,16,64,256,1024", "runs": 3, "faults": ",".join(FAULTS),
                "wait": 30.0, "wireup_wait": 60.0, "hold": 0.5}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, SMOKE[k] if args.smoke else v)
    try:
        args.counts = [int(c) for c in str(args.counts).split(",") if c.strip()]
    except ValueError:
        ap.error("--counts takes numbers, e.g. 1,16,64")
    if not args.counts or any(c < 1 or c > 1024 for c in args.counts):
        ap.error("--counts: each between 1 and 1024 (rov_stream's limit)")
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    for f in args.faults:
        if f not in FAULTS:
            ap.error("unknown fault '%s' (%s)" % (f, ", ".join(FAULTS)))
    if args.runs < 1:
        ap.error("--runs must be positive")
    fobench.check_common_args(ap, args, "failover-scale")
    args.keep = True
    return args


# ---- reading a pair incrementally ------------------------------------------------

class RateTail:
    """Received-message totals from a pair's rate CSVs, read incrementally.
    StreamPair.rx_totals() parses the whole file at every call, which its
    readiness test makes ten times a second: with a thousand connections and
    a row per connection every --rate-ms, that alone would take a core.
    Installed as the pair's rx_totals."""

    ORDER = ["t_s", "side", "conn", "rail", "rx_msgs"]   # rov_stream's documented columns

    def __init__(self, pair):
        self.pair = pair
        self.off = {r: 0 for r in SIDES}
        self.partial = {r: b"" for r in SIDES}
        self.cols = {r: None for r in SIDES}
        self.tot = {r: {} for r in SIDES}               # (conn, rail) -> rx_msgs
        self.plain = pair.rx_totals

    def poll(self, role):
        try:
            with open(self.pair.rate[role], "rb") as f:
                f.seek(self.off[role])
                data = f.read()
        except FileNotFoundError:
            return
        self.off[role] += len(data)
        lines = (self.partial[role] + data).split(b"\n")
        self.partial[role] = lines.pop()
        tot = self.tot[role]
        for raw in lines:
            vals = raw.decode(errors="replace").split(",")
            if self.cols[role] is None:
                names = self.ORDER if vals[0].strip() != "t_s" else [v.strip() for v in vals]
                self.cols[role] = (names.index("conn"), names.index("rail"),
                                   names.index("rx_msgs"), len(names))
                if vals[0].strip() == "t_s":
                    continue
            ic, ir, ix, n = self.cols[role]
            if len(vals) < n:
                continue
            try:
                key = (int(vals[ic]), int(vals[ir]))
                tot[key] = tot.get(key, 0) + int(vals[ix])
            except ValueError:
                continue

    def rx_totals(self, role, rail=None, since_s=None):
        if since_s is not None:
            return self.plain(role, rail=rail, since_s=since_s)
        self.poll(role)
        res = {}
        for (conn, r), v in self.tot[role].items():
            if rail is None or r == rail:
                res[conn] = res.get(conn, 0) + v
        return res

    def delivering(self, n):
        """Connections that have received messages on both sides."""
        t = {role: self.rx_totals(role) for role in SIDES}
        return sum(1 for i in range(n) if all(t[role].get(i, 0) > 0 for role in SIDES))


class Switches:
    """Both sides' switch events per connection, read incrementally (the
    pair's own rail_of()/all_on() scan every event once per connection)."""

    def __init__(self, pair):
        self.pair = pair
        self.seen = {r: 0 for r in SIDES}
        self.sw = {r: {} for r in SIDES}       # conn -> [event], in order
        self.rail = {r: {} for r in SIDES}     # conn -> rail after its last switch
        self.up = {r: 0 for r in SIDES}        # established / accepted events
        self.t_up = {r: None for r in SIDES}   # ... the last one's time
        self.t_last = 0                         # the last switch, either side
        self.errors = {r: [] for r in SIDES}   # "error" events

    def update(self):
        for role in SIDES:
            items = self.pair.events[role].poll()
            for e in items[self.seen[role]:]:
                ev = e.get("ev")
                if ev == "switch":
                    c = e.get("conn")
                    self.sw[role].setdefault(c, []).append(e)
                    self.rail[role][c] = e.get("to")
                    self.t_last = max(self.t_last, e.get("t", 0))
                elif ev in ("established", "accepted"):
                    self.up[role] += 1
                    self.t_up[role] = e.get("t")
                elif ev == "error":
                    self.errors[role].append(e)
            self.seen[role] = len(items)
        return self

    def first_to(self, role, conn, rail, since_ns):
        for e in self.sw[role].get(conn, ()):
            if e.get("t", 0) >= since_ns and e.get("to") == rail:
                return e
        return None

    def both_to(self, conn, rail, since_ns):
        """{role: first switch to rail since since_ns}, or None unless both."""
        res = {role: self.first_to(role, conn, rail, since_ns) for role in SIDES}
        return res if all(res.values()) else None

    def all_on(self, rail, n):
        return all(self.rail[role].get(i, 0) == rail for role in SIDES for i in range(n))

    def count(self, role, t0, t1, to=None):
        return sum(1 for evs in self.sw[role].values() for e in evs
                   if t0 <= e.get("t", 0) < t1 and (to is None or e.get("to") == to))


LIB_WARN = re.compile(r"\] railover\[\d+\] (warn|error) ")


def alive(pair):
    return all(p.alive() for p in pair.procs.values())


# ---- a pair: wire-up, stop and check ----------------------------------------------

class Pair:
    """One rov_stream pair of N connections and what became of it."""

    def __init__(self, args, topo, env, out, n, k):
        name = "stream-%d" % n + ("" if k == 1 else "-%d" % k)
        self.wd = netfault.Dir(os.path.join(out, name))
        os.makedirs(self.wd.path, exist_ok=True)
        self.n = n
        self.sp = netfault.StreamPair(args, self.wd, topo, conns=n, env=env,
                                      max_size=args.max_size, rate_ms=args.rate_ms,
                                      timeout_s=7200, stall_s=int(max(60, 3 * args.wait)))
        self.rate = RateTail(self.sp)
        self.sp.rx_totals = self.rate.rx_totals
        self.sw = Switches(self.sp)
        self.info = {"count": n, "dir": self.wd.path, "wireup_s": None, "up": 0,
                     "stream": "-", "stream_errors": []}

    def start(self, args):
        """Returns True when every connection came up within --wireup-wait."""
        t = {}
        log("N=%d: starting the pair in %s" % (self.n, self.wd.path))
        try:
            self.sp.start(ready_timeout=args.wireup_wait,
                          on_connector=lambda: t.setdefault("c", now_ns()))
            self.info["wireup_s"] = (self.sp.marks[-1][0] - t["c"]) / 1e9
            self.info["up"] = self.n
            self.sw.update()
            if all(self.sw.t_up.values()):
                # Finer than the readiness poll: the last connection
                # established (connector) / accepted (listener).
                self.info["established_s"] = (max(self.sw.t_up.values()) - t["c"]) / 1e9
            ft.write_clock(self.wd.path)
            log("N=%d: wire-up %.2f s (the last connection established after %s s)" % (
                self.n, self.info["wireup_s"], f2(self.info.get("established_s"))))
            return True
        except netfault.Failure as e:
            waited = (now_ns() - t["c"]) / 1e9 if "c" in t else None
            self.info["up"] = self.rate.delivering(self.n)
            self.sw.update()
            self.info.update(wireup_failed_after_s=waited, established=dict(self.sw.up),
                             alive=alive(self.sp), exit=self.rcs(),
                             error_events=sum(len(v) for v in self.sw.errors.values()))
            with open(self.wd.file("wireup-failure.txt"), "w") as f:
                f.write(str(e) + "\n")
            self.info["fail_lines"] = self.fail_lines()
            log("N=%d: WIRE-UP INCOMPLETE: %d of %d connections delivering both ways after "
                "%s s (established/accepted events: listener %d, connector %d; exit %s); "
                "details in %s" % (self.n, self.info["up"], self.n,
                                   "%.1f" % waited if waited is not None else "?",
                                   self.sw.up["listener"], self.sw.up["connector"],
                                   self.info["exit"], self.wd.file("wireup-failure.txt")))
            for line in self.info["fail_lines"][:6]:
                log("    " + line)
            self.sp.kill()
            return False

    def rcs(self):
        return {role: p.poll() for role, p in self.sp.procs.items()}

    def fail_lines(self, limit=20):
        """The first of each side's library warnings and errors and rov_stream's
        FAIL / STALLED / TIMEOUT lines (its log; stderr of both)."""
        res = []
        for role in SIDES:
            n = 0
            try:
                with open(self.wd.file(role + ".log"), errors="replace") as f:
                    for line in f:
                        if n >= limit:
                            break
                        if (LIB_WARN.search(line) or line.startswith("FAIL") or
                                "STALLED" in line or "TIMEOUT (" in line):
                            res.append("%s: %s" % (role, line.rstrip()))
                            n += 1
            except OSError:
                pass
        return res

    def finish(self, why=""):
        """Stop through the stop file and check the stream; kill on failure."""
        if self.info["stream"] != "-":
            return
        if not alive(self.sp):
            # A connection failed and its process ended (rov_stream exits at the
            # first failed connection); the other side, killed, prints no
            # result to compare with.  The run is already counted incomplete.
            rcs = self.rcs()
            self.sp.kill()
            self.info["stream"] = "not checked"
            self.info["stream_errors"] = ["exited before the stop: %s" % ", ".join(
                "%s %s" % (r, "exit %s" % c if c is not None else "killed")
                for r, c in sorted(rcs.items()))]
            log("N=%d: pair ended%s; stream not checked: %s" % (
                self.n, " (%s)" % why if why else "", self.info["stream_errors"][0]))
            return
        ck = netfault.Checker()
        try:
            self.sp.stop(timeout=60 + self.n // 8)
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):     # one log line per connection
                netfault.check_stream(ck, self.sp)
            with open(self.wd.file("stream-check.txt"), "w") as f:
                f.write(buf.getvalue())
        except netfault.Failure as e:
            ck.errors.append(str(e).split("\n")[0])
            with open(self.wd.file("stop-failure.txt"), "w") as f:
                f.write(str(e) + "\n")
        finally:
            self.sp.kill()
        self.info["stream"] = "ok" if not ck.errors else "FAILED"
        self.info["stream_errors"] = ck.errors[:20]
        self.info["stream_error_count"] = len(ck.errors)
        if ck.errors:
            self.info["fail_lines"] = self.fail_lines()
        log("N=%d: pair stopped%s; stream check (no loss, no duplicate, in order): %s" % (
            self.n, " (%s)" % why if why else "", "ok" if not ck.errors else "FAILED: " +
            "; ".join(ck.errors[:3]) + (" ..." if len(ck.errors) > 3 else "")))


# ---- one episode -------------------------------------------------------------------

def wait_for(pair, pred, deadline_ns, poll=0.05):
    """Poll until pred() or the deadline or a side exited; True if pred()."""
    while True:
        pair.sw.update()
        if pred():
            return True
        if not alive(pair.sp) or now_ns() > deadline_ns:
            return False
        time.sleep(poll)


def settle(args, pair, since_ns, quiet_s):
    """Wait until every connection is on rail 0 and nothing has switched for
    quiet_s seconds (since since_ns at the earliest): a switch with no fault
    in place (a false stall on a loaded machine, say) starts the count
    again.  Bounded by quiet_s + --wait.  True when settled."""
    deadline = now_ns() + int((quiet_s + args.wait) * 1e9)
    while True:
        pair.sw.update()
        quiet_from = max(since_ns, pair.sw.t_last)
        if pair.sw.all_on(0, pair.n) and now_ns() - quiet_from >= quiet_s * 1e9:
            return True
        if not alive(pair.sp) or now_ns() > deadline:
            return False
        time.sleep(0.05)


def arrived(sw, n, rail, since, seen):
    """Record in seen[i] when both sides of connection i first switched to
    `rail` after `since`, for those not seen yet."""
    for i in range(n):
        if i not in seen:
            t = sw.both_to(i, rail, since)
            if t:
                seen[i] = t


def episode(args, pair, topo, faults, kind, run):
    """Break the fabric, wait for every connection on rail 1, hold, heal,
    wait for every connection on rail 0.  Returns (row, per-connection rows)."""
    n, sp, sw = pair.n, pair.sp, pair.sw
    wait_ns = int(args.wait * 1e9)
    row = {"count": n, "fault": kind, "run": run, "wireup_s": pair.info["wireup_s"],
           "up": pair.info["up"], "pair": os.path.basename(pair.wd.path)}
    sp.mark("%s.%d inject" % (kind, run))
    if kind == "linkdown":
        t0 = now_ns()
        topo.link_down("A", "fab")
        t1 = now_ns()
    else:
        t0, t1 = faults.fabric_reset("A")
    sp.mark("%s.%d fault in place" % (kind, run))
    moved = {}

    def all_moved():
        arrived(sw, n, 1, t0, moved)
        return len(moved) == n

    wait_for(pair, all_moved, t1 + wait_ns)
    if alive(sp):
        time.sleep(args.hold)
    sp.mark("%s.%d heal" % (kind, run))
    if kind == "linkdown":
        h0 = now_ns()
        topo.link_up("A", "fab")
        h1 = now_ns()
    else:
        h0, h1 = faults.clear("A")
    sp.mark("%s.%d healed" % (kind, run))
    back = {}

    def all_back():
        arrived(sw, n, 0, h0, back)
        return sw.all_on(0, n)

    wait_for(pair, all_back, h1 + wait_ns)
    t_end = now_ns()
    sw.update()

    conns = []
    move_ms, back_ms = [], []
    for i in range(n):
        m, b = moved.get(i), back.get(i)
        mv = (max(e["t"] for e in m.values()) - t1) / 1e6 if m else None
        bk = (max(e["t"] for e in b.values()) - h1) / 1e6 if b else None
        if mv is not None and mv > args.wait * 1000:
            mv = None
        if bk is not None and bk > args.wait * 1000:
            bk = None
        if mv is not None:
            move_ms.append(mv)
        if bk is not None:
            back_ms.append(bk)
        conns.append({"count": n, "fault": kind, "run": run, "conn": i, "move_ms": mv,
                      "back_ms": bk,
                      "move_reason_listener": m["listener"].get("reason") if m else None,
                      "move_reason_connector": m["connector"].get("reason") if m else None,
                      "back_reason_listener": b["listener"].get("reason") if b else None,
                      "back_reason_connector": b["connector"].get("reason") if b else None})
    ms_ = fobench.summarize(move_ms)
    bs = fobench.summarize(back_ms)
    row.update(moved_n=len(move_ms), move_median_ms=ms_["median"], move_p90_ms=ms_["p90"],
               move_max_ms=ms_["max"], back_n=len(back_ms), back_median_ms=bs["median"],
               back_p90_ms=bs["p90"], back_max_ms=bs["max"],
               switches_listener=sw.count("listener", t0, t_end + 1),
               switches_connector=sw.count("connector", t0, t_end + 1),
               onto_down_listener=sw.count("listener", t1, h0, to=0),
               onto_down_connector=sw.count("connector", t1, h0, to=0),
               fault_s=(h1 - t1) / 1e9, inject_ms=(t1 - t0) / 1e6, heal_ms=(h1 - h0) / 1e6)
    row["moves_onto_down"] = row["onto_down_listener"] + row["onto_down_connector"]
    # Back on rail 0, but not by a failback (e.g. rail 1 failed too).
    row["back_not_failback"] = sum(
        1 for c in conns if c["back_ms"] is not None and netfault.FAILBACK not in (
            c["back_reason_listener"], c["back_reason_connector"]))
    if not alive(sp):
        row["status"] = "pair died (exit %s)" % pair.rcs()
        for line in pair.fail_lines(4):
            log("    " + line)
    elif not sw.all_on(0, n):
        row["status"] = "not all back"
    elif len(move_ms) < n:
        row["status"] = "not all moved"
    elif len(back_ms) < n:
        row["status"] = "not all back"
    else:
        row["status"] = "ok"
    log("N=%d %-8s run %d: moved %d/%d median %s p90 %s max %s ms; back %d/%d median %s p90 "
        "%s max %s ms (dwell %s); switches L %d C %d; onto a down rail L %d C %d; %s" % (
            n, kind, run, len(move_ms), n, f1(ms_["median"]), f1(ms_["p90"]), f1(ms_["max"]),
            len(back_ms), n, f1(bs["median"]), f1(bs["p90"]), f1(bs["max"]), args.dwell,
            row["switches_listener"], row["switches_connector"], row["onto_down_listener"],
            row["onto_down_connector"], row["status"]))
    return row, conns, t_end


def f1(v):
    return "-" if v is None else "%.1f" % v


def f2(v):
    return "-" if v is None else "%.2f" % v


# ---- driving the counts ---------------------------------------------------------------

def run_count(args, topo, faults, env, out, n, state):
    plan = [(kind, run) for kind in args.faults for run in range(1, args.runs + 1)]
    pair, k, last_back = None, 0, None
    for idx, (kind, run) in enumerate(plan):
        if pair is None:
            k += 1
            pair = Pair(args, topo, env, out, n, k)
            state["pairs"].append(pair.info)
            if not pair.start(args):
                for kind2, run2 in plan[idx:]:
                    state["rows"].append({"count": n, "fault": kind2, "run": run2,
                                          "wireup_s": None, "up": pair.info["up"],
                                          "status": "wire-up incomplete",
                                          "pair": os.path.basename(pair.wd.path)})
                state["incomplete"].append("N=%d: wire-up: %d of %d up" %
                                           (n, pair.info["up"], n))
                write_csvs(out, state)
                return
            last_back = None
        t_settle = now_ns() if last_back is None else last_back
        settled = settle(args, pair, t_settle, 1.0 if last_back is None else args.settle)
        unprovoked = sum(pair.sw.count(role, t_settle, now_ns() + 1) for role in SIDES)
        if not settled:
            state["rows"].append({"count": n, "fault": kind, "run": run,
                                  "wireup_s": pair.info["wireup_s"], "up": pair.info["up"],
                                  "switches_before_fault": unprovoked,
                                  "status": "not settled on rail 0 before the fault",
                                  "pair": os.path.basename(pair.wd.path)})
            state["incomplete"].append("N=%d %s run %d: not settled on rail 0 before the "
                                       "fault" % (n, kind, run))
            log("N=%d %s run %d: not every connection on rail 0 and quiet within %gs; a "
                "new pair" % (n, kind, run, args.wait))
            pair.finish("not settled")
            pair = None
            continue
        row, conns, last_back = episode(args, pair, topo, faults, kind, run)
        row["switches_before_fault"] = unprovoked
        if unprovoked:
            log("N=%d %s run %d: %d switch(es) with no fault in place before it" % (
                n, kind, run, unprovoked))
        state["rows"].append(row)
        state["conns"].extend(conns)
        if row["status"] != "ok":
            state["incomplete"].append("N=%d %s run %d: %s" % (n, kind, run, row["status"]))
        if not alive(pair.sp) or not pair.sw.all_on(0, n):
            pair.finish("after %s run %d: %s" % (kind, run, row["status"]))
            pair = None
        write_csvs(out, state)
    if pair is not None:
        pair.finish()
    for r in state["rows"]:
        if r["count"] == n and "stream" not in r:
            p = next((p for p in state["pairs"] if os.path.basename(p["dir"]) == r.get("pair")),
                     None)
            r["stream"] = p["stream"] if p else "-"
    write_csvs(out, state)


RUN_COLS = ["count", "fault", "run", "wireup_s", "up", "moved_n", "move_median_ms", "move_p90_ms",
            "move_max_ms", "back_n", "back_median_ms", "back_p90_ms", "back_max_ms",
            "switches_listener", "switches_connector", "moves_onto_down", "onto_down_listener",
            "onto_down_connector", "back_not_failback", "switches_before_fault", "status",
            "stream", "pair",
            "inject_ms", "heal_ms", "fault_s"]
CONN_COLS = ["count", "fault", "run", "conn", "move_ms", "back_ms", "move_reason_listener",
             "move_reason_connector", "back_reason_listener", "back_reason_connector"]


def write_csvs(out, state):
    for name, cols, rows in (("runs.csv", RUN_COLS, state["rows"]),
                             ("conns.csv", CONN_COLS, state["conns"])):
        with open(os.path.join(out, name), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({c: (round(v, 3) if isinstance(v, float) else v)
                            for c, v in r.items()})


# ---- report ------------------------------------------------------------------------

def groups(args, state):
    """Per (count, fault): the connections' times pooled over its runs."""
    res = []
    for n in args.counts:
        for kind in args.faults:
            rows = [r for r in state["rows"] if r["count"] == n and r["fault"] == kind]
            if not rows:
                continue
            done = [r for r in rows if "moved_n" in r]
            cs = [c for c in state["conns"] if c["count"] == n and c["fault"] == kind]
            names = set(r.get("pair") for r in rows)
            wire = [p for p in state["pairs"] if os.path.basename(p["dir"]) in names]
            res.append({
                "count": n, "fault": kind, "runs": len(done), "runs_planned": len(rows),
                "move_ms": fobench.summarize([c["move_ms"] for c in cs]),
                "back_ms": fobench.summarize([c["back_ms"] for c in cs]),
                "moved": sum(r["moved_n"] for r in done),
                "back": sum(r["back_n"] for r in done),
                "conns": n * len(done),
                "switches_listener": [r["switches_listener"] for r in done],
                "switches_connector": [r["switches_connector"] for r in done],
                "onto_down_listener": sum(r["onto_down_listener"] for r in done),
                "onto_down_connector": sum(r["onto_down_connector"] for r in done),
                "wireup_s": [p["wireup_s"] for p in wire],
                "up": [p["up"] for p in wire],
                "pairs": [{k: p.get(k) for k in ("wireup_s", "up", "count", "exit",
                                                 "wireup_failed_after_s")} for p in wire],
                "status": sorted(set(r["status"] for r in rows)),
            })
    return res


def wire_cell(p):
    """A pair's wire-up for the table: the time, or how far it got."""
    if p["wireup_s"] is not None:
        return "%.2f s" % p["wireup_s"]
    died = ", ".join("%s exit %s" % kv for kv in sorted((p.get("exit") or {}).items())
                     if kv[1] is not None)
    return "INCOMPLETE: %d/%d up after %s s%s" % (
        p["up"], p["count"], f1(p.get("wireup_failed_after_s")), " (%s)" % died if died else "")


def mmm(s, n_ok, n_all):
    if not s["n"]:
        return "- (0/%d)" % n_all
    txt = "%s / %s / %s ms" % (f1(s["median"]), f1(s["p90"]), f1(s["max"]))
    return txt if n_ok == n_all else txt + " (%d/%d)" % (n_ok, n_all)


def table(args, gs):
    print()
    print("# failover-scale: %s; %d run(s) of %s per count; messages up to %d B; "
          "RAILOVER_FAILOVER_TIMEOUT=%s KEEPALIVE=%s FAILBACK_DWELL=%s RETRY=%s..%s%s" % (
              ",".join(str(c) for c in args.counts), args.runs, "+".join(args.faults),
              args.max_size, args.timeout, args.keepalive, args.dwell, args.retry,
              args.retry_max, "".join(" " + kv for kv in args.env)))
    print("# moved: fault in place -> both sides switched to rail 1; back: heal -> both on "
          "rail 0 (compare with dwell %s + 200 ms); per connection, pooled over the runs; "
          "(k/N): only k of N within --wait %gs" % (args.dwell, args.wait))
    print("# switches per side: 'listener / connector' of each run (a clean episode: 2 "
          "per connection); onto a down rail: switches to rail 0 while the fault was in "
          "place, listener / connector, all runs")
    print()
    print("| connections | fault | timeout | moved median / p90 / max | back after heal median "
          "/ p90 / max | switches per side | onto a down rail | wire-up |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for g in gs:
        if g["runs"]:
            sws = ", ".join("%d / %d" % lc for lc in zip(g["switches_listener"],
                                                        g["switches_connector"]))
            onto = "%d / %d" % (g["onto_down_listener"], g["onto_down_connector"])
            moved = mmm(g["move_ms"], g["moved"], g["conns"])
            back = mmm(g["back_ms"], g["back"], g["conns"])
        else:
            sws = onto = moved = back = "-"
        wire = ", ".join(wire_cell(p) for p in g["pairs"]) or "-"
        print("| %d | %s | %s | %s | %s | %s | %s | %s |" % (
            g["count"], g["fault"], args.timeout, moved, back, sws, onto, wire))
    print()


def plot(args, out, gs):
    """move.png and back.png: median and max against the connection count."""
    res = {}
    for what, key, ylabel in (
            ("move", "move_ms", "ms from the fault to both sides on rail 1"),
            ("back", "back_ms", "ms from the heal to both sides on rail 0")):
        data = os.path.join(out, what + ".csv")
        with open(data, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["count", "fault", "median_ms", "max_ms", "n", "of", "label"])
            for kind in args.faults:
                for g in gs:
                    s = g[key]
                    if g["fault"] == kind and s["n"]:
                        w.writerow([g["count"], kind, "%.3f" % s["median"], "%.3f" % s["max"],
                                    s["n"], g["conns"], "" if s["n"] == g["conns"] else
                                    "%d/%d" % (s["n"], g["conns"])])
        gp = os.path.join(out, what + ".gp")
        png = os.path.join(out, what + ".png")
        colours = ["#1f5fbf", "#e07000", "#2a9d3a", "#b02020"]
        plots = []
        for i, kind in enumerate(args.faults):
            sel = 'strcol(2) eq "%s"' % kind
            c = colours[i % len(colours)]
            plots.append('"%s" using 1:(%s ? $3 : NaN) with linespoints lw 2 pt 7 lc rgb "%s" '
                         'title "%s, median"' % (data, sel, c, kind))
            plots.append('"%s" using 1:(%s ? $4 : NaN) with linespoints lw 1 dt 2 pt 6 '
                         'lc rgb "%s" title "%s, max"' % (data, sel, c, kind))
            # Points of fewer connections than ran: "k/N" beside the median.
            plots.append('"%s" using 1:(%s ? $3 : NaN):7 with labels left offset 0.8,0 '
                         'tc rgb "%s" notitle' % (data, sel, c))
        # Counts without a single time: why, at the bottom of the plot.
        notes = {}
        for g in gs:
            if not g[key]["n"]:
                why = ("wire-up %s" % "/".join("%d/%d" % (u, g["count"]) for u in g["up"])
                       if not g["runs"] else "%s: none" % g["fault"])
                notes.setdefault(g["count"], []).append(why)
        labels = ['set label %d "%s" at %d, graph 0.04 center front font ",8"' % (
            i + 1, "\\n".join(sorted(set(v))), n) for i, (n, v) in enumerate(sorted(notes.items()))]
        ref = []
        if what == "back":
            d = args.dwell_ns / 1e6
            ref = ['%g with lines dt 3 lc rgb "#808080" title "dwell %s"' % (d, args.dwell),
                   '%g with lines dt 4 lc rgb "#404040" title "dwell + 200 ms"' % (d + 200)]
        elif "linkdown" in args.faults:
            ref = ['%g with lines dt 3 lc rgb "#808080" title "timeout %s"' % (
                args.timeout_ns / 1e6, args.timeout)]
        lines = [
            "set terminal %s noenhanced size 1000,650" % ft.png_terminal(),
            'set output "%s"' % png,
            'set datafile separator ","',
            'set title "Railover: %s, per connection (median, max)\\nTIMEOUT=%s '
            'KEEPALIVE=%s DWELL=%s RETRY=%s..%s, messages up to %d B, %d run(s)"' % (
                "fault -> both sides on rail 1" if what == "move" else
                "heal -> both sides back on rail 0", args.timeout, args.keepalive,
                args.dwell, args.retry, args.retry_max, args.max_size, args.runs),
            "set logscale x 2", "set logscale y", "set grid", "set key outside right top",
            'set xlabel "connections"', 'set ylabel "%s"' % ylabel,
            "set xrange [%g:%g]" % (min(args.counts) / 1.5, max(args.counts) * 1.5),
        ] + labels + [
            "plot " + ", ".join(plots + ref),
        ]
        with open(gp, "w") as f:
            f.write("\n".join(lines) + "\n")
        res[what] = {"csv": data, "gnuplot": gp, "png": None}
        if not any(g[key]["n"] for g in gs):
            log("no %s time measured: %s not drawn" % (what, png))
            continue
        if not shutil.which("gnuplot"):
            log("gnuplot not installed (apt-get install -y gnuplot-nox): %s not drawn; script "
                "in %s" % (png, gp))
            continue
        p = subprocess.run(["gnuplot", gp], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if p.returncode != 0:
            log("gnuplot failed on %s (the numbers are in %s):\n%s" % (gp, data, p.stdout))
            continue
        res[what]["png"] = png
        log("plot: %s" % png)
    return res


# ---- main ----------------------------------------------------------------------------

def clear_results(out):
    """An earlier run's results in DIR are replaced (the smoke test runs
    with the same DIR every time); nothing else there is touched."""
    old = [e for e in os.listdir(out) if re.fullmatch(
        r"stream-\d+(-\d+)?|(runs|conns|move|back)\.csv|summary\.json|(move|back)\.(gp|png)", e)]
    for e in old:
        path = os.path.join(out, e)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    if old:
        log("replaced the results of an earlier run in %s" % out)


def main():
    args = parse_args()
    netfault.require_netns(nft=True)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    clear_results(out)
    env = ft.lib_env(args)
    cfg = {"env": env, "counts": args.counts, "runs": args.runs, "faults": args.faults,
           "wait_s": args.wait, "wireup_wait_s": args.wireup_wait, "hold_s": args.hold,
           "settle_s": args.settle, "max_size": args.max_size, "rate_ms": args.rate_ms,
           "smoke": args.smoke, "fault_side": "A (listener)", "rov_stream": args.rov_stream,
           "railover": args.railover, "kernel": platform.release(),
           "loadavg_start": fobench.load_note(),
           "started": datetime.datetime.now().isoformat(timespec="seconds")}
    t_start = time.monotonic()
    log("failover-scale: counts %s, %d run(s) of %s each; results in %s; wait %gs, wire-up "
        "wait %gs, settle %.1fs" % (",".join(str(c) for c in args.counts), args.runs,
                                    "+".join(args.faults), out, args.wait, args.wireup_wait,
                                    args.settle))
    state = {"rows": [], "conns": [], "pairs": [], "incomplete": []}
    with netfault.Topology() as topo:
        faults = fobench.Faults(topo)
        try:
            if "reset" in args.faults:
                faults.shell("A")     # nft ready before the first fault
            for n in args.counts:
                run_count(args, topo, faults, env, out, n, state)
        finally:
            faults.close()
    cfg["loadavg_end"] = fobench.load_note()
    cfg["elapsed_s"] = round(time.monotonic() - t_start, 1)
    gs = groups(args, state)
    table(args, gs)
    bad_streams = [p for p in state["pairs"] if p["stream"] == "FAILED"]
    unprovoked = [(r["count"], r["fault"], r["run"], r["switches_before_fault"])
                  for r in state["rows"] if r.get("switches_before_fault")]
    print("# switches with no fault in place (while settling before a fault; should be 0): %s"
          % (", ".join("%d at N=%d before %s run %d" % (v, n, k, run)
                       for n, k, run, v in unprovoked) or "0"))
    for p in state["pairs"]:
        print("# pair %s: wire-up %s (last established %s s), %d/%d up; stream check: %s%s" % (
            os.path.basename(p["dir"]), "%.2f s" % p["wireup_s"] if p["wireup_s"] is not None
            else "INCOMPLETE", f2(p.get("established_s")), p["up"], p["count"], p["stream"],
            (" (" + "; ".join(p["stream_errors"][:2]) + ")") if p["stream_errors"] else ""))
    print("# load average: %s at start, %s at end (2 shared cores: compare medians); %.0f s" % (
        cfg["loadavg_start"], cfg["loadavg_end"], cfg["elapsed_s"]))
    summary = {"config": cfg, "groups": gs, "pairs": state["pairs"],
               "switches_before_fault": unprovoked,
               "incomplete": state["incomplete"],
               "streams_failed": [os.path.basename(p["dir"]) for p in bad_streams]}
    summary["plots"] = plot(args, out, gs)
    ft.save(out, summary)
    print("# results: %s/runs.csv, conns.csv, summary.json" % out, flush=True)
    if state["incomplete"] or bad_streams:
        print("# exit 1: %s" % "; ".join(state["incomplete"] + [
            "stream check FAILED in %s" % os.path.basename(p["dir"]) for p in bad_streams]))
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except netfault.Skip as e:
        print("SKIP: %s" % e, flush=True)
        netfault.run_cleanups()
        sys.exit(netfault.SKIP)
    except netfault.Failure as e:
        print("FAILED: %s" % e, flush=True)
        netfault.run_cleanups()
        sys.exit(1)
