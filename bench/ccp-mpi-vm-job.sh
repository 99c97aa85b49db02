#!/usr/bin/env bash
# What a checkpoint costs an MPI job, and how long a restart takes: the two
# Soft-RoCE VMs (tests/vm, two-VM mode), rov_mpi_ckpt under mpirun (pml
# ob1, btl self,railover, verbs rail first), one rank per VM, each
# launcher's tree a checkpoint unit (tests/ccp/mpi-ckpt-lib.sh).
#
#   tests/vm/vmrun --two --timeout 2400 --out OUT -- bench/ccp-mpi-vm-job.sh BUILD [ROUNDS [PER_VM]]
#
# Each round, side by side: the job uninterrupted, then the same job with
# one `cprclient JOB` (drain, close, checkpoint, reopen) a third of the way
# in; their wall times and ratio, and the checkpoint's stages as cprclient
# reports them.  After the last round one more job is checkpointed, killed
# whole (mpirun, orted, ranks) and brought back by `cprclient JOB restart`:
# the restart's time, each tree's restore, and the image sizes.  Prints
# `round=N plain_s=.. ckpt_s=.. ratio=.. drain_s=.. close_s=.. image_s=..
# reopen_s=..`, then `restart_s=..` and a summary of medians.  Numbers only:
# nothing here is a test.
set -u
[ "$ME" = b ] && exit 0
build=${1:?usage: ccp-mpi-vm-job.sh BUILD [ROUNDS [PER_VM]]}
rounds=${2:-3} per_vm=${3:-1}
here=${VM_JOB%/*}
src=${here%/bench}
# shellcheck source=../tests/mpi/vm_mpi_lib.sh
. "$src/tests/mpi/vm_mpi_lib.sh"
# shellcheck source=../tests/ccp/mpi-ckpt-lib.sh
. "$src/tests/ccp/mpi-ckpt-lib.sh"
cpr=$build/tools/cprclient
pkglibdir=$(ompi_info --path pkglibdir | sed 's/^.*: *//')
ITERS=300 BYTES=65536 PAUSE_MS=40
d=$VMOUT/ccp-mpi
rm -rf "$d" && mkdir -p "$d"
mpi_ckpt_criu_setup "$d" || exit 1
vm_agent "$d/agent" || fail "cannot write the agent"
export RAILOVER_CCP_AGENT=$d/agent
export RAILOVER_RESTORE_CMD="$build/tools/railover-restore %a %d --tcp-established"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# run NAME CKPT: one job to its end (CKPT: checkpoint it at a third; kill:
# checkpoint, kill it whole, restart); its wall time in ms into $ms.
run() {
    local name=$1 ckpt=$2 w=$d/$1 t0 t1 at pids_a pids_b p
    mkdir -p "$w"
    mpi_ckpt_job "$w" "$name" "$per_vm" "$build" "$build/mpi-btl" "$pkglibdir" \
        "$ITERS" "$BYTES" "$PAUSE_MS" || fail "cannot set up $w"
    _vm_tms t0
    (cd "$w" && setsid "${mpi_ckpt_argv[@]}" < /dev/null > "$w/out" 2> "$w/err") &
    if [ "$ckpt" != no ]; then
        at() { (($(mpi_ckpt_iteration "$w/err") >= ITERS / 3)); }
        waitfor 300 at || fail "$name: no progress: $(tail -n 5 "$w/err")"
        "$cpr" --timeout 300 "$name" > "$w/cpr.out" 2>&1 || fail "$name: cprclient: $(cat "$w/cpr.out")"
    fi
    if [ "$ckpt" = kill ]; then
        p=$(sed -n 's/^mpi_ckpt: rank 0 pid \([0-9]*\) .*/\1/p' "$w/err")
        pids_a="$(ps -o ppid= -p "$p") $p"
        p=$(sed -n 's/^mpi_ckpt: rank 1 pid \([0-9]*\) host b$/\1/p' "$w/err")
        pids_b=$(rexec "echo \$(ps -o ppid= -p $p) $p")
        # shellcheck disable=SC2086 # (lists)
        kill -9 $pids_a && rexec "kill -9 $pids_b"
        wait
        nap 1
        _vm_tms t0
        "$cpr" --timeout 300 "$name" restart > "$w/restart.out" 2>&1 ||
            fail "$name: restart: $(cat "$w/restart.out")"
        _vm_tms t1
        log "restart_s=$(((t1 - t0) / 1000)).$(((t1 - t0) % 1000 / 100)) images_kib=$(du -sk "$w"/jobs/"$name"/sets/1/unit.*/ | awk '{printf "%s%s", s, $1; s=","}')"
        for p in "$w"/jobs/"$name"/sets/1/unit.*/stats-restore; do
            log "  ${p%/stats-restore}: criu restore_time_us=$(crit show "$p" | sed -n 's/.*"restore_time": \([0-9]*\).*/\1/p')"
        done
        waitfor 600 grep -q '^result=' "$w/out" || fail "$name: the restarted job did not end"
        return
    fi
    wait
    _vm_tms t1
    grep -q '^result=' "$w/out" || fail "$name: no result: $(tail -n 5 "$w/err")"
    ms=$((t1 - t0))
}
stage_s() { # FILE STAGE: cprclient's time for it
    sed -n "s/^stage=$2 .*time_s=\([0-9.]*\).*/\1/p" "$1"
}
ratios=()
for ((r = 1; r <= rounds; r++)); do
    run "plain$r" no
    plain=$ms
    run "ckpt$r" yes
    c=$d/ckpt$r/cpr.out
    ratios+=("$(awk -v a="$ms" -v b="$plain" 'BEGIN { printf "%.3f", a / b }')")
    log "round=$r plain_s=$((plain / 1000)).$((plain % 1000 / 100)) ckpt_s=$((ms / 1000)).$((ms % 1000 / 100))" \
        "ratio=${ratios[-1]}" \
        "drain_s=$(stage_s "$c" drain) close_s=$(stage_s "$c" close)" \
        "image_s=$(stage_s "$c" checkpoint) reopen_s=$(stage_s "$c" reopen)"
done
run killed kill
log "summary: $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR) printf "median ratio with one checkpoint / none %s (%s-%s) over %d rounds", a[int((NR+1)/2)], a[1], a[NR], NR}')"
exit 0
