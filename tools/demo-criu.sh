#!/usr/bin/env bash
# The CRIU demo: checkpoint and restart a job that was using RDMA.
#
# Two QEMU VMs with Soft-RoCE (tests/vm/), one rank of a two-rank job in
# each, exchanging checksummed messages over the verbs rail (TCP on the
# Ethernet link as the fallback).  `cprclient JOB` drains the job, closes
# its rails, has CRIU image every rank (criu dump --leave-running) and
# reopens it: the job finishes with every message right.  Then a second
# job is checkpointed, both ranks are killed, and restored from their
# images with `criu restore`, rank 0 on the other VM: the ranks register
# from their new hosts, reconnect over RDMA and finish, nothing lost.
# (tests/ccp/criu-job.sh, also `ctest -R ccp_criu`; docs/ccp.md.)
#
# Usage: tools/demo-criu.sh [build-dir]   (as root; about 2 minutes)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
out=$build/demo-criu
rc=0
"$src/tests/vm/vmrun" --two --timeout 900 --out "$out" -- "$src/tests/ccp/criu-job.sh" "$build" \
    > "$out.log" 2>&1 || rc=$?
grep -E "exchanging|^rank=|^stage=|image:|rolled back|restored on|result=|checkpoint:|restart:|FAIL" \
    "$out/a.log" 2>/dev/null || true
if [ $rc -eq 0 ]; then
    echo "demo-criu: done (all output: $out)"
else
    echo "demo-criu: failed (exit $rc): $out.log, $out/a.log" >&2
fi
exit $rc
