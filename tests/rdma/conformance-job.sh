#!/usr/bin/env bash
# VM-tier job (one VM, tests/vm/): the rail conformance suite
# (tests/rail/conformance.sh) for an RDMA rail on the real rxe device, with
# the TCP rail on loopback as the second rail.  verbs-rdmacm: the verbs rail
# with its connections set up through librdmacm instead of out of band.
#   conformance-job.sh BUILD_DIR verbs|verbs-rdmacm|ucx [SCALE [--only CASE[,CASE]]]
set -u
build=${1:?usage: conformance-job.sh BUILD_DIR verbs|verbs-rdmacm|ucx [SCALE [--only CASES]]}
kind=${2:?usage: conformance-job.sh BUILD_DIR verbs|verbs-rdmacm|ucx [SCALE [--only CASES]]}
scale=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
case $kind in
verbs|verbs-rdmacm)
       rails="verbs@$RDMA_DEV:$RDMA_PORT,tcp@lo"
       [ "$kind" = verbs ] || export RAILOVER_VERBS_CM=rdmacm ;;
ucx)   rails="ucx@lo,tcp@127.0.0.1"
       # RC on the rxe device for data, TCP on loopback as UCX's auxiliary
       # lane; a finite retry count (7 retries for ever on rxe).
       export UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=$RDMA_DEV:$RDMA_PORT,lo
       export UCX_RC_VERBS_RETRY_COUNT=6 UCX_RC_VERBS_TIMEOUT=100ms ;;
*) echo "conformance-job.sh: unknown rail kind $kind" >&2; exit 64 ;;
esac
# TCG: connects (a UCX wire-up above all) can take longer than the suite's
# 300 ms silent-fault timeout.
export ROV_CONF_SILENT_TIMEOUT=${ROV_CONF_SILENT_TIMEOUT:-1s}
# A first UCX wire-up took over 1 s in CI: then the connection started on the
# TCP rail and fault_silent never met its fault.
export RAILOVER_CONNECT_TIMEOUT=${RAILOVER_CONNECT_TIMEOUT:-20s}
TMPDIR=$VMOUT exec "$here/../rail/conformance.sh" --build "$build" --rails "$rails" --scale "$scale" \
    "${@:4}"
