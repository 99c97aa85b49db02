#include "railover/railover.h"

const char *rov_version(void)
{
    return ROV_VERSION_STRING;
}

const char *rov_status_str(rov_status_t status)
{
    switch (status) {
    case ROV_OK: return "ok";
    case ROV_INPROGRESS: return "in progress";
    case ROV_ERR_NOMEM: return "out of memory";
    case ROV_ERR_INVAL: return "invalid argument";
    case ROV_ERR_AGAIN: return "window full, retry after progress";
    case ROV_ERR_IO: return "input/output error";
    case ROV_ERR_PROTO: return "protocol violation by peer";
    case ROV_ERR_CLOSED: return "connection closed";
    case ROV_ERR_UNREACHABLE: return "peer unreachable";
    case ROV_ERR_REFUSED: return "connection refused";
    case ROV_ERR_RESET: return "connection reset";
    case ROV_ERR_TIMEDOUT: return "timed out";
    case ROV_ERR_MSGSIZE: return "message too large";
    case ROV_ERR_NOT_FOUND: return "not found";
    case ROV_ERR_UNSUPPORTED: return "not supported";
    case ROV_ERR_BUSY: return "busy";
    case ROV_ERR_CANCELED: return "canceled";
    case ROV_ERR_RESOURCE: return "out of a local resource (file descriptors)";
    }
    return "unknown status";
}

static const char *const reason_names[ROV_REASON_COUNT] = {
    [ROV_REASON_NONE] = "none",
    [ROV_REASON_API] = "api",
    [ROV_REASON_FAIL_ERROR] = "failover.error",
    [ROV_REASON_FAIL_RESET] = "failover.error.reset",
    [ROV_REASON_FAIL_CLOSED] = "failover.error.closed",
    [ROV_REASON_FAIL_UNREACH] = "failover.error.unreachable",
    [ROV_REASON_FAIL_STALL] = "failover.stall",
    [ROV_REASON_FAIL_KEEPALIVE] = "failover.stall.keepalive",
    [ROV_REASON_FAIL_INJECTED] = "failover.injected",
    [ROV_REASON_FAILBACK] = "failback",
    [ROV_REASON_ADMIN_FORCE] = "admin.force",
    [ROV_REASON_ADMIN_RELEASE] = "admin.release",
    [ROV_REASON_PEER_FAILOVER] = "peer.failover",
    [ROV_REASON_PEER_FAILBACK] = "peer.failback",
    [ROV_REASON_PEER_ADMIN] = "peer.admin",
    [ROV_REASON_PEER_API] = "peer.api",
    [ROV_REASON_REOPEN] = "reopen",
    [ROV_REASON_PEER_REOPEN] = "peer.reopen",
    [ROV_REASON_FAIL_LINK] = "failover.link",
};

const char *rov_reason_str(rov_reason_t reason)
{
    return (unsigned)reason < ROV_REASON_COUNT ? reason_names[reason] : "unknown";
}
