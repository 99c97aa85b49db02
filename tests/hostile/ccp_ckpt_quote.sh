#!/usr/bin/env bash
# Issue 35, item 6a: every substitution in RAILOVER_CHECKPOINT_CMD (%d, %j,
# %p, %r) reaches /bin/sh quoted, so that a registry path with a space, a
# quote or "$(...)" is one word and runs nothing (docs/ccp.md, "Security").
#
#   ccp_ckpt_quote.sh CPRCLIENT ROV_JOB
#
# Two jobs, their registries (RAILOVER_JOB_DIR) "<work>/my $(touch PWNED)
# jobs" and "<work>/it's a registry"; every rank's command is `touch
# %d/image.%r`.  For each, `cprclient JOBID` (drain, close, checkpoint,
# reopen) must exit 0, each rank's image directory must hold its image.<r>,
# PWNED must not exist anywhere under the work directory (the ranks run
# there), and the job runs on.
set -u

if [ $# -ne 2 ]; then
    echo "usage: ccp_ckpt_quote.sh CPRCLIENT ROV_JOB" >&2
    exit 64
fi
cprclient=$1
rov_job=$2
. "$(dirname "$0")/control_lib.sh"
. "$(dirname "$0")/ccp_lib.sh"

# job_in JOB REGISTRY: JOB's ranks with REGISTRY as RAILOVER_JOB_DIR, each
# with `touch %d/image.%r`; a whole checkpoint (cprclient JOB), checked.
job_in() {
    local job=$1 r
    jobs_dir=$2
    mkdir -m 700 "$jobs_dir"
    export RAILOVER_JOB_DIR=$jobs_dir
    start_job "$job" 'touch %d/image.%r'
    run "$job" "$cprclient" --timeout 20 "$job"
    expect_rc "$job" 0 "drain, close, checkpoint, reopen with the registry '$jobs_dir'"
    for r in 0 1; do
        if [ -f "$jobs_dir/$job/sets/1/unit.$r/image.$r" ]; then
            pass "$job: rank $r's command wrote its image in its image directory"
        else
            fail "$job: rank $r: no $jobs_dir/$job/sets/1/unit.$r/image.$r"
            head -n 3 "$jobs_dir/$job/sets/1/unit.$r.log" >&2
        fi
    done
    if [ -z "$(find "$work" -name PWNED)" ]; then
        pass "$job: nothing in the registry's path ran"
    else
        fail "$job: the \$(...) in the registry's path ran: $(find "$work" -name PWNED)"
    fi
    find "$work" -name PWNED -delete
    expect_running "$job.status" "$job"
    stop_job
}

# shellcheck disable=SC2016 # literally: the registry's name holds "$(...)"
job_in subst "$work/my \$(touch PWNED) jobs"
job_in quote "$work/it's a registry"
finish
