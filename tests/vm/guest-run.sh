#!/usr/bin/env bash
# The job runner of the Soft-RoCE test tier (tests/vm/README.md).
#   VM mode:     init starts it inside the guest, chrooted into the host root,
#                as root, in its own session.
#   native mode: vmrun starts it on the host (a host with a real RDMA port).
# In:  VM_NAME (a, b, or c: the spare that replaces b, vmrun --spare),
#      VM_MODE (vm or native), VMOUT; $VMOUT/.vm/vm.env, written by vmrun
#      (VM_DIR, VM_JOB, VM_COUNT, VM_SPARE, VM_CWD, the job's arguments,
#      forwarded environment, and in native mode the RDMA port).
# Does: the prologue (modules, NICs, rxe0, clock; VM mode), the mailbox agent
#      (two-VM runs), then the job; exits with the job's exit status (3 if
#      the prologue failed).  VM b (or c) finishes only after VM a has
#      finished, so that it can serve a's rexec calls; if its own job is
#      still running 10 seconds after a finished, it is killed (status 124).
#      The spare c takes over b's addresses (NICs of its own MACs; it
#      announces them with gratuitous ARP) and starts its own processes
#      from pid 16384 up (guest-lib.sh, _vm_spare).
set -u
# shellcheck source=/dev/null
. "$VMOUT/.vm/vm.env" || exit 3           # also sets the job's arguments ($@)
VM_LIB=$VM_DIR/guest-lib.sh
# shellcheck source=guest-lib.sh
. "$VM_LIB" || exit 3

ME=$VM_NAME
VM_CTL=$VMOUT/.vm/ctl
# _idx: the VM's addresses; _mac: its NICs' MACs (vmrun assigns them).
case $ME in
  a) _idx=1 _pidx=2 _mac=1 PEER=b ;;
  b) _idx=2 _pidx=1 _mac=2 PEER=a ;;
  c) _idx=2 _pidx=1 _mac=3 PEER=a ;;
  *) echo "guest-run: bad VM name '$ME'" >&2; exit 3 ;;
esac
if [[ $VM_MODE == vm ]]; then
  # The topology of tests/vm/README.md; vmrun assigns the MACs.
  FAB_IF=fabric ETH_IF=eth
  FAB_IP=192.0.2.$_idx ETH_IP=198.51.100.$_idx
  # shellcheck disable=SC2034   # used by _vm_setup
  FAB_MAC=52:54:00:0f:00:0$_mac ETH_MAC=52:54:00:0e:00:0$_mac
  RDMA_DEV=rxe0 RDMA_PORT=1 RDMA_GID_IDX=1
  VM_NAPFIFO=/tmp/.vm-nap
else
  VM_NAPFIFO=$VMOUT/.vm/nap.fifo          # RDMA_* and FAB_*/ETH_* come from vm.env
fi
if ((VM_COUNT == 2)); then
  PEER_FAB=192.0.2.$_pidx PEER_ETH=198.51.100.$_pidx
else
  PEER='' PEER_FAB='' PEER_ETH=''
fi
unset _idx _pidx _mac
export ME PEER VM_COUNT VM_SPARE VM_MODE VMOUT VM_DIR VM_LIB VM_CTL VM_JOB VM_NAPFIFO \
       FAB_IF ETH_IF FAB_IP ETH_IP PEER_FAB PEER_ETH RDMA_DEV RDMA_PORT RDMA_GID_IDX
export -f log fail testbed_broken nap waitfor is_listening wait_listen spawn reap rexec wait_peer vm_agent \
          vm_replace \
          _vm_tms _vm_dur _vm_killtree

t_start=0 t_setup=0 t_job=0 t_end=0 now=0     # (set by _vm_tms)
_vm_tms t_start
mkfifo "$VM_NAPFIFO" 2>/dev/null
if [[ $VM_MODE == vm ]]; then
  [[ $ME == c ]] && _vm_spare pids
  if ! _vm_setup; then
    log "vm: prologue FAILED"
    : > "$VM_CTL/done.$ME"
    exit 3
  fi
  [[ $ME == c ]] && _vm_spare announce
  _vm_tms t_setup
  read -r _up _ < /proc/uptime
  log "vm: prologue done in $(((t_setup - t_start) / 1000)).$(((t_setup - t_start) % 1000 / 100)) s" \
      "(guest uptime ${_up} s): $FAB_IF $FAB_IP ($RDMA_DEV), $ETH_IF $ETH_IP${PEER:+, peer $PEER}"
fi
if ((VM_COUNT == 2)); then
  _vm_agent &
  : > "$VM_CTL/ready.$ME"
fi

cd -- "$VM_CWD" 2>/dev/null || cd -- "$VMOUT" || exit 3
log "vm: job $VM_JOB${*:+ $*}"
_vm_tms t_job
if [[ -x $VM_JOB ]]; then "$VM_JOB" "$@" & else bash "$VM_JOB" "$@" & fi
job=$!

if [[ $ME != a ]]; then
  # Wait for our job; once VM a is done, give it 10 more seconds.
  grace=10000
  a_done=
  rc=
  while kill -0 "$job" 2>/dev/null; do
    _vm_tms now
    if [[ -z $a_done && -e $VM_CTL/done.$PEER ]]; then a_done=$now; fi
    if [[ -n $a_done ]] && ((now - a_done > grace)); then
      log "vm: job still running $((grace / 1000)) s after VM $PEER finished: killed"
      _vm_killtree "$job"
      rc=124
      break
    fi
    nap 0.2
  done
  if [[ -z $rc ]]; then wait "$job"; rc=$?; fi
  # Keep serving VM a's mailbox until it is done.
  until [[ -e $VM_CTL/done.$PEER ]]; do nap 0.2; done
else
  wait "$job"
  rc=$?
fi
_vm_tms t_end
: > "$VM_CTL/done.$ME"
log "vm: job exit status $rc after $(((t_end - t_job) / 1000)).$(((t_end - t_job) % 1000 / 100)) s"
exit "$rc"
