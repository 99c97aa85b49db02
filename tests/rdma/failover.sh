#!/usr/bin/env bash
# Real fabric failures under the verbs (or UCX) rail, between two Soft-RoCE
# VMs (tests/vm/, two-VM mode).  Runs on VM a; VM b runs the vmrun agent.
#
#   failover.sh BUILD_DIR [RAIL] [SCENARIO...]
#
# RAILOVER_TEST_REPEAT=N (default 1) runs the scenario list N times in a row
# (set by tests/rdma/CMakeLists.txt for CI, so a flaky case shows).
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
#   dead_inflight    the fabric goes silent (nftables drops RoCE on a's INPUT,
#                    so neither side's RC traffic is acknowledged, and the RC
#                    retry count is 7, for ever on rxe) while 4 connections
#                    stream messages up to 1 MiB both ways: sends in flight
#                    and queued behind them (the UCX rail's rendezvous sends
#                    wait for the peer), no transport error ever.  Only the
#                    lack-of-progress detector can tell: every connection
#                    must leave the fabric with a failover.* reason (on one
#                    side; peer.failover on the other) within
#                    RAILOVER_FAILOVER_TIMEOUT + 2 s of the drop being in
#                    place (issue 20: a UCX run sat 64 s with 259 sends in
#                    flight and switches=0)
#   peer_stopped     b's rov_stream is stopped (SIGSTOP) for 3 failover
#                    timeouts while 4 connections stream both ways, then
#                    continued: a peer that does not call the library, on a
#                    healthy fabric.  Neither side may move: a hears b's
#                    transport only (the verbs rail's acknowledgements, the
#                    UCX rail's probes; messages up to 256 KiB, below UCX's
#                    rendezvous threshold here, so that a has none of b's
#                    to fetch meanwhile), and b, continued, must look at
#                    what arrived before it judges its channels
#   bond_linkdown    RAILOVER_BOND=on (RAILOVER_BOND_MIN=4k), messages up to
#                    1 MiB both ways: first, within 30 s of the connection
#                    reaching rail 0, both members must carry traffic, each
#                    side's `railover status` showing bond=yes and
#                    bond_sent >= 64 KiB on the fabric rail and the TCP rail
#                    ("never bonded" otherwise: a member rail without
#                    ops.chan_queued is never picked); then the linkdown_local
#                    fault.  Besides the checks above: on both sides the
#                    fabric rail left the bond (a "bond" event with left=0)
#                    after the fault and rejoined it (joined=0) after the
#                    repair, and in the 2 s after the failback the eth link
#                    carried 64 KiB or more from each side (the fabric is the
#                    transmit rail then: only the bond puts data on TCP)
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
build=${1:?usage: failover.sh BUILD_DIR [RAIL] [SCENARIO...]}
rail=${2:-verbs}
shift 2 2>/dev/null || shift $#
scenarios=${*:-linkdown_local linkdown_remote drop_input drop_retry7 flap dead_inflight peer_stopped bond_linkdown}
repeat=${RAILOVER_TEST_REPEAT:-1}

stream=$build/tests/integration/rov_stream
tool=$build/tools/railover
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
# A loaded TCG guest can take seconds over a first UCX wire-up or a QP's
# setup: connects get their own bound, not the 2 s failover timeout's
# (before, a connection then started on the fallback and the fault met a
# rail it was not on; the case waits for rail 0 now as well).
common_env+=" RAILOVER_CONNECT_TIMEOUT=${RAILOVER_CONNECT_TIMEOUT:-10s}"
# TCG: each VM has one vCPU, saturated by the fallback stream, and rxe's ACK
# processing then lags by hundreds of ms.  With the defaults (ACK timeout 14
# = 67 ms x 7 tries, failover timeout 1 s) fresh QPs time out for tens of
# seconds after a repair (measured: failback 12-40 s; with these, 2-6 s).
# Real HCAs answer in microseconds: the defaults are right there.
common_env+=" RAILOVER_VERBS_TIMEOUT=${RAILOVER_VERBS_TIMEOUT:-16}"
fo_timeout=${RAILOVER_FAILOVER_TIMEOUT:-2s}
common_env+=" RAILOVER_FAILOVER_TIMEOUT=$fo_timeout"
case $fo_timeout in # in seconds, for dead_inflight's bound
*ms) fo_timeout_s=$(echo "${fo_timeout%ms} / 1000" | bc -l) ;;
*s)  fo_timeout_s=${fo_timeout%s} ;;
*)   fo_timeout_s=$fo_timeout ;;
esac
# The UCX rail on rxe: RC data lane with a finite retry count (7 is infinite
# on rxe, see the notes), TCP on eth as the auxiliary lane.
common_env+=" UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=$RDMA_DEV:$RDMA_PORT,$ETH_IF"
common_env+=" UCX_RC_VERBS_RETRY_COUNT=6 UCX_RC_VERBS_TIMEOUT=100ms"

up_s() { cut -d' ' -f1 /proc/uptime; }
# b's clock minus a's, in seconds: the VMs boot apart (in CI b was seconds
# behind), and b's events carry b's CLOCK_MONOTONIC (= its uptime: no
# suspend in a guest).  From the look with the shortest round trip of three;
# its error is at most half that round trip.
peer_clock_offset() {
    local i t0 tb t1 rtt best_rtt="" best=0
    for i in 1 2 3; do
        t0=$(up_s); tb=$(rexec "cut -d' ' -f1 /proc/uptime"); t1=$(up_s)
        [[ $tb =~ ^[0-9.]+$ ]] || continue
        rtt=$(echo "$t1 - $t0" | bc)
        if [ -z "$best_rtt" ] || (( $(echo "$rtt < $best_rtt" | bc) )); then
            best_rtt=$rtt best=$(echo "scale=3; $tb - ($t0 + $t1) / 2" | bc)
        fi
    done
    echo "$best"
}
# A time of a's clock on b's, and back.
on_b() { echo "$1 + $off" | bc; }
from_b() { echo "$1 - $off" | bc; }
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

# "T REASON" of conn's first switch away from rail 0 at or after T.
first_move() { # FILE T CONN
    awk -v t="$2" -v c="\"conn\":$3," '
        index($0, "\"ev\":\"switch\"") && index($0, c) && index($0, "\"from\":0,") {
            if (match($0, /"t":[0-9]+/)) {
                s = substr($0, RSTART + 4, RLENGTH - 4) / 1e9
                if (s < t) next
                r = "-"
                if (match($0, /"reason":"[^"]*"/)) r = substr($0, RSTART + 10, RLENGTH - 11)
                printf "%.3f %s\n", s, r; exit
            }
        }' "$1"
}

# The rails the connections were on when a saw the stop file (their last
# switch before it, 0 if none), sorted, unique, comma-separated.  Moves in
# the close that follows (a channel reset after both CLOSEs crossed) are
# the close protocol's, not the failover's.
rails_at_stop() { # FILE NCONNS
    awk -v n="$2" '
        index($0, "\"ev\":\"stop\"") { exit }
        index($0, "\"ev\":\"switch\"") && match($0, /"conn":[0-9]+/) {
            c = substr($0, RSTART + 7, RLENGTH - 7)
            if (match($0, /"to":[0-9]+/)) last[c] = substr($0, RSTART + 5, RLENGTH - 5)
        }
        END { for (i = 0; i < n; i++) seen[((i "") in last) ? last[i ""] : 0] = 1
              s = ""; for (r in seen) s = s (s == "" ? "" : ",") r; print s }' "$1"
}

# Whether every connection is established and on rail 0 now: its last
# switch, or else the rail it connected on.
all_on_rail0() { # FILE NCONNS
    awk -v n="$2" '
        (index($0, "\"ev\":\"switch\"") || index($0, "\"ev\":\"established\"")) &&
        match($0, /"conn":[0-9]+/) {
            c = substr($0, RSTART + 7, RLENGTH - 7)
            if (index($0, "\"ev\":\"switch\"") && match($0, /"to":[0-9]+/))
                last[c] = substr($0, RSTART + 5, RLENGTH - 5)
            else if (match($0, /"rail":[0-9]+/))
                last[c] = substr($0, RSTART + 7, RLENGTH - 7)
        }
        END { for (i = 0; i < n; i++) if (!((i "") in last) || last[i ""] != 0) exit 1; exit 0 }' "$1"
}

# Whether every connection's last switch (if any) went to rail 0.
all_back() { # FILE NCONNS
    awk -v n="$2" '
        index($0, "\"ev\":\"switch\"") && match($0, /"conn":[0-9]+/) {
            c = substr($0, RSTART + 7, RLENGTH - 7)
            if (match($0, /"to":[0-9]+/)) last[c] = substr($0, RSTART + 5, RLENGTH - 5)
        }
        END { for (i = 0; i < n; i++) if ((i "") in last && last[i ""] != 0) exit 1; exit 0 }' "$1"
}

# "SENT0 SENT1": the bond_sent of rail 0's and rail 1's channel in the
# `railover status` of the rov_stream with PID on a (local) or b (remote),
# "-" for a rail not in the bond now (one connection).
bond_sent() { # local|remote PID
    local out
    if [ "$1" = remote ]; then out=$(rexec "$tool status $2" 2>&1); else out=$("$tool" status "$2" 2>&1); fi
    printf '%s\n' "$out" | awk '
        /^  chan rail=/ && match($0, /\([0-9]+\)/) {
            i = substr($0, RSTART + 1, RLENGTH - 2); s = "-"
            if (index($0, " bond=yes ") && match($0, / bond_sent=[0-9]+/))
                s = substr($0, RSTART + 11, RLENGTH - 11)
            v[i] = s
        }
        END { printf "%s %s\n", ("0" in v) ? v["0"] : "-", ("1" in v) ? v["1"] : "-" }'
}

# bond_a and bond_b (the caller's): bond_sent of a's rov_stream PID and of
# b's (its pid in DIR/b.rpid).  A look takes seconds in a TCG guest beside
# the busy stream: both sides' at once.
bond_look() { # DIR PID
    bond_sent local "$2" > "$1/bond.a" &
    local p=$!
    bond_b=$(bond_sent remote "$(cat "$1/b.rpid")")
    wait $p
    bond_a=$(cat "$1/bond.a")
}

# Whether both "SENT0 SENT1" are members with at least MIN bytes.
both_carried() { # "SENT0 SENT1" MIN
    local s0=${1% *} s1=${1#* }
    [[ $s0 =~ ^[0-9]+$ && $s1 =~ ^[0-9]+$ ]] && [ "$s0" -ge "$2" ] && [ "$s1" -ge "$2" ]
}

run_scenario() {
    local name=$1 inject restore where=local extra_env=() t_inj t_inj_done t_rest t_down t_back rc_a
    local conns=1 max_size=262144 moves=0 stay=0 hold=5 bond=0 bond_a bond_b eth_a eth_b
    case $name in
    linkdown_local)  inject="ip link set $FAB_IF down"; restore="ip link set $FAB_IF up" ;;
    linkdown_remote) inject="ip link set $FAB_IF down"; restore="ip link set $FAB_IF up"; where=remote ;;
    drop_input)      inject=$nft_drop_on; restore=$nft_drop_off ;;
    drop_retry7)     inject=$nft_drop_on; restore=$nft_drop_off; extra_env=(RAILOVER_VERBS_RETRY=7) ;;
    flap)            inject="for i in 1 2 3; do ip link set $FAB_IF down; sleep 1.5; ip link set $FAB_IF up; sleep 1.5; done"
                     restore=":"; where=remote ;;
    dead_inflight)   inject=$nft_drop_on; restore=$nft_drop_off; conns=4; max_size=1048576; moves=1
                     extra_env=(RAILOVER_VERBS_RETRY=7 UCX_RC_VERBS_RETRY_COUNT=7) ;;
    bond_linkdown)   inject="ip link set $FAB_IF down"; restore="ip link set $FAB_IF up"
                     max_size=1048576 bond=1 hold=3
                     extra_env=(RAILOVER_BOND=on RAILOVER_BOND_MIN=4k) ;;
    peer_stopped)    inject='kill -STOP $(cat @D@/b.rpid)'; restore='kill -CONT $(cat @D@/b.rpid)'
                     where=remote; conns=4; stay=1
                     hold=$(echo "3 * $fo_timeout_s" | bc) ;;
    *) echo "unknown scenario $name"; return 1 ;;
    esac
    local d=$work/$name n=1 off
    off=$(peer_clock_offset)
    while [ -e "$d" ]; do n=$((n + 1)); d=$work/$name.$n; done # a scenario may repeat
    mkdir -p "$d"
    inject=${inject//@D@/$d} restore=${restore//@D@/$d}
    log "=== $name: inject on $where: $inject"
    local sargs="--stop-file $d/stop --seed 7 --conns $conns --max-size $max_size --stall 60 --quiet-status"
    rexec "cd $d && env $common_env ${extra_env[*]} setsid $stream --listen $d/addr $sargs --pid-file $d/b.rpid --events $d/b.events > $d/b.log 2>&1 & echo \$! > $d/b.pid"
    local w=0
    while [ ! -s "$d/addr" ] && [ $w -lt 100 ] && ! grep -q '(exit [0-9]*)' "$d/b.log" 2>/dev/null; do
        sleep 0.2; w=$((w + 1))
    done
    # A listener that could not start ends the scenario now (not after the
    # fault's whole schedule): there is nothing to inject a fault under.
    [ -s "$d/addr" ] || { log "$name: the listener on b did not start:"; tail -n 20 "$d/b.log"; return 1; }
    env $common_env "${extra_env[@]}" "$stream" --connect "$d/addr" $sargs \
        --events "$d/a.events" > "$d/a.log" 2>&1 &
    local pa=$!
    # The fault must meet the connections on the rail it breaks: on a loaded
    # machine a first connect on the fabric may outlast the connect timeout
    # and start on the fallback (failback then brings it over).  Wait for
    # all of them on rail 0 (bounded), then stream a little.
    local on0=$((SECONDS + 90))
    until [ -s "$d/a.events" ] && all_on_rail0 "$d/a.events" $conns; do
        kill -0 $pa 2>/dev/null || break
        if [ $SECONDS -ge $on0 ]; then
            log "$name: FAIL: the connections never reached rail 0 within 90 s (the fault would break a rail they are not on)"
            touch "$d/stop"; wait $pa; return 1
        fi
        sleep 0.2
    done
    if [ $bond = 1 ]; then
        # Both members carry the stream before the fault (both directions).
        local since=$SECONDS bonded=$((SECONDS + 30)) looks=0
        until looks=$((looks + 1)) && bond_look "$d" $pa && both_carried "$bond_a" 65536 && both_carried "$bond_b" 65536; do
            if ! kill -0 $pa 2>/dev/null || [ $SECONDS -ge $bonded ]; then
                log "$name: FAIL: never bonded: 30 s on rail 0 ($looks looks) and the members' bond_sent (rail 0, rail 1; - not a member) is a: $bond_a, b: $bond_b (each must reach 64 KiB)"
                touch "$d/stop"; wait $pa; return 1
            fi
            sleep 1
        done
        log "$name: bonded after $((SECONDS - since)) s ($looks looks): bond_sent a: $bond_a, b: $bond_b"
    else
        sleep 2
    fi
    kill -0 $pa 2>/dev/null || { wait $pa; log "$name: the connector on a ended before the fault (exit $?):"; tail -n 20 "$d/a.log"; return 1; }
    t_inj=$(up_s)
    if [ $where = remote ]; then rexec "$inject"; else sh -c "$inject"; fi
    t_inj_done=$(up_s)
    sleep "$hold"
    t_rest=$(up_s)
    if [ $where = remote ]; then rexec "$restore"; else sh -c "$restore"; fi
    # Failback needs the path to work again (rxe takes seconds after a link
    # comes back), the retry backoff, the handshake and the dwell: wait for
    # it (bounded), then stream a little more on the preferred rail.
    # (TCG, both vCPUs saturated by the fallback stream: measured up to 23 s)
    local deadline=$((SECONDS + 90))
    [ $stay = 1 ] && deadline=$((SECONDS + 2 * ${fo_timeout_s%.*} + 2)) # stays: watch a little longer
    while { [ $stay = 1 ] || [ ! -s "$d/a.events" ] || ! grep -q '"ev":"switch"' "$d/a.events" ||
            ! all_back "$d/a.events" $conns; } &&
          kill -0 $pa 2>/dev/null && [ $SECONDS -lt $deadline ]; do
        sleep 0.5
    done
    # Back on the fabric, the eth link carries only what the bond gives the
    # TCP rail: its bytes sent over the next 2 s, on both sides (counters,
    # not `railover status`: a tool started beside the busy stream in a TCG
    # guest took seconds).
    local eth_tx="cat /sys/class/net/$ETH_IF/statistics/tx_bytes"
    [ $bond = 1 ] && eth_a=$($eth_tx) eth_b=$(rexec "$eth_tx")
    sleep 2
    [ $bond = 1 ] && eth_a=$(($($eth_tx) - eth_a)) eth_b=$(($(rexec "$eth_tx") - eth_b))
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
    local final_rail close_rail
    final_rail=$(rails_at_stop "$d/a.events" $conns)
    close_rail=$(sed -n 's/^ROV_STREAM_CONN .* rail=\([-0-9]*\) .*/\1/p' "$d/a.log" | sort -u | paste -sd,)
    [ -z "$t_back" ] && [ "$final_rail" = 0 ] && t_back=$t_rest
    local a_reasons b_reasons a_verbs b_verbs ok=1
    a_reasons=$(sed -n 's/^ROV_STREAM_CONN .* reasons=\([^ ]*\).*/\1/p' "$d/a.log" | paste -sd'|')
    b_reasons=$(sed -n 's/^ROV_STREAM_CONN .* reasons=\([^ ]*\).*/\1/p' "$d/b.log" | paste -sd'|')
    a_verbs=$(grep -oE '(IBV_EVENT_[A-Z_]+|IBV_WC_[A-Z_]+|ucx: [^(]*)' "$d/a.log" | sort | uniq -c | tr -s ' ' | paste -sd';')
    b_verbs=$(grep -oE '(IBV_EVENT_[A-Z_]+|IBV_WC_[A-Z_]+|ucx: [^(]*)' "$d/b.log" | sort | uniq -c | tr -s ' ' | paste -sd';')
    grep -q '^\[connector\]: OK (exit 0)' "$d/a.log" || { ok=0; log "$name: connector failed (exit $rc_a)"; tail -n 30 "$d/a.log"; }
    # Every connection left the fabric on its own: a failover.* reason on
    # one side (the other follows with peer.failover), soon enough.
    local moved="" i
    if [ $moves = 1 ]; then
        local bound
        bound=$(echo "$t_inj_done + $fo_timeout_s + 2" | bc)
        for ((i = 0; i < conns; i++)); do
            local ma mb ta ra tb rb
            ma=$(first_move "$d/a.events" "$t_inj" $i); mb=$(first_move "$d/b.events" "$(on_b "$t_inj")" $i)
            ta=${ma%% *} ra=${ma#* } tb=${mb%% *} rb=${mb#* }
            [ -n "$mb" ] && tb=$(from_b "$tb")
            moved+=" c$i:a=$([ -n "$ma" ] && echo "$(ms_between "$t_inj_done" "$ta")ms/$ra" || echo -)"
            moved+=",b=$([ -n "$mb" ] && echo "$(ms_between "$t_inj_done" "$tb")ms/$rb" || echo -)"
            if [ -z "$ma" ] || [ -z "$mb" ]; then
                ok=0; log "$name: connection $i did not leave the fabric on both sides (a: ${ma:-none}, b: ${mb:-none})"
            elif [[ $ra != failover.* && $rb != failover.* ]] || [[ $ra != failover.* && $ra != peer.failover ]] ||
                 [[ $rb != failover.* && $rb != peer.failover ]]; then
                ok=0; log "$name: connection $i moved for the wrong reason (a: $ra, b: $rb)"
            elif (( $(echo "$ta > $bound || $tb > $bound" | bc) )); then
                ok=0; log "$name: connection $i moved too late (a: $(ms_between "$t_inj_done" "$ta") ms, b: $(ms_between "$t_inj_done" "$tb") ms after the drop was in place; bound $fo_timeout + 2 s)"
            fi
        done
    fi
    grep -q 'OK (exit 0)' "$d/b.log" || { ok=0; log "$name: listener failed"; tail -n 30 "$d/b.log"; }
    if [ $bond = 1 ]; then
        local side f left joined t_left t_joined grew
        moved=" bonded=a:${bond_a// /+},b:${bond_b// /+}"
        for side in a b; do
            f=$d/$side.events
            local ti=$t_inj
            [ $side = b ] && ti=$(on_b "$t_inj")
            t_left=$(event_after "$f" bond "$ti" '"left":0')
            t_joined=$(event_after "$f" bond "${t_left:-$ti}" '"joined":0')
            if [ $side = b ]; then
                [ -n "$t_left" ] && t_left=$(from_b "$t_left")
                [ -n "$t_joined" ] && t_joined=$(from_b "$t_joined")
            fi
            left=$([ -n "$t_left" ] && ms_between "$t_inj" "$t_left" || echo -)
            joined=$([ -n "$t_joined" ] && ms_between "$t_rest" "$t_joined" || echo -)
            moved+=" ${side}_left_ms=$left ${side}_rejoined_ms=$joined"
            [ -n "$t_left" ] || { ok=0; log "$name: $side: the fabric rail never left the bond after the fault"; }
            [ -n "$t_joined" ] || { ok=0; log "$name: $side: the fabric rail never rejoined the bond after the repair"; }
        done
        # The TCP rail carried the bond's traffic again (64 KiB in 2 s:
        # beyond its keepalives and acknowledgements, a few hundred bytes).
        moved+=" a_eth_2s_after_back=$eth_a b_eth_2s_after_back=$eth_b"
        for side in a b; do
            grew=$([ $side = a ] && echo "$eth_a" || echo "$eth_b")
            [[ $grew =~ ^[0-9]+$ && $grew -ge 65536 ]] ||
                { ok=0; log "$name: $side: the TCP rail carried $grew bytes in the 2 s after the failback (the bond's share should be there again)"; }
        done
    fi
    if [ $stay = 1 ]; then
        # Nothing failed: any switch before the stop file fails the case.
        local moves_ab
        moves_ab=$(for f in "$d/a.events" "$d/b.events"; do sed '/"ev":"stop"/q' "$f"; done |
                   grep '"ev":"switch"' | head -n 4)
        [ -z "$moves_ab" ] || { ok=0; log "$name: a connection moved although nothing failed:"; echo "$moves_ab"; }
        moved=" a_switches=$(grep -c '"ev":"switch"' "$d/a.events") b_switches=$(grep -c '"ev":"switch"' "$d/b.events")"
        moved+=" b_first=$(grep -m1 '"ev":"switch"' "$d/b.events" | sed -n 's/.*"t":\([0-9]*\).*"reason":"\([^"]*\)".*/\1 \2/p' |
                            awk -v c="$(on_b "$t_rest")" '{ printf "%dms_after_CONT/%s", ($1 / 1e9 - c) * 1000, $2 }')"
        t_down=$t_inj t_back=$t_rest # nothing to detect or fail back
    fi
    [ -n "$t_down" ] || { ok=0; log "$name: a never left the preferred rail"; }
    if [ -z "$t_back" ] || [ "$final_rail" != 0 ]; then
        ok=0
        log "$name: a was not back on the preferred rail when it stopped (rails $final_rail); the rail's story:"
        grep -h '^\[[0-9.]*\] railover' "$d/a.log" "$d/b.log" | grep -v ' core: ' | sort | tail -n 40
    fi
    moved+=" b_clock_ahead_s=$off"
    printf '%-16s %-4s detect_ms=%-6s failback_ms=%-6s a_reasons=%s b_reasons=%s a_saw=[%s] b_saw=[%s]%s\n' \
        "$name" "$([ $ok = 1 ] && echo PASS || echo FAIL)" \
        "$([ -n "$t_down" ] && ms_between "$t_inj" "$t_down" || echo -)" \
        "$([ -n "$t_back" ] && ms_between "$t_rest" "$t_back" || echo -)" \
        "${a_reasons:--}" "${b_reasons:--}" "$a_verbs" "$b_verbs" \
        "${moved:+ [${moved# }]}$([ "$close_rail" = 0 ] || echo " closed_on_rails=$close_rail")" | tee -a "$res"
    # A case that failed on a dead emulated link says nothing of the
    # library: the job ends with 75 and vmrun runs it again.
    [ $ok = 1 ] || testbed_broken "after $name"
    [ $ok = 1 ]
}

wait_peer
# Programs that cannot run here (a build directory the guest does not see,
# a library missing) fail every scenario the same way: say so once, now.
"$stream" --help > /dev/null 2>&1
rc=$?
case $rc in 126|127) log "cannot run $stream in the guest (exit $rc)"; exit 1 ;; esac
status=0
for ((round = 1; round <= repeat; round++)); do
    [ "$repeat" -gt 1 ] && log "=== round $round of $repeat"
    for s in $scenarios; do
        run_scenario "$s" || status=1
    done
done
log "results:"
cat "$res"
exit $status
