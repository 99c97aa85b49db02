#!/usr/bin/env bash
# Build Railover three ways and run every test tier that this machine supports:
#   1. RelWithDebInfo, -Werror: all tests (unit, integration, failover with
#      real faults between network namespaces, the 1000-cycle soak, the
#      Soft-RoCE tier in QEMU VMs)
#   2. AddressSanitizer + UndefinedBehaviorSanitizer: all tests again but the soak
#   3. clang + libFuzzer: the wire-format fuzzer for a bounded time
# Usage: tests/run-all.sh [build-root]   (default: ./build-tests)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-$src/build-tests}
jobs=$(nproc)

step() { printf '\n=== %s ===\n' "$*"; }

step "release build (-Werror)"
cmake -S "$src" -B "$root/release" -DROV_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$root/release" -j "$jobs"
ctest --test-dir "$root/release" --output-on-failure -LE fuzz

step "AddressSanitizer + UndefinedBehaviorSanitizer build"
cmake -S "$src" -B "$root/asan" -DROV_WERROR=ON -DROV_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
cmake --build "$root/asan" -j "$jobs"
# The 1000-cycle soak runs in the release tier (under ASan it takes ~4x as
# long); benchmark smoke tests (label perf) measure nothing under ASan; the
# Soft-RoCE VM tier (label softroce, minutes of TCG) runs in the release tier;
# so do the packages (label package: what a site installs is a release build,
# and its MPI job runs in a clean environment, without the sanitizer runtime).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/asan" --output-on-failure -LE "fuzz|perf|softroce|package" -E failover_soak
# The verbs rail's conformance suite and its one-sided reads under the
# sanitizers, on Soft-RoCE (leaks at exit included: every verbs object must
# be released on close, every read's record freed).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/asan" --output-on-failure -L softroce -R "^(verbs_conformance|verbs_get)$"

step "libFuzzer (clang)"
cmake -S "$src" -B "$root/fuzz" -DCMAKE_C_COMPILER=clang -DROV_FUZZ=ON -DROV_WERROR=ON
cmake --build "$root/fuzz" -j "$jobs"
ctest --test-dir "$root/fuzz" --output-on-failure -L fuzz

step "all test tiers passed"
