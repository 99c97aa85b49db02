#!/usr/bin/env bash
# The job of bench/mpi-perf-vm.sh: NetPIPE (NPopenmpi) between the two
# Soft-RoCE VMs (tests/vm, two-VM mode), one rank per VM, under four
# selections, in paired rotating rounds.  Runs in VM a under
# `tests/vm/vmrun --two`; VM b's mailbox agent starts the remote orted
# (tests/mpi/vm_mpi_lib.sh).
#
#   mpi-perf-vm-job.sh BTL_DIR OMPI_PKGLIBDIR ROUNDS SIZES [REPEATS]
#     BTL_DIR         the directory of mca_btl_railover.so
#     OMPI_PKGLIBDIR  Open MPI's own component directory
#     ROUNDS          paired rounds
#     SIZES           message sizes in bytes, comma-separated
#     REPEATS         NetPIPE -n for every size (default: from a model of
#                     the emulated link, about TRIAL_MS per trial)
#   TRIAL_MS          about this long per NetPIPE trial (default 150)
#
# Modes (every one with the same component path; railover declines where
# it is not named):
#   ucx       --mca pml ucx --mca btl self, UCX_TLS=self,rc_verbs,ud_verbs
#             UCX_NET_DEVICES=rxe0:1 UCX_IB_GID_INDEX=0: Open MPI's own
#             verbs transport; the tag lane must be rc_verbs/rxe0:1
#             (UCX_LOG_LEVEL=info prints the lanes).  rc_verbs cannot
#             connect without an auxiliary (wireup) transport: tcp on eth,
#             which UCX takes with peer error handling (Railover's UCX
#             rail), is refused under pml ucx ("no auxiliary transport ...
#             Unsupported operation", UCX 1.13.1, with or without self and
#             lo); ud_verbs works on rxe only with GID index 0 (the notes
#             softroce-vm.md section 7), so both use the IPv6 link-local
#             RoCEv2 GID of rxe0, on the fabric all the same.  self: the
#             rank's endpoint to itself.
#   rov       --mca pml ob1 --mca btl self,railover, rails
#             verbs@rxe0:1,tcp@eth (failover on, the default)
#   rov-fooff the same with btl_railover_failover off
#   tcp       --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include
#             fabric: Open MPI's btl tcp on the fabric NIC
# A round runs, for every size, the four one after the other, the order
# rotating from size to size and round to round.  Each job is one mpirun of
# one NetPIPE ping-pong of one size (`NPopenmpi -l S -u S -p 0 -n N`; the
# repeat count N is the same for the four).
#
# Output, in $VMOUT: runs.csv, one row per job (round, size, order, mode,
# repeats, NetPIPE's time t_s of half a round trip, exit, wall_s, the bytes
# VM a sent on the fabric and on eth during the job), and in
# $VMOUT/mpi-perf-vm/ each job's output job-rR-SIZE-MODE.log (what carried
# it: UCX's lanes, railover's rails and moves, bml's choice of BTL; the
# host-side bench/mpi-perf-vm.py reads them: every fork costs 0.2-0.5 s here).  Exit 0 when every job gave a number, 1 otherwise (a run
# whose fabric died is repeated by vmrun: 75), 77 without mpirun/NPopenmpi.
set -u
[ "$ME" = b ] && exit 0 # b serves a's rexec calls (tests/vm/guest-run.sh)
usage="usage: mpi-perf-vm-job.sh BTL_DIR OMPI_PKGLIBDIR ROUNDS SIZES [REPEATS]"
btl_dir=${1:?$usage} pkglibdir=${2:?$usage} rounds=${3:?$usage} sizes=${4:?$usage}
fixed_n=${5:-}
trial_ms=${TRIAL_MS:-150}
command -v mpirun > /dev/null || { log "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
np=$(command -v NPopenmpi) || { log "SKIP: NPopenmpi not found (apt-get install netpipe-openmpi)"; exit 77; }
here=${VM_JOB%/*} # (VM_JOB: this script, absolute)
# shellcheck source-path=SCRIPTDIR source=../tests/mpi/vm_mpi_lib.sh
. "$here/../tests/mpi/vm_mpi_lib.sh"

JOB_S=120 # one job that is not over by then hangs
wd=$VMOUT/mpi-perf-vm
rm -rf "$wd"
vm_mpi_setup "$wd" "$pkglibdir" "$btl_dir" || fail "cannot set up $wd"
cd "$wd" || fail "no $wd"

rails="verbs@$RDMA_DEV:$RDMA_PORT,tcp@$ETH_IF"
# shellcheck disable=SC2054 # (the commas are in option values)
sel_ucx=(--mca pml ucx --mca btl self -x UCX_TLS=self,rc_verbs,ud_verbs
         -x "UCX_NET_DEVICES=$RDMA_DEV:$RDMA_PORT" -x UCX_IB_GID_INDEX=0 -x UCX_LOG_LEVEL=info)
# shellcheck disable=SC2054
sel_rov=(--mca pml ob1 --mca btl self,railover --mca btl_base_verbose 20
         --mca btl_railover_rails "$rails" --mca btl_railover_tcp_if "$ETH_IF"
         --mca btl_railover_log "${RAILOVER_LOG:-warn}")
# shellcheck disable=SC2054
sel_tcp=(--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include "$FAB_IF"
         --mca btl_base_verbose 20)
modes=(ucx rov rov-fooff tcp)

# repeats SIZE: NetPIPE -n, so that one trial (N round trips) takes about
# TRIAL_MS on the emulated link, from a rough model of a round trip here
# (2 x (0.7 ms + SIZE / 15 MB/s), measured with btl tcp): the same count
# for the four modes, whatever each one's speed.  At least 1: NetPIPE runs
# 7 trials of N round trips and keeps the fastest, and a 1 MiB job with
# N = 3 already took 16-28 s here.
repeats() {
    local rtt_us=$((2 * (700 + $1 / 15)))
    local n=$((trial_ms * 1000 / rtt_us))
    ((n < 1)) && n=1
    echo "$n"
}
# txb IF VAR: the bytes IF has sent so far, into VAR (no fork).
txb() { read -r "$2" < "/sys/class/net/$1/statistics/tx_bytes"; }
t0=0 t1=0 f0=0 f1=0 e0=0 e1=0 # (set by _vm_tms, txb)

IFS=, read -r -a size_list <<< "$sizes"
csv=$VMOUT/runs.csv
echo "round,size,order,mode,repeats,t_s,exit,wall_s,fab_tx_a,eth_tx_a" > "$csv"
wait_peer || fail "VM b is not ready"
failed=0 shown=
for ((rnd = 1; rnd <= rounds; rnd++)); do
    for ((k = 0; k < ${#size_list[@]}; k++)); do
        size=${size_list[k]}
        # Rotate the order from size to size and round to round, and
        # reverse every other one, so that no mode always runs first.
        shift_=$(((rnd + k) % 4))
        order=()
        for ((i = 0; i < 4; i++)); do order+=("${modes[(i + shift_) % 4]}"); done
        if (((rnd + k) % 2)); then order=("${order[3]}" "${order[2]}" "${order[1]}" "${order[0]}"); fi
        n=${fixed_n:-$(repeats "$size")}
        for ((i = 0; i < 4; i++)); do
            mode=${order[i]}
            case $mode in
            ucx) sel=("${sel_ucx[@]}") ;;
            rov) sel=("${sel_rov[@]}" --mca btl_railover_failover on) ;;
            rov-fooff) sel=("${sel_rov[@]}" --mca btl_railover_failover off) ;;
            tcp) sel=("${sel_tcp[@]}") ;;
            esac
            tag=r$rnd-$size-$mode
            argv=("${vm_mpirun[@]}" "${sel[@]}" "$np" -l "$size" -u "$size" -p 0 -n "$n" -o "np-$tag.out")
            [[ $shown == *" $mode "* ]] || { shown+=" $mode "; log "$mode: \$ ${argv[*]}"; }
            txb "$FAB_IF" f0; txb "$ETH_IF" e0
            _vm_tms t0
            timeout --kill-after=10 "$JOB_S" "${argv[@]}" > "job-$tag.log" 2>&1 < /dev/null
            rc=$?
            _vm_tms t1
            txb "$FAB_IF" f1; txb "$ETH_IF" e1
            t=
            if [[ -s np-$tag.out ]]; then
                read -r s_ _ t < "np-$tag.out"
                [[ $s_ == "$size" ]] || t=
            fi
            if [[ -n $t && $rc == 0 ]]; then
                rm -f "np-$tag.out"
            else
                failed=$((failed + 1))
                log "FAIL: job $tag exited with $rc${t:+}${t:-, no result}; output in $wd/job-$tag.log"
                tail -n 15 "job-$tag.log"
            fi
            wall=$(((t1 - t0) / 1000)).$(((t1 - t0) % 1000 / 100))
            echo "$rnd,$size,$((i + 1)),$mode,$n,$t,$rc,$wall,$((f1 - f0)),$((e1 - e0))" >> "$csv"
            log "round $rnd size $size $mode: ${t:-no result} s (n $n, exit $rc, $wall s)"
        done
    done
done
if ((failed)); then
    testbed_broken "$failed job(s) failed"
    log "FAIL: $failed job(s) gave no number"
    exit 1
fi
log "done: $rounds round(s), ${#size_list[@]} size(s), 4 modes; $csv"
