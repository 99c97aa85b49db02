#!/usr/bin/env bash
# Railover against the same rail used raw, side by side in one run.
#
# Starts `railover perf --listen 127.0.0.1:PORT` with RAILOVER_RAILS=tcp@lo,
# then runs the client R times in raw TCP mode and R times in Railover mode,
# alternating (the order flips every round so neither path always runs
# first), and prints the median of every result per size:
#
#   size, raw p50 latency, railover p50 latency, ratio, paired, raw MB/s,
#   railover MB/s, ratio, paired   (ratio = railover / raw)
#
# "ratio" is the ratio of the two medians; "paired" is the median of the
# per-round ratios, each taken from two runs seconds apart, so a drift in
# the machine's load over the whole run cancels out of it.
#
# With --base PATH, a second railover tool (a build of an earlier commit,
# with its own library) runs as a third path in every round, against its own
# server: "base p50"/"base MB/s" and "vs base" (median of the per-round
# railover/base ratios) tell a change from the machine's drift.
#
# With 2+ cores the server and the client are pinned to different cores.
# Every JSON line the client printed is kept (--out FILE) for later analysis.
set -euo pipefail

usage() {
    cat <<EOF
usage: $(basename "$0") [options] [-- extra railover perf client options]
  --bin PATH        the railover tool (default: \$RAILOVER_BIN, railover in PATH,
                    or a build directory next to this script)
  --base PATH       also run this railover tool (another build) every round
  --reps R          rounds of raw + railover (default 5)
  --port PORT       server port on 127.0.0.1 (default: any free port)
  --sizes LIST      message sizes (default: the tool's, 8,4096,65536,1048576)
  --iters N         latency iterations (default: the tool's)
  --warmup N        latency warmup iterations (default: the tool's)
  --bw-bytes N      bytes per bandwidth repetition (default: the tool's)
  --out FILE        keep every client JSON line in FILE
  --json            print the comparison as JSON lines instead of a table
EOF
}

script_dir=$(cd "$(dirname "$0")" && pwd)
bin=${RAILOVER_BIN:-}
base=
reps=5
port=0
out=
json=0
client_args=()

while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --sizes|--iters|--warmup|--bw-bytes) client_args+=("$1" "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --json) json=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; client_args+=("$@"); break ;;
    *) echo "perf-compare: unknown option '$1'" >&2; usage >&2; exit 1 ;;
    esac
done

if ! [[ "$reps" =~ ^[1-9][0-9]*$ ]]; then
    echo "perf-compare: --reps must be a positive number" >&2
    exit 1
fi
if [ -z "$bin" ]; then
    if command -v railover >/dev/null 2>&1; then
        bin=$(command -v railover)
    else
        for cand in "$script_dir"/../build*/tools/railover; do
            if [ -x "$cand" ]; then bin=$cand; break; fi
        done
    fi
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "perf-compare: railover tool not found; build it or pass --bin PATH" >&2
    exit 1
fi
if [ -n "$base" ] && [ ! -x "$base" ]; then
    echo "perf-compare: --base $base is not an executable" >&2
    exit 1
fi
command -v python3 >/dev/null 2>&1 || { echo "perf-compare: needs python3" >&2; exit 1; }

export RAILOVER_RAILS=tcp@lo

server_pin=()
client_pin=()
ncpu=$(nproc 2>/dev/null || echo 1)
if [ "$ncpu" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    server_pin=(taskset -c 0)
    client_pin=(taskset -c 1)
    pinning="server on cpu 0, client on cpu 1"
else
    pinning="not pinned ($ncpu cpu)"
fi

work=$(mktemp -d)
server_pids=()
cleanup() {
    for pid in "${server_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_server TOOL NAME PORT: prints the address it listens on
start_server() {
    local tool=$1 name=$2 p=$3 a=
    "${server_pin[@]}" "$tool" perf --listen "127.0.0.1:$p" >"$work/$name.out" \
        2>"$work/$name.err" &
    server_pids+=($!)
    for _ in $(seq 100); do
        a=$(sed -n 's/^railover perf: listening on \([^ ]*\).*/\1/p' "$work/$name.out")
        [ -n "$a" ] && break
        if ! kill -0 "${server_pids[-1]}" 2>/dev/null; then break; fi
        sleep 0.1
    done
    if [ -z "$a" ]; then
        echo "perf-compare: the $name server did not start:" >&2
        cat "$work/$name.out" "$work/$name.err" >&2
        exit 1
    fi
    echo "$a"
}

start_server "$bin" server "$port" >"$work/addr"
addr=$(cat "$work/addr")
base_addr=
modes=(raw railover)
if [ -n "$base" ]; then
    start_server "$base" base-server 0 >"$work/base-addr"
    base_addr=$(cat "$work/base-addr")
    modes=(raw railover base)
fi

echo "# perf-compare: $bin, server $addr, RAILOVER_RAILS=$RAILOVER_RAILS," \
     "$reps rounds, $pinning" >&2
[ -z "$base" ] || echo "# base: $base, server $base_addr" >&2
# Busy polling on both sides: any other load skews the numbers badly.
if [ -r /proc/loadavg ]; then
    read -r load1 _ </proc/loadavg
    if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.5 else 1)" "$load1"; then
        echo "# warning: load average $load1 before the run: other work competes for the" \
             "cores, the numbers are unreliable (compare ratios, rerun when idle)" >&2
    fi
fi

run_client() {
    local mode=$1 round=$2 tool=$bin a=$addr
    local args=(--json "${client_args[@]}")
    [ "$mode" = raw ] && args+=(--raw)
    [ "$mode" = base ] && { tool=$base; a=$base_addr; }
    echo "# round $round/$reps: $mode" >&2
    if ! "${client_pin[@]}" "$tool" perf "$a" "${args[@]}" >"$work/client.out" \
            2>"$work/client.err"; then
        echo "perf-compare: the $mode client failed in round $round:" >&2
        cat "$work/client.err" >&2
        echo "--- server logs:" >&2
        cat "$work"/*server.err >&2
        exit 1
    fi
    sed -e "s/^{/{\"round\":$round,/" \
        -e "$([ "$mode" = base ] && echo 's/"path":"railover"/"path":"base"/' || echo 's/^//')" \
        "$work/client.out" >>"$work/results.jsonl"
}

# Rotate the order every round, so that no path always runs first.
for round in $(seq "$reps"); do
    n=${#modes[@]}
    for i in $(seq 0 $((n - 1))); do
        if [ $((round % 2)) -eq 1 ]; then
            run_client "${modes[$(( (i + round / 2) % n ))]}" "$round"
        else
            run_client "${modes[$(( (n - 1 - i + round / 2) % n ))]}" "$round"
        fi
    done
done

if [ -n "$out" ]; then
    cp "$work/results.jsonl" "$out"
fi

python3 - "$work/results.jsonl" "$json" <<'EOF'
import json
import statistics
import sys

path, as_json = sys.argv[1], sys.argv[2] == "1"
vals = {}
by_round = {}
rails = set()
with open(path) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        key = "p50_us" if r["test"] == "latency" else "mb_s"
        vals.setdefault((r["test"], r["path"], r["size"]), []).append(r[key])
        by_round.setdefault((r["test"], r["size"], r["round"]), {})[r["path"]] = r[key]
        if r["path"] == "railover":
            rails.add(r["rail"])

def med(test, p, size):
    v = vals.get((test, p, size))
    return statistics.median(v) if v else None

def ratio(a, b):
    return round(a / b, 4) if a is not None and b else None

def paired(test, size, den="raw"):
    v = [p["railover"] / p[den] for (t, s, _), p in by_round.items()
         if t == test and s == size and den in p and "railover" in p and p[den]]
    return round(statistics.median(v), 4) if v else None

has_base = any(k[1] == "base" for k in vals)

sizes = sorted({k[2] for k in vals})
rows = []
for s in sizes:
    lr, lv = med("latency", "raw", s), med("latency", "railover", s)
    br, bv = med("bandwidth", "raw", s), med("bandwidth", "railover", s)
    rows.append((s, lr, lv, ratio(lv, lr), paired("latency", s), br, bv, ratio(bv, br),
                 paired("bandwidth", s), med("latency", "base", s),
                 paired("latency", s, "base"), med("bandwidth", "base", s),
                 paired("bandwidth", s, "base")))

if as_json:
    for s, lr, lv, lrat, lpair, br, bv, brat, bpair, lb, lbp, bb, bbp in rows:
        r = {"test": "compare", "size": s, "raw_p50_us": lr,
             "railover_p50_us": lv, "lat_ratio": lrat, "lat_ratio_paired": lpair,
             "raw_mb_s": br, "railover_mb_s": bv, "bw_ratio": brat,
             "bw_ratio_paired": bpair, "rail": ",".join(sorted(rails))}
        if has_base:
            r.update({"base_p50_us": lb, "lat_vs_base_paired": lbp, "base_mb_s": bb,
                      "bw_vs_base_paired": bbp})
        print(json.dumps(r, separators=(",", ":")))
    sys.exit(0)

def fmt(v, spec):
    return format(v, spec) if v is not None else "-"

print("# medians; ratio = railover / raw (latency: above 1 is slower; bandwidth: below 1 is"
      " slower); railover rail: %s" % ",".join(sorted(rails)))
print("%10s %12s %12s %8s %8s %12s %12s %8s %8s" % ("size", "raw p50 us", "rov p50 us",
                                                     "ratio", "paired", "raw MB/s",
                                                     "rov MB/s", "ratio", "paired"))
for s, lr, lv, lrat, lpair, br, bv, brat, bpair, *_ in rows:
    print("%10d %12s %12s %8s %8s %12s %12s %8s %8s" % (
        s, fmt(lr, ".2f"), fmt(lv, ".2f"), fmt(lrat, ".3f"), fmt(lpair, ".3f"),
        fmt(br, ".1f"), fmt(bv, ".1f"), fmt(brat, ".3f"), fmt(bpair, ".3f")))
if has_base:
    print("# base: the --base tool; vs base = median of the per-round railover / base ratios")
    print("%10s %12s %12s %12s %12s" % ("size", "base p50 us", "vs base", "base MB/s",
                                        "vs base"))
    for s, *_, lb, lbp, bb, bbp in rows:
        print("%10d %12s %12s %12s %12s" % (s, fmt(lb, ".2f"), fmt(lbp, ".3f"),
                                            fmt(bb, ".1f"), fmt(bbp, ".3f")))
EOF
