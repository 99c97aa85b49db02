# shellcheck shell=bash
# Shared by the ccp_*.sh hostile tests (sourced after control_lib.sh):
# jobs of two rov_job ranks on this host (loopback, control sockets only,
# no network control endpoint), driven by cprclient.  Needs $cprclient and
# $rov_job.

unset RAILOVER_JOB_DIR RAILOVER_CCP_ADDR RAILOVER_CHECKPOINT_CMD RAILOVER_RANK
export RAILOVER_RAILS=tcp@lo
jobs_dir=$work/jobs
mkdir -m 700 "$jobs_dir" "$work/run"
export RAILOVER_JOB_DIR=$jobs_dir RAILOVER_RUN_DIR=$work/run

# start_job JOBID [CHECKPOINT_CMD]: ranks 0 and 1 of JOBID, streaming to each
# other, run from $work (a command's relative paths land there); sets
# job_pid0 and job_pid1 and waits until both are registered.
start_job() {
    local job=$1 cmd=${2:-} r p
    for r in 0 1; do
        (cd "$work" && RAILOVER_JOBID=$job RAILOVER_RANK=$r RAILOVER_CHECKPOINT_CMD=$cmd \
            RAILOVER_CHECKPOINT_TIMEOUT=20s exec setsid "$rov_job" --size 2 --msgs 1000000 \
            --rate 20 --timeout 60 >"$work/$job.$r.out" 2>"$work/$job.$r.log" </dev/null) &
        p=$!
        pids+=("$p")
        eval "job_pid$r=$p"
    done
    if ! wait_for 20 test -s "$jobs_dir/$job/rank.0" -a -s "$jobs_dir/$job/rank.1"; then
        fail "job $job: the ranks did not register"
        tail -n 5 "$work/$job".*.log >&2
        finish
    fi
    # Both connected (a stage asked of a rank that is not yet streaming is
    # still right, but the checks below want a job that runs).
    wait_for 20 both_receiving "$job" || fail "job $job: the ranks exchange nothing"
}

both_receiving() {
    grep -q " received=[1-9]" "$work/$1.0.log" && grep -q " received=[1-9]" "$work/$1.1.log"
}

stop_job() {
    kill -TERM "$job_pid0" "$job_pid1" 2>/dev/null
    wait "$job_pid0" "$job_pid1" 2>/dev/null
}

# expect_rc NAME RC WHAT: the run NAME exited RC.
expect_rc() {
    if [ "$(rc_of "$1")" = "$2" ]; then
        pass "$1: exit $2 ($3)"
    else
        fail "$1: expected exit $2 ($3)"
        show "$1"
    fi
}

# expect_running NAME JOBID: `cprclient JOBID status` says every rank running.
expect_running() {
    run "$1" "$cprclient" --timeout 10 "$2" status
    if [ "$(rc_of "$1")" = 0 ] && [ "$(grep -c ' stage=running .*status=ok' "$work/$1.out")" = 2 ]
    then
        pass "$1: job $2 runs on (both ranks running)"
    else
        fail "$1: job $2: expected both ranks running"
        show "$1"
    fi
}
