#!/usr/bin/env bash
# VM-tier job (one VM, tests/vm/): the hostile tier's listener cases
# (half-open, slowloris, garbage) against an RDMA rail's own listener
# (hostile_listener.py): the verbs rail's out-of-band setup listener, or
# UCX's connection manager; with verbs and ROV_CM_STRANGER, then the verbs
# rail's rdma_cm listener against a stranger's connect requests
# (hostile_cm.py), in the same VM.
#   hostile-job.sh ROV_STREAM verbs|ucx [ROV_CM_STRANGER]
set -u
stream=${1:?usage: hostile-job.sh ROV_STREAM verbs|ucx [ROV_CM_STRANGER]}
kind=${2:?usage: hostile-job.sh ROV_STREAM verbs|ucx [ROV_CM_STRANGER]}
stranger=${3:-}
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
export PYTHONDONTWRITEBYTECODE=1
$py "$here/hostile_listener.py" "$stream" "$kind" "$rails"
rc=$?
if [ "$kind" = verbs ] && [ -n "$stranger" ]; then
    unset RAILOVER_VERBS_CM
    $py "$here/hostile_cm.py" "$stream" "$stranger" || rc=1
fi
exit $rc
