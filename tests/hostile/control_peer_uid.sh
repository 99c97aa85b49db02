#!/usr/bin/env bash
# Issue 19, part 5: the `railover` tool talks only to servers of its own user
# (SO_PEERCRED on the client side; docs/control.md, "Security model").
#
#   control_peer_uid.sh RAILOVER
#
# The run directory is ours and safe, but the socket in it is served by a
# process of uid 65534 (bound by root, listening after dropping to 65534: a
# socket that got there some other way than through the directory).  The
# tool must refuse it with a message naming the socket and both uids, print
# nothing it received, and exit 1.
set -u

if [ $# -ne 1 ]; then
    echo "usage: control_peer_uid.sh RAILOVER" >&2
    exit 64
fi
railover=$1
. "$(dirname "$0")/control_lib.sh"
need_root

run_dir=$work/run
mkdir -m 700 "$run_dir"
export RAILOVER_RUN_DIR=$run_dir
sock=$run_dir/4242.0.sock
start_fake other "$sock" "$other_uid" "b'process pid=4242 fake\nforced 99 connections\nok\n'"

msg="railover: $sock is served by uid $other_uid, not by us (uid 0); not trusting it"
for cmd in "status" "status 4242" "force all" "force 4242" "ctl 4242 ping"; do
    name=${cmd// /_}
    # shellcheck disable=SC2086
    run "$name" "$railover" $cmd
    if [ "$(rc_of "$name")" = 1 ] && [ ! -s "$work/$name.out" ] &&
       grep -qxF "$msg" "$work/$name.err" && ! grep -q "fake\|forced 99" "$work/$name.err"; then
        pass "railover $cmd: refused the server of uid $other_uid"
    else
        fail "railover $cmd: expected exit 1, no output and '$msg'"
        show "$name"
    fi
done

finish
