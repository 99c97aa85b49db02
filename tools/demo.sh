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
# Then, with Open MPI and the BTL built, the same fault under an MPI job:
# two ranks, one per host, `mpirun --mca pml ob1 --mca btl self,railover`.
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

# 2 s from now the fabric link goes down, 2 s later it comes back.
fabric_down_up() {
    sleep 2
    echo "demo: >>> fabric link DOWN"
    ip -n ${ns}a link set fab down
    sleep 2
    echo "demo: >>> fabric link UP"
    ip -n ${ns}a link set fab up
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
    fabric_down_up
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

# Part two, with Open MPI and the two hosts: an unmodified MPI program (two
# ranks, one per host, exchanging checked messages for 8 s) over the BTL
# component, `mpirun --mca btl self,railover`; the fabric goes down after
# 2 s and comes back after 4 s, and the job goes on.  mpirun starts the
# remote rank through an agent that enters the other namespace; Open MPI's
# own traffic stays on the ethernet link.
btl=$build/mpi-btl/mca_btl_railover.so
app=$build/tests/mpi/rov_mpi_check
pkglib=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
if ! ip netns list | grep -q "^${ns}a" || [ ! -e "$btl" ] || [ ! -x "$app" ] || [ -z "$pkglib" ]; then
    echo "demo: no MPI part (needs root, Open MPI with libopenmpi-dev, and the BTL built)"
    exit 0
fi
ip -n ${ns}a link set fab up
printf '198.51.100.1 slots=1\n198.51.100.2 slots=1\n' > "$dir/hosts"
cat > "$dir/agent" <<AGENT
#!/bin/sh
case \$1 in 198.51.100.1) ns=${ns}a ;; 198.51.100.2) ns=${ns}b ;; *) exit 1 ;; esac
shift
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod 700 "$dir/agent"
echo
echo "MPI: mpirun -np 2 --mca pml ob1 --mca btl self,railover (one rank per host)"
ip netns exec ${ns}a env OMPI_MCA_mca_base_component_path="$pkglib:$(dirname "$btl")" \
    ROV_MPI_SOAK_S=8 RAILOVER_LOG=warn \
    mpirun --allow-run-as-root --hostfile "$dir/hosts" -np 2 --map-by node \
    --mca plm_rsh_agent "$dir/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include 198.51.100.0/24 \
    --mca pml ob1 --mca btl self,railover --mca btl_base_verbose 10 \
    --mca btl_railover_rails tcp@fab,tcp@eth --mca btl_railover_failback_dwell 1s \
    "$app" soak > "$dir/mpi.out" 2>&1 &
job=$!
for _ in $(seq 1 600); do grep -q "soak: started" "$dir/mpi.out" && break; sleep 0.1; done
fabric_down_up
mpi_rc=0
wait $job || mpi_rc=$?
grep -E "moved from|soak: (started|[0-9]+ rounds)|PASSED|FAILED" "$dir/mpi.out" | sed 's/^/MPI: /'
if [ $mpi_rc -eq 0 ] && grep -q "PASSED" "$dir/mpi.out"; then
    echo "demo: MPI job OK across the failure"
else
    echo "demo: MPI job FAILED (exit $mpi_rc):"; tail -n 30 "$dir/mpi.out"; exit 1
fi
