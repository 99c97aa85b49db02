# shellcheck shell=bash
# vm_mpi_lib.sh: launching an MPI job across the two Soft-RoCE VMs
# (tests/vm, two-VM mode), one rank per VM, from a job running in VM a.
# Sourced by tests/mpi/vm_failover.sh and bench/mpi-perf-vm-job.sh, after
# tests/vm/guest-lib.sh (log, rexec, ... and the job variables ME, PEER,
# ETH_IP, PEER_ETH, VMOUT, VM_LIB, VM_CTL).
#
#   vm_mpi_setup WD PKGLIBDIR BTL_DIR
#       WD         a directory under $VMOUT (the same path in both VMs):
#                  the job's working directory; gets `hosts` and `agent`
#       PKGLIBDIR  Open MPI's own component directory
#                  (`ompi_info --path pkglibdir`)
#       BTL_DIR    the directory of mca_btl_railover.so
#     writes WD/hosts (the two eth addresses, one slot each) and WD/agent
#     (the plm_rsh_agent), exports the component path and Open MPI's
#     permission to run as root, and sets the array vm_mpirun: mpirun with
#     the launch options (hostfile, -np 2 --map-by node, the agent, no tree
#     spawn, out-of-band traffic on the eth subnet).  Append the job's own
#     options (pml, btl, -x ...) and the program:
#
#       vm_mpi_setup "$VMOUT/myjob" "$pkglibdir" "$btl_dir"
#       "${vm_mpirun[@]}" --mca pml ob1 --mca btl self,railover ./prog
#
# Launch: mpirun runs in VM a; the hosts are named by their eth addresses
# and Open MPI's out-of-band traffic stays on eth (oob_tcp_if_include), so
# a fault on the fabric hits the transport under test, not the launcher.
# The plm_rsh_agent runs the orted command line on VM b through the vmrun
# mailbox (rexec).  That works because with plm_rsh_no_tree_spawn Open
# MPI's rsh launcher passes --daemonize to the orted: the orted forks, its
# parent exits at once, so the mailbox command (which runs to completion,
# one at a time) ends, the agent exits 0, and Open MPI's rsh launcher takes
# an agent's exit status 0 as "launched" (rsh_wait_daemon reports only an
# abnormal exit).  The daemonized orted lives on in VM b for the job's life,
# reached over eth.
#
# The agent must exist at the same path in VM b as well, where it is never
# run: mpirun passes plm_rsh_agent on to the orted, whose rsh component
# refuses a path it cannot find, and the orted then dies (SIGSEGV in its
# FORCE-TERMINATE, Open MPI 4.1.4).  So it lives in the shared WD.  The job
# environment is baked into it: mpirun gives its agents a copy of its own
# environment, but nothing relies on that.

vm_mpi_setup() {
    local wd=${1:?usage: vm_mpi_setup WD PKGLIBDIR BTL_DIR} pkglibdir=${2:?} btl_dir=${3:?}
    mkdir -p "$wd" || return 1
    printf '%s slots=1\n%s slots=1\n' "$ETH_IP" "$PEER_ETH" > "$wd/hosts" || return 1
    # plm_rsh_agent: "agent HOST CMD..." runs CMD (an orted command line) on
    # the peer VM through the mailbox.
    {
        echo '#!/usr/bin/env bash'
        printf 'ME=%q PEER=%q VM_CTL=%q VM_NAPFIFO=%q\n' "$ME" "$PEER" "$VM_CTL" "${VM_NAPFIFO:-}"
        printf '. %q\n' "$VM_LIB"
        printf 'peer_eth=%q wd=%q VMOUT=%q\n' "$PEER_ETH" "$wd" "$VMOUT"
        cat << 'EOF'
[ "$1" = "$peer_eth" ] || { echo "agent: unknown host $1" >&2; exit 1; }
shift
printf '%s\n' "$*" > "$wd/orted.cmd"
rexec -t 60 "spawn orted bash $wd/orted.cmd"
EOF
    } > "$wd/agent" || return 1
    chmod 755 "$wd/agent" || return 1
    export OMPI_MCA_mca_base_component_path="$pkglibdir:$btl_dir"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # shellcheck disable=SC2034 # (for the sourcing job)
    vm_mpirun=(mpirun --hostfile "$wd/hosts" -np 2 --map-by node
               --mca plm_rsh_agent "$wd/agent" --mca plm_rsh_no_tree_spawn 1
               --mca oob_tcp_if_include "${ETH_IP%.*}.0/24")
}
