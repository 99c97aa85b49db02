# shellcheck shell=bash disable=SC2154 # (build, d: the sourcing job's)
# criu-lib.sh: what the ccp tier's CRIU jobs share (criu-job.sh,
# criu-action-job.sh; sourced on VM a, after tests/vm/guest-lib.sh's
# helpers): CRIU's modules in both VMs, a rank launcher, a job's start and
# end.  Expects $build (the build directory) and $d (the job's directory on
# $VMOUT, made here with its registry jobs/, mode 0700).
#
#   criu_setup [EXPORTS]  modules and `criu check`; $d/rank.sh RANK JOBID
#                         MSGS RATE starts one rank of a two-rank rov_job job
#                         (verbs@rxe0 first with RAILOVER_VERBS_CM=oob, tcp
#                         on eth second), EXPORTS (a shell line) added to its
#                         environment
#   start JOBID MSGS RATE rank 0 here, rank 1 on b; until both exchange
#   finish JOBID          both ranks end with result=ok (the rest of their
#                         messages sent at once: rov_job --hurry-file)
#   pid_of JOBID RANK     the rank's pid, from its registry record
rov_job=$build/tests/ccp/rov_job

criu_setup() {
    local mods="unix_diag inet_diag tcp_diag udp_diag raw_diag netlink_diag af_packet_diag tun veth nf_tables"
    rm -rf "$d"
    mkdir -p "$d/jobs" && chmod 700 "$d/jobs"
    "$rov_job" --help > /dev/null 2>&1
    case $? in 126|127) fail "cannot run $rov_job in the guest" ;; esac
    command -v criu > /dev/null || fail "criu is not installed on the host (apt-get install criu)"
    # What CRIU needs in the guest (shared notes, softroce-vm.md section 3).
    modprobe -a $mods || fail "modprobe $mods"
    ip link set lo up
    rexec "modprobe -a $mods && ip link set lo up" || fail "modprobe on b"
    criu check > "$d/criu-check.a" 2>&1 || fail "criu check on a: $(tail -n 3 "$d/criu-check.a")"
    # One launcher for both VMs (same path on each): RANK JOBID MSGS RATE.
    cat > "$d/rank.sh" <<LAUNCH
#!/bin/sh
export RAILOVER_RAILS=verbs@$RDMA_DEV:$RDMA_PORT,tcp@$ETH_IF RAILOVER_VERBS_CM=oob
export RAILOVER_TCP_IF=$ETH_IF RAILOVER_VERBS_TIMEOUT=16 RAILOVER_FAILOVER_TIMEOUT=2s
# A loaded guest can take seconds over a QP's setup: the reopen's connects
# get their own bound rather than the 2 s failover timeout's (with it, a
# reconnect landed on TCP first under load, and came to verbs by failback).
export RAILOVER_CONNECT_TIMEOUT=10s
export RAILOVER_LOG=info RAILOVER_JOB_DIR=$d/jobs RAILOVER_CCP_ADDR=$ETH_IF
export RAILOVER_JOBID=\$2 RAILOVER_RANK=\$1
${1:-}
exec setsid $rov_job --size 2 --msgs \$3 --rate \$4 --msg-size 4096 --timeout 900 \\
    --hurry-file $d/\$2.hurry \\
    < /dev/null > $d/\$2.rank\$1.out 2> $d/\$2.rank\$1.log
LAUNCH
    chmod +x "$d/rank.sh"
    wait_peer || exit 1
    export RAILOVER_JOB_DIR=$d/jobs
}

start() {
    rexec "$d/rank.sh 1 $1 $2 $3 &" || fail "starting rank 1 on b"
    "$d/rank.sh" 0 "$1" "$2" "$3" &
    local end=$((SECONDS + 120)) r
    for r in 0 1; do
        until grep -q "received=[1-9]" "$d/$1.rank$r.log" 2>/dev/null; do
            [ $SECONDS -lt $end ] || fail "rank $r of $1 exchanges nothing: $(tail -n 5 "$d/$1.rank$r.log")"
            sleep 0.5
        done
    done
    log "job $1: both ranks exchanging"
}

finish() {
    local end=$((SECONDS + 400)) r
    : > "$d/$1.hurry"
    for r in 0 1; do
        until grep -q "result=" "$d/$1.rank$r.out" 2>/dev/null; do
            [ $SECONDS -lt $end ] || fail "rank $r of $1 did not finish: $(tail -n 5 "$d/$1.rank$r.log")"
            sleep 1
        done
        grep "result=" "$d/$1.rank$r.out" | tail -n 1 | sed "s/^/  $1: /"
        grep -q "result=ok" "$d/$1.rank$r.out" || fail "rank $r of $1 lost, duplicated or damaged messages"
    done
}

pid_of() {
    sed -n 's/^pid=//p' "$d/jobs/$1/rank.$2"
}
