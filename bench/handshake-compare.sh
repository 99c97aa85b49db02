#!/usr/bin/env bash
# The handshake's cost, this build against another, side by side: the same
# rov_handshake binary (bench/handshake.c, public API only) runs against this
# build's librailover.so and against BASE's (LD_LIBRARY_PATH), alternately,
# one round each per repetition, on tcp@lo.  Prints the per-round medians,
# their medians and the median of the paired ratios (this / base).
# Numbers only; nothing is asserted.
#
# Usage: bench/handshake-compare.sh BUILD BASE_BUILD [REPS] [CONNS]
#   BUILD: a build directory of this tree (bench/rov_handshake in it)
#   BASE_BUILD: a build directory of another commit (its librailover.so)
set -euo pipefail
build=${1:?usage: handshake-compare.sh BUILD BASE_BUILD [REPS] [CONNS]}
base=${2:?usage: handshake-compare.sh BUILD BASE_BUILD [REPS] [CONNS]}
reps=${3:-11}
conns=${4:-300}
bin=$build/bench/rov_handshake
for lib in "$build/librailover.so" "$base/librailover.so"; do
    [[ -e $lib ]] || { echo "handshake-compare: no $lib" >&2; exit 2; }
done
# RAILOVER_RAILS from the environment: another rail (in a VM, e.g.
# verbs@rxe0:1 with RAILOVER_VERBS_CM=rdmacm), tcp@lo by default.
export RAILOVER_RAILS=${RAILOVER_RAILS:-tcp@lo} RAILOVER_LOG=error RAILOVER_CONTROL=off
one() { # LIBDIR -> median microseconds of one round
    LD_LIBRARY_PATH=$1 "$bin" --conns "$conns" --json |
        sed -n 's/.*"median_us":\([0-9.]*\).*/\1/p'
}
med() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
rows=()
for ((r = 0; r < reps; r++)); do
    if ((r % 2)); then b=$(one "$base"); n=$(one "$build"); else n=$(one "$build"); b=$(one "$base"); fi
    rows+=("$n $b")
    printf 'round %2d: this %8.2f us  base %8.2f us  ratio %.3f\n' "$r" "$n" "$b" \
        "$(awk -v n="$n" -v b="$b" 'BEGIN {print n / b}')"
done
mn=$(printf '%s\n' "${rows[@]}" | awk '{print $1}' | med)
mb=$(printf '%s\n' "${rows[@]}" | awk '{print $2}' | med)
mr=$(printf '%s\n' "${rows[@]}" | awk '{print $1 / $2}' | med)
printf 'handshake (connect to established, %d per round, %d rounds): this %.2f us, base %.2f us; median paired ratio %.3f\n' \
    "$conns" "$reps" "$mn" "$mb" "$mr"
printf '{"bench":"handshake_compare","this_us":%s,"base_us":%s,"ratio":%s,"rounds":%d}\n' \
    "$mn" "$mb" "$mr" "$reps"
