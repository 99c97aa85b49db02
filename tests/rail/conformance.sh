#!/usr/bin/env bash
# The rail conformance suite: what every rail (tcp, verbs, ucx) must do under
# the transport, checked end to end with two rov_stream processes (every
# message checksummed and sequence-checked, per-connection counts
# cross-checked by run_pair.sh).
#
#   conformance.sh --build DIR --rails RAILS [--scale N] [--only CASE[,CASE]]
#
# RAILS is a RAILOVER_RAILS value: the rail under test first, a second rail
# (the fallback, e.g. tcp@lo) after it.  --scale multiplies the message
# counts (1 suits Soft-RoCE under TCG; the native TCP run uses more).
#
# Cases:
#   stream        both directions at once, random sizes 0 B .. 1 MiB (eager,
#                 zero-copy and large-frame paths)
#   small         many messages of 0..256 B (inline sends, credits, acks)
#   conns         four connections over one rail instance, one progress loop
#   switch        forced switches to the other rail and back every ~5 ms:
#                 handshakes, resends, duplicate drop, in-order delivery
#   fault_error   the rail fails with an error again and again
#                 (RAILOVER_FAULT): failover, resend, failback
#   fault_silent  the rail goes silent: only the lack-of-progress timer and
#                 the keepalive can tell
#   peer_killed   the peer is killed (SIGKILL) mid-stream: the survivor
#                 reports the connection failed and exits cleanly
#   renew         after every zero-copy send its buffer gets new pages at the
#                 same address (munmap + mmap there, or MADV_DONTNEED): a
#                 rail that kept a registration of the old pages sends their
#                 poison, which the checksum catches
#   sleep         both sides sleep in rov_context_wait() for up to 60 s
#                 whenever idle, with the failover engine (whose timer would
#                 wake them) off: only the rail's own wake-up (a readable
#                 socket, an armed CQ or UCX worker) moves the stream; one
#                 missed wake-up is a stall (--stall 20); the listener's
#                 CLOSE goes second, and its close must end without the
#                 keepalive (verbs: the peer's answer to it, which the peer
#                 keeps its QP for until its send completed, chan_flush,
#                 since an idle QP shows nothing when the peer destroys it)
#   last_close    the listener's CLOSE goes second and is lost on a rail that
#                 goes silent under it (RAILOVER_FAULT at=last-close): the
#                 listener must not finish on that, the connector must not
#                 fail; the stall moves them to the other rail, where the
#                 CLOSE goes again and is answered
set -u

build=
rails=
scale=1
only=
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --rails) rails=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "conformance.sh: unknown option $1" >&2; exit 64 ;;
    esac
done
if [ -z "$build" ] || [ -z "$rails" ]; then
    echo "usage: conformance.sh --build DIR --rails RAILS [--scale N] [--only CASES]" >&2
    exit 64
fi
here=$(cd "$(dirname "$0")" && pwd)
pair="$here/../integration/run_pair.sh"
stream="$build/tests/integration/rov_stream"
[ -x "$stream" ] || { echo "conformance.sh: $stream not built" >&2; exit 2; }

export RAILOVER_RAILS=$rails
export RAILOVER_LOG=${RAILOVER_LOG:-warn}
# Failover tests want quick failback so that one run sees several cycles.
fo_env="RAILOVER_FAILBACK_DWELL=20ms RAILOVER_FAILBACK_RETRY=2ms RAILOVER_FAILBACK_RETRY_MAX=20ms"
n() { echo $(( $1 * scale )); }
# The failover timeout of fault_silent.  The first connect must also finish
# within it (else the connection starts on the second rail and the fault is
# never met): under TCG a UCX wire-up can take longer than 300 ms.
silent_timeout=${ROV_CONF_SILENT_TIMEOUT:-300ms}

work=$(mktemp -d "${TMPDIR:-/tmp}/rov_conf.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
failed=()
passed=0

# run_case NAME COMMAND...
run_case() {
    local name=$1 t0 t1 rc
    shift
    if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then
        return
    fi
    t0=$(date +%s.%N)
    "$@" > "$work/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    if [ $rc = 0 ]; then
        printf 'PASS %-13s %6.1f s  %s\n' "$name" "$(echo "$t1 - $t0" | bc)" \
            "$(grep -h '^ROV_STREAM_RESULT role=connector' "$work/$name.log" |
               grep -o 'switches=[0-9]* .*failures=[0-9]*' | head -n 1)"
        passed=$((passed + 1))
    else
        printf 'FAIL %-13s (exit %d, rails %s); end of its log:\n' "$name" "$rc" "$rails"
        tail -n 40 "$work/$name.log" | sed 's/^/    /'
        failed+=("$name")
    fi
}

# peer_killed: the connector is killed while both stream; the listener must
# see its connection fail (rov_stream exit 2: the library reported the
# connection failed) rather than hang, spin between dead rails or crash.
peer_killed() {
    local addr=$work/pk.addr pid_l pid_c rc deadline
    rm -f "$addr"
    "$stream" --listen "$addr" --count 10000000 --seed 9 --timeout 120 \
        > "$work/pk.listener" 2>&1 &
    pid_l=$!
    deadline=$((SECONDS + 60))
    while [ ! -s "$addr" ] && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    "$stream" --connect "$addr" --count 10000000 --seed 9 --timeout 120 \
        > "$work/pk.connector" 2>&1 &
    pid_c=$!
    # Kill once the connection carries traffic both ways.
    deadline=$((SECONDS + 60))
    until grep -q 'connection accepted' "$work/pk.listener" 2>/dev/null ||
          [ $SECONDS -ge $deadline ]; do sleep 0.1; done
    sleep 1
    kill -9 $pid_c
    wait $pid_c 2>/dev/null
    deadline=$((SECONDS + 60))
    while kill -0 $pid_l 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    if kill -0 $pid_l 2>/dev/null; then
        echo "listener still running 60 s after its peer was killed"
        kill -9 $pid_l
        cat "$work/pk.listener"
        return 1
    fi
    wait $pid_l
    rc=$?
    cat "$work/pk.listener"
    # 2 = the library reported a failure; 1 (data corrupted), 3 (stalled),
    # a crash or a sanitizer report are wrong.
    if [ $rc != 2 ]; then
        echo "listener exited $rc, expected 2 (connection failed)"
        return 1
    fi
    grep -q 'connection failed' "$work/pk.listener" || { echo "no connection failure seen"; return 1; }
}

# renew: besides the checks of every case, both sides must have renewed
# buffers (else the case proved nothing).
renew() {
    local log=$work/renew.out
    "$pair" --timeout 600 -- "$stream" --count "$(n 3000)" --seed 8 --renew-buffers \
        --timeout 580 > "$log" 2>&1
    local rc=$?
    cat "$log"
    [ $rc = 0 ] || return $rc
    if [ "$(grep -c 'buffers renewed' "$log")" -lt 2 ] ||
       grep 'buffers renewed' "$log" | grep -q ' 0 buffers renewed'; then
        echo "a side renewed no buffer"
        return 1
    fi
}

echo "rail conformance: RAILOVER_RAILS=$rails scale=$scale"
run_case stream "$pair" --timeout 600 -- "$stream" --count "$(n 2000)" --seed 1 --timeout 580
run_case small "$pair" --timeout 600 -- "$stream" --count "$(n 20000)" --max-size 256 --seed 3 \
    --timeout 580
run_case conns "$pair" --timeout 600 -- "$stream" --count "$(n 300)" --conns 4 --seed 5 \
    --timeout 580
run_case switch "$pair" --timeout 600 --expect-switches -- "$stream" --count "$(n 2000)" \
    --seed 2 --switch-every 5 --timeout 580
run_case fault_error env $fo_env RAILOVER_FAULT=rail=0,mode=error,after=300,every=1000 \
    "$pair" --timeout 600 --expect-switches -- "$stream" --count "$(n 3000)" --seed 4 \
    --max-size 65536 --timeout 580
run_case fault_silent env $fo_env RAILOVER_FAILOVER_TIMEOUT=$silent_timeout RAILOVER_KEEPALIVE=100ms \
    RAILOVER_FAULT=rail=0,mode=silent,after=300,every=1500 \
    "$pair" --timeout 600 --expect-switches -- "$stream" --count "$(n 3000)" --seed 6 \
    --max-size 65536 --timeout 580
run_case sleep env RAILOVER_FAILOVER=off \
    "$pair" --timeout 300 -- "$stream" --count "$(n 500)" --seed 7 --max-size 65536 \
    --wait-ms 60000 --stall 20 --listener-closes-second --timeout 280
run_case last_close env $fo_env RAILOVER_FAILOVER_TIMEOUT=$silent_timeout RAILOVER_KEEPALIVE=100ms \
    RAILOVER_FAULT=rail=0,mode=silent,at=last-close \
    "$pair" --timeout 300 --expect-switches -- "$stream" --count "$(n 300)" --seed 8 \
    --max-size 65536 --listener-closes-second --timeout 280
run_case peer_killed peer_killed
run_case renew renew

echo "rail conformance ($rails): $passed passed, ${#failed[@]} failed${failed:+: ${failed[*]}}"
[ ${#failed[@]} = 0 ]
