#!/usr/bin/env bash
# The CRIU demo: checkpoint and restart jobs that were using RDMA.
#
# Two QEMU VMs with Soft-RoCE (tests/vm/), the verbs rail first and TCP on
# the Ethernet link as the fallback.
#  1. A two-rank job exchanging checksummed messages (one rank per VM):
#     `cprclient JOB` drains it, closes its rails, has CRIU image every rank
#     into a checkpoint set (criu dump --leave-running) and reopens it: the
#     job finishes with every message right.  A second job is checkpointed,
#     both ranks are killed, and `cprclient JOB restart --map ...` brings
#     them back, rank 0 on the other VM: they register from their new
#     hosts, reconnect over RDMA and finish, nothing lost
#     (tests/ccp/criu-job.sh, `ctest -R ccp_criu`).
#  2. An unmodified MPI program (mpirun, pml ob1, btl self,railover; mpirun
#     in VM a, its orted in VM b): checkpointed while it runs (it goes on), then
#     mpirun, the orted and the ranks killed, and `cprclient JOB restart`
#     restores both launchers' trees; the job ends with the result of an
#     uninterrupted run (tests/ccp/mpi-criu-job.sh, `ctest -R ccp_mpi_criu`).
# docs/ccp.md walks through both.
#
# Usage: tools/demo-criu.sh [build-dir]   (as root; about 6 minutes)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
rc=0
# demo NAME JOB PATTERN: one two-VM run of a job script, its story lines.
demo() {
    local out=$build/demo-criu/$1 r=0
    mkdir -p "$build/demo-criu"
    "$src/tests/vm/vmrun" --two --timeout 900 --out "$out" -- "$src/tests/ccp/$2" "$build" \
        > "$out.log" 2>&1 || r=$?
    grep -E "$3|FAIL" "$out/a.log" 2>/dev/null || true
    if [ $r -eq 0 ]; then
        echo "demo-criu: $1 done (all output: $out)"
    else
        echo "demo-criu: $1 failed (exit $r): $out.log, $out/a.log" >&2
        rc=$r
    fi
}
echo "== 1. a job of two ranks: checkpoint, then kill and restart with one rank moved"
demo job criu-job.sh "exchanging|^rank=|^stage=|image:|rolled back|restored on|result=|checkpoint:|restart:"
echo "== 2. an MPI job: checkpoint, kill mpirun, the orted and the ranks, restart"
demo mpi mpi-criu-job.sh "reference:|running:|checkpoint [0-9]:|^stage=|put back|restored on|restarted|on verbs|PASS"
exit $rc
