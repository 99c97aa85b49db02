#!/usr/bin/env bash
# Fault-free cost of the failover engine: RAILOVER_FAILOVER=on against =off,
# side by side in one run, over loopback with `railover perf`.
#
# Two servers run for the whole benchmark, one per setting (the server and
# the client of a run share the setting, as they must).  A round runs the
# client once per size against each server, on and off back to back (a few
# seconds apart, so both see the same load on a shared machine), the order
# flipping every size and every round so that neither setting always runs
# first.  Every result is kept; the table shows per size:
#
#   size, p50 latency on / off and ratio, MB/s on / off and ratio
#                                           (ratio = on / off, medians)
#
# plus the median [min..max] of the per-round ratios (each on run against
# the off run next to it, which cancels slow drifts in the load of the
# machine), and the ratio of the best runs (lowest latency, highest
# bandwidth: what each setting does when nothing else interferes).
#
# Both settings use the same rails (default two TCP rails on loopback,
# tcp@127.0.0.1,tcp@127.0.0.2, so that the engine has somewhere to fail
# over to) and the same fast-detection settings as bench/failover-time.py
# (RAILOVER_FAILOVER_TIMEOUT=250ms, RAILOVER_KEEPALIVE=100ms): the engine's
# 2.5 ms tick and its probes are active in "on" and absent in "off".
set -euo pipefail

usage() {
    cat <<EOF
usage: $(basename "$0") [options]
  --bin PATH        the railover tool (default: \$RAILOVER_BIN, railover in PATH,
                    or a build directory next to this script, build-bench first)
  --reps R          rounds of on + off (default 9)
  --sizes LIST      message sizes (default 8,65536,1048576)
  --iters N         latency iterations (default: the tool's)
  --warmup N        latency warmup iterations (default: the tool's)
  --bw-bytes N      bytes per bandwidth repetition (default per size: 128Ki
                    messages' worth, at most 256M; 1M for 8-byte messages)
  --rails LIST      RAILOVER_RAILS of both settings (default tcp@127.0.0.1,tcp@127.0.0.2)
  --timeout T       RAILOVER_FAILOVER_TIMEOUT of "on" (default 250ms)
  --keepalive T     RAILOVER_KEEPALIVE of "on" (default 100ms)
  --out DIR         keep every client JSON line (on.jsonl, off.jsonl) and the
                    summary (summary.json, table.txt) in DIR
  --json            print the comparison as JSON lines instead of a table
EOF
}

script_dir=$(cd "$(dirname "$0")" && pwd)
bin=${RAILOVER_BIN:-}
reps=9
sizes=8,65536,1048576
rails=tcp@127.0.0.1,tcp@127.0.0.2
fo_timeout=250ms
keepalive=100ms
out=
json=0
client_args=()
bw_bytes=

while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters|--warmup) client_args+=("$1" "$2"); shift 2 ;;
    --bw-bytes) bw_bytes=$2; shift 2 ;;
    --rails) rails=$2; shift 2 ;;
    --timeout) fo_timeout=$2; shift 2 ;;
    --keepalive) keepalive=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --json) json=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "failover-overhead: unknown option '$1'" >&2; usage >&2; exit 1 ;;
    esac
done

if ! [[ "$reps" =~ ^[1-9][0-9]*$ ]]; then
    echo "failover-overhead: --reps must be a positive number" >&2
    exit 1
fi
if [ -z "$bin" ]; then
    for cand in "$script_dir"/../build-bench/tools/railover "$script_dir"/../build*/tools/railover; do
        if [ -x "$cand" ]; then bin=$cand; break; fi
    done
    if [ -z "$bin" ] && command -v railover >/dev/null 2>&1; then
        bin=$(command -v railover)
    fi
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "failover-overhead: railover tool not found; build it or pass --bin PATH" >&2
    exit 1
fi
command -v python3 >/dev/null 2>&1 || { echo "failover-overhead: needs python3" >&2; exit 1; }

# The same environment for both settings but RAILOVER_FAILOVER.
for v in $(env | sed -n 's/^\(RAILOVER_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export RAILOVER_RAILS=$rails RAILOVER_FAILOVER_TIMEOUT=$fo_timeout RAILOVER_KEEPALIVE=$keepalive
export RAILOVER_LOG=warn

server_pin=()
client_pin=()
ncpu=$(nproc 2>/dev/null || echo 1)
if [ "$ncpu" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    server_pin=(taskset -c 0)
    client_pin=(taskset -c 1)
    pinning="servers on cpu 0, client on cpu 1"
else
    pinning="not pinned ($ncpu cpu)"
fi

work=$(mktemp -d)
declare -A server_pid=() addr=()
cleanup() {
    for s in "${!server_pid[@]}"; do
        kill "${server_pid[$s]}" 2>/dev/null || true
        wait "${server_pid[$s]}" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for s in on off; do
    RAILOVER_FAILOVER=$s "${server_pin[@]}" "$bin" perf --listen 127.0.0.1:0 \
        >"$work/server-$s.out" 2>"$work/server-$s.err" &
    server_pid[$s]=$!
done
for s in on off; do
    a=
    for _ in $(seq 100); do
        a=$(sed -n 's/^railover perf: listening on \([^ ]*\).*/\1/p' "$work/server-$s.out")
        [ -n "$a" ] && break
        kill -0 "${server_pid[$s]}" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$a" ]; then
        echo "failover-overhead: the $s server did not start:" >&2
        cat "$work/server-$s.out" "$work/server-$s.err" >&2
        exit 1
    fi
    addr[$s]=$a
done

read -r load_start _ </proc/loadavg 2>/dev/null || load_start=?
echo "# failover-overhead: $bin; RAILOVER_RAILS=$RAILOVER_RAILS" \
     "RAILOVER_FAILOVER_TIMEOUT=$RAILOVER_FAILOVER_TIMEOUT RAILOVER_KEEPALIVE=$RAILOVER_KEEPALIVE;" \
     "servers on=${addr[on]} off=${addr[off]}; $reps rounds; $pinning; load $load_start" >&2

size_bytes() {   # 8, 64K, 1M, 1G -> bytes
    python3 -c "import sys; v=sys.argv[1].upper(); m={'K':1<<10,'M':1<<20,'G':1<<30};
print(int(v[:-1])*m[v[-1]] if v[-1] in m else int(v))" "$1"
}

run_client() {
    local s=$1 round=$2 size=$3 bw
    bw=$bw_bytes
    if [ -z "$bw" ]; then
        bw=$(( $(size_bytes "$size") * 131072 ))
        [ "$bw" -le $((256 << 20)) ] || bw=$((256 << 20))
    fi
    if ! RAILOVER_FAILOVER=$s "${client_pin[@]}" "$bin" perf "${addr[$s]}" --json \
            --sizes "$size" --bw-bytes "$bw" "${client_args[@]}" >"$work/run.jsonl" \
            2>"$work/client.err"; then
        echo "failover-overhead: the client (failover $s) failed in round $round:" >&2
        cat "$work/client.err" >&2
        echo "--- server log:" >&2
        cat "$work/server-$s.err" >&2
        exit 1
    fi
    # Tag every line with its round, so the summary can pair on/off runs.
    sed "s/^{/{\"round\":$round,/" "$work/run.jsonl" >>"$work/$s.jsonl"
}

IFS=, read -r -a size_list <<<"$sizes"
flip=0
for round in $(seq "$reps"); do
    echo "# round $round/$reps" >&2
    for size in "${size_list[@]}"; do
        if [ $((flip % 2)) -eq 0 ]; then
            run_client on "$round" "$size"
            run_client off "$round" "$size"
        else
            run_client off "$round" "$size"
            run_client on "$round" "$size"
        fi
        flip=$((flip + 1))
    done
    # An odd number of sizes flips by itself from round to round; an even
    # number needs one more flip.
    [ $(( ${#size_list[@]} % 2 )) -eq 1 ] || flip=$((flip + 1))
done
read -r load_end _ </proc/loadavg 2>/dev/null || load_end=?

# A connection that switched rails in a fault-free run would make the
# comparison meaningless: say so.
for s in on off; do
    if grep -q 'switched from rail' "$work/server-$s.err"; then
        echo "# warning: the $s server saw rail switches:" >&2
        grep 'switched from rail' "$work/server-$s.err" | head -3 >&2
    fi
done

summary=$(python3 - "$work" "$json" "$reps" "$load_start" "$load_end" <<'EOF'
import json
import statistics
import sys

work, as_json, reps, load0, load1 = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), \
    sys.argv[4], sys.argv[5]
vals = {}      # (setting, test, size) -> [values]
by_round = {}  # (setting, test, size, round) -> value
rails = set()
for s in ("on", "off"):
    with open("%s/%s.jsonl" % (work, s)) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            key = "p50_us" if r["test"] == "latency" else "mb_s"
            vals.setdefault((s, r["test"], r["size"]), []).append(r[key])
            by_round[(s, r["test"], r["size"], r["round"])] = r[key]
            rails.add(r.get("rail", "?"))


def med(s, test, size):
    v = vals.get((s, test, size))
    return statistics.median(v) if v else None


def ratio(a, b):
    return a / b if a is not None and b else None


def round_ratios(test, size):
    out = []
    for k in range(1, reps + 1):
        a, b = by_round.get(("on", test, size, k)), by_round.get(("off", test, size, k))
        if a is not None and b:
            out.append(a / b)
    return out


rows = []
for size in sorted({k[2] for k in vals}):
    row = {"test": "failover_overhead", "size": size}
    for test, unit in (("latency", "p50_us"), ("bandwidth", "mb_s")):
        on, off = med("on", test, size), med("off", test, size)
        rr = round_ratios(test, size)
        pre = "lat" if test == "latency" else "bw"
        best = min if test == "latency" else max
        b_on = best(vals[("on", test, size)]) if vals.get(("on", test, size)) else None
        b_off = best(vals[("off", test, size)]) if vals.get(("off", test, size)) else None
        row.update({"%s_on_%s" % (pre, unit): on, "%s_off_%s" % (pre, unit): off,
                    "%s_best_on" % pre: b_on, "%s_best_off" % pre: b_off,
                    "%s_best_ratio" % pre: ratio(b_on, b_off),
                    "%s_ratio" % pre: ratio(on, off),
                    "%s_round_ratio_median" % pre: statistics.median(rr) if rr else None,
                    "%s_round_ratio_min" % pre: min(rr) if rr else None,
                    "%s_round_ratio_max" % pre: max(rr) if rr else None,
                    "%s_n" % pre: len(vals.get(("on", test, size), []))})
    rows.append(row)

with open("%s/summary.json" % work, "w") as fo:
    json.dump({"rounds": reps, "load_start": load0, "load_end": load1,
               "rails": sorted(rails), "rows": rows}, fo, indent=1)

if as_json:
    for row in rows:
        print(json.dumps(row, separators=(",", ":")))
    sys.exit(0)


def f(v, spec):
    return "-" if v is None else format(v, spec)


print("# medians of %d rounds; ratio = on / off (latency: above 1 = on is slower; bandwidth:"
      " below 1 = on is slower); goal: within 2%%" % reps)
print("# per-round: median [min..max] of on/off of the two runs of one size in one round;"
      " best: lowest latency / highest bandwidth of each setting; rail %s; load average %s at"
      " start, %s at end" % (",".join(sorted(rails)), load0, load1))
print("%9s | %9s %9s %7s %22s %6s | %9s %9s %7s %22s %6s" % (
    "size", "p50 on us", "off us", "ratio", "per-round ratio", "best",
    "on MB/s", "off MB/s", "ratio", "per-round ratio", "best"))
for r in rows:
    print("%9d | %9s %9s %7s %22s %6s | %9s %9s %7s %22s %6s" % (
        r["size"], f(r["lat_on_p50_us"], ".2f"), f(r["lat_off_p50_us"], ".2f"),
        f(r["lat_ratio"], ".3f"),
        "%s [%s..%s]" % (f(r["lat_round_ratio_median"], ".3f"),
                         f(r["lat_round_ratio_min"], ".2f"), f(r["lat_round_ratio_max"], ".2f")),
        f(r["lat_best_ratio"], ".3f"),
        f(r["bw_on_mb_s"], ".1f"), f(r["bw_off_mb_s"], ".1f"), f(r["bw_ratio"], ".3f"),
        "%s [%s..%s]" % (f(r["bw_round_ratio_median"], ".3f"),
                         f(r["bw_round_ratio_min"], ".2f"), f(r["bw_round_ratio_max"], ".2f")),
        f(r["bw_best_ratio"], ".3f")))
EOF
)
echo "$summary"
if [ -n "$out" ]; then
    mkdir -p "$out"
    cp "$work/on.jsonl" "$work/off.jsonl" "$out/"
    [ -f "$work/summary.json" ] && cp "$work/summary.json" "$out/"
    echo "$summary" >"$out/table.txt"
    {
        echo "RAILOVER_RAILS=$RAILOVER_RAILS RAILOVER_FAILOVER_TIMEOUT=$RAILOVER_FAILOVER_TIMEOUT"
        echo "RAILOVER_KEEPALIVE=$RAILOVER_KEEPALIVE reps=$reps sizes=$sizes" \
             "bw-bytes=${bw_bytes:-per size} client: ${client_args[*]}"
        echo "$pinning"
    } >"$out/config.txt"
    echo "# results kept in $out" >&2
fi
