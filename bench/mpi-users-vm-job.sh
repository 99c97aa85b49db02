#!/usr/bin/env bash
# The job of bench/mpi-users-vm.sh: bench/mpi-users.c (what MPI users run:
# ping-pong, windowed bandwidth with 64 in flight, message rate) between
# the two Soft-RoCE VMs (tests/vm, two-VM mode), one rank per VM, under
# three selections, in paired rotating rounds.  Runs in VM a under
# `tests/vm/vmrun --two`; VM b's mailbox agent starts the remote orted
# (tests/mpi/vm_mpi_lib.sh).
#
#   mpi-users-vm-job.sh PROG BTL_DIR OMPI_PKGLIBDIR ROUNDS FIGURES SCALE MODES [BASE_BTL_DIR]
#     PROG            the mpi-users program (built on the host)
#     BTL_DIR         the directory of mca_btl_railover.so
#     OMPI_PKGLIBDIR  Open MPI's own component directory
#     ROUNDS          paired rounds
#     FIGURES         KIND:SIZE,... (bench/mpi-users.c)
#     SCALE           ROV_MPIU_SCALE, the iteration scale (0.05: TCG is some
#                     20 times slower than the host)
#     MODES           the selections below, comma-separated
#     BASE_BTL_DIR    another build's component: adds the mode rov-base,
#                     rov with that component, side by side
#
# Modes (the same as bench/mpi-perf-vm-job.sh, which explains the UCX
# settings): ucx (pml ucx, rc_verbs on rxe0), rov (ob1 + btl railover,
# rails verbs@rxe0:1,tcp@eth), rov1 (the same on verbs@rxe0:1 alone), tcp
# (ob1 + btl tcp on the fabric NIC).
#
# Output, in $VMOUT: runs.csv in bench/mpi-users.py's form (round, pin, mode,
# np, kind, size, value, unit, exit, wall_s, iters), and in
# $VMOUT/mpi-users-vm/ each job's output.  Exit 0 when every job gave its
# figures, 1 otherwise, 77 without mpirun.
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
usage="usage: mpi-users-vm-job.sh PROG BTL_DIR OMPI_PKGLIBDIR ROUNDS FIGURES SCALE MODES [BASE_BTL_DIR]"
prog=${1:?$usage} btl_dir=${2:?$usage} pkglibdir=${3:?$usage} rounds=${4:?$usage}
figures=${5:?$usage} scale=${6:?$usage} modelist=${7:?$usage} base_dir=${8:-}
command -v mpirun > /dev/null || { log "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
here=${VM_JOB%/*} # (VM_JOB: this script, absolute)
# shellcheck source-path=SCRIPTDIR source=../tests/mpi/vm_mpi_lib.sh
. "$here/../tests/mpi/vm_mpi_lib.sh"

JOB_S=300 # one job that is not over by then hangs
wd=$VMOUT/mpi-users-vm
rm -rf "$wd"
vm_mpi_setup "$wd" "$pkglibdir" "$btl_dir" || fail "cannot set up $wd"
cd "$wd" || fail "no $wd"
export ROV_MPIU_SCALE=$scale

rails="verbs@$RDMA_DEV:$RDMA_PORT,tcp@$ETH_IF"
# shellcheck disable=SC2054 # (the commas are in option values)
sel_ucx=(--mca pml ucx --mca btl self -x UCX_TLS=self,rc_verbs,ud_verbs
         -x "UCX_NET_DEVICES=$RDMA_DEV:$RDMA_PORT" -x UCX_IB_GID_INDEX=0 -x ROV_MPIU_SCALE)
# shellcheck disable=SC2054
sel_rov=(--mca pml ob1 --mca btl self,railover --mca btl_railover_tcp_if "$ETH_IF"
         --mca btl_railover_log "${RAILOVER_LOG:-warn}" -x ROV_MPIU_SCALE)
sel_rov1=("${sel_rov[@]}" --mca btl_railover_rails "verbs@$RDMA_DEV:$RDMA_PORT")
sel_rov+=(--mca btl_railover_rails "$rails")
# shellcheck disable=SC2054
sel_tcp=(--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include "$FAB_IF" -x ROV_MPIU_SCALE)
IFS=, read -r -a modes <<< "$modelist"
[[ -n $base_dir ]] && modes+=(rov-base)
nmodes=${#modes[@]}

IFS=, read -r -a figs <<< "$figures"
csv=$VMOUT/runs.csv
echo "round,pin,mode,np,kind,size,value,unit,exit,wall_s,iters" > "$csv"
wait_peer || fail "VM b is not ready"
failed=0 shown=
for ((rnd = 1; rnd <= rounds; rnd++)); do
    # Rotate the order from round to round, reversed every other one.
    order=()
    for ((i = 0; i < nmodes; i++)); do order+=("${modes[(i + rnd) % nmodes]}"); done
    if ((rnd % 2)); then
        rev=()
        for ((i = nmodes - 1; i >= 0; i--)); do rev+=("${order[i]}"); done
        order=("${rev[@]}")
    fi
    for mode in "${order[@]}"; do
        case $mode in
        ucx) sel=("${sel_ucx[@]}") ;;
        rov) sel=("${sel_rov[@]}") ;;
        rov1) sel=("${sel_rov1[@]}") ;;
        rov-base) sel=(--mca mca_base_component_path "$pkglibdir:$base_dir" "${sel_rov[@]}") ;;
        tcp) sel=("${sel_tcp[@]}") ;;
        esac
        argv=("${vm_mpirun[@]}" "${sel[@]}" "$prog" "${figs[@]}")
        [[ $shown == *" $mode "* ]] || { shown+=" $mode "; log "$mode: \$ ${argv[*]}"; }
        _vm_tms t0
        timeout --kill-after=10 "$JOB_S" "${argv[@]}" > "job-r$rnd-$mode.log" 2>&1 < /dev/null
        rc=$?
        _vm_tms t1
        wall=$(((t1 - t0) / 1000)).$(((t1 - t0) % 1000 / 100))
        got=0
        while read -r tag kv; do
            [[ $tag == ROV_MPIU ]] || continue
            declare -A f=()
            for w in $kv; do f[${w%%=*}]=${w#*=}; done
            echo "$rnd,off,$mode,2,${f[kind]},${f[size]},${f[value]},${f[unit]},$rc,$wall,${f[iters]:-}" >> "$csv"
            got=$((got + 1))
            unset f
        done < "job-r$rnd-$mode.log"
        if ((rc != 0 || got != ${#figs[@]})); then
            failed=$((failed + 1))
            log "FAIL: round $rnd $mode exited with $rc, $got of ${#figs[@]} figures; output in $wd/job-r$rnd-$mode.log"
            tail -n 15 "job-r$rnd-$mode.log"
        fi
        log "round $rnd $mode: $got figures (exit $rc, $wall s)"
    done
done
if ((failed)); then
    testbed_broken "$failed job(s) failed"
    log "FAIL: $failed job(s) gave no figures"
    exit 1
fi
log "done: $rounds round(s), $nmodes modes; $csv"
