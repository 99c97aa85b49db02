# softroce_two_smoke (two VMs): ping over both links, then ibv_rc_pingpong
# between VM a (client) and VM b (server, started through rexec), with the
# out-of-band exchange over the eth link and RDMA over fabric (rxe0).
# Runs under vmrun --two; helpers and variables from tests/vm/guest-lib.sh.
set -u

# VM b has nothing of its own to do: its mailbox agent serves VM a.
[[ $ME == b ]] && exit 0

wait_peer || fail "VM $PEER did not come up"
for ip in "$PEER_FAB" "$PEER_ETH"; do
  busybox ping -q -c 3 -i 0.2 -w 15 "$ip" || fail "no ping reply from $ip"
done

pp=(ibv_rc_pingpong -d "$RDMA_DEV" -i "$RDMA_PORT" -g "$RDMA_GID_IDX" -m 1024 -n 100)
rexec "spawn pp_server timeout 60 ${pp[*]}" || fail "cannot start the server on $PEER"
rexec "wait_listen 18515 30" || { rexec "reap pp_server 1"; fail "the server on $PEER did not start"; }
log "client: ${pp[*]} $PEER_ETH"
timeout 60 "${pp[@]}" "$PEER_ETH"
crc=$?
log "server on $PEER:"
rexec "reap pp_server 30"
src=$?
((crc == 0 && src == 0)) || fail "ibv_rc_pingpong: client exit $crc, server exit $src"
log "PASS"
