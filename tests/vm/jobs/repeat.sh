#!/usr/bin/env bash
# VM job: run another job N times in this VM and count its failures, to
# measure how often a flaky case fails (one boot, many tries).
#   vmrun --out DIR -- tests/vm/jobs/repeat.sh N JOB [ARGS...]
# Each try's output goes to $VMOUT/repeat-K.log; the last line says how many
# of the N tries failed, and the exit status is 1 if any did.  One-VM jobs
# only (a two-VM job's peer would not know of the repeats).
# Example, the UCX conformance case `switch` 66 times:
#   tests/vm/vmrun --timeout 1400 --out /tmp/sw -- tests/vm/jobs/repeat.sh 66 \
#       tests/rdma/conformance-job.sh "$PWD/build" ucx 1 --only switch
set -u
n=${1:?usage: repeat.sh N JOB [ARGS...]}
shift
[ $# -ge 1 ] || { echo "usage: repeat.sh N JOB [ARGS...]" >&2; exit 64; }
fails=0
for k in $(seq 1 "$n"); do
    if ! "$@" > "$VMOUT/repeat-$k.log" 2>&1; then
        fails=$((fails + 1))
        echo "try $k of $n failed (log: repeat-$k.log)"
    fi
done
echo "repeat: $fails of $n tries failed: $*"
[ "$fails" -eq 0 ]
