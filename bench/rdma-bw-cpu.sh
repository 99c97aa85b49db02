#!/usr/bin/env bash
# Two-VM job (tests/vm/vmrun --two): streaming bandwidth of the verbs rail
# against ib_write_bw, alternately in every round, with each VM's busy
# share of its one vCPU over every run (from /proc/stat; a sends, b
# receives), and Railover run once per VARIANT, a set of environment
# assignments for both sides ("-" for none), so that a setting can be told
# from the machine's drift.
#
#   tests/vm/vmrun --two --timeout 1800 --out DIR -- \
#       bench/rdma-bw-cpu.sh BUILD ROUNDS SIZES [VARIANT...]
#   e.g. bench/rdma-bw-cpu.sh $PWD/build-rel 6 65536 - RAILOVER_VERBS_EAGER=66000
#
# SIZES is a comma-separated list.  Prints and saves in $VMOUT/bw-cpu.txt
# one line per run: "ROUND SIZE WHAT MB/s a_busy=F b_busy=F" (MB/s:
# 10^6 B/s, 32 MiB per Railover run, 3 s per ib_write_bw run; "nan" when a
# run failed), then per size and variant the per-round ratios to
# ib_write_bw and their median.
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
usage="usage: rdma-bw-cpu.sh BUILD ROUNDS SIZES [VARIANT...]"
build=${1:?$usage}
rounds=${2:?$usage}
sizes=${3:?$usage}
shift 3
variants=("$@")
((${#variants[@]})) || variants=(-)
tool=$build/tools/railover
out=$VMOUT/bw-cpu.txt
: > "$out"
BENCH_PORT0=23000
# shellcheck source=bench/rdma-lib.sh
. "$(dirname "$0")/rdma-lib.sh"
cpu_cmd="awk '/^cpu /{ print \$2 + \$3 + \$4 + \$7 + \$8, \$5 + \$6 }' /proc/stat"

busy() { # "BUSY0 IDLE0" "BUSY1 IDLE1": the busy share between the two
    set -- $1 $2
    awk -v b=$(($3 - $1)) -v i=$(($4 - $2)) 'BEGIN { if (b + i > 0) printf "%.2f", b / (b + i); else print "nan" }'
}
# measure WHAT CMD...: run CMD here (its output: MB/s) and record the run.
measure() {
    local what=$1 a0 a1 b0 b1 v
    shift
    b0=$(rexec "$cpu_cmd")
    a0=$(eval "$cpu_cmd")
    v=$("$@")
    a1=$(eval "$cpu_cmd")
    b1=$(rexec "$cpu_cmd")
    rec "$round $size $what ${v:-nan} a_busy=$(busy "$a0" "$a1") b_busy=$(busy "$b0" "$b1")"
}
# ib_write_bw's client (its server started before the measured window).
perftest_bw() {
    perftest_client ib_write_bw -s "$size" -D 3 --report_gbits | awk '{ print $4 * 1000 / 8 }'
}
railover_bw() { # ENV...
    env RAILOVER_RAILS=verbs "$@" timeout 120 "$tool" perf "$PEER_ETH:$port" --json \
        --sizes "$size" --iters 10 --bw-bytes 33554432 2>/dev/null |
        grep '"bandwidth"' | json_field mb_s
}

wait_peer || exit 1
for round in $(seq "$rounds"); do
    log "round $round of $rounds"
    for size in ${sizes//,/ }; do
        perftest_server ib_write_bw -s "$size" -D 3 --report_gbits
        measure ib_write_bw perftest_bw
        # The variants' order turns every round.
        n=${#variants[@]}
        for ((k = 0; k < n; k++)); do
            variant=${variants[$(((k + round) % n))]}
            env_args=()
            [ "$variant" != - ] && read -r -a env_args <<< "$variant"
            next_port
            rexec "env RAILOVER_RAILS=verbs ${env_args[*]} setsid timeout 120 $tool perf --listen $PEER_ETH:$port > /dev/null 2>&1 &"
            sleep 2
            measure "railover[$variant]" railover_bw "${env_args[@]}"
            rexec "pkill -f 'perf --listen $PEER_ETH:$port' || true"
        done
    done
done

echo
awk "$AWK_MEDIAN"'
    { v[$1 " " $2 " " $3] = $4; if ($1 > nr) nr = $1; sz[$2] = 1; if ($3 != "ib_write_bw") what[$3] = 1 }
    END {
        for (s in sz) for (w in what) {
            r = ""
            for (k = 1; k <= nr; k++) { # in round order: "for (k in ...)" has none
                x = v[k " " s " " w]; y = v[k " " s " ib_write_bw"]
                if (x > 0 && y > 0) r = r sprintf(" %.3f", x / y)
            }
            if (r != "") printf "%s %s / ib_write_bw per round:%s  median %.3f\n", s, w, r, median(r)
        }
    }' "$out" | tee "$VMOUT/bw-cpu-ratios.txt"
