#!/usr/bin/env bash
# mpi-perf-vm.sh: NetPIPE over Open MPI across the two Soft-RoCE QEMU VMs
# (tests/vm), side by side in one run: Open MPI's own verbs transport (pml
# ucx, rc_verbs), btl railover on the verbs rail with failover on and off,
# and Open MPI's btl tcp on the same fabric NIC.  Issue 21.
#
#   bench/mpi-perf-vm.sh BUILD_DIR [--rounds N] [--sizes LIST] [--repeats N]
#                        [--trial-ms MS] [--out DIR]
#
#   BUILD_DIR    the build directory (mpi-btl/mca_btl_railover.so)
#   --rounds N   paired rounds (default 5): every round runs every mode once
#                per size, the order rotating
#   --sizes LIST message sizes, k/m suffixes allowed (default
#                1,64,1k,8k,64k,1m); one NetPIPE job per size and mode
#   --repeats N  NetPIPE -n for every size (default: from a model of the
#                emulated link, about --trial-ms per trial, 150 ms)
#   --out DIR    results (default ./mpi-perf-vm-YYYYmmdd-HHMMSS): runs.csv,
#                ratios.csv, summary.csv, summary.md, meta.txt, and vm/ (the
#                VMs' logs, each job's output)
#
# The job (bench/mpi-perf-vm-job.sh) runs in VM a under
# `tests/vm/vmrun --two`; bench/mpi-perf-vm-summary.py makes the tables on
# the host.  Exit: 0 every mode gave a number at every size; 77 skipped
# (no qemu, usable kernel, mpirun, NPopenmpi or component); else vmrun's or
# the summary's failure.  See bench/README.md.
set -u -o pipefail
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
repo=$(dirname "$here")
usage() { sed -n '7,19{s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }
skip() { echo "mpi-perf-vm: SKIP: $*"; exit 77; }

if (($# < 1)) || [[ $1 == -* ]]; then usage >&2; exit 2; fi
argv=("$0" "$@")
build=$(readlink -f -- "$1")
shift
rounds=5 sizes=1,64,1k,8k,64k,1m repeats='' trial_ms=150 out=''
while (($#)); do
    case $1 in
    --rounds | --sizes | --repeats | --trial-ms | --out)
        (($# >= 2)) || { usage >&2; exit 2; }
        case $1 in
        --rounds) rounds=$2 ;; --sizes) sizes=$2 ;; --repeats) repeats=$2 ;;
        --trial-ms) trial_ms=$2 ;; --out) out=$2 ;;
        esac
        shift
        ;;
    -h | --help) usage; exit 0 ;;
    *) echo "mpi-perf-vm: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $rounds =~ ^[1-9][0-9]*$ && $trial_ms =~ ^[1-9][0-9]*$ && $repeats =~ ^[0-9]*$ ]] ||
    { echo "mpi-perf-vm: --rounds, --trial-ms and --repeats take positive integers" >&2; exit 2; }
bytes=()
IFS=, read -r -a words <<< "$sizes"
for w in "${words[@]}"; do
    case ${w,,} in
    *k) n=${w%?} m=1024 ;; *m) n=${w%?} m=1048576 ;; *) n=$w m=1 ;;
    esac
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "mpi-perf-vm: --sizes: bad size '$w'" >&2; exit 2; }
    bytes+=($((n * m)))
done
sizes=$(IFS=,; echo "${bytes[*]}")

btl_dir=$build/mpi-btl
[[ -f $btl_dir/mca_btl_railover.so ]] || skip "no railover BTL component in $btl_dir"
for p in mpirun ompi_info; do
    command -v $p > /dev/null || skip "$p not found (apt-get install openmpi-bin)"
done
command -v NPopenmpi > /dev/null || skip "NPopenmpi not found (apt-get install netpipe-openmpi)"
pkglibdir=$(ompi_info --path pkglibdir | sed -n 's/.*Pkglibdir: *//p')
[[ -d $pkglibdir ]] || skip "ompi_info --path pkglibdir gave no directory"

out=${out:-mpi-perf-vm-$(date +%Y%m%d-%H%M%S)}
mkdir -p -- "$out" || exit 1
out=$(cd -- "$out" && pwd -P)
rm -f -- "$out"/{runs,ratios,summary}.csv "$out"/summary.md "$out"/meta.txt
# A job is an mpirun of 3-15 s here (launch about 3 s); the VMs boot in
# about 10 s.  Bound the run at 30 s a job (a hung job has its own 120 s).
njobs=$((rounds * ${#bytes[@]} * 4))
tmo=$((njobs * 30 + 180))
echo "mpi-perf-vm: $rounds round(s), sizes $sizes, $njobs jobs; results in $out"
started=$(date -u +%FT%TZ)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
psi0=$(sed -n 's/^some //p' /proc/pressure/cpu 2> /dev/null)
t0=$(date +%s)
TRIAL_MS=$trial_ms "$repo/tests/vm/vmrun" --two --timeout "$tmo" --out "$out/vm" -- \
    "$here/mpi-perf-vm-job.sh" "$btl_dir" "$pkglibdir" "$rounds" "$sizes" ${repeats:+"$repeats"}
rc=$?
t1=$(date +%s)
{
    printf 'command:'; printf ' %q' "${argv[@]}"; echo
    echo "started: $started"
    echo "wall: $((t1 - t0)) s (vmrun exit $rc)"
    echo "commit: $(git -C "$repo" rev-parse --short HEAD 2> /dev/null)"
    echo "host: $(uname -r), $(nproc) cpu"
    echo "load before: $load0 (cpu pressure ${psi0:-?}); after: $(cut -d' ' -f1-3 /proc/loadavg) (cpu pressure $(sed -n 's/^some //p' /proc/pressure/cpu 2> /dev/null))"
    echo "rounds: $rounds; sizes: $sizes; NetPIPE: NPopenmpi -l SIZE -u SIZE -p 0 -n ${repeats:-(about $trial_ms ms per trial)}"
    echo "Open MPI: $(ompi_info --version 2> /dev/null | head -n 1); UCX: $(ucx_info -v 2> /dev/null | sed -n 's/^# Version //p')"
} > "$out/meta.txt"
((rc == 77)) && skip "vmrun skipped (see above)"
[[ -s $out/vm/runs.csv ]] || { echo "mpi-perf-vm: FAIL: no results (vmrun exit $rc); logs in $out/vm"; exit 1; }
python3 "$here/mpi-perf-vm-summary.py" "$out"
src=$?
echo "mpi-perf-vm: $((t1 - t0)) s; results in $out"
((rc != 0)) && { echo "mpi-perf-vm: FAIL: vmrun exited with $rc; logs in $out/vm"; exit "$rc"; }
exit "$src"
