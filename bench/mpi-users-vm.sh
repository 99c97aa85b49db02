#!/usr/bin/env bash
# mpi-users-vm.sh: what MPI users run (bench/mpi-users.c: ping-pong,
# windowed bandwidth with 64 messages in flight, message rate) across the
# two Soft-RoCE QEMU VMs (tests/vm), side by side in one run: Open MPI's
# own verbs transport (pml ucx, rc_verbs), btl railover on the verbs rail
# (verbs@rxe0,tcp@eth) and btl tcp on the fabric NIC.  Issue 34.
#
#   bench/mpi-users-vm.sh BUILD_DIR [--rounds N] [--figures LIST] [--out DIR]
#                         [--scale S] [--modes LIST] [--base-build DIR]
#
#   BUILD_DIR     the build directory (mpi-btl/mca_btl_railover.so)
#   --base-build  another build: adds rov-base, rov with its component
#   --modes LIST  selections, of ucx,rov,rov1,tcp (default ucx,rov,tcp; rov1:
#                 rov with the verbs rail alone)
#   --scale S     iteration scale (default 0.05: TCG is some 20 times slower
#                 than the host)
#   --rounds N    paired rounds (default 5), the order rotating
#   --figures L   KIND:SIZE,... (default lat:8,lat:65536,lat:1048576,
#                 bw:65536,bw:1048576,rate:8)
#   --out DIR     results (default ./mpi-users-vm-YYYYmmdd-HHMMSS): vm/runs.csv,
#                 summary.md (ratios against pml ucx), meta.txt, vm/ (logs)
#
# Exit: 0 every job gave its figures; 77
# skipped (no qemu, usable kernel, mpirun, mpicc or component).
set -u -o pipefail
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
repo=$(dirname "$here")
usage() { sed -n '8,18{s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }
skip() { echo "mpi-users-vm: SKIP: $*"; exit 77; }

if (($# < 1)) || [[ $1 == -* ]]; then usage >&2; exit 2; fi
argv=("$0" "$@")
build=$(readlink -f -- "$1")
shift
rounds=5 figures=lat:8,lat:65536,lat:1048576,bw:65536,bw:1048576,rate:8 out='' base='' scale=0.05
modes=ucx,rov,tcp
while (($#)); do
    case $1 in
    --rounds | --figures | --out | --base-build | --scale | --modes)
        (($# >= 2)) || { usage >&2; exit 2; }
        case $1 in
        --rounds) rounds=$2 ;; --figures) figures=$2 ;; --out) out=$2 ;;
        --base-build) base=$(readlink -f -- "$2")/mpi-btl ;; --scale) scale=$2 ;;
        --modes) modes=$2 ;;
        esac
        shift
        ;;
    -h | --help) usage; exit 0 ;;
    *) echo "mpi-users-vm: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "mpi-users-vm: --rounds takes a positive integer" >&2; exit 2; }
[[ $modes =~ ^(ucx|rov|rov1|tcp)(,(ucx|rov|rov1|tcp))*$ ]] ||
    { echo "mpi-users-vm: --modes takes a list of ucx, rov, rov1, tcp" >&2; exit 2; }

btl_dir=$build/mpi-btl
[[ -f $btl_dir/mca_btl_railover.so ]] || skip "no railover BTL component in $btl_dir"
[[ -z $base || -f $base/mca_btl_railover.so ]] || skip "no railover BTL component in $base"
for p in mpirun mpicc ompi_info; do
    command -v $p > /dev/null || skip "$p not found (apt-get install openmpi-bin libopenmpi-dev)"
done
pkglibdir=$(ompi_info --path pkglibdir | sed -n 's/.*Pkglibdir: *//p')
[[ -d $pkglibdir ]] || skip "ompi_info --path pkglibdir gave no directory"

out=${out:-mpi-users-vm-$(date +%Y%m%d-%H%M%S)}
mkdir -p -- "$out" || exit 1
out=$(cd -- "$out" && pwd -P)
mpicc -O2 -o "$out/mpi-users" "$here/mpi-users.c" || { echo "mpi-users-vm: FAIL: mpicc"; exit 1; }
nfig=$(tr ',' '\n' <<< "$figures" | grep -c .)
tmo=$((rounds * 4 * (60 + 30 * nfig) + 180))
echo "mpi-users-vm: $rounds round(s), figures $figures; results in $out"
started=$(date -u +%FT%TZ)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
"$repo/tests/vm/vmrun" --two --timeout "$tmo" --out "$out/vm" -- \
    "$here/mpi-users-vm-job.sh" "$out/mpi-users" "$btl_dir" "$pkglibdir" "$rounds" "$figures" "$scale" \
    "$modes" ${base:+"$base"}
rc=$?
t1=$(date +%s)
{
    printf 'command:'; printf ' %q' "${argv[@]}"; echo
    echo "started: $started"
    echo "wall: $((t1 - t0)) s (vmrun exit $rc)"
    echo "commit: $(git -C "$repo" rev-parse --short HEAD 2> /dev/null)"
    echo "host: $(uname -r), $(nproc) cpu"
    echo "load before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "rounds: $rounds; figures: $figures; scale: $scale; base: ${base:--}"
    echo "Open MPI: $(ompi_info --version 2> /dev/null | head -n 1); UCX: $(ucx_info -v 2> /dev/null | sed -n 's/^# Version //p')"
} > "$out/meta.txt"
((rc == 77)) && skip "vmrun skipped (see above)"
[[ -s $out/vm/runs.csv ]] || { echo "mpi-users-vm: FAIL: no results (vmrun exit $rc); logs in $out/vm"; exit 1; }
python3 "$here/mpi-users.py" --summarize "$out/vm/runs.csv" --base ucx | tee "$out/summary.md"
echo "mpi-users-vm: $((t1 - t0)) s; results in $out"
((rc != 0)) && { echo "mpi-users-vm: FAIL: vmrun exited with $rc; logs in $out/vm"; exit "$rc"; }
exit 0
