#!/usr/bin/env bash
# Railover's RDMA rails against the raw tools, side by side in one two-VM
# Soft-RoCE run (tests/vm/vmrun --two; this script is VM a's job, VM b runs
# the agent).  TCG makes absolute numbers meaningless: the ratios are the
# figures (DESIGN.md section 9: latency within 10 %, bandwidth >= 90 %).
#
#   bench/rdma-perf.sh BUILD_DIR [ROUNDS [LAT_ROUNDS]]
#
# Latency first, LAT_ROUNDS (default 4 x ROUNDS) short rounds of 8-byte
# ping-pong, each server on b and client on a, in this order:
#   ib_send_lat -s 8, railover perf over the verbs rail,
#   ucx_perftest -t ucp_am_lat (UCP active messages, as the UCX rail;
#   UCX_TLS=rc_verbs,tcp), railover perf over UCX
# and a last ib_send_lat and ucx_perftest after them, so that every Railover
# measurement has its raw tool just before and just after it: its ratio is
# taken against the mean of those two, which cancels the machine's drift
# as far as it is linear over a round (under TCG a neighbour's load moves
# every latency by tens of percent within seconds).
# Then ROUNDS (default 3) bandwidth rounds:
#   ib_write_bw / ib_read_bw -s 64KiB, 1MiB   perftest (average)
#   railover perf over the verbs rail, 64 KiB and 1 MiB
#   ucx_perftest ucp_am_bw 64 KiB, 1 MiB; railover perf over the UCX rail
# Both UCX programs run with UCX_RNDV_SCHEME=put_zcopy: UCX's default
# rendezvous reads (get_zcopy), and RDMA READ on rxe under TCG ran at a
# tenth of WRITE (ib_read_bw here), ucx_perftest at 1 MiB at 1 MB/s or timed
# out, where put_zcopy gave 8-9 MB/s.  Measured while the VM link lost
# packets (docs/rdma.md, stop 18); without the loss READ is as fast.
# Output: one line per measurement to $VMOUT/rdma-perf.txt
# ("tool test size value unit"), then a table of medians and the ratios
# railover/raw, and the bracketed latency ratios (per round, median and
# quartiles) in $VMOUT/rdma-lat-ratios.txt.
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
build=${1:?usage: rdma-perf.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
lat_rounds=${3:-$((4 * rounds))}
out=$VMOUT/rdma-perf.txt
lat=$VMOUT/rdma-lat.txt # "round tool one-way-us", for the bracketed ratios
: > "$out"
: > "$lat"
tool=$build/tools/railover
lat_iters=1000
# shellcheck source=bench/rdma-lib.sh
. "$(dirname "$0")/rdma-lib.sh"

rovperf() { # RAIL ARGS...
    local rail=$1
    shift
    next_port
    rexec "env RAILOVER_RAILS=$rail $ucx_env setsid timeout 120 $tool perf --listen $PEER_ETH:$port > /tmp/rp.log 2>&1 &"
    sleep 2
    env RAILOVER_RAILS=$rail $ucx_env timeout 120 "$tool" perf "$PEER_ETH:$port" --json "$@" 2>/dev/null
    rexec "pkill -f 'perf --listen $PEER_ETH:$port' || true"
}

wait_peer
have_ucx=0
"$tool" info 2>/dev/null | grep -qw ucx && have_ucx=1
# rec_lat ROUND TOOL VALUE: a latency measurement, in both files.
rec_lat() {
    rec "$2 lat 8 ${3:-nan} us"
    echo "$1 $2 ${3:-nan}" >> "$lat"
}
lat_perftest() { perftest ib_send_lat -s 8 -n $lat_iters | awk '{print $5}'; }
lat_ucx() { ucxperf -e -t ucp_am_lat -s 8 -n $lat_iters | awk '{print ($3 > 0 ? $3 : $4)}'; }
lat_rov() { # RAIL
    rovperf "$1" --sizes 8 --iters $lat_iters --bw-bytes 1 | grep '"latency"' | json_field p50_us
}
for r in $(seq 0 "$lat_rounds"); do
    log "latency round $r of $lat_rounds"
    rec_lat "$r" perftest "$(lat_perftest)"
    [ "$r" = "$lat_rounds" ] || rec_lat "$r" railover-verbs "$(lat_rov verbs)"
    rec_lat "$r" ucx_perftest "$(lat_ucx)"
    [ "$r" = "$lat_rounds" ] || [ $have_ucx = 0 ] || rec_lat "$r" railover-ucx "$(lat_rov ucx)"
done

for r in $(seq "$rounds"); do
    log "bandwidth round $r of $rounds"
    for s in 65536 1048576; do
        v=$(perftest ib_write_bw -s $s -D 4 --report_gbits | awk '{print $4 * 1000 / 8}')
        rec "perftest bw $s ${v:-nan} MB/s"
        # RDMA READ, the verbs rail's large-message operation, for reference.
        v=$(perftest ib_read_bw -s $s -D 4 --report_gbits | awk '{print $4 * 1000 / 8}')
        rec "perftest-read bw $s ${v:-nan} MB/s"
    done
    rovperf verbs --sizes 65536,1048576 --iters 10 --bw-bytes 67108864 | grep '"bandwidth"' |
        while read -r l; do
            rec "railover-verbs bw $(echo "$l" | json_field size) $(echo "$l" | json_field mb_s) MB/s"
        done
    # ucx_perftest: -s size, -n iterations; latency is one way; MB/s is 2^20;
    # the Final line: iterations, latency typical/average/overall, bandwidth
    # average (of the last report interval)/overall, message rate the same.
    for s in 65536 1048576; do
        v=$(ucxperf -e -t ucp_am_bw -s $s -n $((67108864 / s)) | awk '{print $7 * 1.048576}')
        rec "ucx_perftest bw $s ${v:-nan} MB/s"
    done
    if [ $have_ucx = 1 ]; then
        rovperf ucx --sizes 65536,1048576 --iters 10 --bw-bytes 67108864 | grep '"bandwidth"' |
            while read -r l; do
                rec "railover-ucx bw $(echo "$l" | json_field size) $(echo "$l" | json_field mb_s) MB/s"
            done
    fi
done

echo
echo "medians (latency: $lat_rounds rounds, one way, us; bandwidth: $rounds rounds, 10^6 B/s)"
awk "$AWK_MEDIAN"'
    $4 ~ /^[0-9]+(\.[0-9]+)?$/ { k = $1 " " $2 " " $3; v[k] = v[k] " " $4; unit[k] = $5 }
    END {
        for (k in v) m[k] = median(v[k])
        printf "%-8s %8s %12s %12s %8s %12s %12s %8s\n", "test", "size", "perftest", "rov-verbs", "ratio", "ucx_perftest", "rov-ucx", "ratio"
        n = split("lat 8|bw 65536|bw 1048576", rows, "|")
        for (i = 1; i <= n; i++) {
            split(rows[i], f, " ")
            p = m["perftest " rows[i]]; rv = m["railover-verbs " rows[i]]
            u = m["ucx_perftest " rows[i]]; ru = m["railover-ucx " rows[i]]
            printf "%-8s %8s %12.1f %12.1f %8.3f %12.1f %12.1f %8.3f\n", f[1], f[2], p, rv, (p > 0 ? rv / p : 0), u, ru, (u > 0 ? ru / u : 0)
        }
        print "(latency ratio: railover/raw, lower is better, goal <= 1.10; bandwidth ratio: goal >= 0.90)"
    }' "$out" | tee "$VMOUT/rdma-perf-table.txt"

# Each Railover latency against the mean of its raw tool's measurements
# just before and just after it (the same round and the next).
echo
awk '
    $3 ~ /^[0-9]+(\.[0-9]+)?$/ && $3 + 0 > 0 { v[$1 " " $2] = $3 }
    $1 + 0 > n { n = $1 + 0 }
    function sorted(s, a,   k, i, j, t) {
        k = split(s, a, " ")
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return k
    }
    function q(a, k, f,   x, i) { x = 1 + (k - 1) * f; i = int(x); return i >= k ? a[k] : a[i] + (x - i) * (a[i + 1] - a[i]) }
    END {
        split("railover-verbs perftest|railover-ucx ucx_perftest", pairs, "|")
        for (p = 1; p <= 2; p++) {
            split(pairs[p], t, " ")
            s = ""
            for (r = 0; r < n; r++) {
                b = v[r " " t[2]]; e = v[(r + 1) " " t[2]]; x = v[r " " t[1]]
                if (b > 0 && e > 0 && x > 0) s = s sprintf(" %.3f", x / ((b + e) / 2))
            }
            if (s == "") continue
            k = sorted(s, a)
            printf "%s / %s (bracketed), %d rounds:%s\n", t[1], t[2], k, s
            printf "    median %.3f, quartiles %.3f - %.3f\n", q(a, k, 0.5), q(a, k, 0.25), q(a, k, 0.75)
        }
    }' "$lat" | tee "$VMOUT/rdma-lat-ratios.txt"
