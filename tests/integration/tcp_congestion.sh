#!/usr/bin/env bash
# RAILOVER_TCP_CONGESTION: the tcp rail's channels use the congestion
# control it names (read back from the kernel with ss, on both ends of a
# live rov_stream pair), and a name the kernel does not have is a clear
# error when the rail opens, not a connection that runs on the default.
#
#   tcp_congestion.sh ROV_STREAM
#
# The name tried is one the kernel has and that is not its default (reno,
# built into every kernel, or cubic where reno is the default), so that
# the check cannot pass by accident.
set -u
stream=$1
fail() { echo "tcp_congestion: FAIL: $*" >&2; exit 1; }
command -v ss > /dev/null || { echo "tcp_congestion: no ss (iproute2): skipped"; exit 77; }

default=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
want=reno
[ "$default" = reno ] && want=cubic
case " $(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control) " in
*" $want "*) ;;
*) [ "$(id -u)" = 0 ] || { echo "tcp_congestion: $want not allowed for this user: skipped"; exit 77; } ;;
esac

dir=$(mktemp -d "${TMPDIR:-/tmp}/rov_cc.XXXXXX") || exit 2
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
    wait 2> /dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

# A wrong name: the process says which variable and why, and exits.
RAILOVER_TCP_CONGESTION=no-such-cc timeout 20 "$stream" --listen "$dir/bad.addr" --count 1 \
    > "$dir/bad.log" 2>&1 && fail "rov_stream ran with RAILOVER_TCP_CONGESTION=no-such-cc"
grep -q "RAILOVER_TCP_CONGESTION=no-such-cc: the kernel has no such congestion control" \
    "$dir/bad.log" || { cat "$dir/bad.log"; fail "no clear error for an unknown congestion control"; }
echo "tcp_congestion: an unknown name is refused: $(grep -m1 'no-such-cc' "$dir/bad.log")"

# A right one: every established TCP socket of both processes uses it.
export RAILOVER_TCP_CONGESTION=$want
"$stream" --listen "$dir/addr" --count 1000000 --max-size 65536 --timeout 60 \
    --pid-file "$dir/l.pid" > "$dir/l.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/addr" ] && break; sleep 0.1; done
[ -s "$dir/addr" ] || fail "the listener wrote no address"
"$stream" --connect "$dir/addr" --count 1000000 --max-size 65536 --timeout 60 \
    --pid-file "$dir/c.pid" > "$dir/c.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/c.pid" ] && [ -s "$dir/l.pid" ] && break; sleep 0.1; done
lp=$(cat "$dir/l.pid") cp=$(cat "$dir/c.pid")
seen=
for _ in $(seq 100); do
    # One line per socket: "ESTAB ... users:((\"rov_stream\",pid=N,...)) ... cubic ..."
    seen=$(ss -tinpH state established 2> /dev/null | paste - - |
           grep -E "pid=($lp|$cp)," || true)
    [ "$(grep -c . <<< "$seen")" -ge 2 ] && break
    sleep 0.1
done
n=$(grep -c . <<< "$seen")
[ "$n" -ge 2 ] || fail "fewer than two established sockets of the pair were seen ($n)"
bad=$(grep -v -E "[[:space:]]$want[[:space:]]" <<< "$seen" || true)
[ -z "$bad" ] || fail "sockets not on $want (the default is $default): $bad"
echo "tcp_congestion: $n sockets of the pair on $want (the system's default: $default)"
kill "${pids[@]}" 2> /dev/null
echo "tcp_congestion: PASS"
