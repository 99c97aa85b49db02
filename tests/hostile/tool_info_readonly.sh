#!/usr/bin/env bash
# Issue 35, item 7: `railover info` is an information command: it changes
# nothing on disk.  It used to open a context with a control socket, which
# created RAILOVER_RUN_DIR, a socket in it, RAILOVER_JOB_DIR and the job's
# directory with a secret (and, unset, <run dir>/jobs).
#
#   tool_info_readonly.sh RAILOVER
set -u

if [ $# -ne 1 ]; then
    echo "usage: tool_info_readonly.sh RAILOVER" >&2
    exit 64
fi
railover=$1
. "$(dirname "$0")/control_lib.sh"

check_nothing_made() {
    local label=$1
    shift
    run "$label" env "$@" "$railover" info
    if [ "$(rc_of "$label")" != 0 ] || ! grep -q "^rails: 2" "$work/$label.out"; then
        fail "$label: railover info did not report the two rails"
        show "$label"
    fi
    local made
    made=$(cd "$work" && find . -mindepth 1 ! -name "$label.*" | sort)
    if [ -z "$made" ]; then
        pass "$label: railover info created nothing"
    else
        fail "$label: railover info created: $(echo $made)"
    fi
}

# Both directories named, neither exists.
check_nothing_made named RAILOVER_RUN_DIR="$work/run" RAILOVER_JOB_DIR="$work/jobs" \
    RAILOVER_JOBID=info-test
# The registry left to its default, <run dir>/jobs.
find "$work" -mindepth 1 -delete
check_nothing_made default RAILOVER_RUN_DIR="$work/run2" RAILOVER_JOBID=info-test
# An existing run directory stays empty (no socket, no jobs/).
find "$work" -mindepth 1 -delete
mkdir -m 700 "$work/run3"
run existing env RAILOVER_RUN_DIR="$work/run3" RAILOVER_JOBID=info-test "$railover" info
if [ "$(rc_of existing)" = 0 ] && [ -z "$(ls -A "$work/run3")" ]; then
    pass "an existing run directory stays empty"
else
    fail "railover info wrote into an existing run directory: $(ls -A "$work/run3")"
    show existing
fi

finish
