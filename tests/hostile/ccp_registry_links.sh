#!/usr/bin/env bash
# Issue 35, items 6b and 6c: nothing of the job registry is written through
# a link, and a link where a file of the job should be is reported as a
# tampered registry (cprclient exit 8), not as a failed checkpoint command
# (exit 9); a registry another user cannot read is "permission denied"
# (docs/ccp.md, "Security").
#
#   ccp_registry_links.sh CPRCLIENT ROV_JOB
#
# Jobs of two ranks, each command `touch %d/image.%r`; before the whole
# checkpoint (cprclient JOBID: drain, close, checkpoint, reopen):
#   - log:     ckpt.0.log a symbolic link to a file of the test's: exit 8
#              naming rank 0, the file unchanged, the job reopened;
#   - images:  images a symbolic link to a directory of the test's: exit 8,
#              nothing written in that directory, the job reopened;
#   - tmp:     a hard link to a file of the test's at each rank's old record
#              temporary name (rank.<r>.tmp.<pid>): exit 0, the file
#              unchanged;
#   - lock:    the lock a hard link to a file of the test's: exit 8, the
#              file unchanged; a symbolic link: exit 8;
#   - record:  rank.1 a symbolic link to a true copy of itself: exit 8;
# and `cprclient list` as uid 65534 (a copy of cprclient, since the build
# tree may be closed to it) with a registry of mode 0700 that is not
# theirs: "permission denied", exit 7.
set -u

if [ $# -ne 2 ]; then
    echo "usage: ccp_registry_links.sh CPRCLIENT ROV_JOB" >&2
    exit 64
fi
cprclient=$1
rov_job=$2
. "$(dirname "$0")/control_lib.sh"
. "$(dirname "$0")/ccp_lib.sh"

cmd='touch %d/image.%r'

# precious NAME: a file of the test's holding one known line.
precious() {
    echo "precious $1" >"$work/$1"
}

# unchanged NAME WHAT: the file NAME still holds its line.
unchanged() {
    if [ "$(cat "$work/$1")" = "precious $1" ]; then
        pass "$2: $work/$1 unchanged"
    else
        fail "$2: $work/$1 was written through the link: $(head -c 200 "$work/$1" | tr '\n' '|')"
    fi
}

# tampered NAME TEXT: the run NAME exited 8, its last stderr line names TEXT.
tampered() {
    if [ "$(rc_of "$1")" = 8 ] && tail -n 1 "$work/$1.err" | grep -q "$2"; then
        pass "$1: exit 8, '$2'"
    else
        fail "$1: expected exit 8 (tampered registry) and '$2'"
        show "$1"
    fi
}

# ---- ckpt.0.log a symbolic link ---------------------------------------------
start_job log "$cmd"
precious log.target
ln -s "$work/log.target" "$jobs_dir/log/ckpt.0.log"
run log.ckpt "$cprclient" --timeout 20 log
tampered log.ckpt "rank 0 refused to run its checkpoint command"
unchanged log.target "symlinked ckpt.0.log"
expect_running log.status log
stop_job

# ---- images a symbolic link -------------------------------------------------
start_job images "$cmd"
mkdir -m 700 "$work/images.target"
ln -s "$work/images.target" "$jobs_dir/images/images"
run images.ckpt "$cprclient" --timeout 20 images
tampered images.ckpt "refused to run its checkpoint command"
if [ -z "$(ls -A "$work/images.target")" ]; then
    pass "symlinked images: nothing written in $work/images.target"
else
    fail "symlinked images: written there: $(cd "$work/images.target" && find . | tr '\n' ' ')"
fi
expect_running images.status images
stop_job

# ---- a hard link at each rank's record temporary name ----------------------
start_job tmp "$cmd"
precious tmp.target
# shellcheck disable=SC2154 # set by start_job
ln "$work/tmp.target" "$jobs_dir/tmp/rank.0.tmp.$job_pid0"
ln "$work/tmp.target" "$jobs_dir/tmp/rank.1.tmp.$job_pid1"
run tmp.ckpt "$cprclient" --timeout 20 tmp
expect_rc tmp.ckpt 0 "the records rewritten after the checkpoint"
unchanged tmp.target "hard link at the records' temporary names"
expect_running tmp.status tmp

# ---- the lock: a hard link, then a symbolic link ----------------------------
precious lock.target
rm -f "$jobs_dir/tmp/lock"
ln "$work/lock.target" "$jobs_dir/tmp/lock"
run lock.hard "$cprclient" --timeout 10 tmp status
tampered lock.hard "lock has another name (a hard link)"
unchanged lock.target "hard-linked lock"
rm -f "$jobs_dir/tmp/lock"
precious lock.target
ln -s "$work/lock.target" "$jobs_dir/tmp/lock"
run lock.sym "$cprclient" --timeout 10 tmp status
tampered lock.sym "lock is a symbolic link"
unchanged lock.target "symlinked lock"
rm -f "$jobs_dir/tmp/lock"

# ---- a record a symbolic link (to a true copy of itself) --------------------
cp -p "$jobs_dir/tmp/rank.1" "$work/rank.1.copy"
ln -sf "$work/rank.1.copy" "$jobs_dir/tmp/rank.1"
run record.sym "$cprclient" --timeout 10 tmp status
tampered record.sym "rank.1 is a symbolic link"
mv -f "$work/rank.1.copy" "$jobs_dir/tmp/rank.1"
stop_job

# ---- cprclient list: a registry closed to the user --------------------------
need_root
other_client=$(copy_for_other "$cprclient") || { fail "cannot copy $cprclient"; finish; }
run list.other as_other env LD_LIBRARY_PATH="$work/bin" "$other_client" list
if [ "$(rc_of list.other)" = 7 ] && grep -q "permission denied" "$work/list.other.err" &&
    ! grep -q "input/output" "$work/list.other.err"; then
    pass "list as uid $other_uid: permission denied, exit 7"
else
    fail "list as uid $other_uid: expected exit 7 and 'permission denied'"
    show list.other
fi

finish
