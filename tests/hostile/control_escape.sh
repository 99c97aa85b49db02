#!/usr/bin/env bash
# Issue 19, part 5: the `railover` tool prints nothing a process sent without
# making its control characters harmless (docs/control.md, "Command line").
#
#   control_escape.sh RAILOVER
#
# A server of our own user (a buggy or compromised process) answers with
# terminal escape codes, a carriage return, a bell, a C1 CSI byte and UTF-8,
# in answer lines and in its error line.  stdout and stderr of `status`,
# `force all` and `ctl` must hold none of those bytes, and show each as \xHH.
set -u

if [ $# -ne 1 ]; then
    echo "usage: control_escape.sh RAILOVER" >&2
    exit 64
fi
railover=$1
. "$(dirname "$0")/control_lib.sh"

run_dir=$work/run
mkdir -m 700 "$run_dir"
export RAILOVER_RUN_DIR=$run_dir
ok_answer="b'process pid=4242 \\x1b]0;title\\x07\\x1b[2J\\rtab\\there \\x9b31m caf\\xc3\\xa9\\nok\\n'"
err_answer="b'line\\nerror: no \\x1b[31mconnection\\x1b[0m\\r\\n'"
start_fake good "$run_dir/4242.0.sock" - "$ok_answer"
start_fake bad "$run_dir/4243.0.sock" - "$err_answer"

want_ok='process pid=4242 \x1b]0;title\x07\x1b[2J\x0dtab	here \x9b31m caf\xc3\xa9'
for cmd in "status 4242" "force 4242" "ctl 4242 hello"; do
    name=${cmd// /_}
    # shellcheck disable=SC2086
    run "$name" "$railover" $cmd
    if [ "$(rc_of "$name")" = 0 ] && ! has_ctl_bytes "$work/$name.out" &&
       grep -qxF "$want_ok" "$work/$name.out"; then
        pass "railover $cmd: control characters shown escaped"
    else
        fail "railover $cmd: expected exit 0 and the line '$want_ok'"
        show "$name" | cat -A
    fi
done

want_err='railover: process 4243: error: no \x1b[31mconnection\x1b[0m\x0d'
for cmd in "force 4243" "ctl 4243 ping"; do
    name=${cmd// /_}
    # shellcheck disable=SC2086
    run "$name" "$railover" $cmd
    if [ "$(rc_of "$name")" = 1 ] && ! has_ctl_bytes "$work/$name.err" &&
       ! has_ctl_bytes "$work/$name.out" && grep -qxF "$want_err" "$work/$name.err"; then
        pass "railover $cmd: the error line shown escaped"
    else
        fail "railover $cmd: expected exit 1 and '$want_err' on stderr"
        show "$name" | cat -A
    fi
done

# Everything at once: `status` over both, `force all` prefixed.
run all "$railover" force all
if ! has_ctl_bytes "$work/all.out" && ! has_ctl_bytes "$work/all.err" &&
   grep -qxF "4242: $want_ok" "$work/all.out"; then
    pass "railover force all: prefixed lines escaped"
else
    fail "railover force all: raw control characters or a missing line"
    show all | cat -A
fi

finish
