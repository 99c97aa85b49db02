#!/usr/bin/env bash
# CRIU checkpoint and restart of an unmodified MPI job (rov_mpi_ckpt, Open
# MPI's mpirun, ob1 over btl self,railover) across the two Soft-RoCE VMs
# (tests/vm, two-VM mode): one rank per VM, mpirun in VM a, its orted in VM
# b (tests/mpi/vm_mpi_lib.sh), the verbs rail first (RAILOVER_VERBS_CM=oob)
# and tcp on the eth link second.  Runs on VM a; VM b serves its rexec calls.
#
#   mpi-criu-job.sh BUILD_DIR [BTL_DIR [OMPI_PKGLIBDIR]]
#   RAILOVER_TEST_MPI_PER_VM=2: two ranks per VM (-np 4, --map-by slot) over btl
#     self,vader,railover; the ranks of a tree are one unit, imaged once.
#   Under `vmrun --two --spare` (as CTest ccp_mpi_criu runs it), a second
#     cycle restarts on a replacement host: VM b dies (vmrun kills its
#     qemu, with the orted's tree in it) and the spare VM c takes its
#     addresses (tests/vm/README.md, "A spare VM"); the orted's tree is
#     restored on c (`cprclient JOB restart --map R=c`, R its unit's lowest
#     rank; with RAILOVER_TEST_MPI_PER_VM=2 as well).  Without --spare, the
#     first cycle only.
#
# The recipe (docs/ccp.md, "Restarting an MPI job"): RAILOVER_CHECKPOINT_TREE
# =parent makes the ranks under one parent a unit whose checkpoint command
# images the parent's tree, mpirun's on VM a and the orted's on VM b, with
# --tcp-established (mpirun's and the orted's out-of-band connection on eth,
# dumped at both ends; PMIx's on loopback) and the action script
# railover-criu-tree (at the dump: the files the tree has open or maps
# shared, Open MPI's session directory in /tmp and mpirun's output files,
# saved while the tree is frozen, and the tree's TCP ports); `cprclient JOB
# restart` runs railover-restore on each VM (through the mailbox agent):
# the files put back, the killed sockets' remains destroyed, the ports held
# until both trees are back, criu restore --tcp-established.
#
# reference: the same program, the same arguments, two ranks on VM a over
#   btl self,vader without pauses: its result line.
# checkpoint: the job runs, every rank printing a numbered tick every
#   TICK_MS (which the orted on b forwards to mpirun on a all the time);
#   `cprclient JOB` drains, closes, images both trees (criu dump
#   --leave-running) and reopens; the job goes on.  VM b's command starts
#   DELAY_B seconds late (checkpoint 1), so that VM a's tree is imaged long before b's:
#   railover-criu-tree's cut keeps a's tree frozen until b's is imaged too
#   (without it a would resume first and take b's ticks, which would then
#   be in neither image).
# restart: once the job has gone on 20 iterations, every process of it on
#   both VMs (mpirun, the orted, the ranks) is killed with SIGKILL;
#   `cprclient JOB restart` restores both trees from that checkpoint's set
#   (both VMs at once), waits for the ranks and reopens the job; both
#   ranks' connection is on the verbs rail again (`railover status`).
# spare (with a spare VM): the same cycle again, checkpoint 2, but b's
#   processes die with VM b itself, replaced by c, and the restart puts
#   the orted's tree on c.
# end: the job ends with the reference's result line, and mpirun's output
#   has every tick of every rank once, in order.
# Prints the dump and restore times and the image sizes.
set -u
[ "$ME" != a ] && exit 0 # b (or c) serves a's rexec calls (tests/vm/guest-run.sh)
build=${1:?usage: mpi-criu-job.sh BUILD_DIR [BTL_DIR [OMPI_PKGLIBDIR]]}
prog=$build/tests/ccp/rov_mpi_ckpt cpr=$build/tools/cprclient railover=$build/tools/railover
btl_dir=${2:-$build/mpi-btl}
command -v mpirun > /dev/null || { log "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
[ -x "$prog" ] || { log "SKIP: no $prog (the build found no Open MPI headers)"; exit 77; }
command -v criu > /dev/null || fail "criu is not installed on the host (apt-get install criu)"
pkglibdir=${3:-$(ompi_info --path pkglibdir | sed 's/^.*: *//')}
here=${VM_JOB%/*} # (VM_JOB: this script, absolute)
# shellcheck source-path=SCRIPTDIR source=../mpi/vm_mpi_lib.sh
. "$here/../mpi/vm_mpi_lib.sh"
# shellcheck source-path=SCRIPTDIR source=mpi-ckpt-lib.sh
. "$here/mpi-ckpt-lib.sh"

# The job: ITERS ring exchanges of BYTES and an allreduce each, PAUSE_MS of
# "computation" between them (about 0.1 s an iteration under TCG).
# Two ranks per VM take longer to set up and image: more iterations, so
# that the job is still running when it is killed the second time.
per_vm=${RAILOVER_TEST_MPI_PER_VM:-1}
ITERS=$((per_vm == 1 ? 500 : 1000)) BYTES=65536 PAUSE_MS=40 TICK_MS=100 DELAY_B=20
np=$((2 * per_vm))

d=$VMOUT/mpi-criu
rm -rf "$d"
mkdir -p "$d"

mpi_ckpt_criu_setup "$d" || exit 1

# --- reference ---------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np "$np" --oversubscribe --mca mpi_yield_when_idle 1 --mca pml ob1 --mca btl self,vader \
    "$prog" "$ITERS" "$BYTES" 0 < /dev/null > "$d/ref.out" 2> "$d/ref.err" ||
    fail "the reference run failed: $(tail -n 5 "$d/ref.err")"
ref=$(grep '^result=' "$d/ref.out") || fail "no result line in the reference run"
log "reference: $ref"

# --- the job -----------------------------------------------------------------------
job=mpi-ckpt out=$d/job.out err=$d/job.err
mpi_ckpt_job "$d" "$job" "$per_vm" "$build" "$btl_dir" "$pkglibdir" "$ITERS" "$BYTES" "$PAUSE_MS" \
    "$TICK_MS" || fail "cannot set up $d"
# (checkpoint 1 only: RAILOVER_CKPT_SET, from the checkpoint runner)
RAILOVER_CHECKPOINT_CMD="case \$RAILOVER_CKPT_SET in */sets/1) [ \"\$(uname -n)\" != b ] || sleep $DELAY_B ;; esac; $RAILOVER_CHECKPOINT_CMD"
argv=("${mpi_ckpt_argv[@]}")
log "\$ ${argv[*]}"
cd "$d" || fail "no $d"
# In a session of its own (CRIU images a tree whose session it holds), its
# standard streams on files.
setsid "${argv[@]}" < /dev/null > "$out" 2> "$err" &

iteration() { it=$(mpi_ckpt_iteration "$err"); } # (into $it)
progressed() { local it; iteration; ((it >= $1)); }
waitfor 90 progressed 10 || fail "the job did not start: $(tail -n 20 "$err")"
# rank 0 on VM a, rank rb (the first on VM b) there
rb=$per_vm
waitfor 20 grep -q "^mpi_ckpt: rank $rb pid" "$err" || fail "rank $rb did not print its pid: $(cat "$err")"
pid0=$(sed -n 's/^mpi_ckpt: rank 0 pid \([0-9]*\) .*/\1/p' "$err")
pid1=$(sed -n "s/^mpi_ckpt: rank $rb pid \\([0-9]*\\) host b\$/\\1/p" "$err")
[ -n "$pid0" ] && [ -n "$pid1" ] ||
    fail "rank 0 is not on a or rank $rb not on b: $(cat "$err")"
mpirun_pid=$(ps -o ppid= -p "$pid0" | tr -d ' ')
orted_pid=$(rexec "ps -o ppid= -p $pid1" | tr -d ' ')
log "running: mpirun $mpirun_pid, rank 0 $pid0 (VM a); orted $orted_pid, rank $rb $pid1 (VM b)"
# The image directories of the two trees in checkpoint set N: their units'
# lowest ranks, 0 on a and rb on b.
img() { # N VM
    if [ "$2" = a ]; then echo "$d/jobs/$job/sets/$1/unit.0"; else echo "$d/jobs/$job/sets/$1/unit.$rb"; fi
}

# What the two trees hold (for the record: the recipe's reasons).
show_tree() { # ROOT
    local p
    ps -o pid,ppid,pgid,sid,nlwp,comm -p "$1" --ppid "$1"
    for p in $1 $(cat /proc/"$1"/task/*/children); do
        echo "$p $(cat /proc/"$p"/comm): shared file mappings:"
        awk 'substr($2, 4, 1) == "s" { print "   ", $2, $6, $7 }' /proc/"$p"/maps | sort -u
        echo "$p: files:"
        ls -l /proc/"$p"/fd | awk 'NR > 1 { print "   ", $9, $11 }'
    done
    ls -lR /tmp/ompi.* /dev/shm 2> /dev/null | sed 's/^/  /'
}
declare -f show_tree > "$d/show_tree.sh"
{ echo "== VM a"; show_tree "$mpirun_pid"; } > "$d/trees.txt" 2>&1
{ echo "== VM b"; rexec ". $d/show_tree.sh; show_tree $orted_pid"; } >> "$d/trees.txt" 2>&1

images() { # N: sizes, times
    local r dir
    [ -s "$d/jobs/$job/sets/$1/manifest" ] || fail "checkpoint set $1 has no manifest"
    for dir in "$(img "$1" a)" "$(img "$1" b)"; do
        [ -s "$dir/inventory.img" ] || fail "no CRIU image in $dir: $(tail -n 5 "$dir/dump.log" 2> /dev/null)"
        log "checkpoint $1: ${dir##*/}: image $(du -sk "$dir" | cut -f1) KiB," \
            "$(wc -l < "$dir/ckpt-files.txt") files saved"
        grep -E 'Error|Warn' "$dir/dump.log" | grep -v 'with interrupted system call' | head -n 5
    done
    for ((r = 0; r < np; r++)); do
        log "  rank $r: checkpoint command $(sed -n 's/^ckpt_ms=//p' "$d/jobs/$job/rank.$r") ms"
    done
}
checkpoint() { # N
    "$cpr" --timeout 300 "$job" > "$d/cpr$1.out" 2>&1
    local rc=$?
    cat "$d/cpr$1.out"
    if [ $rc -ne 0 ]; then
        cat "$d"/jobs/"$job"/sets/"$1"/unit.*.log
        tail -n 20 "$d"/jobs/"$job"/sets/"$1"/unit.*/dump.log
        fail "cprclient $job (drain, close, checkpoint, reopen) exited $rc"
    fi
    images "$1"
}

# --- checkpoint, the job continues; kill everything, restart -------------------------
tree() { # ROOT: the pids of the tree
    local p
    echo "$1"
    for p in $(cat /proc/"$1"/task/*/children 2> /dev/null); do tree "$p"; done
}
declare -f tree > "$d/tree.sh"
gone() { local p; for p in "$@"; do [ ! -e /proc/"$p" ] || return 1; done; }
declare -f gone > "$d/gone.sh"
# Both ranks on the verbs rail (rail 0): the reopen connects on it first,
# or fails back to it after a connect that landed on tcp.
first=verbs@$RDMA_DEV:$RDMA_PORT
on_verbs() { # PID
    local s
    s=$("$railover" status "$1" 2>&1) &&
        [[ $s =~ state=established\ rail=$first\(0\) && ! $s =~ state=established\ rail=[^\ ]*\([1-9] ]]
}
declare -f on_verbs > "$d/on_verbs.sh"
export RAILOVER_CCP_AGENT=$d/agent
export RAILOVER_RESTORE_CMD="$build/tools/railover-restore %a %d --tcp-established -v2"

cycle() { # N same|spare: checkpoint N, go on, kill, restart from set N
    local n=$1 how=$2 at pids_a pids_b rc t0=0 t1=0 v where=()
    iteration
    log "checkpoint $n at iteration $it"
    checkpoint "$n"
    iteration
    at=$it
    waitfor 60 progressed $((at + 20)) || fail "the job did not go on after checkpoint $n: $(tail -n 5 "$err")"
    iteration
    log "the job goes on after checkpoint $n (iteration $at -> $it)"
    pids_a=$(tree "$mpirun_pid" | tr '\n' ' ')
    pids_b=$(rexec ". $d/tree.sh; tree $orted_pid" | tr '\n' ' ')
    iteration
    kill -9 $pids_a
    if [ "$how" = same ]; then
        rexec "kill -9 $pids_b" || fail "killing the orted's tree on $PEER"
    else
        # The host dies with the orted's tree; a spare takes its addresses.
        vm_replace || fail "VM b could not be replaced by the spare c"
    fi
    wait # (mpirun, the first time: this script's child)
    grep -q '^result=' "$out" && fail "the job finished before it was killed: raise ITERS"
    log "killed at iteration $it: mpirun's tree on a ($pids_a), the orted's ($pids_b)" \
        "$([ "$how" = same ] && echo "on $PEER" || echo "with VM b")"
    # CRIU restores the same pids: they must be free (no zombie left either).
    waitfor 10 gone $pids_a || fail "a process of mpirun's tree is still there on a: $(ps -o pid,stat,comm -p "${pids_a// /,}")"
    if [ "$how" = same ]; then
        rexec ". $d/gone.sh; waitfor 10 gone $pids_b" || fail "a process of the orted's tree is still there on $PEER"
    else
        mpi_ckpt_criu_peer "$d" || fail "CRIU cannot run on the spare c"
        # (c's own processes take pids from 16384 up: tests/vm/guest-lib.sh, _vm_spare)
        log "on c: hostname $(rexec hostname), its last pid $(rexec 'cat /proc/sys/kernel/ns_last_pid')," \
            "the tree to restore: $pids_b"
        # (c announced its addresses: a's entries name c's MACs, not b's)
        log "a's neighbours at c's addresses: $(ip neigh show to "$PEER_FAB" | tr '\n' ' ')|" \
            "$(ip neigh show to "$PEER_ETH" | tr '\n' ' ')"
        # The orted's tree on the spare: its unit (lowest rank rb) on c's hostname.
        where=(--map "$rb=$(rexec hostname)")
    fi
    log "left on the job's ports on a after the kill:"
    ss -tanH state all | grep -E ":($(paste -s -d '|' "$(img "$n" a)/ckpt-tcp-ports.txt")) "

    # The restart: railover-restore on each VM (the peer through the
    # mailbox: the agent names the peer of now), both at once; then the
    # ranks register again and the job is reopened.
    vm_agent "$d/agent" || fail "cannot write the agent"
    _vm_tms t0
    "$cpr" --timeout 300 "$job" restart "${where[@]}" > "$d/cpr-restart$n.out" 2>&1
    rc=$?
    _vm_tms t1
    cat "$d/cpr-restart$n.out"
    for v in a "$PEER"; do
        grep -v '^+ ' "$d/jobs/$job/sets/$n/restore.$([ "$v" = a ] && echo 0 || echo "$rb").out" |
            sed "s/^/  $v: /"
        grep -E 'Error|Warn' "$(img "$n" "$v")/restore.log" | head -n 5
    done
    [ $rc -eq 0 ] || tail -n 30 "$(img "$n" "$PEER")/restore.log"
    [ $rc -eq 0 ] || fail "cprclient $job restart exited $rc"
    log "restarted from set $n (both trees restored, on a and $PEER, the ranks back, the job reopened) in $((t1 - t0)) ms"
    waitfor 30 on_verbs "$pid0" || fail "rank 0 is not on $first after the restart: $("$railover" status "$pid0" 2>&1)"
    rexec "railover=$railover first=$first; . $d/on_verbs.sh; waitfor 30 on_verbs $pid1" ||
        fail "rank $rb is not on $first after the restart: $(rexec "$railover status $pid1" 2>&1)"
    log "rank 0 and rank $rb (on $PEER) are on $first after the restart"
}

cycle 1 same
if [ "${VM_SPARE:-0}" = 1 ]; then
    cycle 2 spare
    log "PASS: restarted with the orted's tree on the spare c, which took over b's addresses"
fi

waitfor 300 grep -q '^result=' "$out" || fail "the restored job did not finish: $(tail -n 5 "$err")"
res=$(grep '^result=' "$out")
log "restarted job: $res"
waitfor 30 eval '! kill -0 $mpirun_pid 2> /dev/null' || fail "mpirun ($mpirun_pid) did not end"
grep -v '^mpi_ckpt: ' "$err" | head -n 20
[ "$res" = "$ref" ] || fail "the restarted job's result differs from the reference ($ref)"
# Every rank's ticks in mpirun's output: 1, 2, 3... to the end, none twice,
# none missing (the images were one cut of the job); every rank's there,
# with at least 100 (the job runs for minutes at 10 a second).
tr -d '\r' < "$err" | awk -v np="$np" '$1 == "mpi_ckpt:" && $2 == "tick" {
        r = $3; k = $4 + 0; n[r]++
        if (k != last[r] + 1) { printf "rank %s: tick %d after tick %d\n", r, k, last[r]; bad++ }
        last[r] = k }
    END { for (r = 0; r < np; r++) {
              printf "rank %d: %d ticks\n", r, n[r]
              if (n[r] < 100) bad++ }
          exit bad > 0 }' > "$d/ticks.txt"
rc=$?
sed 's/^/  /' "$d/ticks.txt" | head -n 20
[ $rc -eq 0 ] || fail "mpirun's output lost, repeated or missed ticks: the images were not one cut of the job"
# The cut held at checkpoint 1: VM a's tree, imaged first, ended its dump
# only after VM b's was imaged (b's command started DELAY_B s late).
[ "$(stat -c %Y "$d/jobs/$job/sets/1/status.0")" -ge "$(stat -c %Y "$d/jobs/$job/sets/1/dumped.$rb")" ] ||
    fail "VM a's dump of checkpoint 1 ended before VM b's tree was imaged: no cut"
grep -h "railover-criu-tree: every unit" "$d/jobs/$job/sets/"*/unit.*/dump.log | sed 's/^/  /'
log "PASS: the MPI job, checkpointed, gone on, killed and restarted from the checkpoint, ended with the reference's result"
