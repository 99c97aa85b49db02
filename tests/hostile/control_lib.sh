# shellcheck shell=bash
# Shared by the control_*.sh hostile tests (sourced, not run): a work
# directory removed on exit, pass/fail bookkeeping, processes killed on exit,
# and acting as another user.  Each test sources it after setting $railover
# (the tool) and, when it runs processes, $stream (rov_stream).

export RAILOVER_RAILS=${RAILOVER_RAILS:-tcp@lo,tcp@127.0.0.1}
export RAILOVER_LOG=${RAILOVER_LOG:-warn}
unset RAILOVER_CONTROL RAILOVER_JOBID XDG_RUNTIME_DIR

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fake_server=$here/control_fake_server.py
other_uid=65534 # the other user (nobody); the tests run as root

work=$(mktemp -d "${TMPDIR:-/tmp}/rov_hostile.XXXXXX") || exit 2
# Other users must reach the directories made for them below.
chmod 711 "$work"
pids=()
cleanup_extra=()
failures=0

cleanup() {
    local p f
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null
    done
    for f in "${cleanup_extra[@]}"; do
        rm -rf "$f"
    done
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

pass() {
    echo "ok: $*"
}

# skip REASON: the test cannot run here; said, and reported to CTest as a
# skip (SKIP_RETURN_CODE 77), never as a pass.
skip() {
    echo "SKIP: $*"
    exit 77
}

need_root() {
    [ "$(id -u)" = 0 ] || skip "needs root to act as uid $other_uid (setpriv, setuid)"
    command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
}

# as_other COMMAND...: run COMMAND as uid/gid $other_uid.
as_other() {
    setpriv --reuid "$other_uid" --regid "$other_uid" --clear-groups "$@"
}

# copy_for_other PROGRAM: a copy of the build tree's PROGRAM and of the
# librailover it loads, in $work/bin (mode 0755), which every user can
# read: the build tree may be where another uid cannot go (a clone in
# root's home, mode 0700).  Prints the copy's path.  Run it with
# LD_LIBRARY_PATH=$work/bin (as_other passes the environment on).
copy_for_other() {
    local prog=$1 name lib
    mkdir -p "$work/bin" && chmod 755 "$work/bin" || return 1
    cp "$prog" "$work/bin/" && chmod 755 "$work/bin/${prog##*/}" || return 1
    # "librailover.so.0 => /path/librailover.so.0 (0x...)": the soname the
    # program asks for, and the file the build tree has under it.
    while read -r name lib; do
        cp -L "$lib" "$work/bin/$name" && chmod 644 "$work/bin/$name" || return 1
    done < <(ldd "$prog" | awk '$1 ~ /^librailover/ && $3 ~ /^\// {print $1, $3}')
    echo "$work/bin/${prog##*/}"
}

# wait_for SECONDS COMMAND...: poll until COMMAND succeeds.
wait_for() {
    local end=$(( $(date +%s) + $1 ))
    shift
    until "$@"; do
        [ "$(date +%s)" -ge "$end" ] && return 1
        sleep 0.1
    done
}

# up_or_gone PID TEST-ARGS...: `test TEST-ARGS` holds, or process PID has
# exited (for wait_for: a process that died is not waited for).
up_or_gone() {
    local p=$1
    shift
    test "$@" || ! kill -0 "$p" 2>/dev/null
}

# run NAME COMMAND...: run, keeping stdout/stderr in $work/NAME.{out,err}.
run() {
    local name=$1
    shift
    "$@" >"$work/$name.out" 2>"$work/$name.err"
    echo $? >"$work/$name.rc"
}

rc_of() { cat "$work/$1.rc"; }

show() {
    echo "--- $1: exit $(rc_of "$1")"
    sed 's/^/  out: /' "$work/$1.out"
    sed 's/^/  err: /' "$work/$1.err"
}

# has_ctl_bytes FILE: FILE holds a control character other than newline and
# tab, or a byte outside ASCII.
has_ctl_bytes() {
    LC_ALL=C grep -q '[^[:print:]	]' "$1"
}

# start_fake NAME SOCKET UID ANSWER [BUSY]: a fake control server (see
# control_fake_server.py) on SOCKET, listening as UID, answering busy to its
# first BUSY requests ('all': to every one); the requests it gets go to
# $work/NAME.requests.
start_fake() {
    local name=$1 sock=$2 uid=$3 answer=$4 busy=${5:-0}
    python3 "$fake_server" "$sock" "$uid" "$work/$name.requests" "$answer" "$busy" \
        >"$work/$name.log" 2>&1 &
    pids+=($!)
    if ! wait_for 10 test -s "$work/$name.requests.ready"; then
        fail "fake server $name did not start"
        cat "$work/$name.log" >&2
        exit 1
    fi
}

# start_pair DIR ARGS...: a rov_stream pair ($stream) with RAILOVER_RUN_DIR=DIR; sets
# lpid, cpid, lsock, csock.
start_pair() {
    local dir=$1
    shift
    rm -f "$work/addr"
    RAILOVER_RUN_DIR=$dir "$stream" --listen "$work/addr" "$@" >"$work/listener.log" 2>&1 &
    lpid=$!
    pids+=("$lpid")
    wait_for 20 up_or_gone "$lpid" -s "$work/addr"
    if ! test -s "$work/addr"; then
        fail "listener wrote no address file"
        tail -n 15 "$work/listener.log" >&2
        exit 1
    fi
    RAILOVER_RUN_DIR=$dir "$stream" --connect "$work/addr" "$@" >"$work/connector.log" 2>&1 &
    cpid=$!
    pids+=("$cpid")
    lsock=$dir/$lpid.0.sock
    csock=$dir/$cpid.0.sock
    wait_for 20 up_or_gone "$cpid" -S "$csock"
    if ! test -S "$csock" || ! test -S "$lsock"; then
        fail "control sockets $lsock and $csock did not appear"
        ls -la "$dir" >&2
        tail -n 15 "$work/listener.log" "$work/connector.log" >&2
        exit 1
    fi
}

finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$failures check(s) failed" >&2
        exit 1
    fi
    echo "all checks passed"
    exit 0
}
