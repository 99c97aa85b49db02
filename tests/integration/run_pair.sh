#!/usr/bin/env bash
# Run a two-process integration test: a listener and a connector.
#
#   run_pair.sh [--timeout SEC] [--expect-switches] [--keep] -- PROGRAM [ARGS...]
#
# Starts `PROGRAM --listen ADDRFILE ARGS...` in the background, waits (bounded)
# until it has written its address file, then starts
# `PROGRAM --connect ADDRFILE ARGS...`.  Waits for both with one deadline.
# Fails if either exits non-zero or the deadline passes; then both are killed
# and the end of each log is printed.  With --expect-switches, at least one
# side must report switches > 0 on its ROV_STREAM_RESULT line.  When the
# program prints ROV_STREAM_CONN lines, each connection's sent on one side
# must equal its recv on the other.
set -u

timeout=600
addr_wait=30
expect_switches=0
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
    --timeout) timeout=$2; shift 2 ;;
    --addr-wait) addr_wait=$2; shift 2 ;;
    --expect-switches) expect_switches=1; shift ;;
    --keep) keep=1; shift ;;
    --) shift; break ;;
    *) echo "run_pair.sh: unknown option $1" >&2; exit 64 ;;
    esac
done
if [ $# -lt 1 ]; then
    echo "usage: run_pair.sh [--timeout SEC] [--expect-switches] [--keep] -- PROGRAM [ARGS...]" >&2
    exit 64
fi
prog=$1
shift

dir=$(mktemp -d "${TMPDIR:-/tmp}/rov_pair.XXXXXX") || exit 2
addr=$dir/addr
llog=$dir/listener.log
clog=$dir/connector.log
lpid=
cpid=
lrc=
crc=

now() { date +%s; }

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

kill_all() {
    local p
    for p in $lpid $cpid; do
        alive "$p" && kill -TERM "$p" 2>/dev/null
    done
    # bounded grace, then KILL
    local end=$(( $(now) + 5 ))
    while { alive "$lpid" || alive "$cpid"; } && [ "$(now)" -lt "$end" ]; do
        sleep 0.1
    done
    for p in $lpid $cpid; do
        alive "$p" && kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
}

show_logs() {
    local n=$1
    echo "---- listener log (last $n lines of $llog) ----"
    tail -n "$n" "$llog" 2>/dev/null
    echo "---- connector log (last $n lines of $clog) ----"
    tail -n "$n" "$clog" 2>/dev/null
    echo "----"
}

fail() {
    echo "run_pair.sh: FAIL: $*"
    kill_all
    show_logs 40
    echo "run_pair.sh: logs kept in $dir"
    exit 1
}

trap 'fail "interrupted"' INT TERM

echo "run_pair.sh: $prog $* (RAILOVER_RAILS=${RAILOVER_RAILS-<unset>}, timeout ${timeout}s)"
start=$(now)
deadline=$(( start + timeout ))

"$prog" --listen "$addr" "$@" >"$llog" 2>&1 &
lpid=$!

# Wait for the address file (written atomically by rename) or the
# listener's death, whichever comes first.
addr_deadline=$(( start + addr_wait ))
while [ ! -s "$addr" ]; do
    if ! alive "$lpid"; then
        wait "$lpid"; lrc=$?
        lpid=
        fail "listener exited with status $lrc before writing its address"
    fi
    [ "$(now)" -ge "$addr_deadline" ] && fail "listener wrote no address within ${addr_wait}s"
    sleep 0.05
done

"$prog" --connect "$addr" "$@" >"$clog" 2>&1 &
cpid=$!

# Reap each process as it ends; stop at the first failure or the deadline.
while [ -z "$lrc" ] || [ -z "$crc" ]; do
    if [ -z "$lrc" ] && ! alive "$lpid"; then
        wait "$lpid"; lrc=$?
        lpid=
        [ "$lrc" -ne 0 ] && fail "listener exited with status $lrc"
    fi
    if [ -z "$crc" ] && ! alive "$cpid"; then
        wait "$cpid"; crc=$?
        cpid=
        [ "$crc" -ne 0 ] && fail "connector exited with status $crc"
    fi
    if [ -z "$lrc" ] || [ -z "$crc" ]; then
        [ "$(now)" -ge "$deadline" ] && fail "timed out after ${timeout}s" \
            "(listener ${lrc:-running}, connector ${crc:-running})"
        sleep 0.1
    fi
done

result() { grep -h '^ROV_STREAM_RESULT' "$1" 2>/dev/null | tail -n 1; }
lres=$(result "$llog")
cres=$(result "$clog")
[ -n "$lres" ] || fail "listener printed no ROV_STREAM_RESULT line"
[ -n "$cres" ] || fail "connector printed no ROV_STREAM_RESULT line"

# Per connection: what one side sent, the other received.
conn_field() { # LOG CONN FIELD
    sed -n "s/^ROV_STREAM_CONN .* conn=$2 .* $3=\([0-9]*\).*/\1/p" "$1" | tail -n 1
}
lconns=$(grep -c '^ROV_STREAM_CONN' "$llog")
cconns=$(grep -c '^ROV_STREAM_CONN' "$clog")
[ "$lconns" = "$cconns" ] ||
    fail "ROV_STREAM_CONN lines: listener $lconns, connector $cconns"
for ((i = 0; i < lconns; i++)); do
    lsent=$(conn_field "$llog" "$i" sent)
    lrecv=$(conn_field "$llog" "$i" recv)
    csent=$(conn_field "$clog" "$i" sent)
    crecv=$(conn_field "$clog" "$i" recv)
    if [ -z "$lsent" ] || [ "$lsent" != "$crecv" ] || [ "$csent" != "$lrecv" ]; then
        fail "connection $i: listener sent ${lsent:-?} received ${lrecv:-?}," \
            "connector sent ${csent:-?} received ${crecv:-?}"
    fi
done

if [ "$expect_switches" = 1 ]; then
    field() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" <<<"$1"; }
    ls=$(field "$lres" switches)
    cs=$(field "$cres" switches)
    if [ "${ls:-0}" -eq 0 ] && [ "${cs:-0}" -eq 0 ]; then
        fail "--expect-switches: no side completed a rail switch (listener $ls, connector $cs)"
    fi
    echo "run_pair.sh: completed switches: listener $ls, connector $cs"
fi

show_logs 12
echo "run_pair.sh: PASS in $(( $(now) - start ))s"
if [ "$keep" = 1 ]; then
    echo "run_pair.sh: logs kept in $dir"
else
    rm -rf "$dir"
fi
exit 0
