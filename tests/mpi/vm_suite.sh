#!/usr/bin/env bash
# The MPI correctness programs across the two Soft-RoCE VMs, one rank per
# VM, on the verbs rail (tcp on eth second), no fault:
#   mpirun --mca pml ob1 --mca btl self,railover rov_mpi_check ring sizes
#          alltoall anysource nonblocking halo threads
# Messages above the eager limit go by RDMA get (ob1's RGET on the verbs
# rail's RDMA READ), 64 MiB ones in get_limit pieces, MPI_THREAD_MULTIPLE
# senders among them.  Runs on VM a (vm_mpi_lib.sh launches VM b's rank).
#
#   vm_suite.sh MPI_CHECK BTL_DIR OMPI_PKGLIBDIR
#
# Pass: "PASSED: 2 rank(s), 0 failure(s)" (every payload checked), ob1 used
# railover both ways, RDMA get was on, and the connection stayed on the
# verbs rail (no move).
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
check=${1:?usage: vm_suite.sh MPI_CHECK BTL_DIR OMPI_PKGLIBDIR} btl_dir=${2:?} pkglibdir=${3:?}
command -v mpirun > /dev/null || { log "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
# shellcheck source-path=SCRIPTDIR source=vm_mpi_lib.sh
. "${VM_JOB%/*}/vm_mpi_lib.sh"

wd=$VMOUT/mpi-suite
rm -rf "$wd"
vm_mpi_setup "$wd" "$pkglibdir" "$btl_dir" || fail "cannot set up $wd"
out=$wd/job.log
argv=("${vm_mpirun[@]}"
      --mca pml ob1 --mca btl self,railover --mca btl_base_verbose 20
      --mca btl_railover_rails "verbs@$RDMA_DEV:$RDMA_PORT,tcp@$ETH_IF"
      --mca btl_railover_tcp_if "$ETH_IF" --mca btl_railover_log "${RAILOVER_LOG:-warn}"
      --mca btl_railover_verbs_timeout 16 --mca btl_railover_failover_timeout 5s
      "$check" ring sizes alltoall anysource nonblocking halo threads)
log "\$ ${argv[*]}"
cd "$wd" || fail "no $wd"
timeout --kill-after=10 300 "${argv[@]}" > "$out" 2>&1 < /dev/null
rc=$?
status=0
problem() { log "FAIL: $*"; status=1; }
[ "$rc" = 0 ] || problem "the job exited with $rc"
grep -q '^PASSED: 2 rank(s), 0 failure(s)$' "$out" || problem "no PASSED: 2 rank(s), 0 failure(s)"
grep -Eq '^\[a:[0-9]+\] mca: bml: Using railover btl for send to \[\[[0-9]+,1\],1\]' "$out" &&
    grep -Eq '^\[b:[0-9]+\] mca: bml: Using railover btl for send to \[\[[0-9]+,1\],0\]' "$out" ||
    problem "ob1 did not use railover between the two ranks"
grep -Eq 'btl railover: .* RDMA get on ' "$out" || problem "RDMA get was not on"
! grep -q 'moved from' "$out" || problem "a connection left the verbs rail"
grep -E 'RDMA get|^(ring|sizes|alltoall|anysource|nonblocking|halo|threads)|PASSED|FAIL' "$out" | cut -c1-200
if [ "$status" != 0 ]; then
    echo "---- job output ($out) ----"
    tail -n 60 "$out"
    exit 1
fi
log "PASS: mpi_verbs_suite"
