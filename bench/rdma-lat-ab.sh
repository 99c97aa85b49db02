#!/usr/bin/env bash
# Two-VM job (tests/vm/vmrun --two): 8-byte ping-pong latency of two builds
# of Railover side by side, over the verbs and the UCX rail, with
# ib_send_lat and ucx_perftest beside them, alternately in every round, so
# that a change can be told from the machine's drift.
#
#   tests/vm/vmrun --two --timeout 1500 --out DIR -- \
#       bench/rdma-lat-ab.sh [--bw] NEW_BUILD BASE_BUILD [ROUNDS]
#
# With --bw, streaming bandwidth instead (64 KiB and 1 MiB messages, 32 MiB
# per size and run, 10^6 B/s) of the two builds alone, no raw tool: a
# change's effect on the receiving side's progress and sleep.
#
# BASE_BUILD is a copy of a build tree (cp -a build /some/where; not under
# /tmp, which the VMs have their own of, so every base run fails): its own
# tools/railover runs with LD_LIBRARY_PATH at that copy.  Prints one line
# per measurement (round, what, one-way p50 in us), saved in $VMOUT/ab.txt,
# then the per-round ratios new/base and new/raw tool with their medians.
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
bw=0
[ "${1:-}" = --bw ] && bw=1 && shift
new=${1:?usage: rdma-lat-ab.sh [--bw] NEW_BUILD BASE_BUILD [ROUNDS]}
base=${2:?usage: rdma-lat-ab.sh [--bw] NEW_BUILD BASE_BUILD [ROUNDS]}
rounds=${3:-5}
iters=2000
BENCH_PORT0=19000
# shellcheck source=bench/rdma-lib.sh
. "$(dirname "$0")/rdma-lib.sh"
out=$VMOUT/ab.txt
: > "$out"

rovrun() { # BUILD RAIL PERF-ARGS...: the client's JSON lines, server on next_port
    local lib=$1 rail=$2 tool=$1/tools/railover
    shift 2
    next_port
    rexec "env LD_LIBRARY_PATH=$lib RAILOVER_RAILS=$rail $ucx_env setsid timeout 120 $tool perf --listen $PEER_ETH:$port > /tmp/rp.log 2>&1 &"
    sleep 3
    env LD_LIBRARY_PATH="$lib" RAILOVER_RAILS="$rail" $ucx_env timeout 120 "$tool" perf \
        "$PEER_ETH:$port" --json "$@" 2>/dev/null
    rexec "pkill -f 'perf --listen $PEER_ETH:$port' || true"
}
rovlat() { # BUILD RAIL
    rovrun "$1" "$2" --sizes 8 --iters $iters --bw-bytes 1 | grep '"latency"' | json_field p50_us
}
# rec_bw ROUND RAIL KIND BUILD: "ROUND RAIL64k-KIND MB/s", "ROUND RAIL1m-KIND MB/s"
rec_bw() {
    local lines v64 v1m
    lines=$(rovrun "$4" "$2" --sizes 65536,1048576 --iters 10 --bw-bytes 33554432 | grep '"bandwidth"')
    v64=$(echo "$lines" | grep '"size": *65536' | json_field mb_s)
    v1m=$(echo "$lines" | grep '"size": *1048576' | json_field mb_s)
    rec "$1 ${2}64k-$3 ${v64:-nan}"
    rec "$1 ${2}1m-$3 ${v1m:-nan}"
}

lat_rounds() {
    for r in $(seq "$rounds"); do
        log "round $r of $rounds"
        v=$(perftest ib_send_lat -s 8 -n $iters | awk '{ print $5 }')
        rec "$r perftest ${v:-nan}"
        # The order of the two builds flips every round.
        if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
        for kind in $order; do
            lib=$new; [ "$kind" = base ] && lib=$base
            v=$(rovlat "$lib" verbs)
            rec "$r verbs-$kind ${v:-nan}"
        done
        v=$(ucxperf -e -t ucp_am_lat -s 8 -n $iters | awk '{ print ($3 > 0 ? $3 : $4) }')
        rec "$r ucx_perftest ${v:-nan}"
        if "$new/tools/railover" info 2>/dev/null | grep -qw ucx; then
            for kind in $order; do
                lib=$new; [ "$kind" = base ] && lib=$base
                v=$(rovlat "$lib" ucx)
                rec "$r ucx-$kind ${v:-nan}"
            done
        fi
    done
}

bw_rounds() {
    have_ucx=0
    "$new/tools/railover" info 2>/dev/null | grep -qw ucx && have_ucx=1
    for r in $(seq "$rounds"); do
        log "bandwidth round $r of $rounds"
        if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
        for rail in verbs ucx; do
            [ $rail = ucx ] && [ $have_ucx = 0 ] && continue
            for kind in $order; do
                lib=$new; [ "$kind" = base ] && lib=$base
                rec_bw "$r" $rail "$kind" "$lib"
            done
        done
    done
}

wait_peer
if [ $bw = 1 ]; then
    bw_rounds
    pairs="verbs64k-new verbs64k-base|verbs1m-new verbs1m-base|ucx64k-new ucx64k-base|ucx1m-new ucx1m-base"
else
    lat_rounds
    pairs="verbs-new verbs-base|verbs-new perftest|verbs-base perftest|ucx-new ucx-base|ucx-new ucx_perftest|ucx-base ucx_perftest"
fi

echo
awk -v pairs="$pairs" "$AWK_MEDIAN"'
    { v[$1 " " $2] = $3; if ($1 > nr) nr = $1 }
    function ratios(num, den,   r, s) {
        s = ""
        for (r = 1; r <= nr; r++) if (v[r " " num] > 0 && v[r " " den] > 0) s = s " " v[r " " num] / v[r " " den]
        return s
    }
    END {
        n = split(pairs, pair, "|")
        for (i = 1; i <= n; i++) {
            split(pair[i], p, " ")
            s = ratios(p[1], p[2])
            if (s != "") printf "%-11s / %-12s per round:%s  median %.3f\n", p[1], p[2], s, median(s)
        }
    }' "$out" | tee "$VMOUT/ab-ratios.txt"
