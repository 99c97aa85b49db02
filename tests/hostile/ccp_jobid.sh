#!/usr/bin/env bash
# Issue 35, item 6d: a job id that does not fit the registry's record (more
# than 63 characters) or holds anything but A-Z a-z 0-9 . _ - is refused at
# context creation (as any bad setting, naming RAILOVER_JOBID), and by
# cprclient with its usage exit code (64); nothing is registered
# (docs/ccp.md, "Job identity").
#
#   ccp_jobid.sh CPRCLIENT ROV_JOB
#
# Two ranks whose 64-character RAILOVER_JOBIDs share their first 63
# characters were registered as one job (the second's record replacing the
# first's); ids "a b", "../up" and ".hidden" ran unregistered.
set -u

if [ $# -ne 2 ]; then
    echo "usage: ccp_jobid.sh CPRCLIENT ROV_JOB" >&2
    exit 64
fi
cprclient=$1
rov_job=$2
. "$(dirname "$0")/control_lib.sh"
. "$(dirname "$0")/ccp_lib.sh"

x63=$(printf 'j%.0s' $(seq 63))

# check_refused N ID: the rank of run idN exited 1 with the context refused.
check_refused() {
    if [ "$(rc_of "id$1")" = 1 ] && grep -q "error config: RAILOVER_JOBID=.* is not a job id" \
        "$work/id$1.err" && grep -q "rov_context_create: invalid argument" "$work/id$1.err"; then
        pass "RAILOVER_JOBID='$2' (${#2} characters) refused at context creation"
    else
        fail "RAILOVER_JOBID='$2': expected the context refused, naming RAILOVER_JOBID"
        show "id$1"
    fi
}

# start_rank N ID: rank 0 of a job ID, in the background (exit in idN.rc).
start_rank() {
    (cd "$work" && RAILOVER_JOBID=$2 RAILOVER_RANK=0 timeout 10 "$rov_job" --size 2 \
        --timeout 5 >"$work/id$1.out" 2>"$work/id$1.err" </dev/null; echo $? >"$work/id$1.rc") &
    pids+=($!)
}

ended() { test -s "$work/id1.rc" -a -s "$work/id2.rc"; }

# Two ranks at once, their ids the same but for the 64th character.
start_rank 1 "${x63}1"
start_rank 2 "${x63}2"
wait_for 8 eval 'ended || test -s "$jobs_dir/$x63/rank.0"'
if [ -e "$jobs_dir/$x63" ]; then
    fail "the two ids were registered as one job $x63 (its rank.0: pid" \
        "$(sed -n 's/^pid=//p' "$jobs_dir/$x63/rank.0" 2>/dev/null))"
fi
wait_for 12 ended
check_refused 1 "${x63}1"
check_refused 2 "${x63}2"
n=2
for id in "a b" "../up" ".hidden"; do
    n=$((n + 1))
    start_rank "$n" "$id"
    wait_for 12 test -s "$work/id$n.rc"
    check_refused "$n" "$id"
done
if [ -z "$(ls -A "$jobs_dir")" ]; then
    pass "nothing was registered"
else
    fail "registered: $(cd "$jobs_dir" && find . | tr '\n' ' ')"
fi

for id in "${x63}1" "a b" "../up"; do
    run client "$cprclient" "$id" status
    if [ "$(rc_of client)" = 64 ] && grep -q "is not a job id: .*RAILOVER_JOBID" "$work/client.err"
    then
        pass "cprclient '$id' status: exit 64, the id refused"
    else
        fail "cprclient '$id' status: expected exit 64 and 'is not a job id'"
        show client
    fi
done
finish
