# softroce_smoke (one VM): rxe0 exists, its port is ACTIVE, and RC traffic
# flows (ibv_rc_pingpong, server and client on rxe0: rxe talks to its own GID
# through its loopback path).  Runs under vmrun; the helpers (log, fail,
# spawn, reap, wait_listen) and $RDMA_DEV & co. come from tests/vm/guest-lib.sh.
set -u

devs=$(ibv_devices) || fail "ibv_devices failed"
[[ $devs == *"$RDMA_DEV"* ]] || fail "ibv_devices does not list $RDMA_DEV: $devs"
log "ibv_devices lists $RDMA_DEV"
info=$(ibv_devinfo -d "$RDMA_DEV") || fail "ibv_devinfo -d $RDMA_DEV failed"
[[ $info == *PORT_ACTIVE* ]] || fail "$RDMA_DEV port is not active: $info"
log "ibv_devinfo -d $RDMA_DEV: PORT_ACTIVE"

# GID index 1 (IPv4-mapped RoCEv2) and MTU 1024 are required on rxe.
pp=(ibv_rc_pingpong -d "$RDMA_DEV" -i "$RDMA_PORT" -g "$RDMA_GID_IDX" -m 1024 -n 100)
spawn pp_server timeout 60 "${pp[@]}"
wait_listen 18515 30 || { reap pp_server 1; fail "the pingpong server did not start"; }
log "client: ${pp[*]} 127.0.0.1"
timeout 60 "${pp[@]}" 127.0.0.1
crc=$?
log "server:"
reap pp_server 30
src=$?
((crc == 0 && src == 0)) || fail "ibv_rc_pingpong: client exit $crc, server exit $src"
log "PASS"
