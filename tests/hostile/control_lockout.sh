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
# client is refused with a reason while they are young: the tool asks again
# for its 5 s, then reports the process busy (exit 10, as cprclient); after
# 10 s it is served.
#
# Then fake servers of our uid (control_fake_server.py) answer busy, with
# nothing timed: one that is busy twice and then answers is asked again
# until it does (exit 0, its answer printed, 3 requests); one that stays
# busy is asked again until the 5 s are out (exit 10, more than 1 request),
# for each command, and `status` over it and a process that answers exits
# 10 with that process's answer printed.
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

busy_line="^railover: process $lpid: control socket busy for [0-9.]* s (busy: 16 control "
busy_line+="clients already; try again later)\$"
run busy "$railover" ctl "$lpid" ping
if [ "$(rc_of busy)" = 10 ] && grep -q "$busy_line" "$work/busy.err"; then
    pass "a seventeenth client is told why it is refused: $(cat "$work/busy.err")"
else
    fail "ctl ping with 16 clients holding: expected exit 10 and 'busy: 16 control clients already'"
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

# Fake servers answering busy.
fake_dir=$work/fake
mkdir -m 700 "$fake_dir"
answer="b'process pid=4242 fake\\nok\\n'"
start_fake twice "$fake_dir/4242.0.sock" - "$answer" 2
start_fake always "$fake_dir/4243.0.sock" - "$answer" all
requests() { grep -c . "$work/$1.requests"; }

RAILOVER_RUN_DIR=$fake_dir run twice "$railover" ctl 4242 ping
if [ "$(rc_of twice)" = 0 ] && grep -qx "process pid=4242 fake" "$work/twice.out" &&
   [ ! -s "$work/twice.err" ] && [ "$(requests twice)" = 3 ]; then
    pass "busy twice, then answered: asked 3 times, answer printed, exit 0"
else
    fail "busy twice: expected exit 0, the answer and 3 requests (got $(requests twice))"
    show twice
fi

busy_line="^railover: process 4243: control socket busy for [0-9.]* s (busy: 16 control "
busy_line+="clients already; try again later)\$"
for cmd in "ctl 4243 ping" "status 4243"; do
    name=${cmd// /_}
    before=$(requests always)
    # shellcheck disable=SC2086
    RAILOVER_RUN_DIR=$fake_dir run "$name" "$railover" $cmd
    asked=$(( $(requests always) - before ))
    if [ "$(rc_of "$name")" = 10 ] && [ ! -s "$work/$name.out" ] &&
       grep -q "$busy_line" "$work/$name.err" && [ "$asked" -gt 1 ]; then
        pass "railover $cmd: stays busy: asked $asked times, exit 10"
    else
        fail "railover $cmd on a process that stays busy: expected exit 10, the busy line and" \
            "more than 1 request (got $asked)"
        show "$name"
    fi
done

# Every process of the run directory: one answers, one stays busy.
RAILOVER_RUN_DIR=$fake_dir run both "$railover" force all
if [ "$(rc_of both)" = 10 ] && grep -qx "4242: process pid=4242 fake" "$work/both.out" &&
   grep -q "$busy_line" "$work/both.err"; then
    pass "force all: the answer of one printed, the other busy: exit 10"
else
    fail "force all over a process that answers and one that stays busy: expected exit 10"
    show both
fi

finish
