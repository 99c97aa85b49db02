# shellcheck shell=bash
# mpi-ckpt-lib.sh: an MPI job of rov_mpi_ckpt across the two Soft-RoCE VMs,
# set up to be checkpointed and restarted (docs/ccp.md, "Restarting an MPI
# job").  Sourced by tests/ccp/mpi-criu-job.sh and bench/ccp-mpi-vm-job.sh,
# after tests/vm/guest-lib.sh and tests/mpi/vm_mpi_lib.sh.
#
#   mpi_ckpt_criu_setup DIR
#       what CRIU needs in both VMs (the modules, lo up, a first `criu check`,
#       its output in DIR/criu-check.{a,b}); fails the job when it cannot.
#   mpi_ckpt_criu_peer DIR
#       the same on the peer VM alone (a spare that replaced b: c), its
#       output in DIR/criu-check.$PEER; 1 when it cannot.
#   mpi_ckpt_job DIR JOBID PER_VM BUILD BTL_DIR PKGLIBDIR ITERS BYTES PAUSE_MS [TICK_MS]
#       DIR (under $VMOUT, the same path in both VMs) gets the launch files
#       and the job registry DIR/jobs; PER_VM ranks on each VM (1: btl
#       self,railover; 2: self,vader,railover); exports the job's RAILOVER_*
#       settings (verbs rail first, tcp on eth; each launcher's tree one
#       checkpoint unit, imaged by CRIU with railover-criu-tree) and sets the
#       array mpi_ckpt_argv: the mpirun command line (rov_mpi_ckpt's
#       arguments: ITERS BYTES PAUSE_MS [TICK_MS]).  Run it in a session
#       of its own, its streams on files:
#           setsid "${mpi_ckpt_argv[@]}" < /dev/null > OUT 2> ERR &
mpi_ckpt_job() {
    local d=$1 job=$2 per_vm=$3 build=$4 btl_dir=$5 pkglibdir=$6 np=$(($3 * 2)) btl i
    case $per_vm in 1) btl=self,railover ;; 2) btl=self,vader,railover ;;
    *) log "mpi_ckpt_job: $per_vm ranks per VM: 1 or 2"; return 1 ;; esac
    mkdir -p "$d/jobs" && chmod 700 "$d/jobs" || return 1
    vm_mpi_setup "$d" "$pkglibdir" "$btl_dir" || return 1
    if [ "$per_vm" != 1 ]; then
        printf '%s slots=%d\n' "$ETH_IP" "$per_vm" "$PEER_ETH" "$per_vm" > "$d/hosts"
        for i in "${!vm_mpirun[@]}"; do
            case ${vm_mpirun[$i]} in 2) vm_mpirun[i]=$np ;; node) vm_mpirun[i]=slot ;; esac
        done
    fi
    export RAILOVER_JOBID=$job RAILOVER_JOB_DIR=$d/jobs RAILOVER_CCP_ADDR=$ETH_IF
    export RAILOVER_RAILS=verbs@$RDMA_DEV:$RDMA_PORT,tcp@$ETH_IF RAILOVER_VERBS_CM=oob
    export RAILOVER_TCP_IF=$ETH_IF RAILOVER_LOG=warn
    # The TCG tunings of tests/ccp/criu-job.sh and tests/mpi/vm_failover.sh.
    export RAILOVER_VERBS_TIMEOUT=16 RAILOVER_FAILOVER_TIMEOUT=2s RAILOVER_CONNECT_TIMEOUT=10s
    export RAILOVER_FAILBACK_DWELL=1s RAILOVER_FAILBACK_RETRY=200ms RAILOVER_FAILBACK_RETRY_MAX=1s
    # The ranks under one parent are a unit, imaged with its tree (mpirun's,
    # the orted's) by one command.
    export RAILOVER_CHECKPOINT_TREE=parent
    export RAILOVER_CHECKPOINT_CMD="criu dump -t %p -D %d --tcp-established \
--network-lock nftables --leave-running -o dump.log -v2 --action-script $build/tools/railover-criu-tree"
    export RAILOVER_CRIU_FILES=/tmp:/dev/shm:$VMOUT # (railover-criu-tree: what it saves)
    # shellcheck disable=SC2034,SC2054 # (for the caller; the commas are in option values)
    mpi_ckpt_argv=("${vm_mpirun[@]}" --mca pml ob1 --mca btl "$btl"
        -x RAILOVER_JOBID -x RAILOVER_JOB_DIR -x RAILOVER_CCP_ADDR -x RAILOVER_RAILS
        -x RAILOVER_VERBS_CM -x RAILOVER_TCP_IF -x RAILOVER_LOG -x RAILOVER_VERBS_TIMEOUT
        -x RAILOVER_FAILOVER_TIMEOUT -x RAILOVER_CONNECT_TIMEOUT -x RAILOVER_FAILBACK_DWELL
        -x RAILOVER_FAILBACK_RETRY -x RAILOVER_FAILBACK_RETRY_MAX -x RAILOVER_CHECKPOINT_CMD
        -x RAILOVER_CHECKPOINT_TREE -x RAILOVER_CRIU_FILES
        "$build/tests/ccp/rov_mpi_ckpt" "$7" "$8" "$9" ${10:+"${10}"})
}

# (shared notes, softroce-vm.md section 3; --tcp-established locks the
# connections with --network-lock nftables, CRIU's libnftables: the default
# lock runs iptables, which a host may not have)
mpi_ckpt_criu_mods="unix_diag inet_diag tcp_diag udp_diag raw_diag netlink_diag af_packet_diag tun veth nf_tables"

mpi_ckpt_criu_setup() {
    local d=$1
    # shellcheck disable=SC2086 # (a list)
    modprobe -a $mpi_ckpt_criu_mods || fail "modprobe $mpi_ckpt_criu_mods"
    ip link set lo up
    # (CRIU's first run on a host probes the kernel, with error lines on the way)
    criu check > "$d/criu-check.a" 2>&1 || fail "criu check on a: $(tail -n 3 "$d/criu-check.a")"
    wait_peer || fail "VM $PEER is not ready"
    mpi_ckpt_criu_peer "$d" || exit 1
}

mpi_ckpt_criu_peer() {
    local d=$1
    rexec "modprobe -a $mpi_ckpt_criu_mods && ip link set lo up" || { log "modprobe on $PEER failed"; return 1; }
    rexec "criu check > $d/criu-check.$PEER 2>&1" ||
        { log "criu check on $PEER: $(tail -n 3 "$d/criu-check.$PEER")"; return 1; }
}

# mpi_ckpt_iteration ERR: the last iteration rank 0 reported (0: none yet).
mpi_ckpt_iteration() {
    local it
    it=$(sed -n 's|^mpi_ckpt: iteration \([0-9]*\)/.*|\1|p' "$1" | tail -n 1)
    echo "${it:-0}"
}
