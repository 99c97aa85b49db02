#!/usr/bin/env bash
# The Debian packages as a site installs them (ctest -L package): cpack
# builds railover, railover-dev and railover-openmpi from the build
# directory into a temporary one, dpkg installs them, and then, from the
# installed paths only (a clean environment: no RAILOVER_* or OMPI_MCA_*
# variable, no LD_LIBRARY_PATH, a HOME without ~/.openmpi):
#   - the tools find the installed library, and no installed file keeps the
#     build tree's RUNPATH;
#   - a program built with `pkg-config --cflags --libs railover` links and runs;
#   - `mpirun --mca btl self,vader,railover` initializes the component, and a
#     two-rank job over `--mca btl self,railover` (one loopback rail) passes
#     with ob1 sending to its peer over railover;
#   - `ompi_info --param btl railover` lists btl_railover_rails;
#   - `cprclient list` exits 0.
# The packages are purged again in every case (trap), leaving dpkg's
# database and the file system as they were.
#
# Skipped (77), saying why, when not root, without dpkg, cpack or Open MPI,
# when a railover package (any version) or a file the packages would
# install is already on the machine, when an MPI job is running (it would
# see the component appear in Open MPI's directory), or when a dependency of
# the packages is not installed (apt-get is not used).
#
# Environment (set by CTest): ROV_BUILD_DIR (the build directory, with
# CPackConfig.cmake), ROV_MPI_CHECK (the MPI tier's test program), or
# ROV_PACKAGE_SKIP (why this build cannot run the test).
# Exit 0 pass, 1 fail, 77 skipped.
set -u

skip() {
    echo "SKIP: $*"
    exit 77
}

[ -z "${ROV_PACKAGE_SKIP:-}" ] || skip "$ROV_PACKAGE_SKIP"
: "${ROV_BUILD_DIR:?}" "${ROV_MPI_CHECK:?}"
packages=(railover railover-dev railover-openmpi)

[ "$(id -u)" -eq 0 ] || skip "installing packages needs root"
for tool in dpkg dpkg-deb dpkg-query dpkg-shlibdeps file cpack mpirun ompi_info pkg-config cc \
    readelf ldd; do
    command -v "$tool" >/dev/null || skip "$tool not found"
done
# A run killed before its cleanup (a CTest timeout sends SIGKILL) leaves
# this stamp with its packages installed: they are that run's, removed now.
stamp=/var/tmp/railover-package-test.installed
if [ -e "$stamp" ]; then
    echo "+ dpkg --purge ${packages[*]} (left installed by a run that was killed: $stamp)"
    dpkg --purge "${packages[@]}" >/dev/null 2>&1 ||
        { echo "FAIL: cannot purge what an earlier run left installed"; exit 1; }
    rm -f "$stamp"
fi
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status} ${Version}' "$p" 2>/dev/null)
    case $status in
    "" | *not-installed*) ;;
    *) skip "package $p is on this machine ($status): the test would replace and then remove it" ;;
    esac
done
pids=$(pgrep -x mpirun; pgrep -x orted)
[ -z "$pids" ] ||
    skip "an MPI job is running (pids ${pids//$'\n'/ }): it would load the component installed under it"

tmp=$(mktemp -d)
out=$tmp/out
installed=false
cleanup() {
    local rc=$?
    if $installed; then
        if dpkg --purge "${packages[@]}" >"$tmp/purge" 2>&1; then
            rm -f "$stamp"
        else
            echo "FAIL: dpkg --purge ${packages[*]}:"
            cat "$tmp/purge"
            rc=1
        fi
    fi
    rm -rf "$tmp"
    exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "FAIL: $*"
    if [ -s "$out" ]; then
        echo "---- output ----"
        cat "$out"
    fi
    exit 1
}
expect() { grep -q -- "$1" "$out" || fail "expected in the output: $1"; }

# Run from the installed paths only.
clean() {
    mkdir -p "$tmp/home"
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME="$tmp/home" LANG=C "$@"
}

echo "+ cpack -G DEB -B $tmp/debs (in $ROV_BUILD_DIR)"
(cd "$ROV_BUILD_DIR" && cpack -G DEB -B "$tmp/debs") >"$out" 2>&1 || fail "cpack failed"
debs=()
for p in "${packages[@]}"; do
    deb=$(ls "$tmp/debs/${p}_"*.deb 2>/dev/null)
    [ -n "$deb" ] || fail "cpack made no package $p"
    debs+=("$deb")
done

# Nothing of another installation (cmake --install) may be overwritten,
# then removed with the packages.
for deb in "${debs[@]}"; do
    while read -r path; do
        [ -e "$path" ] || [ -L "$path" ] || continue
        [ -d "$path" ] && [ ! -L "$path" ] && continue
        skip "$path is already on this machine (another installation): the packages would replace it"
    done < <(dpkg-deb -c "$deb" | awk '{print substr($6, 2)}')
done

echo "+ dpkg -i ${debs[*]##*/}"
installed=true
echo "${packages[*]}" >"$stamp"
if ! dpkg -i "${debs[@]}" >"$out" 2>&1; then
    grep -q "dependency problems" "$out" &&
        skip "a dependency of the packages is not installed:"$'\n'"$(grep -E 'depends on|not installed' "$out")"
    fail "dpkg -i failed"
fi

# Each package holds what it should, the component and its help file where
# Open MPI looks (ompi_info --path).
pkglibdir=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
pkgdatadir=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
for want in "railover /bin/railover" "railover /bin/cprclient" "railover /bin/railover-criu-action" \
            "railover /bin/railover-criu-tree" "railover /bin/railover-restore" \
            "railover /librailover[.]so[.]0" \
            "railover-dev /include/railover/railover[.]h" "railover-dev /pkgconfig/railover[.]pc" \
            "railover-dev /librailover[.]so" "railover-openmpi $pkglibdir/mca_btl_railover[.]so" \
            "railover-openmpi $pkgdatadir/help-btl-railover[.]txt"; do
    dpkg -L "${want%% *}" | grep -q "${want#* }\$" || fail "package ${want%% *} has no ${want#* }"
done
# No build-tree RUNPATH, and the library the tools load is the package's.
bin=$(dpkg -L railover | grep '/bin/railover$')
cprclient=$(dpkg -L railover | grep '/bin/cprclient$')
component=$pkglibdir/mca_btl_railover.so
for f in "$bin" "$cprclient" "$component" $(dpkg -L railover | grep '/librailover[.]so[.0-9]*$'); do
    [ -f "$f" ] || continue
    if readelf -d "$f" | grep -E 'R(UN)?PATH' | grep -qF "$ROV_BUILD_DIR"; then
        fail "$f keeps the build tree's RUNPATH: $(readelf -d "$f" | grep -E 'R(UN)?PATH')"
    fi
done
for f in "$bin" "$cprclient" "$component"; do
    lib=$(clean ldd "$f" | sed -n 's/^[[:space:]]*librailover[.]so[.0-9]* => \([^ ]*\) .*/\1/p')
    if [ -z "$lib" ] || ! dpkg -L railover | grep -qxF "$(readlink -f "$lib")"; then
        fail "$f loads librailover from '$lib', not from the package railover"
    fi
done
echo "the tools and the component load $(readlink -f "$lib")"

clean "$bin" info >"$out" 2>&1 || fail "railover info exited with $?"
expect "^railover [0-9]"
clean "$bin" --help >"$out" 2>&1 || fail "railover --help exited with $?"
clean "$cprclient" --help >"$out" 2>&1 || fail "cprclient --help exited with $?"

# The development package: a program built against it.
printf '#include <railover/railover.h>\n#include <stdio.h>\nint main(void) { puts(rov_version()); return 0; }\n' \
    >"$tmp/app.c"
# shellcheck disable=SC2046 # pkg-config's words are separate arguments
clean cc -o "$tmp/app" "$tmp/app.c" $(clean pkg-config --cflags --libs railover) >"$out" 2>&1 ||
    fail "cc app.c \$(pkg-config --cflags --libs railover) failed"
clean "$tmp/app" >"$out" 2>&1 || fail "a program linked with pkg-config's flags did not run"

mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ob1
        --mca btl_railover_rails tcp@127.0.0.1)
echo "+ ${mpirun[*]} --mca btl self,vader,railover $ROV_MPI_CHECK ring"
clean timeout --kill-after=10 60 "${mpirun[@]}" --mca btl self,vader,railover \
    --mca btl_base_verbose 10 "$ROV_MPI_CHECK" ring >"$out" 2>&1 ||
    fail "the job exited with $?"
expect "PASSED: 2 rank(s), 0 failure(s)"
expect "btl railover: 1 rail(s), first tcp@127.0.0.1"

# vader wins over railover between ranks of one host: without it, ob1
# must send to the peer over railover.
echo "+ ${mpirun[*]} --mca btl self,railover $ROV_MPI_CHECK ring sizes"
clean timeout --kill-after=10 60 "${mpirun[@]}" --mca btl self,railover \
    --mca btl_base_verbose 100 "$ROV_MPI_CHECK" ring sizes >"$out" 2>&1 ||
    fail "the job exited with $?"
expect "PASSED: 2 rank(s), 0 failure(s)"
n=$(grep -c "mca: bml: Using railover btl for send to" "$out")
[ "$n" -eq 2 ] || fail "ob1 chose railover for $n rank/peer pairs, expected 2"

clean ompi_info --param btl railover --level 9 >"$out" 2>&1 || fail "ompi_info exited with $?"
expect "MCA btl: railover"
expect 'parameter "btl_railover_rails"'

clean "$cprclient" list >"$out" 2>&1 || fail "cprclient list exited with $?"

echo "PASS: installed, ran from the installed paths; purging ${packages[*]}"
