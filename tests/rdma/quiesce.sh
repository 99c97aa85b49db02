#!/usr/bin/env bash
# Quiesce, close the rails and reopen under the verbs (or UCX) rail, between
# two Soft-RoCE VMs (tests/vm/, two-VM mode).  Runs on VM a; VM b runs the
# vmrun agent.
#
#   quiesce.sh BUILD_DIR [RAIL]
#
# A rov_stream pair streams checksummed messages both ways on 3 connections
# (b listens, a connects; RAIL preferred, TCP on the eth link as fallback).
# a's process is driven through its control socket (`railover ctl PID`):
#   - quiesce: its stage reaches quiesced;
#   - close-rails: before, it holds /dev/infiniband descriptors (the rail
#     uses the device); after, none, and no socket but Unix ones (its
#     control socket); b's connections neither fail nor move meanwhile;
#   - reopen: its stage is running again, every connection moved with
#     reason `reopen` and delivers again;
# then the pair stops through its stop file: both sides verify every
# message (no loss, duplicate or reordering) and exit 0.
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
build=${1:?usage: quiesce.sh BUILD_DIR [RAIL]}
rail=${2:-verbs}
stream=$build/tests/integration/rov_stream
tool=$build/tools/railover
"$stream" --help > /dev/null 2>&1
rc=$?
case $rc in 126|127) log "cannot run $stream in the guest (exit $rc)"; exit 1 ;; esac

# As failover.sh: the UCX rail's connection manager on eth, slow TCG timers.
env_common="RAILOVER_RAILS=$rail,tcp@$ETH_IF RAILOVER_LOG=${RAILOVER_LOG:-info}"
env_common+=" RAILOVER_TCP_IF=$ETH_IF RAILOVER_VERBS_TIMEOUT=16 RAILOVER_FAILOVER_TIMEOUT=2s"
env_common+=" RAILOVER_FAILBACK_DWELL=1s"
# Connects (the reopen's above all) get their own bound on a loaded guest,
# not the 2 s failover timeout's (tests/rdma/failover.sh).
env_common+=" RAILOVER_CONNECT_TIMEOUT=${RAILOVER_CONNECT_TIMEOUT:-10s}"
env_common+=" UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=$RDMA_DEV:$RDMA_PORT,$ETH_IF"
env_common+=" UCX_RC_VERBS_RETRY_COUNT=6 UCX_RC_VERBS_TIMEOUT=100ms"
d=$VMOUT/quiesce
rm -rf "$d"
mkdir -p "$d"
conns=3
sargs="--stop-file $d/stop --seed 11 --conns $conns --max-size 262144 --stall 60 --quiet-status"

ctl() { env $env_common "$tool" ctl "$pa" "$@"; }
stage_is() { ctl stage 2>/dev/null | grep -q "stage=$1 "; }
wait_stage() { # STAGE SECONDS
    local end=$((SECONDS + $2))
    until stage_is "$1"; do
        [ $SECONDS -lt "$end" ] || { log "stage $1 not reached within $2 s:"; ctl stage; return 1; }
        kill -0 "$pa" 2>/dev/null || { log "the connector died"; return 1; }
        sleep 0.2
    done
}
# a's descriptors of the device, and its sockets that are not Unix sockets.
rail_fds() {
    local unix fd t
    unix=$(awk 'NR > 1 { print $7 }' "/proc/$pa/net/unix")
    for fd in /proc/"$pa"/fd/*; do
        t=$(readlink "$fd") || continue
        case $t in
        /dev/infiniband/*) echo "$t" ;;
        socket:*) t=${t#socket:[}; t=${t%]}
                  grep -qx "$t" <<< "$unix" || echo "socket $t" ;;
        esac
    done
}

wait_peer
rexec "cd $d && env $env_common setsid $stream --listen $d/addr $sargs --pid-file $d/b.rpid --events $d/b.events > $d/b.log 2>&1 & echo \$! > $d/b.pid"
w=0
while [ ! -s "$d/addr" ] && [ $w -lt 150 ]; do sleep 0.2; w=$((w + 1)); done
[ -s "$d/addr" ] || { log "the listener on b did not start:"; tail -n 20 "$d/b.log"; exit 1; }
env $env_common "$stream" --connect "$d/addr" $sargs --events "$d/a.events" > "$d/a.log" 2>&1 &
pa=$!
sleep 5
kill -0 $pa 2>/dev/null || { log "the connector ended early:"; tail -n 30 "$d/a.log"; exit 1; }
ok=1
before=$(rail_fds | grep -c infiniband)
log "before: $(rail_fds | tr '\n' ' ')"
[ "$before" -gt 0 ] || { log "the connector holds no /dev/infiniband descriptor: is $rail in use?"; ok=0; }

t0=$(date +%s.%N)
ctl quiesce
wait_stage quiesced 30 || ok=0
t1=$(date +%s.%N)
ctl close-rails || ok=0
left=$(rail_fds)
if [ -n "$left" ]; then
    log "after close-rails the connector still holds: $(tr '\n' ' ' <<< "$left")"; ok=0
else
    log "after close-rails the connector holds no device descriptor and no rail socket"
fi
sleep 3
grep -q '"ev":"error"' "$d/b.events" && { log "a listener connection failed while a's rails were closed"; ok=0; }
t2=$(date +%s.%N)
ctl reopen
wait_stage running 60 || ok=0
t3=$(date +%s.%N)
sleep 5
n=$(grep '"ev":"switch"' "$d/a.events" | grep -c '"reason":"reopen"')
[ "$n" -ge "$conns" ] || { log "only $n connections moved with reason reopen"; ok=0; }
log "quiesce $(echo "($t1 - $t0) * 1000 / 1" | bc) ms; reopen to running $(echo "($t3 - $t2) * 1000 / 1" | bc) ms"
touch "$d/stop"
wait $pa
rc_a=$?
w=0
while ! grep -q '(exit [0-9]*)' "$d/b.log" 2>/dev/null && [ $w -lt 300 ]; do sleep 0.2; w=$((w + 1)); done
grep -q '^\[connector\]: OK (exit 0)' "$d/a.log" || { log "connector failed (exit $rc_a)"; tail -n 30 "$d/a.log"; ok=0; }
grep -q 'OK (exit 0)' "$d/b.log" || { log "listener failed"; tail -n 30 "$d/b.log"; ok=0; }
grep -h 'stage:\|reopen' "$d/a.log" | tail -n 12
[ $ok = 1 ] && log "PASS" || { testbed_broken "after the quiesce"; log "FAIL"; }
[ $ok = 1 ]
