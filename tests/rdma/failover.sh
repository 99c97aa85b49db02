#!/usr/bin/env bash
# Real fabric failures under the verbs (or UCX) rail, between two Soft-RoCE
# VMs (tests/vm/, two-VM mode).  Runs on VM a; VM b runs the vmrun agent.
#
#   failover.sh BUILD_DIR [RAIL] [SCENARIO...]
#
# RAIL is the preferred rail (default verbs); the fallback is the TCP rail
# on the `eth` link.  For every scenario: a rov_stream pair streams
# checksummed messages both ways (b listens, a connects) until told to stop;
# 3 s in, the fault is injected; it is repaired later; the pair runs on until
# the connection is back on the preferred rail.  Each scenario must show:
#   - zero loss, duplicates or reordering (rov_stream verifies every message
#     and both sides' counts are cross-checked),
#   - a move to the fallback rail with the expected reason code on a,
#   - a move back to the preferred rail after the repair (failback).
# One line per scenario goes to $VMOUT/failover-results.txt: which verbs
# completion status or async event each side's log shows, and how long a
# took from the injection to its rail-down event and from the repair to the
# failback.
#
# Scenarios (default: all):
#   linkdown_local   ip link set fabric down on a (the requester's own port)
#   linkdown_remote  ip link set fabric down on b (a's peer vanishes: silent)
#   drop_input       nftables drops RoCE (UDP 4791) on a's INPUT: ACKs lost
#   drop_retry7      the same with RAILOVER_VERBS_RETRY=7 (rxe then retries
#                    for ever): only the lack-of-progress timer can tell
#   flap             fabric on b down/up three times, 1.5 s apart
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
build=${1:?usage: failover.sh BUILD_DIR [RAIL] [SCENARIO...]}
rail=${2:-verbs}
shift 2 2>/dev/null || shift $#
scenarios=${*:-linkdown_local linkdown_remote drop_input drop_retry7 flap}

stream=$build/tests/integration/rov_stream
res=$VMOUT/failover-results.txt
work=$VMOUT/failover
rm -rf "$work"
mkdir -p "$work"
: > "$res"

# The same environment on both VMs (b's agent does not inherit ours).
common_env="RAILOVER_RAILS=$rail,tcp@$ETH_IF RAILOVER_LOG=${RAILOVER_LOG:-debug} RAILOVER_FAILBACK_DWELL=1s"
# The UCX rail's connection manager listens on RAILOVER_TCP_IF unless the
# rail names an interface: Ethernet, as on a cluster.  On the fabric's own
# interface (`ucx@fabric`) it never reconnects after that link flapped
# (docs/rdma.md); the data lanes are UCX's choice either way (rc_verbs).
common_env+=" RAILOVER_TCP_IF=$ETH_IF"
common_env+=" RAILOVER_FAILBACK_RETRY=200ms RAILOVER_FAILBACK_RETRY_MAX=1s"
# TCG: each VM has one vCPU, saturated by the fallback stream, and rxe's ACK
# processing then lags by hundreds of ms.  With the defaults (ACK timeout 14
# = 67 ms x 7 tries, failover timeout 1 s) fresh QPs time out for tens of
# seconds after a repair (measured: failback 12-40 s; with these, 2-6 s).
# Real HCAs answer in microseconds: the defaults are right there.
common_env+=" RAILOVER_VERBS_TIMEOUT=${RAILOVER_VERBS_TIMEOUT:-16}"
common_env+=" RAILOVER_FAILOVER_TIMEOUT=${RAILOVER_FAILOVER_TIMEOUT:-2s}"
# The UCX rail on rxe: RC data lane with a finite retry count (7 is infinite
# on rxe, see the notes), TCP on eth as the auxiliary lane.
common_env+=" UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=$RDMA_DEV:$RDMA_PORT,$ETH_IF"
common_env+=" UCX_RC_VERBS_RETRY_COUNT=6 UCX_RC_VERBS_TIMEOUT=100ms"

up_s() { cut -d' ' -f1 /proc/uptime; }
ms_between() { echo "($2 - $1) * 1000 / 1" | bc; }
nft_drop_on="nft add table inet rovdrop; nft add chain inet rovdrop in '{ type filter hook input priority 0; }'; nft add rule inet rovdrop in udp dport 4791 drop"
nft_drop_off="nft delete table inet rovdrop"

# Time (uptime seconds) of the first EVENT line at or after T that also
# contains FIELD (e.g. "from":0); rov_stream stamps events with
# CLOCK_MONOTONIC, which is the uptime in these VMs.
event_after() { # FILE EVENT T [FIELD]
    awk -v ev="\"ev\":\"$2\"" -v t="$3" -v want="${4:-}" '
        index($0, ev) && (want == "" || index($0, want)) {
            if (match($0, /"t":[0-9]+/)) {
                s = substr($0, RSTART + 4, RLENGTH - 4) / 1e9
                if (s >= t) { printf "%.3f\n", s; exit }
            }
        }' "$1"
}

run_scenario() {
    local name=$1 inject restore where=local extra_env=() t_inj t_rest t_down t_back rc_a
    case $name in
    linkdown_local)  inject="ip link set $FAB_IF down"; restore="ip link set $FAB_IF up" ;;
    linkdown_remote) inject="ip link set $FAB_IF down"; restore="ip link set $FAB_IF up"; where=remote ;;
    drop_input)      inject=$nft_drop_on; restore=$nft_drop_off ;;
    drop_retry7)     inject=$nft_drop_on; restore=$nft_drop_off; extra_env=(RAILOVER_VERBS_RETRY=7) ;;
    flap)            inject="for i in 1 2 3; do ip link set $FAB_IF down; sleep 1.5; ip link set $FAB_IF up; sleep 1.5; done"
                     restore=":"; where=remote ;;
    *) echo "unknown scenario $name"; return 1 ;;
    esac
    local d=$work/$name n=1
    while [ -e "$d" ]; do n=$((n + 1)); d=$work/$name.$n; done # a scenario may repeat
    mkdir -p "$d"
    log "=== $name: inject on $where: $inject"
    rexec "cd $d && env $common_env ${extra_env[*]} setsid $stream --listen $d/addr --stop-file $d/stop --seed 7 --max-size 262144 --stall 60 --quiet-status --events $d/b.events > $d/b.log 2>&1 & echo \$! > $d/b.pid"
    local w=0
    while [ ! -s "$d/addr" ] && [ $w -lt 100 ]; do sleep 0.2; w=$((w + 1)); done
    env $common_env "${extra_env[@]}" "$stream" --connect "$d/addr" --stop-file "$d/stop" --seed 7 \
        --max-size 262144 --stall 60 --quiet-status --events "$d/a.events" > "$d/a.log" 2>&1 &
    local pa=$!
    sleep 4
    t_inj=$(up_s)
    if [ $where = remote ]; then rexec "$inject"; else sh -c "$inject"; fi
    sleep 5
    t_rest=$(up_s)
    if [ $where = remote ]; then rexec "$restore"; else sh -c "$restore"; fi
    # Failback needs the path to work again (rxe takes seconds after a link
    # comes back), the retry backoff, the handshake and the dwell: wait for
    # it (bounded), then stream a little more on the preferred rail.
    # (TCG, both vCPUs saturated by the fallback stream: measured up to 23 s)
    local deadline=$((SECONDS + 90))
    while [ "$(sed -n 's/.*"ev":"switch".*"to":\([0-9]*\).*/\1/p' "$d/a.events" | tail -n 1)" != 0 ] &&
          [ $SECONDS -lt $deadline ]; do
        sleep 0.5
    done
    sleep 2
    touch "$d/stop"
    wait $pa; rc_a=$?
    w=0
    while ! grep -q '(exit [0-9]*)' "$d/b.log" 2>/dev/null && [ $w -lt 300 ]; do
        sleep 0.2; w=$((w + 1))
    done

    t_down=$(event_after "$d/a.events" switch "$t_inj" '"from":0')
    t_back=$(event_after "$d/a.events" switch "$t_rest" '"to":0')
    # A flap may end with the connection already back (it failed back
    # between two outages): then it must still be on the preferred rail.
    local final_rail
    final_rail=$(sed -n 's/^ROV_STREAM_CONN .* rail=\([-0-9]*\) .*/\1/p' "$d/a.log")
    [ -z "$t_back" ] && [ "$final_rail" = 0 ] && t_back=$t_rest
    local a_reasons b_reasons a_verbs b_verbs ok=1
    a_reasons=$(sed -n 's/^ROV_STREAM_CONN .* reasons=\([^ ]*\).*/\1/p' "$d/a.log")
    b_reasons=$(sed -n 's/^ROV_STREAM_CONN .* reasons=\([^ ]*\).*/\1/p' "$d/b.log")
    a_verbs=$(grep -oE '(IBV_EVENT_[A-Z_]+|IBV_WC_[A-Z_]+|ucx: [^(]*)' "$d/a.log" | sort | uniq -c | tr -s ' ' | paste -sd';')
    b_verbs=$(grep -oE '(IBV_EVENT_[A-Z_]+|IBV_WC_[A-Z_]+|ucx: [^(]*)' "$d/b.log" | sort | uniq -c | tr -s ' ' | paste -sd';')
    grep -q '^\[connector\]: OK (exit 0)' "$d/a.log" || { ok=0; log "$name: connector failed (exit $rc_a)"; tail -n 30 "$d/a.log"; }
    grep -q 'OK (exit 0)' "$d/b.log" || { ok=0; log "$name: listener failed"; tail -n 30 "$d/b.log"; }
    [ -n "$t_down" ] || { ok=0; log "$name: a never left the preferred rail"; }
    if [ -z "$t_back" ] || [ "$final_rail" != 0 ]; then
        ok=0
        log "$name: a did not end on the preferred rail (rail $final_rail); the rail's story:"
        grep -h '^\[[0-9.]*\] railover' "$d/a.log" "$d/b.log" | grep -v ' core: ' | sort | tail -n 40
    fi
    printf '%-16s %-4s detect_ms=%-6s failback_ms=%-6s a_reasons=%s b_reasons=%s a_saw=[%s] b_saw=[%s]\n' \
        "$name" "$([ $ok = 1 ] && echo PASS || echo FAIL)" \
        "$([ -n "$t_down" ] && ms_between "$t_inj" "$t_down" || echo -)" \
        "$([ -n "$t_back" ] && ms_between "$t_rest" "$t_back" || echo -)" \
        "${a_reasons:--}" "${b_reasons:--}" "$a_verbs" "$b_verbs" | tee -a "$res"
    # A case that failed on a dead emulated link says nothing of the
    # library: the job ends with 75 and vmrun runs it again.
    [ $ok = 1 ] || testbed_broken "after $name"
    [ $ok = 1 ]
}

wait_peer
status=0
for s in $scenarios; do
    run_scenario "$s" || status=1
done
log "results:"
cat "$res"
exit $status
