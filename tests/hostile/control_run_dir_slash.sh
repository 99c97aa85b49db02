#!/usr/bin/env bash
# Issue 19, part 6: a trailing slash must not get a symbolic link past the
# run directory's "not a symbolic link" rule (docs/control.md).
#
#   control_run_dir_slash.sh RAILOVER ROV_STREAM
#
# RAILOVER_RUN_DIR names a symbolic link to a safe directory (ours, 0700),
# with and without a trailing slash, and as link/. : a process must run
# without a control socket and say why; the tool must refuse it.
set -u

if [ $# -ne 2 ]; then
    echo "usage: control_run_dir_slash.sh RAILOVER ROV_STREAM" >&2
    exit 64
fi
railover=$1
stream=$2
. "$(dirname "$0")/control_lib.sh"

target=$work/target
mkdir -m 700 "$target"
ln -s "$target" "$work/link"

# What both say: the link itself, or a last component that hides it.
why="run directory '\?$work/link.*\(is not a directory (a symbolic link)\|does not end in a directory name\)"
i=0
for dir in "$work/link" "$work/link/" "$work/link//" "$work/link/."; do
    i=$((i + 1))
    RAILOVER_RUN_DIR=$dir "$stream" --listen "$work/addr$i" --stall 0 --timeout 20 \
        --quiet-status >"$work/proc$i.log" 2>&1 &
    p=$!
    pids+=("$p")
    wait_for 20 up_or_gone "$p" -s "$work/addr$i"
    if ! test -s "$work/addr$i"; then
        fail "RAILOVER_RUN_DIR=$dir: the process did not start"
        tail -n 5 "$work/proc$i.log" >&2
        continue
    fi
    if grep -q "warn ctl: $why.*; running without a control socket" "$work/proc$i.log" &&
       [ ! -e "$target/$p.0.sock" ]; then
        pass "RAILOVER_RUN_DIR=$dir: the process refused it"
    else
        fail "RAILOVER_RUN_DIR=$dir: expected a warning and no socket in $target"
        ls -la "$target" >&2
        grep "ctl" "$work/proc$i.log" >&2
    fi
    RAILOVER_RUN_DIR=$dir run "tool$i" "$railover" status
    if [ "$(rc_of "tool$i")" = 1 ] && [ ! -s "$work/tool$i.out" ] &&
       grep -q "^railover: $why.*; not trusting the control sockets in it" "$work/tool$i.err"; then
        pass "RAILOVER_RUN_DIR=$dir: the tool refused it"
    else
        fail "RAILOVER_RUN_DIR=$dir: expected the tool to refuse it"
        show "tool$i"
    fi
    kill -TERM "$p" 2>/dev/null
    wait "$p" 2>/dev/null
done

finish
