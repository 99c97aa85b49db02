#!/usr/bin/env bash
# VM-tier job (one VM, tests/vm/): the hostile tier's listener cases
# (half-open, slowloris, garbage) against an RDMA rail's own listener
# (hostile_listener.py): the verbs rail's out-of-band setup listener, or
# UCX's connection manager.
#   hostile-job.sh ROV_STREAM verbs|ucx
set -u
stream=${1:?usage: hostile-job.sh ROV_STREAM verbs|ucx}
kind=${2:?usage: hostile-job.sh ROV_STREAM verbs|ucx}
here=$(cd "$(dirname "$0")" && pwd)
case $kind in
verbs) rails="verbs@$RDMA_DEV:$RDMA_PORT"; export RAILOVER_VERBS_CM=oob ;;
ucx)   rails="ucx@lo"
       export UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=$RDMA_DEV:$RDMA_PORT,lo
       export UCX_RC_VERBS_RETRY_COUNT=6 UCX_RC_VERBS_TIMEOUT=100ms ;;
*) echo "hostile-job.sh: unknown rail kind $kind" >&2; exit 64 ;;
esac
py=/usr/bin/python3
[ -x $py ] || py=python3
PYTHONDONTWRITEBYTECODE=1 exec $py "$here/hostile_listener.py" "$stream" "$kind" "$rails"
