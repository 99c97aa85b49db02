#!/usr/bin/env bash
# A plain `criu dump` and `criu restore` of a rank that was using RDMA,
# with Railover's action script (tools/railover-criu-action) as the only
# cue: two Soft-RoCE VMs (tests/vm/, two-VM mode), one rank of a two-rank
# rov_job job in each, the verbs rail first (RAILOVER_VERBS_CM=oob) and TCP
# on the eth link second.  No cprclient: each VM images its own rank.  Runs
# on VM a; VM b serves its rexec calls.  One job goes through every case,
# in this order, and ends with every message delivered once, in order,
# intact (rov_job result=ok); CTest ccp_criu_action, about 3 min.
#
#   criu-action-job.sh BUILD_DIR
#
# leave-running: while the ranks exchange checksummed messages, `criu dump
#   -t PID --leave-running --action-script` of rank 0 on a, then of rank 1
#   on b: each dump succeeds (its pre-dump drained and closed the rank: a
#   verbs descriptor would have failed it), the rank reopens by itself
#   afterwards (the script's watcher).
# mid-failover: the fabric between the VMs blocked (nftables, RoCE's UDP
#   port) right before a `--leave-running` dump of rank 0: its drain waits
#   for the move to TCP and completes there, the dump succeeds, the rank
#   reopens; the fabric back.  Then both links blocked (fabric and eth)
#   right before a dump with RAILOVER_CRIU_TIMEOUT=15: the drain cannot
#   complete, the action script exits 1 and CRIU refuses the dump (exit
#   non-zero, no image), the rank is running again (its drain resumed);
#   the links back.
# restore: `criu dump` (the rank killed) of rank 0, then `criu restore
#   --action-script` on the same VM: the restored rank answers `railover
#   status` at its control socket (restored by CRIU, the stale file
#   replaced), reopens by itself (post-resume), comes back on the verbs
#   rail, and the job ends.
# Prints how long each dump and restore took.
set -u
[ "$ME" = b ] && exit 0
build=${1:?usage: criu-action-job.sh BUILD_DIR}
act=$build/tools/railover-criu-action
railover=$build/tools/railover
d=$VMOUT/ccp-criu-action
. "$(dirname "$0")/criu-lib.sh"
criu_setup
[ -x "$act" ] || fail "no $act (build first)"

# stage_of PID: the rank's stage, as `railover status` shows it (the same
# default run directory as the ranks: the job's environment).
stage_of() {
    "$railover" status "$1" | sed -n 's/.* stage=\([a-z]*\) .*/\1/p'
}

# dump VM JOBID RANK NAME [criu options...]: criu dump of the rank on VM
# with the action script; its exit status.
dump() {
    local vm=$1 job=$2 r=$3 name=$4 pid dir cmd rc t0
    shift 4
    pid=$(pid_of "$job" "$r")
    dir=$d/img.$name
    mkdir -p "$dir"
    cmd="criu dump -t $pid -D $dir --action-script $act -o dump.log -v2 $*"
    t0=$(date +%s%N)
    if [ "$vm" = a ]; then $cmd; else rexec "$cmd"; fi
    rc=$?
    log "$name: criu dump of rank $r (pid $pid) on $vm: exit $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    grep "railover-criu-action" "$dir/dump.log" | sed "s/^/  [$name] /"
    return $rc
}

# reopened VM JOBID RANK: the rank is running again (the watcher reopened it).
reopened() {
    local pid st end=$((SECONDS + 60))
    pid=$(pid_of "$2" "$3")
    while :; do
        if [ "$1" = a ]; then st=$(stage_of "$pid")
        else st=$(rexec "$railover status $pid" | sed -n 's/.* stage=\([a-z]*\) .*/\1/p'); fi
        [ "$st" = running ] && break
        [ $SECONDS -lt $end ] || fail "rank $3 of $2 is $st, not running, 60 s after the dump"
        sleep 0.5
    done
    log "rank $3 of $2 is running again"
}

nft_block() { # PEER_IP...: drop everything from and to these addresses
    local ip rules="add table inet rovblock
add chain inet rovblock in { type filter hook input priority 0; }
add chain inet rovblock out { type filter hook output priority 0; }"
    for ip; do rules+=$'\n'"add rule inet rovblock in ip saddr $ip drop"$'\n'"add rule inet rovblock out ip daddr $ip drop"; done
    nft -f - <<< "$rules"
}
nft_unblock() { nft delete table inet rovblock; }

# One job for every case: 20 messages a second, enough for about 400 s
# (a loaded machine); finish sends the rest at once (rov_job --hurry-file).
job=$(cat /proc/sys/kernel/random/uuid)
start "$job" 8000 20

# --- leave-running: each VM images its rank, the job continues ------------------------
dump a "$job" 0 leave-a --leave-running || fail "criu dump --leave-running of rank 0 failed"
[ -s "$d/img.leave-a/inventory.img" ] || fail "no image of rank 0"
grep -q "pre-dump: 1 Railover process(es) drained and closed" "$d/img.leave-a/dump.log" ||
    fail "the action script did not close rank 0 before the dump"
reopened a "$job" 0
dump b "$job" 1 leave-b --leave-running || fail "criu dump --leave-running of rank 1 on b failed"
reopened b "$job" 1
grep "after the dump: reopened" "$d/img.leave-a/dump.log" "$d/img.leave-b/dump.log" | sed 's/^/  /'
log "image of rank 0: $(du -sk "$d/img.leave-a" | cut -f1) KiB"
log "leave-running: both ranks imaged by plain criu dump and running again"

# --- mid-failover --------------------------------------------------------------------
nft_block "$PEER_FAB" || fail "nft"
log "mid-failover: the fabric to $PEER_FAB blocked; dump at once"
dump a "$job" 0 fab-a --leave-running; rc=$?
nft_unblock
[ $rc -eq 0 ] || fail "criu dump of rank 0 with the fabric blocked exited $rc"
grep "event=switch" "$d/$job.rank0.log" | tail -n 2 | sed 's/^/  /'
reopened a "$job" 0
log "mid-failover: the drain waited for the move to TCP, the dump succeeded"

nft_block "$PEER_FAB" "$PEER_ETH" || fail "nft"
log "mid-failover: both links to b blocked; dump at once (RAILOVER_CRIU_TIMEOUT=15)"
export RAILOVER_CRIU_TIMEOUT=15
dump a "$job" 0 both-a --leave-running; rc=$?
unset RAILOVER_CRIU_TIMEOUT
nft_unblock
[ $rc -ne 0 ] || fail "criu dump succeeded although rank 0 could not drain"
[ -e "$d/img.both-a/inventory.img" ] && fail "CRIU wrote an image although the dump was refused"
grep -q "the dump is refused" "$d/img.both-a/dump.log" || fail "the action script did not say why"
reopened a "$job" 0 # (bounded: a cue the rank could not answer in time is served late)
log "mid-failover: with no rail the drain could not complete: the dump was refused, rank 0 runs on"

# --- restore: rank 0 dumped (killed) and restored on a ---------------------------------
p0=$(pid_of "$job" 0)
seen=$(grep -c "event=switch" "$d/$job.rank0.log") # (the switches before the restore)
dump a "$job" 0 kill-a || fail "criu dump of rank 0 failed"
sleep 0.5
[ -e "/proc/$p0" ] && fail "rank 0 (pid $p0) still runs after criu dump without --leave-running"
grep -q "result=" "$d/$job.rank0.out" 2>/dev/null && fail "rank 0 finished before it was dumped"
t0=$(date +%s%N)
criu restore -D "$d/img.kill-a" -d --action-script "$act" -o restore.log -v2 ||
    { tail -n 20 "$d/img.kill-a/restore.log"; fail "criu restore of rank 0"; }
log "restore: criu restore of rank 0 in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
grep "railover-criu-action" "$d/img.kill-a/restore.log" | sed 's/^/  [restore] /'
[ -e "/proc/$p0" ] || fail "rank 0 is not there after the restore"
st=$(stage_of "$p0") || fail "the restored rank 0 has no control socket answering railover status"
log "restored rank 0 answers railover status: stage=$st"
reopened a "$job" 0
finish "$job"
last=$(grep "event=switch" "$d/$job.rank0.log" | tail -n +$((seen + 1)) | tail -n 1)
case $last in
*" to=0 "*) log "rank 0 is on the verbs rail after the restore: $last" ;;
*) fail "rank 0 did not come back on the verbs rail after the restore: $last" ;;
esac
log "PASS: imaged by plain criu dump (left running, mid-failover, refused, killed and restored); every message delivered once"
exit 0
