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
#   - sets:    sets (the checkpoint sets' directory) a symbolic link to a
#              directory of the test's: exit 8, nothing written there, the
#              job reopened;
#   - set:     the next set's number (sets/1) a symbolic link to a directory
#              of the test's: never taken as the set (the checkpoint writes
#              set 2, exit 0), nothing written there, and the link, an
#              incomplete set older than the new one, pruned (the link
#              removed, its target kept);
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

# ---- sets a symbolic link ---------------------------------------------------
start_job sets "$cmd"
mkdir -m 700 "$work/sets.target"
ln -s "$work/sets.target" "$jobs_dir/sets/sets"
run sets.ckpt "$cprclient" --timeout 20 sets
tampered sets.ckpt "sets is .*the job.s registry was tampered with"
empty_dir() { # DIR WHAT
    if [ -z "$(ls -A "$1")" ]; then
        pass "$2: nothing written in $1"
    else
        fail "$2: written there: $(cd "$1" && find . | tr '\n' ' ')"
    fi
}
empty_dir "$work/sets.target" "symlinked sets"
expect_running sets.status sets
stop_job

# ---- the next set a symbolic link -------------------------------------------
start_job set "$cmd"
mkdir -m 700 "$work/set.target" "$jobs_dir/set/sets"
ln -s "$work/set.target" "$jobs_dir/set/sets/1"
run set.ckpt "$cprclient" --timeout 20 set
expect_rc set.ckpt 0 "a checkpoint beside a link planted at sets/1"
empty_dir "$work/set.target" "symlinked sets/1"
if [ -f "$jobs_dir/set/sets/2/manifest" ] && [ ! -e "$jobs_dir/set/sets/1" ] &&
   [ -d "$work/set.target" ]; then
    pass "the checkpoint wrote set 2 and pruned the link at sets/1 (its target kept)"
else
    fail "expected set 2 complete, the link sets/1 gone, its target kept: $(ls -l "$jobs_dir/set/sets" | tr '\n' '|')"
fi
expect_running set.status set
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
