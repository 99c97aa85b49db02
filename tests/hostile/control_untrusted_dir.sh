#!/usr/bin/env bash
# Issue 19, part 5: the `railover` tool must not trust a run directory that
# another user made (docs/control.md, "Security model").
#
#   control_untrusted_dir.sh RAILOVER
#
# Another user (uid 65534) creates the run directory with mode 0777 and puts
# a fake control socket in it, served by its own process, that answers every
# request with escape codes and "forced 99 connections".  `railover status`,
# `railover force all` and `railover ctl` must refuse the directory with a
# message naming it and what is wrong, print nothing the fake sent, send it
# nothing, and exit 1.  Once with RAILOVER_RUN_DIR, once at the default
# /tmp/railover-<uid> of a victim user (uid 65533) running the tool.
set -u

if [ $# -ne 1 ]; then
    echo "usage: control_untrusted_dir.sh RAILOVER" >&2
    exit 64
fi
railover=$1
. "$(dirname "$0")/control_lib.sh"
need_root

fake_answer="b'process pid=4242 \\x1b[31mOWNED\\x1b[0m\\nforced 99 connections\\nok\\n'"

# check_refused NAME DIR: the run NAME refused DIR and showed nothing fake.
check_refused() {
    local name=$1 dir=$2 what=$3
    if [ "$(rc_of "$name")" = 1 ] && [ ! -s "$work/$name.out" ] &&
       grep -q "^railover: run directory $dir $what" "$work/$name.err" &&
       ! grep -q "forced 99\|OWNED" "$work/$name.err"; then
        pass "$name: refused ($what)"
    else
        fail "$name: expected exit 1, no output and 'run directory $dir $what'"
        show "$name"
    fi
}

# ---- RAILOVER_RUN_DIR names the other user's directory ----------------------

evil=$work/evil
mkdir "$evil"
chown "$other_uid:$other_uid" "$evil"
chmod 777 "$evil"
start_fake evil "$evil/4242.0.sock" "$other_uid" "$fake_answer"

export RAILOVER_RUN_DIR=$evil
run status "$railover" status
check_refused status "$evil" "belongs to uid $other_uid, not to us (uid 0)"
run force "$railover" force all
check_refused force "$evil" "belongs to uid $other_uid, not to us (uid 0)"
run ctl "$railover" ctl 4242 hello
check_refused ctl "$evil" "belongs to uid $other_uid, not to us (uid 0)"

# Our own directory, but open to everyone: refused for its mode.
open=$work/open
mkdir "$open"
chmod 777 "$open"
start_fake open "$open/4243.0.sock" - "$fake_answer"
RAILOVER_RUN_DIR=$open run open_status "$railover" status
check_refused open_status "$open" "has mode 777; it must be accessible by its owner only"
RAILOVER_RUN_DIR=$open run open_force "$railover" force all
check_refused open_force "$open" "has mode 777; it must be accessible by its owner only"
unset RAILOVER_RUN_DIR

if [ ! -s "$work/evil.requests" ] && [ ! -s "$work/open.requests" ]; then
    pass "the fake servers got no request"
else
    fail "requests sent to a fake server: $(cat "$work/evil.requests" "$work/open.requests")"
fi

# ---- the default run directory, made by another user before the victim's ----

victim=65533
vdir=/tmp/railover-$victim
if [ -e "$vdir" ]; then
    echo "note: $vdir exists already; the default-directory case is not run"
else
    cleanup_extra+=("$vdir")
    as_other mkdir -m 777 "$vdir"
    start_fake default "$vdir/4244.0.sock" "$other_uid" "$fake_answer"
    # The victim may not reach the build tree: it runs a copy.
    vtool=$(copy_for_other "$railover") || { fail "cannot copy $railover for uid $victim"; finish; }
    vrun() {
        setpriv --reuid "$victim" --regid "$victim" --clear-groups env -u RAILOVER_RUN_DIR \
            LD_LIBRARY_PATH="$work/bin" "$@"
    }
    run v_status vrun "$vtool" status
    check_refused v_status "$vdir" "belongs to uid $other_uid, not to us (uid $victim)"
    run v_force vrun "$vtool" force all
    check_refused v_force "$vdir" "belongs to uid $other_uid, not to us (uid $victim)"
    if [ ! -s "$work/default.requests" ]; then
        pass "the fake server in $vdir got no request"
    else
        fail "requests sent to the fake server in $vdir: $(cat "$work/default.requests")"
    fi
fi

finish
