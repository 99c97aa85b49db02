#!/usr/bin/env bash
# Issue 19, part 5: the `railover` tool talks only to servers of its own user
# (SO_PEERCRED on the client side; docs/control.md, "Security model"); issue
# 36: so does the library's client, which cprclient uses (docs/ccp.md).
#
#   control_peer_uid.sh RAILOVER ROV_STREAM CPRCLIENT
#
# The run directory is ours and safe, but the socket in it is served by a
# process of uid 65534 (bound by root, listening after dropping to 65534: a
# socket that got there some other way than through the directory).  The
# tool must refuse it with a message naming the socket and both uids, print
# nothing it received, and exit 1.
#
# Then a job "peer" of two rov_stream ranks: one rank's socket is replaced
# by such a server (its record in the registry still names the path).
# `cprclient peer status` must send it nothing, name the socket and both
# uids, and report that rank unreachable (exit 3).
set -u

if [ $# -ne 3 ]; then
    echo "usage: control_peer_uid.sh RAILOVER ROV_STREAM CPRCLIENT" >&2
    exit 64
fi
railover=$1
stream=$2
cprclient=$3
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

# cprclient (rov_ctl_request()) on a job whose rank's socket is another uid's.
job_run=$work/jobrun
mkdir -m 700 "$job_run" "$work/jobs"
export RAILOVER_RUN_DIR=$job_run RAILOVER_JOB_DIR=$work/jobs
RAILOVER_JOBID=peer start_pair "$job_run" --conns 2 --count 100 --max-size 64 \
    --stop-file "$work/stop" --stall 0 --timeout 120 --quiet-status
record=$work/jobs/peer/rank.$lpid
wait_for 20 grep -q "^ctl_path=$lsock\$" "$record" ||
    fail "rank $lpid did not register its control socket in $record"
run before "$cprclient" peer status
if [ "$(rc_of before)" = 0 ]; then
    pass "cprclient peer status works while the ranks serve their own sockets"
else
    fail "cprclient peer status before the socket was replaced"
    show before
fi
rm -f "$lsock"
start_fake job "$lsock" "$other_uid" "b'context stage=running conns=2 quiesced=0\\nok\\n'"
run cpr "$cprclient" peer status
msg="$lsock is served by uid $other_uid, not by us (uid 0); not trusting it"
if [ "$(rc_of cpr)" = 3 ] && grep -qF "$msg" "$work/cpr.err" &&
   grep -q "^rank=$lpid .*status=rank $lpid (pid $lpid on [^ ]*) unreachable: $msg" \
       "$work/cpr.out" && grep -q "^rank=$cpid .*status=ok" "$work/cpr.out" &&
   ! grep -q . "$work/job.requests"; then
    pass "cprclient refused the server of uid $other_uid: $(head -n 1 "$work/cpr.err")"
else
    fail "cprclient peer status: expected exit 3, '$msg' and nothing sent to the server"
    show cpr
    sed 's/^/  request: /' "$work/job.requests"
fi
touch "$work/stop"

finish
