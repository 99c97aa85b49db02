#!/usr/bin/env bash
# Issue 19, part 6: `railover force|release PID conn ID` takes only a decimal
# connection id; "-1" was read as 2^64-1.
#
#   control_conn_id.sh RAILOVER ROV_STREAM
#
# Against a live rov_stream pair: ids with a sign, an overflow, hex or
# nothing but digits that are not decimal are refused by the tool with a
# message naming the argument, before any request goes out (the process's
# connection stays where it is); a real id still works.
set -u

if [ $# -ne 2 ]; then
    echo "usage: control_conn_id.sh RAILOVER ROV_STREAM" >&2
    exit 64
fi
railover=$1
stream=$2
. "$(dirname "$0")/control_lib.sh"

run_dir=$work/run
mkdir -m 700 "$run_dir"
export RAILOVER_RUN_DIR=$run_dir
start_pair "$run_dir" --count 2000000 --stall 30 --timeout 60 --quiet-status

conn_id() { # the id of the listener's connection, from its status
    "$railover" status "$lpid" 2>/dev/null | sed -n 's/^conn id=\([0-9]*\) .*/\1/p' | head -n 1
}
if ! wait_for 10 test -n "$(conn_id)"; then
    fail "no connection in the status of $lpid"
    "$railover" status "$lpid" >&2
    finish
fi
id=$(conn_id)

why="(a decimal number, as 'railover status' shows after 'conn id=')"
i=0
for bad in -1 +1 18446744073709551616 99999999999999999999999 0x1 1e3 "-$id" ""; do
    i=$((i + 1))
    for verb in force release; do
        run "bad$i$verb" "$railover" "$verb" "$lpid" conn "$bad"
        if [ "$(rc_of "bad$i$verb")" = 1 ] && [ ! -s "$work/bad$i$verb.out" ] &&
           grep -qxF "railover $verb: '$bad' is not a connection id $why" "$work/bad$i$verb.err"
        then
            pass "$verb conn '$bad' refused"
        else
            fail "$verb conn '$bad': expected exit 1 and 'is not a connection id'"
            show "bad$i$verb"
        fi
    done
done
if "$railover" status "$lpid" | grep -q "^conn id=$id .* forced=no "; then
    pass "connection $id was not forced"
else
    fail "connection $id changed"
    "$railover" status "$lpid" >&2
fi

run good "$railover" force "$lpid" conn "$id"
run good2 "$railover" release "$lpid" conn "$id"
if [ "$(rc_of good)" = 0 ] && grep -qx "forced 1 connection" "$work/good.out" &&
   [ "$(rc_of good2)" = 0 ] && grep -qx "released 1 connection" "$work/good2.out"; then
    pass "force and release conn $id"
else
    fail "force/release conn $id"
    show good
    show good2
fi

finish
