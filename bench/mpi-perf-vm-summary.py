#!/usr/bin/env python3
"""Summarize a bench/mpi-perf-vm.sh run: NetPIPE across the two Soft-RoCE VMs.

    mpi-perf-vm-summary.py OUT [--command TEXT]

Reads OUT/vm/runs.csv (one row per NetPIPE job, written by
bench/mpi-perf-vm-job.sh in VM a) and the jobs' output in
OUT/vm/mpi-perf-vm/job-rR-SIZE-MODE.log (what carried each job: UCX's tag
lane, the railover rails the connection was made on and moved to, bml's
choice of BTL), and writes into OUT:

  runs.csv     one row per job: round, size, order, mode, repeats,
               latency_us (NetPIPE's time of half a round trip), mb_s (size
               over it, 10^6 B/s), exit, wall_s, bytes VM a sent on the
               fabric and on eth, transport (what the job log shows), ok
               (the transport is the one the mode asks for)
  ratios.csv   per round and size: the time ratios rov/ucx, rov/tcp,
               rov/rov-fooff (the bandwidth ratio is the inverse)
  summary.csv  per size: medians per mode; per ratio median, min, max
  summary.md   the markdown tables (also printed)

Exit 0 when every mode has a number at every size, 1 otherwise.
"""

import argparse
import csv
import os
import re
import statistics
import sys

MODES = ("ucx", "rov", "rov-fooff", "tcp")
RATIOS = (("rov_ucx", "rov", "ucx"), ("rov_tcp", "rov", "tcp"), ("on_off", "rov", "rov-fooff"))


def _mpi_perf():
    """bench/mpi-perf.py (the namespace benchmark) as a module, for what the
    two summaries share; its name is not an identifier."""
    import importlib.util
    sys.dont_write_bytecode = True  # nothing written into the source tree
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi-perf.py")
    spec = importlib.util.spec_from_file_location("mpi_perf", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fmt_size = _mpi_perf().fmt_size


def transport(mode, path):
    """(what carried the job, as the log shows it; whether it is the
    transport the mode asks for)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return "no log", False
    if mode == "ucx":
        # ep_cfg[N]: tag(self/memory0 rc_verbs/rxe0:1): the endpoint to
        # itself has self, the one to the peer rc_verbs only.
        lanes = set()
        for m in re.finditer(r"ep_cfg\[\d+\]: tag\(([^)]*)\)", text):
            lanes.update(w for w in m.group(1).split() if not w.startswith("self/"))
        desc = "tag " + (",".join(sorted(lanes)) or "?")
        return desc, bool(lanes) and all(w.startswith("rc_verbs/") for w in lanes)
    if mode.startswith("rov"):
        rails = sorted(set(re.findall(r"btl railover: connected to \S+ on (\S+)", text)))
        moves = re.findall(r"moved from (\S+) to (\S+)", text)
        used = "Using railover btl" in text
        desc = "on " + (",".join(rails) or "?")
        if moves:
            desc += "; %d move(s): %s" % (len(moves), ", ".join("%s>%s" % m for m in moves))
        ok = used and bool(rails) and all(r.startswith("verbs@") for r in rails) and not moves
        return desc, ok
    used = "Using tcp btl" in text
    return ("btl tcp" if used else "?"), used


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--command", default="")
    args = ap.parse_args()
    vm = os.path.join(args.out, "vm")
    rows = []
    with open(os.path.join(vm, "runs.csv")) as f:
        for r in csv.DictReader(f):
            rnd, size, mode = int(r["round"]), int(r["size"]), r["mode"]
            t = float(r["t_s"]) if r["t_s"] else None
            desc, ok = transport(mode, os.path.join(vm, "mpi-perf-vm",
                                                    "job-r%d-%d-%s.log" % (rnd, size, mode)))
            rows.append({"round": rnd, "size": size, "order": int(r["order"]), "mode": mode,
                         "repeats": int(r["repeats"]),
                         "latency_us": t * 1e6 if t else None,
                         "mb_s": size / t / 1e6 if t else None,
                         "exit": int(r["exit"]), "wall_s": float(r["wall_s"]),
                         "fab_tx_a": int(r["fab_tx_a"]), "eth_tx_a": int(r["eth_tx_a"]),
                         "transport": desc, "ok": int(ok)})
    keys = list(rows[0].keys()) if rows else []
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("%.4f" % v if isinstance(v, float) else ("" if v is None else v))
                        for k, v in r.items()})
    sizes = sorted({r["size"] for r in rows})
    rounds = sorted({r["round"] for r in rows})
    val = {(r["round"], r["mode"], r["size"]): r["latency_us"] for r in rows if r["latency_us"]}
    complete = all(any((rd, m, s) in val for rd in rounds) for m in MODES for s in sizes)

    ratio_rows, summary = [], []
    for s in sizes:
        med = {}
        for m in MODES:
            v = [val[(rd, m, s)] for rd in rounds if (rd, m, s) in val]
            med[m] = statistics.median(v) if v else None
        rr = {k: [] for k, _a, _b in RATIOS}
        for rd in rounds:
            row = [rd, s]
            for k, a, b in RATIOS:
                x = val.get((rd, a, s)), val.get((rd, b, s))
                q = x[0] / x[1] if x[0] and x[1] else None
                if q is not None:
                    rr[k].append(q)
                row.append("" if q is None else "%.4f" % q)
            ratio_rows.append(row)
        st = {k: (statistics.median(v), min(v), max(v)) if v else None for k, v in rr.items()}
        summary.append((s, med, st, len(rr["rov_ucx"])))

    with open(os.path.join(args.out, "ratios.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "size"] + ["time_%s" % k for k, _a, _b in RATIOS])
        w.writerows(ratio_rows)
    with open(os.path.join(args.out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        hdr = ["size"]
        for m in MODES:
            hdr += ["%s_latency_us" % m, "%s_mb_s" % m]
        for k, _a, _b in RATIOS:
            hdr += ["time_%s_%s" % (k, x) for x in ("median", "min", "max")]
        w.writerow(hdr)
        for s, med, st, _n in summary:
            row = [s]
            for m in MODES:
                row += ["%.3f" % med[m], "%.4f" % (s / med[m])] if med[m] else ["", ""]
            for k, _a, _b in RATIOS:
                row += ["%.4f" % x for x in st[k]] if st[k] else ["", "", ""]
            w.writerow(row)

    def sp(x):
        return "%.2f (%.2f-%.2f)" % x if x else "-"

    def us(x):
        return "%.0f" % x if x and x >= 100 else ("%.1f" % x if x else "-")

    def mbs(s, x):
        return "%.3g" % (s / x) if x else "-"

    out = []
    out.append("Medians over %d paired round(s) of NetPIPE's time of half a round trip (us) "
               "and the ping-pong bandwidth (MB/s, 10^6 B/s, size over that time):" % len(rounds))
    out.append("")
    out.append("| size | ucx us | rov us | rov fo-off us | tcp us | ucx MB/s | rov MB/s "
               "| rov fo-off MB/s | tcp MB/s |")
    out.append("| --- " * 9 + "|")
    for s, med, _st, _n in summary:
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            (fmt_size(s),) + tuple(us(med[m]) for m in MODES) +
            tuple(mbs(s, med[m]) for m in MODES)))
    out.append("")
    out.append("Time ratios, per round (the two measured side by side), median (min-max over "
               "the rounds); above 1 railover is slower, the bandwidth ratio is the inverse:")
    out.append("")
    out.append("| size | rov / ucx | rov / tcp | fo on / off | rounds |")
    out.append("| --- | --- | --- | --- | --- |")
    for s, _med, st, n in summary:
        out.append("| %s | %s | %s | %s | %d |" % (fmt_size(s), sp(st["rov_ucx"]),
                                                   sp(st["rov_tcp"]), sp(st["on_off"]), n))
    bad = [r for r in rows if not r["ok"] or r["latency_us"] is None]
    out.append("")
    walls = [r["wall_s"] for r in rows]
    out.append("%d jobs, %.0f s of mpirun wall time (median %.1f s a job)." % (
        len(rows), sum(walls), statistics.median(walls) if walls else 0))
    if bad:
        out.append("")
        out.append("%d job(s) without a number or not on the transport asked for:" % len(bad))
        for r in bad:
            out.append("- round %d %s %s: %s, exit %d" % (
                r["round"], fmt_size(r["size"]), r["mode"], r["transport"], r["exit"]))
    else:
        out.append("Every job ran on the transport asked for (ucx: tag lane rc_verbs/rxe0:1; "
                   "rov, rov fo-off: connected on the verbs rail, no move; tcp: btl tcp).")
    text = "\n".join(out) + "\n"
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text, end="")
    if not complete:
        print("FAIL: a mode has no number at some size", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
