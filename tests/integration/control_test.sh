#!/usr/bin/env bash
# The per-process control endpoint, end to end (docs/control.md):
#
#   control_test.sh RAILOVER ROV_STREAM
#
# RAILOVER is the `railover` tool, ROV_STREAM the stream test program.  A
# rov_stream pair runs (each process has a context and calls progress) while
# the real tool talks to it; then a second, short pair runs with an unsafe run
# directory on one side.  RAILOVER_RAILS comes from the environment (CMake).
set -u

if [ $# -ne 2 ]; then
    echo "usage: control_test.sh RAILOVER ROV_STREAM" >&2
    exit 64
fi
railover=$1
stream=$2
# The work directory, cleanup, pass/fail, wait_for, run/rc_of/show and
# start_pair are the hostile tier's (tests/hostile/control_lib.sh).
. "$(dirname "$0")/../hostile/control_lib.sh"

# Tail of the stream logs, for a failure's context.
dump_logs() {
    local f
    for f in "$work"/*.log; do
        [ -f "$f" ] || continue
        echo "--- $f (tail)"
        tail -n 15 "$f"
    done
}

# ---- a long-running pair with a safe run directory ------------------------

run_dir=$work/run
mkdir -m 700 "$run_dir"
export RAILOVER_RUN_DIR=$run_dir

stream_args=(--count 2000000 --stall 60)
start_pair "$run_dir" "${stream_args[@]}"
pass "control sockets created"

mode=$(stat -c %a "$lsock")
[ "$mode" = 600 ] && pass "socket mode 600" || fail "socket $lsock has mode $mode, not 600"
mode=$(stat -c %a "$run_dir")
[ "$mode" = 700 ] && pass "run dir mode 700" || fail "run dir has mode $mode, not 700"

run hello "$railover" ctl "$lpid" hello
if [ "$(rc_of hello)" = 0 ] &&
   grep -Eq "^process pid=$lpid version=[^ ]+ endpoint=[0-9a-f]{32} jobid=[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12} rank=$lpid rails=tcp@lo,tcp@127.0.0.1$" \
       "$work/hello.out"; then
    pass "ctl hello"
else
    fail "ctl $lpid hello"
    show hello
fi

run ping "$railover" ctl "$cpid" ping
if [ "$(rc_of ping)" = 0 ] && [ "$(cat "$work/ping.out")" = ok ]; then
    pass "ctl ping"
else
    fail "ctl $cpid ping"
    show ping
fi

run help "$railover" ctl "$lpid" help
if [ "$(rc_of help)" = 0 ] && grep -q "^hello " "$work/help.out" &&
   grep -q "^ping " "$work/help.out" && grep -q "^help " "$work/help.out"; then
    pass "ctl help"
else
    fail "ctl $lpid help"
    show help
fi

run unknown "$railover" ctl "$lpid" frobnicate now
if [ "$(rc_of unknown)" = 1 ] &&
   grep -q "error: unknown command 'frobnicate' (try 'help')" "$work/unknown.err"; then
    pass "unknown verb"
else
    fail "ctl $lpid frobnicate: expected exit 1 and 'unknown command'"
    show unknown
fi

run nosock "$railover" ctl 999999999 ping
if [ "$(rc_of nosock)" = 1 ] && grep -q "no control socket of process 999999999" \
       "$work/nosock.err"; then
    pass "pid without a socket"
else
    fail "ctl 999999999 ping: expected exit 1 and 'no control socket'"
    show nosock
fi

# A request longer than ROV_CTL_LINE_MAX gets an error; the process goes on.
run toolong python3 - "$lsock" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
s.connect(sys.argv[1])
try:
    s.sendall(b"x" * 6000 + b"\n")
except OSError:
    pass  # the server may close before taking everything
data = b""
try:
    while True:
        b = s.recv(4096)
        if not b:
            break
        data += b
except ConnectionResetError:
    pass
sys.stdout.write(data.decode())
EOF
if grep -qx "error: request longer than 4096 bytes" "$work/toolong.out"; then
    pass "request too long"
else
    fail "too long request: no 'request longer than 4096 bytes' error"
    show toolong
fi
run ping2 "$railover" ctl "$lpid" ping
if kill -0 "$lpid" 2>/dev/null && [ "$(rc_of ping2)" = 0 ]; then
    pass "process alive after the long request"
else
    fail "listener gone or not answering after the long request"
    show ping2
fi

# Without a PID, status visits every process (the status verb itself may not
# be registered in this build: only the hello blocks are checked).
run status "$railover" status
if grep -q "^process pid=$lpid " "$work/status.out" &&
   grep -q "^process pid=$cpid " "$work/status.out"; then
    pass "status lists both processes"
else
    fail "railover status: both processes expected"
    show status
fi

# ---- operator control: force the connection off its preferred rail ---------

status_has() { # PID REGEX: the process's status shows a line matching REGEX
    "$railover" status "$1" 2>/dev/null | grep -Eq "$2"
}

if wait_for 10 status_has "$lpid" '^conn id=[0-9]+ .* rail=tcp@lo\(0\) '; then
    pass "status shows the connection on rail 0"
else
    fail "status of $lpid: no connection on tcp@lo(0)"
    "$railover" status "$lpid" >&2
fi
run force "$railover" force "$lpid"
if [ "$(rc_of force)" = 0 ] && grep -q "^forced 1 connection$" "$work/force.out" &&
   wait_for 10 status_has "$lpid" 'rail=tcp@127.0.0.1\(1\) forced=yes .*reasons=.*admin.force:1' &&
   wait_for 10 status_has "$cpid" 'rail=tcp@127.0.0.1\(1\) forced=no peer_forced=yes .*peer.admin:1'; then
    pass "force moved the connection to rail 1 on both sides, reasons admin.force / peer.admin"
else
    fail "railover force $lpid"
    show force
    "$railover" status "$lpid" "$cpid" >&2
fi
# Held: no failback, although the preferred rail is healthy (dwell 2 s).
sleep 3
if status_has "$lpid" 'rail=tcp@127.0.0.1\(1\) forced=yes' &&
   status_has "$cpid" 'rail=tcp@127.0.0.1\(1\)'; then
    pass "a forced connection stays on the fallback rail"
else
    fail "the forced connection moved back"
    "$railover" status "$lpid" "$cpid" >&2
fi
run release "$railover" release "$lpid"
if [ "$(rc_of release)" = 0 ] && grep -q "^released 1 connection$" "$work/release.out" &&
   wait_for 10 status_has "$lpid" 'rail=tcp@lo\(0\) forced=no peer_forced=no' &&
   wait_for 10 status_has "$cpid" 'rail=tcp@lo\(0\) forced=no peer_forced=no'; then
    pass "release moved it back to rail 0"
else
    fail "railover release $lpid"
    show release
    "$railover" status "$lpid" "$cpid" >&2
fi
run badconn "$railover" force "$lpid" conn 424242
run badpeer "$railover" force "$lpid" peer xyz
if [ "$(rc_of badconn)" = 1 ] && grep -q "error: no connection 424242" "$work/badconn.err" &&
   [ "$(rc_of badpeer)" = 1 ] && grep -q "is not an endpoint id" "$work/badpeer.err"; then
    pass "bad force targets are refused with a clear error"
else
    fail "bad force targets"
    show badconn
    show badpeer
fi

# A process that does not call rov_progress does not answer.
kill -STOP "$lpid"
run stopped "$railover" ctl "$lpid" ping
kill -CONT "$lpid"
if [ "$(rc_of stopped)" = 1 ] &&
   grep -q "process $lpid did not answer within 5 s (does it call rov_progress?)" \
       "$work/stopped.err"; then
    pass "timeout on a stopped process"
else
    fail "ctl ping to a stopped process: expected the 5 s timeout message"
    show stopped
fi

# ---- a stale socket: bound by a process that exited --------------------------

stale_dir=$work/stale
mkdir -m 700 "$stale_dir"
stale=$stale_dir/999999998.0.sock
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$stale"
if [ -S "$stale" ]; then
    RAILOVER_RUN_DIR=$stale_dir run stale "$railover" status
    if [ "$(rc_of stale)" = 1 ] && [ ! -e "$stale" ] &&
       grep -q "$stale: stale control socket" "$work/stale.err" &&
       grep -q "no Railover process" "$work/stale.err"; then
        pass "stale socket reported and removed"
    else
        fail "stale socket: expected report, removal, 'no Railover process' and exit 1"
        show stale
    fi
else
    fail "python3 did not create $stale"
fi

kill -TERM "$lpid" "$cpid" 2>/dev/null
wait "$lpid" "$cpid" 2>/dev/null
pids=()

# ---- a short pair: unsafe run dir on one side, clean exit on the other ------

open_dir=$work/open
mkdir -m 755 "$open_dir"
run_dir2=$work/run2
mkdir -m 700 "$run_dir2"
short_args=(--count 2000 --max-size 4096 --stall 20 --timeout 25)
rm -f "$work/addr"
RAILOVER_RUN_DIR=$open_dir "$stream" --listen "$work/addr" "${short_args[@]}" \
    >"$work/short-listener.log" 2>&1 &
lpid=$!
pids+=("$lpid")
if wait_for 20 test -s "$work/addr"; then
    # debug: the connector logs its socket's creation and removal
    RAILOVER_RUN_DIR=$run_dir2 RAILOVER_LOG=debug "$stream" --connect "$work/addr" \
        "${short_args[@]}" >"$work/short-connector.log" 2>&1 &
    cpid=$!
    pids+=("$cpid")
    wait "$lpid"
    lrc=$?
    wait "$cpid"
    crc=$?
    pids=()
    if [ "$lrc" = 0 ] && [ "$crc" = 0 ]; then
        pass "short stream completed"
    else
        fail "short stream: listener exit $lrc, connector exit $crc"
        dump_logs
    fi
    if grep -q "warn ctl: run directory $open_dir has mode 755" "$work/short-listener.log"; then
        pass "unsafe run dir refused with a warning"
    else
        fail "no warning about run directory $open_dir (mode 755)"
        tail -n 15 "$work/short-listener.log" >&2
    fi
    csock=$run_dir2/$cpid.0.sock
    if grep -q "debug ctl: control socket $csock\$" "$work/short-connector.log" &&
       grep -q "debug ctl: control socket $csock closed" "$work/short-connector.log"; then
        pass "connector opened and closed $csock"
    else
        fail "connector did not log opening and closing $csock"
        grep "ctl:" "$work/short-connector.log" >&2
    fi
    left=$(find "$open_dir" "$run_dir2" -name '*.sock' | wc -l)
    [ "$left" = 0 ] && pass "no socket files left after exit" ||
        fail "$left socket file(s) left: $(find "$open_dir" "$run_dir2" -name '*.sock')"
else
    fail "short listener wrote no address file"
    dump_logs
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "all control checks passed"
