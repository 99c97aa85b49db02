# guest-lib.sh: the helpers of the Soft-RoCE test jobs (tests/vm/README.md).
# bash only.  guest-run.sh sources this file, runs the prologue (_vm_setup)
# and exports the public helpers to the job with `export -f`, so a bash job
# calls them directly (sourcing this file again from a job is harmless).
#
# Public helpers (all return non-zero on failure, none exits except fail;
# safe in jobs that use set -e and set -u):
#   log MSG...            "[a 12:34:56.789] MSG" on stdout (host-synced clock)
#   fail MSG...           log "FAIL: MSG" and exit 1
#   nap SEC               sleep without fork+exec (SEC may be fractional)
#   waitfor SEC CMD...    run CMD every 0.1 s until it succeeds; 1 on timeout
#   is_listening PORT     a TCP socket listens on PORT (IPv4 or IPv6)
#   wait_listen PORT [SEC]          wait (30 s) until something listens on PORT
#   spawn NAME CMD...     start CMD in the background, output to $VMOUT/$ME.NAME.log
#   reap NAME [SEC]       wait (60 s) for it, print its output, return its status
#   rexec [-t SEC] CMD... run a bash command line on the peer VM (two-VM runs)
#   wait_peer [SEC]       wait (120 s) until the peer VM has finished its prologue
#   vm_agent FILE         write FILE, a launcher agent (`FILE HOST COMMAND`, as
#                         ssh, Open MPI's plm_rsh_agent, RAILOVER_CCP_AGENT) that
#                         runs COMMAND on the peer VM (HOST: its hostname)
#   vm_replace [SEC]      (VM a, vmrun --spare) VM b dies, the spare c takes
#                         its place; wait (300 s) until c is ready, then
#                         PEER=c (rexec and vm_agent reach c)
#
# Why builtins everywhere: under TCG one fork+exec costs 0.2-0.5 s (notes
# softroce-vm.md section 8), so polling loops use `nap` and $EPOCHREALTIME and
# every wait is bounded by wall time, never by a number of iterations.

# ---------------------------------------------------------------- time
# _vm_tms VAR: the wall clock in milliseconds, into VAR.
_vm_tms() {
  local _vm_us=${EPOCHREALTIME//[!0-9]/}
  printf -v "$1" '%s' "$((_vm_us / 1000))"
}
# _vm_dur VAR SEC: a duration in seconds ("2", "0.5") in milliseconds, into VAR.
_vm_dur() {
  [[ $2 =~ ^([0-9]*)(\.([0-9]*))?$ ]] || { log "bad duration '$2' (seconds)"; return 2; }
  local _vm_i=${BASH_REMATCH[1]:-0} _vm_f=${BASH_REMATCH[3]}000
  printf -v "$1" '%s' "$((10#$_vm_i * 1000 + 10#${_vm_f:0:3}))"
}

log() {
  local _vm_us=${EPOCHREALTIME//[!0-9]/}
  printf '[%s %(%H:%M:%S)T.%03d] %s\n' "${ME:-?}" "$((_vm_us / 1000000))" \
    "$((_vm_us / 1000 % 1000))" "$*"
}

fail() { log "FAIL: $*"; exit 1; }

# testbed_broken WHY: one of the two VMs' links (fabric, or eth, which
# carries the TCP rail and UCX's connection manager) no longer carries even
# an ICMP echo (3 tries, 1 s apart), i.e. the emulated link died under the
# job (tests/vm/README.md, "Traps"): say so and end the job with 75, which
# vmrun takes as a test bed failure and repeats the run for.  Returns 1
# (the job goes on) while both answer, or without a peer.  Call it only
# once the job's own faults are repaired (link up, no drop rules).
testbed_broken() {
  [[ -n ${PEER_FAB:-} ]] || return 1
  local _vm_i _vm_link _vm_if _vm_peer
  for _vm_link in fabric eth; do
    if [[ $_vm_link == fabric ]]; then _vm_if=$FAB_IF _vm_peer=$PEER_FAB
    else _vm_if=$ETH_IF _vm_peer=${PEER_ETH:-}; fi
    [[ -n $_vm_peer ]] || continue
    for _vm_i in 1 2 3; do
      busybox ping -c 1 -W 1 -I "$_vm_if" "$_vm_peer" > /dev/null 2>&1 && continue 2
    done
    log "TEST BED: the $_vm_link link does not carry a ping to $_vm_peer any more ($*)"
    ip -s link show "$_vm_if" | sed -n '3,6p'
    ip neigh show dev "$_vm_if"
    exit 75
  done
  return 1
}

# nap SEC: a read with a timeout on a FIFO that nobody writes to.
nap() {
  if [[ -n ${VM_NAPFIFO:-} && -p $VM_NAPFIFO ]]; then
    local _vm_x
    read -r -t "$1" _vm_x <> "$VM_NAPFIFO" || :     # (status > 128: timed out)
    return 0
  fi
  sleep "$1"
}

waitfor() {
  local _vm_end _vm_now
  _vm_dur _vm_end "$1" || return 2
  shift
  _vm_tms _vm_now
  _vm_end=$((_vm_end + _vm_now))
  while :; do
    "$@" && return 0
    _vm_tms _vm_now
    ((_vm_now < _vm_end)) || return 1
    nap 0.1
  done
}

# ---------------------------------------------------------------- processes
is_listening() {
  local _vm_hex _vm_f _vm_sl _vm_loc _vm_rem _vm_st _vm_rest
  printf -v _vm_hex ':%04X' "$1"
  for _vm_f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r $_vm_f ]] || continue
    while read -r _vm_sl _vm_loc _vm_rem _vm_st _vm_rest; do
      [[ $_vm_st == 0A && $_vm_loc == *"$_vm_hex" ]] && return 0
    done < "$_vm_f"
  done
  return 1
}

wait_listen() {
  waitfor "${2:-30}" is_listening "$1" && return 0
  log "wait_listen: nothing listens on TCP port $1 after ${2:-30} s"
  return 1
}

# _vm_killtree PID: SIGKILL PID and all its descendants.
_vm_killtree() {
  local _vm_t _vm_c _vm_kids=()
  kill -STOP "$1" 2>/dev/null || return 0
  for _vm_t in /proc/"$1"/task/*/children; do
    _vm_c=()
    read -r -a _vm_c 2>/dev/null < "$_vm_t" || :   # (no newline at the end: status 1)
    _vm_kids+=("${_vm_c[@]}")
  done
  for _vm_c in "${_vm_kids[@]}"; do _vm_killtree "$_vm_c"; done
  kill -KILL "$1" 2>/dev/null
  return 0
}

# spawn NAME CMD [ARG...]: CMD runs in the background with its output in
# $VMOUT/$ME.NAME.log (kept on the host); `reap NAME` collects it.  CMD may
# be a helper function.
spawn() {
  local _vm_n=$1 _vm_b=$VMOUT/.vm/spawn.$ME.$1
  shift
  : > "$_vm_b.rc"                      # empty while running
  ( "$@" > "$VMOUT/$ME.$_vm_n.log" 2>&1 < /dev/null; printf '%d\n' $? > "$_vm_b.rc" ) &
  printf '%d\n' $! > "$_vm_b.pid"
  disown $!                            # reap uses the files, not `wait`
}

# reap NAME [SEC]: wait up to SEC (60) seconds for `spawn NAME ...` to end,
# print its output and return its exit status.  Still running: killed, 124.
reap() {
  local _vm_n=$1 _vm_b=$VMOUT/.vm/spawn.$ME.$1 _vm_rc _vm_pid
  [[ -e $_vm_b.rc ]] || { log "reap: nothing was spawned as '$_vm_n'"; return 2; }
  if waitfor "${2:-60}" test -s "$_vm_b.rc"; then
    read -r _vm_rc < "$_vm_b.rc"
  else
    read -r _vm_pid < "$_vm_b.pid"
    _vm_killtree "$_vm_pid"
    log "reap: '$_vm_n' still running after ${2:-60} s: killed"
    _vm_rc=124
  fi
  [[ -s $VMOUT/$ME.$_vm_n.log ]] && cat -- "$VMOUT/$ME.$_vm_n.log"
  return "$_vm_rc"
}

# ---------------------------------------------------------------- two VMs
# The mailbox lives on the shared output directory, $VM_CTL (9p, cache=none).
# rexec on X claims slot n by creating $VM_CTL/<peer>.n.cmd exclusively
# (O_EXCL, so concurrent callers get distinct slots), then creates
# <peer>.n.go; the peer's agent runs the slots in order, writing <peer>.n.out
# and then <peer>.n.rc.
#
# rexec [-t SEC] CMD...: run CMD (one bash command line: the words are joined
# with spaces, as for bash -c) on the peer, in its job environment (these
# helpers and variables included) and working directory.  Prints the output,
# returns the exit status; 124 if there was no answer within SEC (120)
# seconds (the command keeps running), 125 if there is no peer.  The agent
# runs one command at a time: background long-running ones (&, or spawn).
rexec() {
  local _vm_tmo=120 _vm_n _vm_f _vm_rc _vm_end _vm_now _vm_l _vm_opts=$-
  if [[ ${1:-} == -t ]]; then _vm_tmo=$2; shift 2; fi
  [[ -n ${PEER:-} && -n ${VM_CTL:-} ]] || { log "rexec: no peer VM"; return 125; }
  _vm_n=${_VM_RSEQ:-0}
  set -C                                       # noclobber: > is O_EXCL
  until { printf '%s\n' "$*" > "$VM_CTL/$PEER.$_vm_n.cmd"; } 2>/dev/null; do
    if [[ ! -e $VM_CTL/$PEER.$_vm_n.cmd ]]; then
      [[ $_vm_opts == *C* ]] || set +C
      log "rexec: cannot write to $VM_CTL"
      return 125
    fi
    _vm_n=$((_vm_n + 1))
  done
  [[ $_vm_opts == *C* ]] || set +C
  _VM_RSEQ=$((_vm_n + 1))
  _vm_f=$VM_CTL/$PEER.$_vm_n
  : > "$_vm_f.go"
  _vm_dur _vm_end "$_vm_tmo" || return 2
  _vm_tms _vm_now
  _vm_end=$((_vm_end + _vm_now))
  until [[ -s $_vm_f.rc ]]; do
    if [[ -e $VM_CTL/done.$PEER && ! -s $_vm_f.rc ]]; then
      log "rexec: VM $PEER has finished; no answer to: $*"
      return 125
    fi
    _vm_tms _vm_now
    if ((_vm_now >= _vm_end)); then
      log "rexec: no answer from VM $PEER within $_vm_tmo s to: $*"
      return 124
    fi
    nap 0.05
  done
  read -r _vm_rc < "$_vm_f.rc"
  if [[ -s $_vm_f.out ]]; then
    while IFS= read -r _vm_l || [[ -n $_vm_l ]]; do printf '%s\n' "$_vm_l"; done < "$_vm_f.out"
  fi
  return "$_vm_rc"
}

# _vm_agent: serve the mailbox of this VM (runs in the background for the
# whole job, in both VMs of a two-VM run).
_vm_agent() {
  local _vm_n=0 _vm_f
  while :; do
    _vm_f=$VM_CTL/$ME.$_vm_n
    if [[ -e $_vm_f.go ]]; then
      bash "$_vm_f.cmd" > "$_vm_f.out" 2>&1 < /dev/null
      printf '%d\n' $? > "$_vm_f.rc"
      _vm_n=$((_vm_n + 1))
    else
      nap 0.1
    fi
  done
}

# vm_agent FILE: FILE HOST COMMAND runs the bash command line COMMAND on
# the peer VM through the mailbox (rexec, 100 s at most) and exits with its
# status; 255 (as ssh when it cannot connect) for any other HOST.
vm_agent() {
  local _vm_peer_host
  _vm_peer_host=$(rexec hostname) || return 1
  {
    echo '#!/usr/bin/env bash'
    printf 'ME=%q PEER=%q VM_CTL=%q VM_NAPFIFO=%q\n' "$ME" "$PEER" "$VM_CTL" "${VM_NAPFIFO:-}"
    printf '. %q\npeer_host=%q\n' "$VM_LIB" "$_vm_peer_host"
    echo '[[ $1 == "$peer_host" ]] || { echo "agent: no host $1 here" >&2; exit 255; }'
    echo 'rexec -t 100 "$2"'
  } > "$1" && chmod +x "$1"
}

# wait_peer [SEC]: wait until the peer VM has run its prologue (rxe0 up,
# addresses set, agent serving).  1 on timeout or if the peer VM is gone.
wait_peer() {
  local _vm_end _vm_now
  [[ -n ${PEER:-} ]] || { log "wait_peer: no peer VM"; return 125; }
  _vm_dur _vm_end "${1:-120}" || return 2
  _vm_tms _vm_now
  _vm_end=$((_vm_end + _vm_now))
  until [[ -e $VM_CTL/ready.$PEER ]]; do
    if [[ -e $VM_CTL/done.$PEER ]]; then log "wait_peer: VM $PEER is gone"; return 1; fi
    _vm_tms _vm_now
    if ((_vm_now >= _vm_end)); then log "wait_peer: VM $PEER not ready after ${1:-120} s"; return 1; fi
    nap 0.1
  done
}

# vm_replace [SEC]: (VM a of a `vmrun --two --spare` run) ask vmrun to
# replace VM b by the spare c ($VM_CTL/replace.b): vmrun kills b's qemu
# (whatever runs there dies with it, unannounced) and boots c on b's links,
# with b's addresses.  Waits up to SEC (300) seconds for c's prologue (a
# boot under TCG), then sets PEER=c: rexec, wait_peer and a vm_agent
# written from then on reach c.  1 if c did not come up.
vm_replace() {
  local _vm_end _vm_now _vm_t0
  [[ $ME == a && ${PEER:-} == b ]] ||
    { log "vm_replace: only VM a replaces b, once (ME=$ME, PEER=${PEER:-none})"; return 125; }
  [[ ${VM_SPARE:-0} == 1 ]] || { log "vm_replace: no spare VM (run vmrun --two --spare)"; return 125; }
  : > "$VM_CTL/replace.b" || { log "vm_replace: cannot write to $VM_CTL"; return 1; }
  _vm_dur _vm_end "${1:-300}" || return 2
  _vm_tms _vm_t0
  _vm_end=$((_vm_end + _vm_t0))
  until [[ -e $VM_CTL/ready.c ]]; do
    if [[ -e $VM_CTL/done.c ]]; then
      log "vm_replace: the spare c ended before it was ready (see c.console, c.qemu, c.log)"
      return 1
    fi
    _vm_tms _vm_now
    if ((_vm_now >= _vm_end)); then
      log "vm_replace: the spare c not ready after ${1:-300} s (see c.console: still booting?)"
      return 1
    fi
    nap 0.2
  done
  PEER=c
  unset _VM_RSEQ                               # (c's mailbox starts at slot 0)
  _vm_tms _vm_now
  log "vm_replace: b is gone, c ready in its place after $(((_vm_now - _vm_t0) / 1000)) s"
}

# ---------------------------------------------------------------- prologue
# _vm_spare pids|announce: what the spare c does beyond the prologue.
#   pids      its own processes (the prologue, the mailbox agent, what it
#             runs) take pids from 16384 up.  c boots as b did, so they
#             would otherwise take the low pids that b's job had, the ones
#             CRIU restores: without this, c's last pid was 155 when the
#             MPI restart began (mpi-criu-job.sh), between the orted's 154
#             and its rank's 157.  That restore passed, the processes that
#             had had them being gone, but one alive at the restore
#             (railover-restore, CRIU itself, the agent's command) would
#             have failed it (cprclient exit 13).  A site's replacement
#             node must keep them free likewise.
#   announce  gratuitous ARP for its addresses on both links: its MACs are
#             not b's, and a's neighbour entries (which rxe resolves a new
#             QP's destination MAC from, once, and TCP uses) still name
#             b's: without it, a's fabric entry named b's MAC after the
#             restore (README.md, "A spare VM").
_vm_spare() {
  local _vm_max
  case $1 in
    pids)
      read -r _vm_max < /proc/sys/kernel/pid_max
      if ((_vm_max > 20000)); then
        echo 16383 > /proc/sys/kernel/ns_last_pid
      else
        log "setup: pid_max is $_vm_max: the spare's pids not moved up"
      fi ;;
    announce)
      busybox arping -q -U -c 2 -I "$FAB_IF" "$FAB_IP" &
      busybox arping -q -U -c 2 -I "$ETH_IF" "$ETH_IP"
      wait ;;
  esac
  return 0
}

_vm_gid_ready() {
  local _vm_g _vm_s
  read -r _vm_g 2>/dev/null < "/sys/class/infiniband/$RDMA_DEV/ports/$RDMA_PORT/gids/$RDMA_GID_IDX" &&
  read -r _vm_s 2>/dev/null < "/sys/class/infiniband/$RDMA_DEV/ports/$RDMA_PORT/state" &&
  [[ $_vm_g == *:ffff:* && $_vm_s == *ACTIVE* ]]
}

# _vm_setup: the guest prologue (VM mode only).  Needs FAB_MAC, ETH_MAC,
# FAB_IP, ETH_IP, RDMA_DEV, RDMA_PORT, RDMA_GID_IDX, VM_CTL.
_vm_setup() {
  local _vm_d _vm_mac _vm_fab='' _vm_eth='' _vm_ip _vm_t
  # virtio_net without TX NAPI: with it (the default) a NIC under load
  # stopped transmitting for good within a run or two (NETDEV WATCHDOG,
  # tests/vm/README.md "Traps"), without it none did.  Its own call: modprobe
  # takes parameters only for a single module.
  modprobe virtio_net napi_tx=0 || { log "setup: modprobe virtio_net failed"; return 1; }
  read -r _vm_t 2>/dev/null < /sys/module/virtio_net/parameters/napi_tx || _vm_t=?
  [[ $_vm_t == N ]] || log "setup: warning: virtio_net has napi_tx=$_vm_t, not N (loaded before?)"
  # Soft-RoCE (crc32_generic is not a dependency of rdma_rxe, but without it
  # `rdma link add` fails with ENOENT), nftables and netem for fault tests.
  modprobe -a crc32_generic rdma_rxe ib_uverbs rdma_ucm nf_tables sch_netem ||
    { log "setup: modprobe failed"; return 1; }
  # Name the NICs by MAC address (vmrun assigns the MACs).
  for _vm_d in /sys/class/net/*; do
    read -r _vm_mac < "$_vm_d/address" || continue
    [[ $_vm_mac == "$FAB_MAC" ]] && _vm_fab=${_vm_d##*/}
    [[ $_vm_mac == "$ETH_MAC" ]] && _vm_eth=${_vm_d##*/}
  done
  [[ -n $_vm_fab && -n $_vm_eth ]] ||
    { log "setup: no NICs with MAC $FAB_MAC and $ETH_MAC"; return 1; }
  _vm_ip="link set dev lo up"
  [[ $_vm_fab == "$FAB_IF" ]] || _vm_ip+=$'\n'"link set dev $_vm_fab name $FAB_IF"
  [[ $_vm_eth == "$ETH_IF" ]] || _vm_ip+=$'\n'"link set dev $_vm_eth name $ETH_IF"
  _vm_ip+=$'\n'"addr add $FAB_IP/24 dev $FAB_IF"$'\n'"link set dev $FAB_IF up"
  _vm_ip+=$'\n'"addr add $ETH_IP/24 dev $ETH_IF"$'\n'"link set dev $ETH_IF up"
  ip -batch - <<< "$_vm_ip" || { log "setup: ip failed"; return 1; }
  rdma link add "$RDMA_DEV" type rxe netdev "$FAB_IF" || { log "setup: rdma link add failed"; return 1; }
  # The IPv4-mapped RoCEv2 GID (index 1) appears about 0.2 s later.
  waitfor 15 _vm_gid_ready || { log "setup: $RDMA_DEV has no active IPv4 GID"; return 1; }
  # Clock: a file created on the 9p share carries the host's time as mtime.
  : > "$VM_CTL/clk.$ME"
  if ! _vm_t=$(stat -c %.9Y "$VM_CTL/clk.$ME") || ! date -s "@$_vm_t" > /dev/null; then
    log "setup: could not set the clock from the host"
  fi
  return 0
}
