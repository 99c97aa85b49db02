#!/usr/bin/env bash
# VM-tier job (one VM): rov_fd_release with the verbs rail in both setup
# modes.  oob: nothing of /dev/infiniband may remain after the contexts are
# destroyed; rdmacm: librdmacm's device contexts remain (why oob is the
# default for checkpointable jobs).
set -u
prog=${1:?usage: fd-release-job.sh PATH/rov_fd_release}
export RAILOVER_RAILS="verbs@$RDMA_DEV:$RDMA_PORT,tcp@lo"
status=0
echo "== RAILOVER_VERBS_CM=oob"
RAILOVER_VERBS_CM=oob "$prog" || status=1
if [ -e /usr/include/rdma/rdma_cma.h ] || ldd "$prog" | grep -q librdmacm; then
    echo "== RAILOVER_VERBS_CM=rdmacm"
    RAILOVER_VERBS_CM=rdmacm "$prog" --expect-held || status=1
fi
exit $status
