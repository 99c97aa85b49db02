#!/usr/bin/env bash
# Issue 19, part 6: a client the control socket refuses (root, not the
# process's user) gets a one-line reason, not a bare close ("Broken pipe").
#
#   control_refused_reason.sh RAILOVER ROV_STREAM
#
# A rov_stream process runs as uid 65534 with its run directory owned by
# 65534.  Root connects to its socket (root may enter the directory): once
# sending at once, once only after the process has refused it.  Both must
# read "error: permission denied: ..." naming both uids.  The `railover` tool,
# run by root, refuses that run directory itself, with one line.
set -u

if [ $# -ne 2 ]; then
    echo "usage: control_refused_reason.sh RAILOVER ROV_STREAM" >&2
    exit 64
fi
railover=$1
stream=$2
. "$(dirname "$0")/control_lib.sh"
need_root

theirs=$work/theirs
mkdir -m 700 "$theirs"
chown "$other_uid:$other_uid" "$theirs"
# The other uid may not reach the build tree: it runs a copy.
stream=$(copy_for_other "$stream") || { fail "cannot copy $2 for uid $other_uid"; finish; }
RAILOVER_RUN_DIR=$theirs LD_LIBRARY_PATH=$work/bin setpriv --reuid "$other_uid" --regid "$other_uid" --clear-groups \
    "$stream" --listen "$theirs/addr" --stall 0 --timeout 25 \
    --quiet-status >"$work/proc.log" 2>&1 &
p=$!
pids+=("$p")
sock=$theirs/$p.0.sock
wait_for 20 up_or_gone "$p" -S "$sock"
if ! test -S "$sock"; then
    fail "the process of uid $other_uid made no control socket $sock"
    cat "$work/proc.log" >&2
    finish
fi

want="error: permission denied: only uid $other_uid, which runs this process,"
want+=" may use its control socket (you are uid 0)"
for delay in 0 1; do
    run "client$delay" python3 - "$sock" "$delay" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
s.connect(sys.argv[1])
time.sleep(float(sys.argv[2]))  # 1: the process has refused us by now
try:
    s.sendall(b"ping\n")
except OSError as e:
    print("send: %s" % e, file=sys.stderr)
data = b""
try:
    while True:
        b = s.recv(4096)
        if not b:
            break
        data += b
except OSError as e:
    print("recv: %s" % e, file=sys.stderr)
sys.stdout.write(data.decode(errors="replace"))
PY
    if [ "$(cat "$work/client$delay.out")" = "$want" ]; then
        pass "root client (request after ${delay} s) told why it is refused"
    else
        fail "root client (request after ${delay} s): expected '$want'"
        show "client$delay"
    fi
done

RAILOVER_RUN_DIR=$theirs run tool "$railover" ctl "$p" ping
want_tool="railover: run directory $theirs belongs to uid $other_uid, not to us (uid 0);"
want_tool+=" not trusting the control sockets in it"
if [ "$(rc_of tool)" = 1 ] && [ "$(cat "$work/tool.err")" = "$want_tool" ]; then
    pass "the tool, run by root, says why in one line"
else
    fail "railover ctl $p ping as root: expected exit 1 and '$want_tool'"
    show tool
fi

finish
