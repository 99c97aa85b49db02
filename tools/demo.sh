#!/usr/bin/env bash
# Run the Railover demo: two processes stream to each other for 8 seconds.
#
# As root with network namespaces: the two processes are two "hosts" joined
# by a "fabric" link (192.0.2.0/24, the preferred rail) and an "ethernet"
# link (198.51.100.0/24, the fallback rail).  After 2 s the fabric link goes
# down: the connection fails over to ethernet when the rail stops completing
# its work (RAILOVER_FAILOVER_TIMEOUT=250ms); after 4 s the link comes back
# and, once it has stayed healthy for RAILOVER_FAILBACK_DWELL=1s, traffic
# moves back.  Without root, both processes run on loopback and the client
# moves the connection between two TCP rails every two seconds instead.
#
# Usage: tools/demo.sh [build-dir]
set -euo pipefail
build=${1:-build}
demo=$build/tools/railover-demo
dir=$(mktemp -d)
ns=rovdemo$$
export RAILOVER_LOG=${RAILOVER_LOG:-info}
export RAILOVER_FAILOVER_TIMEOUT=250ms RAILOVER_KEEPALIVE=100ms RAILOVER_FAILBACK_DWELL=1s
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    ip netns del ${ns}a 2>/dev/null || true
    ip netns del ${ns}b 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

two_hosts() {
    [ "$(id -u)" = 0 ] && ip netns add ${ns}a 2>/dev/null && ip netns add ${ns}b || return 1
    ip link add fab netns ${ns}a type veth peer name fab netns ${ns}b
    ip link add eth netns ${ns}a type veth peer name eth netns ${ns}b
    local h
    for h in a b; do
        local n=1
        [ $h = b ] && n=2
        ip -n ${ns}$h addr add 192.0.2.$n/24 dev fab
        ip -n ${ns}$h addr add 198.51.100.$n/24 dev eth
        ip -n ${ns}$h link set lo up
        ip -n ${ns}$h link set fab up
        ip -n ${ns}$h link set eth up
    done
}

client_rc=0; server_rc=0
if two_hosts; then
    echo "two hosts: fabric 192.0.2.0/24 (preferred), ethernet 198.51.100.0/24 (fallback)"
    ip netns exec ${ns}a env RAILOVER_RAILS=tcp@192.0.2.1,tcp@198.51.100.1 \
        "$demo" --listen "$dir/addr" --seconds 8 --switch-ms 0 &
    server=$!
    ip netns exec ${ns}b env RAILOVER_RAILS=tcp@192.0.2.2,tcp@198.51.100.2 \
        "$demo" --connect "$dir/addr" --seconds 8 --switch-ms 0 &
    client=$!
    sleep 2
    echo "demo: >>> fabric link DOWN"
    ip -n ${ns}a link set fab down
    sleep 2
    echo "demo: >>> fabric link UP"
    ip -n ${ns}a link set fab up
    wait $client || client_rc=$?
else
    export RAILOVER_RAILS=${RAILOVER_RAILS:-tcp@lo,tcp@127.0.0.1}
    echo "no network namespaces (not root?): loopback, switching rails every 2 s"
    echo "RAILOVER_RAILS=$RAILOVER_RAILS"
    "$demo" --listen "$dir/addr" --seconds 6 &
    server=$!
    "$demo" --connect "$dir/addr" --seconds 6 --switch-ms 2000 || client_rc=$?
fi
wait $server || server_rc=$?
if [ $client_rc -eq 0 ] && [ $server_rc -eq 0 ]; then echo "demo: OK, nothing lost"; else echo "demo: FAILED"; exit 1; fi
