#!/usr/bin/env bash
# CRIU checkpoint and restart of a job that was using RDMA: two Soft-RoCE
# VMs (tests/vm/, two-VM mode), one rank of a two-rank job in each, the
# verbs rail first (RAILOVER_VERBS_CM=oob) and TCP on the eth link second,
# the job registry and the images on the VMs' shared directory.  Runs on VM
# a; VM b serves its rexec calls.
#
#   criu-job.sh BUILD_DIR
#
# checkpoint: while the ranks exchange checksummed messages, `cprclient JOB`
#   drains, closes, checkpoints (RAILOVER_CHECKPOINT_CMD: criu dump
#   --leave-running, each rank imaged on its own VM) and reopens the job;
#   the images are there, and both ranks end with every message delivered
#   once, in order, intact (rov_job result=ok).
# restart: a second job checkpointed the same way, then both ranks killed
#   (SIGKILL) and restored from their images with `criu restore`, rank 0 on
#   VM b (the other VM: its host, addresses and verbs device change) and
#   rank 1 on whichever VM has its pid free; each registers again (the
#   registry shows the new host), `cprclient JOB reopen` reconnects them
#   through the addresses they published, and both end with result=ok.
# Prints the dump and restore times and the image sizes.
set -u
[ "$ME" = b ] && exit 0
build=${1:?usage: criu-job.sh BUILD_DIR}
cpr=$build/tools/cprclient
d=$VMOUT/ccp-criu
. "$(dirname "$0")/criu-lib.sh"
criu_setup "export RAILOVER_CHECKPOINT_CMD='criu dump -t %p -D %d --leave-running -o dump.log -v2'"

images() { # JOBID: sizes and dump times
    local r dir
    for r in 0 1; do
        dir=$d/jobs/$1/images/rank.$r
        [ -s "$dir/inventory.img" ] || fail "no CRIU image of rank $r in $dir: $(tail -n 5 "$dir/dump.log" 2>/dev/null)"
        log "rank $r image: $(du -sk "$dir" | cut -f1) KiB; dump: $(sed -n 's/^ckpt_ms=//p' "$d/jobs/$1/rank.$r") ms"
    done
}

# --- checkpoint, the job continues ---------------------------------------------------
job1=$(cat /proc/sys/kernel/random/uuid)
start "$job1" 600 20
"$cpr" --timeout 300 "$job1" > "$d/cpr1.out" 2>&1
rc=$?
cat "$d/cpr1.out"
[ $rc -eq 0 ] || fail "cprclient $job1 (drain, close, checkpoint, reopen) exited $rc"
images "$job1"
finish "$job1"
log "checkpoint: both ranks imaged by CRIU and continued to the end"

# --- restart from the images, one rank on the other VM --------------------------------
job2=$(cat /proc/sys/kernel/random/uuid)
start "$job2" 900 20
"$cpr" --timeout 300 "$job2" > "$d/cpr2.out" 2>&1
rc=$?
cat "$d/cpr2.out"
[ $rc -eq 0 ] || fail "cprclient $job2 exited $rc"
images "$job2"
p0=$(pid_of "$job2" 0) p1=$(pid_of "$job2" 1)
kill -9 "$p0"
rexec "kill -9 $p1" || fail "killing rank 1 on b"
sleep 1
grep -q "result=" "$d/$job2.rank0.out" "$d/$job2.rank1.out" 2>/dev/null &&
    fail "a rank of $job2 finished before it was killed: raise its message count"
log "job $job2: both ranks killed (pids $p0 on a, $p1 on b) after the checkpoint"

# The killed ranks wrote on to their output files after the checkpoint;
# CRIU restores a regular file only at the size it had then: roll the
# job's files back to the checkpoint (what they held when it was taken).
rollback() { # RANK
    crit decode -i "$d/jobs/$job2/images/rank.$1/files.img" | python3 -c '
import json, os, sys
for e in json.load(sys.stdin)["entries"]:
    reg = e.get("reg") or {}
    path, size = "/" + reg.get("name", "").lstrip("/"), reg.get("size")
    if path.startswith(sys.argv[1] + "/") and size is not None and os.path.isfile(path) \
            and os.path.getsize(path) > size:
        os.truncate(path, size)
        print("rolled back to the checkpoint: %s (%d bytes)" % (path, size))
' "$d" || fail "cannot read the file table of rank $1's image (crit)"
}
rollback 0
rollback 1

# Rank 0 goes to b; rank 1 to a if its pid is free there, else back to b.
restore() { # RANK VM
    local dir=$d/jobs/$job2/images/rank.$1 t0 t1 cmd
    cmd="criu restore -D $dir -d -o restore.log -v2"
    t0=$(date +%s%N)
    if [ "$2" = a ]; then $cmd; else rexec "$cmd"; fi || {
        tail -n 20 "$dir/restore.log"
        fail "criu restore of rank $1 on VM $2"
    }
    t1=$(date +%s%N)
    log "rank $1 restored on VM $2 in $(( (t1 - t0) / 1000000 )) ms (pid $(pid_of "$job2" "$1"))"
}
rexec "test ! -e /proc/$p0" || fail "pid $p0 (rank 0) is taken on b: cannot restore it there"
restore 0 b
if [ ! -e "/proc/$p1" ]; then restore 1 a; else restore 1 b; fi
# Each restored rank opens its control endpoints on its new host and
# publishes them; then the job reopens.
hb=$(rexec hostname) || fail "hostname on b"
end=$((SECONDS + 60))
until "$cpr" "$job2" status > "$d/cpr2-status.out" 2>&1 &&
      grep -q "^rank=0 .*host=$hb " "$d/cpr2-status.out"; do
    [ $SECONDS -lt $end ] || { cat "$d/cpr2-status.out"; fail "the restored ranks did not register again"; }
    sleep 1
done
cat "$d/cpr2-status.out"
"$cpr" --timeout 300 "$job2" reopen > "$d/cpr2-reopen.out" 2>&1
rc=$?
cat "$d/cpr2-reopen.out"
[ $rc -eq 0 ] || fail "cprclient $job2 reopen after the restart exited $rc"
finish "$job2"
# The restored ranks came back on the verbs rail (rail 0), not TCP: their
# last move is to rail 0, by the reopen itself or by a failback after a
# reconnect that landed on TCP first.
for r in 0 1; do
    last=$(grep "event=switch" "$d/$job2.rank$r.log" | tail -n 1)
    case $last in
    *" to=0 reason=reopen"*) ;;
    *" to=0 reason="*) log "rank $r came back on the verbs rail by: ${last##* reason=}" ;;
    *) fail "rank $r did not come back on the verbs rail after the restart: $last" ;;
    esac
done
log "restart: both ranks restored from CRIU images (rank 0 on the other VM) and finished"
exit 0
