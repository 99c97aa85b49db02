#!/usr/bin/env bash
# VM-tier job (one VM): rov_rdma_get with the verbs rail on rxe0 first and
# TCP on loopback second, in both connection setup modes of the verbs rail.
set -u
prog=${1:?usage: get-job.sh PATH/rov_rdma_get}
export RAILOVER_RAILS="verbs@$RDMA_DEV:$RDMA_PORT,tcp@lo"
export RAILOVER_LOG=${RAILOVER_LOG:-warn}
# The bad-key case waits for failback: keep it short under TCG.
export RAILOVER_FAILBACK_DWELL=200ms RAILOVER_FAILBACK_RETRY=20ms RAILOVER_FAILBACK_RETRY_MAX=200ms
status=0
echo "== RAILOVER_VERBS_CM=oob"
RAILOVER_VERBS_CM=oob "$prog" || status=1
if [ -e /usr/include/rdma/rdma_cma.h ] || ldd "$prog" | grep -q librdmacm; then
    echo "== RAILOVER_VERBS_CM=rdmacm"
    RAILOVER_VERBS_CM=rdmacm "$prog" || status=1
fi
exit $status
