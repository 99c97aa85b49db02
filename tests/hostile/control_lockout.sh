#!/usr/bin/env bash
# Issue 19, part 6: sixteen control clients that send `status` and never read
# the answer must not lock the control socket out for good: with the client
# table full, a client older than 10 s is dropped for a new one whatever its
# state (docs/control.md, "Security model").
#
#   control_lockout.sh RAILOVER ROV_STREAM
#
# A rov_stream pair with 1024 connections, so that the listener's status
# answer (about 360 KB) is larger than a socket buffer and its sender waits
# for a reader.  Sixteen clients ask for it and never read.  A seventeenth
# client is refused with a reason while they are young; after 10 s it is
# served.
set -u

if [ $# -ne 2 ]; then
    echo "usage: control_lockout.sh RAILOVER ROV_STREAM" >&2
    exit 64
fi
railover=$1
stream=$2
. "$(dirname "$0")/control_lib.sh"

run_dir=$work/run
mkdir -m 700 "$run_dir"
export RAILOVER_RUN_DIR=$run_dir
start_pair "$run_dir" --conns 1024 --count 100 --max-size 64 --stop-file "$work/stop" \
    --stall 0 --timeout 60 --quiet-status

big_status() {
    [ "$("$railover" ctl "$lpid" status 2>/dev/null | wc -c)" -gt 300000 ]
}
if ! wait_for 20 big_status; then
    fail "the listener's status never grew past 300000 bytes (1024 connections)"
    "$railover" ctl "$lpid" status | head -n 3 >&2
    finish
fi
pass "status answer of $lpid is $("$railover" ctl "$lpid" status | wc -c) bytes"

# Sixteen clients ask and never read; they hold their sockets until killed.
python3 - "$lsock" "$work/holding" <<'PY' >"$work/holder.log" 2>&1 &
import socket, sys, time
socks = []
for i in range(16):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    s.sendall(b"status\n")
    socks.append(s)
time.sleep(1)  # let the process take them all and fill their buffers
open(sys.argv[2], "w").write("%f\n" % time.monotonic())
time.sleep(60)
PY
pids+=($!)
if ! wait_for 10 test -s "$work/holding"; then
    fail "the holding clients did not start"
    cat "$work/holder.log" >&2
    finish
fi
held_at=$(date +%s)

run busy "$railover" ctl "$lpid" ping
if [ "$(rc_of busy)" = 1 ] &&
   grep -qxF "railover: process $lpid: error: busy: 16 control clients already; try again later" \
       "$work/busy.err"; then
    pass "a seventeenth client is told why it is refused"
else
    fail "ctl ping with 16 clients holding: expected 'error: busy: 16 control clients already'"
    show busy
fi

pinged() { "$railover" ctl "$lpid" ping >/dev/null 2>&1; }
if wait_for 16 pinged; then
    waited=$(( $(date +%s) - held_at ))
    if [ "$waited" -ge 8 ]; then
        pass "served after $waited s: a client that does not read is dropped by age"
    else
        fail "served after only $waited s: the non-reading clients were dropped early"
    fi
else
    fail "the control socket stayed locked out by 16 clients that do not read"
fi
run status "$railover" status "$lpid"
if [ "$(rc_of status)" = 0 ] && grep -q "^conn id=" "$work/status.out"; then
    pass "status works again"
else
    fail "railover status $lpid after the eviction"
    show status
fi
touch "$work/stop"

finish
