/*
 * Endpoints and connections: one connection per peer, made on first use;
 * the peer's identity travels with the connection (connect-time data,
 * authenticated by Railover's handshake), so an accepted connection is
 * matched to its process without a message of ours.
 */
#include "opal_config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "opal/util/output.h"

#include "btl_railover.h"
#include "btl_railover_endpoint.h"

_Static_assert(sizeof(opal_process_name_t) == sizeof(uint64_t),
               "a process name is the 64-bit key of the peer table");

/* What a Railover connection's user pointer holds. */
typedef struct railover_conn {
    opal_list_item_t super;  /* in component.conn_list */
    mca_btl_base_endpoint_t *ep;
    rov_conn_t *conn;
    bool closing;            /* rov_conn_close() called: a failure now only ends the close */
} railover_conn_t;

static OBJ_CLASS_INSTANCE(railover_conn_t, opal_list_item_t, NULL, NULL);

static void endpoint_construct(mca_btl_base_endpoint_t *ep)
{
    ep->proc = NULL;
    ep->addr = NULL;
    ep->addr_len = 0;
    ep->conn = NULL;
    ep->conn_is_ours = false;
    ep->failed = false;
    ep->connect_deferred = false;
    ep->connect_again = 0;
    OBJ_CONSTRUCT(&ep->pending, opal_list_t);
}

static void endpoint_destruct(mca_btl_base_endpoint_t *ep)
{
    free(ep->addr);
    OBJ_DESTRUCT(&ep->pending);
    if (NULL != ep->proc)
        OBJ_RELEASE(ep->proc);
}

OBJ_CLASS_INSTANCE(mca_btl_base_endpoint_t, opal_list_item_t, endpoint_construct,
                   endpoint_destruct);

static uint64_t name_key(opal_process_name_t name)
{
    uint64_t key;

    memcpy(&key, &name, sizeof(key));
    return key;
}

mca_btl_base_endpoint_t *mca_btl_railover_endpoint_lookup(opal_process_name_t name, bool create)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    mca_btl_base_endpoint_t *ep = NULL;

    if (OPAL_SUCCESS == opal_hash_table_get_value_uint64(&c->peers, name_key(name), (void **) &ep))
        return ep;
    if (!create)
        return NULL;
    ep = OBJ_NEW(mca_btl_base_endpoint_t);
    if (NULL == ep)
        return NULL;
    ep->name = name;
    if (OPAL_SUCCESS != opal_hash_table_set_value_uint64(&c->peers, name_key(name), ep)) {
        OBJ_RELEASE(ep);
        return NULL;
    }
    opal_list_append(&c->endpoints, &ep->super);
    return ep;
}

void mca_btl_railover_endpoint_set_proc(mca_btl_base_endpoint_t *ep, opal_proc_t *proc,
                                        void *addr, size_t addr_len)
{
    if (ep->proc != proc) {
        OBJ_RETAIN(proc);
        if (NULL != ep->proc)
            OBJ_RELEASE(ep->proc);
        ep->proc = proc;
    }
    free(ep->addr);
    ep->addr = addr;
    ep->addr_len = addr_len;
}

static const char *peer_host(const mca_btl_base_endpoint_t *ep)
{
    const char *host = NULL;

    if (NULL != ep->proc)
        host = opal_get_proc_hostname(ep->proc);
    return NULL != host ? host : "an unknown host";
}

/* ------------------------------------------------------------------------ */
/* Completions                                                               */

/* A frag btl_send took (OPAL_SUCCESS) is done: its callback, always, then
 * back to the free list if the BTL owns it.  After finalize began ob1 is
 * gone: only the free. */
static void frag_complete(mca_btl_railover_frag_t *frag, int status)
{
    int own = frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;

    if (NULL != frag->base.des_cbfunc && !mca_btl_railover_component.finalizing)
        frag->base.des_cbfunc(&mca_btl_railover_module.super, frag->endpoint, &frag->base,
                              status);
    if (own)
        mca_btl_railover_frag_free(frag);
}

/* Railover's send completion of a zero-copy send: the peer has it; or the
 * connection failed, and Railover reports its sends before the failure
 * itself (ROV_EVENT_CONN_ERROR, with the reason): ob1 aborts on a send that
 * failed, so these wait until progress returns, after the BTL's message. */
static void frag_sent(void *arg, rov_status_t status)
{
    mca_btl_railover_frag_t *frag = arg;

    if (OPAL_LIKELY(ROV_OK == status) || mca_btl_railover_component.finalizing)
        frag_complete(frag, ROV_OK == status ? OPAL_SUCCESS : OPAL_ERR_UNREACH);
    else
        opal_list_append(&mca_btl_railover_component.dead_frags, &frag->base.super.super);
}

static void pending_fail(mca_btl_base_endpoint_t *ep, int status)
{
    opal_list_item_t *item;

    while (NULL != (item = opal_list_remove_first(&ep->pending))) {
        mca_btl_railover_component.npending--;
        frag_complete((mca_btl_railover_frag_t *) item, status);
    }
}

/* ------------------------------------------------------------------------ */
/* Failures                                                                  */

static void rails_list(char *buf, size_t len)
{
    rov_context_t *ctx = mca_btl_railover_component.ctx;
    size_t off = 0;

    buf[0] = '\0';
    for (int i = 0; i < rov_context_rail_count(ctx) && off < len; i++)
        off += (size_t) snprintf(buf + off, len - off, "%s%s", i ? ", " : "",
                                 rov_context_rail_name(ctx, i));
}

/* Every rail to the peer is gone: the one failure ob1 hears of.  The help
 * message names both ends and the rails; ob1's error callback ends the job
 * (its handler aborts), which is better than a hang. */
static void endpoint_fail(mca_btl_base_endpoint_t *ep, rov_status_t status, const char *why)
{
    mca_btl_railover_module_t *m = &mca_btl_railover_module;
    char rails[512], info[256];

    if (ep->failed)
        return;
    ep->failed = true;
    rails_list(rails, sizeof(rails));
    mca_btl_railover_show_help("peer unreachable", opal_process_info.nodename,
                               OPAL_NAME_PRINT(OPAL_PROC_MY_NAME),
                               (unsigned) OPAL_PROC_MY_NAME.vpid, peer_host(ep),
                               OPAL_NAME_PRINT(ep->name), (unsigned) ep->name.vpid,
                               rov_status_str(status), why ? why : "", rails);
    pending_fail(ep, OPAL_ERR_UNREACH);
    if (NULL != m->error_cb) {
        snprintf(info, sizeof(info), "btl railover: every rail to %s on %s failed (%s)",
                 OPAL_NAME_PRINT(ep->name), peer_host(ep), rov_status_str(status));
        m->error_cb(&m->super, MCA_BTL_ERROR_FLAGS_FATAL, ep->proc, info);
    }
}

void mca_btl_railover_complete_dead(void)
{
    opal_list_item_t *item;

    while (NULL != (item = opal_list_remove_first(&mca_btl_railover_component.dead_frags))) {
        mca_btl_railover_frag_t *frag = (mca_btl_railover_frag_t *) item;

        if (!mca_btl_railover_component.finalizing)
            endpoint_fail(frag->endpoint, ROV_ERR_CLOSED, "a send was not delivered");
        frag_complete(frag, OPAL_ERR_UNREACH);
    }
}

/* ------------------------------------------------------------------------ */
/* Connections                                                               */

static void conn_forget(railover_conn_t *rc, rov_conn_t *conn)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;

    if (NULL == rc)
        return;
    if (NULL != rc->ep && rc->ep->conn == conn)
        rc->ep->conn = NULL;
    c->conns--;
    opal_list_remove_item(&c->conn_list, &rc->super);
    OBJ_RELEASE(rc);
}

/* Graceful: what was sent on it is still delivered. */
static void conn_close(rov_conn_t *conn)
{
    railover_conn_t *rc = rov_conn_get_user(conn);

    if (NULL != rc) {
        rc->closing = true;
        if (NULL != rc->ep && rc->ep->conn == conn)
            rc->ep->conn = NULL;
    }
    if (ROV_OK == rov_conn_close(conn))
        conn_forget(rc, conn); /* freed at once: no CLOSED event comes */
}

static railover_conn_t *conn_record(mca_btl_base_endpoint_t *ep)
{
    railover_conn_t *rc = OBJ_NEW(railover_conn_t);

    if (NULL != rc) {
        rc->ep = ep;
        rc->conn = NULL;
        rc->closing = false;
        opal_list_append(&mca_btl_railover_component.conn_list, &rc->super);
        mca_btl_railover_component.conns++;
    }
    return rc;
}

/* A send Railover could not take now but may later: its window is full
 * (ROV_ERR_AGAIN), or this process is short of memory or another local
 * resource.  Neither says anything about the peer: the send waits, in
 * order, and never reports the peer unreachable. */
static bool send_later(rov_status_t st)
{
    return ROV_ERR_AGAIN == st || ROV_ERR_NOMEM == st || ROV_ERR_RESOURCE == st;
}

/* A connect deferred by a local limit is tried again this much later. */
#define CONNECT_AGAIN_S 0.1

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

static int endpoint_connect(mca_btl_base_endpoint_t *ep)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    opal_process_name_t me = OPAL_PROC_MY_NAME;
    rov_connect_params_t params = {.data = &me, .data_len = sizeof(me)};
    rov_status_t st;

    if (NULL == ep->addr)
        return OPAL_ERR_UNREACH;
    if (ep->connect_deferred && now_s() < ep->connect_again)
        return OPAL_ERR_OUT_OF_RESOURCE;
    params.user = conn_record(ep);
    if (NULL == params.user)
        return OPAL_ERR_OUT_OF_RESOURCE;
    st = rov_conn_connect_ex(c->rov_ep, ep->addr, ep->addr_len, &params, &ep->conn);
    ((railover_conn_t *) params.user)->conn = ep->conn;
    if (ROV_OK != st) {
        ep->conn = NULL;
        conn_forget(params.user, NULL);
        if (send_later(st)) {
            /* Out of memory or descriptors here (EMFILE): nothing is
             * known of the peer, so the sends wait and progress tries
             * again; the user hears why, once. */
            if (!ep->connect_deferred)
                opal_output(0, "btl railover: cannot connect to %s on %s yet: %s; "
                            "its sends wait and the connect is retried",
                            OPAL_NAME_PRINT(ep->name), peer_host(ep), rov_status_str(st));
            ep->connect_deferred = true;
            ep->connect_again = now_s() + CONNECT_AGAIN_S;
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
        endpoint_fail(ep, st, "the connection could not be started");
        return OPAL_ERR_UNREACH;
    }
    ep->connect_deferred = false;
    ep->conn_is_ours = true;
    opal_output_verbose(20, c->verbose, "btl railover: connecting to %s on %s",
                        OPAL_NAME_PRINT(ep->name), peer_host(ep));
    return OPAL_SUCCESS;
}

static void conn_reject(rov_conn_t *conn, const char *why)
{
    opal_output(0, "btl railover on %s: refused a connection: %s", opal_process_info.nodename,
                why);
    rov_conn_set_user(conn, NULL);
    rov_conn_close(conn);
}

/* Two processes that connect to each other at once end with the connection
 * the lower name made: the higher one closes its own (gracefully, so what
 * it sent there still arrives; ob1 puts fragments back in order by its
 * sequence numbers) and sends on the accepted one.  The lower one keeps
 * receiving on the loser until the peer's close reaches it. */
static void conn_accepted(rov_conn_t *conn)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    opal_process_name_t name;
    mca_btl_base_endpoint_t *ep;
    railover_conn_t *rc;
    const void *data;
    rov_status_t st;
    size_t len = 0;

    data = rov_conn_data(conn, &len);
    if (len != sizeof(name)) {
        conn_reject(conn, "the peer named no MPI process");
        return;
    }
    memcpy(&name, data, sizeof(name));
    if (0 == opal_compare_proc(name, OPAL_PROC_MY_NAME)) {
        conn_reject(conn, "the peer claims to be this process");
        return;
    }
    ep = mca_btl_railover_endpoint_lookup(name, true);
    rc = ep ? conn_record(ep) : NULL;
    if (NULL == rc) {
        conn_reject(conn, "out of memory");
        return;
    }
    rc->conn = conn;
    rov_conn_set_user(conn, rc);
    if (NULL == ep->conn) {
        ep->conn = conn;
        ep->conn_is_ours = false;
        opal_output_verbose(20, c->verbose, "btl railover: accepted a connection from %s",
                            OPAL_NAME_PRINT(name));
    } else if (ep->conn_is_ours && opal_compare_proc(name, OPAL_PROC_MY_NAME) < 0) {
        rov_conn_t *ours = ep->conn;

        railover_conn_t *ours_rc = rov_conn_get_user(ours);

        ep->conn = conn;
        ep->conn_is_ours = false;
        /* Ours has not connected yet (its rail may be the one that is
         * dead): what ob1 sent on it goes out on the peer's at once,
         * instead of after our connect's timeout. */
        if (NULL != ours_rc)
            ours_rc->closing = true;
        st = rov_conn_hand_over(ours, conn);
        if (ROV_OK == st)
            conn_forget(ours_rc, ours); /* ended at once: no CLOSED event comes */
        if (ROV_OK == st || ROV_INPROGRESS == st) {
            opal_output_verbose(20, c->verbose,
                                "btl railover: %s and this process connected at once; "
                                "keeping its connection, ours (not connected yet) handed "
                                "its sends over", OPAL_NAME_PRINT(name));
        } else {
            opal_output_verbose(20, c->verbose,
                                "btl railover: %s and this process connected at once; "
                                "keeping its connection, closing ours",
                                OPAL_NAME_PRINT(name));
            conn_close(ours);
        }
    } else {
        opal_output_verbose(20, c->verbose,
                            "btl railover: %s and this process connected at once; "
                            "its connection receives until it closes it",
                            OPAL_NAME_PRINT(name));
    }
}

static void conn_failed(const rov_event_t *e)
{
    railover_conn_t *rc = rov_conn_get_user(e->conn);

    /* Only the connection sends use speaks for the peer: the loser of a
     * simultaneous connect, receiving until the peer closes it, may fail
     * while the one kept works. */
    if (NULL != rc && NULL != rc->ep && !rc->closing && rc->ep->conn == e->conn &&
        !mca_btl_railover_component.finalizing)
        endpoint_fail(rc->ep, e->status, e->reason);
    else if (NULL != rc && NULL != rc->ep)
        opal_output_verbose(10, mca_btl_railover_component.verbose,
                            "btl railover: the close of the connection to %s ended with %s",
                            OPAL_NAME_PRINT(rc->ep->name), rov_status_str(e->status));
    conn_close(e->conn);
}

static const char *rail_name(int rail)
{
    return rail >= 0 ? rov_context_rail_name(mca_btl_railover_component.ctx, rail) : "none";
}

static const char *conn_peer(rov_conn_t *conn)
{
    railover_conn_t *rc = rov_conn_get_user(conn);

    return NULL != rc && NULL != rc->ep ? OPAL_NAME_PRINT(rc->ep->name) : "(unknown)";
}

/* Railover's events, inside rov_progress(): rail switches are Railover's
 * business (logged, not reported); the end of every rail is ob1's. */
void mca_btl_railover_event(void *arg, const rov_event_t *e)
{
    int out = mca_btl_railover_component.verbose;

    switch (e->type) {
    case ROV_EVENT_CONN_ACCEPTED:
        conn_accepted(e->conn);
        break;
    case ROV_EVENT_CONN_ESTABLISHED:
        opal_output_verbose(20, out, "btl railover: connected to %s on %s", conn_peer(e->conn),
                            rail_name(rov_conn_rail(e->conn)));
        break;
    case ROV_EVENT_CONN_RAIL_SWITCH:
        opal_output_verbose(10, out, "btl railover: connection to %s moved from %s to %s (%s)",
                            conn_peer(e->conn), rail_name(e->rail_from), rail_name(e->rail_to),
                            rov_reason_str(e->code));
        break;
    case ROV_EVENT_CONN_RAIL_DOWN:
        opal_output_verbose(10, out, "btl railover: rail %s to %s is down: %s (%s)",
                            rail_name(e->rail_from), conn_peer(e->conn),
                            rov_status_str(e->status), e->reason ? e->reason : "");
        break;
    case ROV_EVENT_CONN_PEER_CLOSED:
        conn_close(e->conn);
        break;
    case ROV_EVENT_CONN_CLOSED:
        conn_forget(rov_conn_get_user(e->conn), e->conn);
        break;
    case ROV_EVENT_CONN_ERROR:
        conn_failed(e);
        break;
    case ROV_EVENT_CONTEXT_QUIESCED:
    case ROV_EVENT_ENDPOINT_ADDRESS:
    case ROV_EVENT_CONTEXT_RESUMED:
        /* Checkpoint stages, driven from the control socket: ob1 sees only
         * a delay (sends are held meanwhile). */
        opal_output_verbose(10, out, "btl railover: %s", e->reason);
        break;
    case ROV_EVENT_CONN_BOND:
        /* A rail joined or left the bond: ob1 sees only the bandwidth. */
        opal_output_verbose(20, out, "btl railover: rail %d %s the bond (%s)",
                            e->rail_to >= 0 ? e->rail_to : e->rail_from,
                            e->rail_to >= 0 ? "joined" : "left", e->reason);
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Sends and receives                                                        */

int mca_btl_railover_endpoint_can_send(mca_btl_base_endpoint_t *ep)
{
    if (OPAL_UNLIKELY(ep->failed))
        return OPAL_ERR_UNREACH;
    if (OPAL_UNLIKELY(NULL == ep->conn)) {
        int rc;

        /* ob1 sends from its receive callbacks (a collective forwarding to
         * the next rank); inside rov_progress() railover.h allows sends and
         * closes, not connects: the frag waits for progress to return. */
        if (mca_btl_railover_component.in_progress)
            return OPAL_ERR_RESOURCE_BUSY;
        rc = endpoint_connect(ep);
        if (OPAL_ERR_OUT_OF_RESOURCE == rc)
            return OPAL_ERR_RESOURCE_BUSY; /* queued; connected from progress */
        if (OPAL_SUCCESS != rc)
            return rc;
    }
    return opal_list_is_empty(&ep->pending) ? OPAL_SUCCESS : OPAL_ERR_RESOURCE_BUSY;
}

static void pending_add(mca_btl_base_endpoint_t *ep, mca_btl_railover_frag_t *frag)
{
    opal_list_append(&ep->pending, &frag->base.super.super);
    mca_btl_railover_component.npending++;
}

/* One send into Railover.  Up to RAILOVER_EAGER_LIMIT it copies (ROV_OK);
 * above, it keeps a reference to the descriptor's buffer until the peer
 * has the data (ROV_INPROGRESS, then frag_sent). */
static rov_status_t frag_try(mca_btl_base_endpoint_t *ep, mca_btl_railover_frag_t *frag)
{
    rov_send_params_t params = {.cb = frag_sent, .arg = frag};
    const mca_btl_base_segment_t *data = &frag->segments[0];
    rov_status_t st;

    if (2 == frag->base.des_segment_count) {
        /* Sent in place: ob1's header first, then the user's data. */
        params.prefix = frag->segments[0].seg_addr.pval;
        params.prefix_len = frag->segments[0].seg_len;
        data = &frag->segments[1];
    }
    st = rov_conn_send(ep->conn, frag->tag, data->seg_addr.pval, data->seg_len, &params);
    if (OPAL_UNLIKELY(ROV_OK != st && ROV_INPROGRESS != st && !send_later(st)))
        opal_output(0, "btl railover: send of %zu bytes to %s refused: %s",
                    (size_t) (params.prefix_len + data->seg_len), OPAL_NAME_PRINT(ep->name),
                    rov_status_str(st));
    return st;
}

int mca_btl_railover_endpoint_send(mca_btl_base_endpoint_t *ep, mca_btl_railover_frag_t *frag)
{
    int rc = mca_btl_railover_endpoint_can_send(ep);

    if (OPAL_ERR_RESOURCE_BUSY == rc) {
        pending_add(ep, frag); /* behind the others, in order */
        return OPAL_SUCCESS;
    }
    if (OPAL_SUCCESS != rc)
        return rc;
    switch (frag_try(ep, frag)) {
    case ROV_OK:
        return 1;
    case ROV_INPROGRESS:
        return OPAL_SUCCESS;
    case ROV_ERR_AGAIN: /* window full: sent from progress when acks free it */
    case ROV_ERR_NOMEM: /* short of memory here: tried again from progress */
    case ROV_ERR_RESOURCE:
        pending_add(ep, frag);
        return OPAL_SUCCESS;
    case ROV_ERR_MSGSIZE:
        /* The peer accepts less (its RAILOVER_MAX_MSG is smaller): ob1
         * would retry the fragment for ever, so the job ends, saying why. */
        endpoint_fail(ep, ROV_ERR_MSGSIZE,
                      "a fragment larger than the peer's btl_railover_max_msg "
                      "(RAILOVER_MAX_MSG): set the same value on every rank");
        return OPAL_ERR_UNREACH;
    default:
        return OPAL_ERR_UNREACH;
    }
}

/* From progress, after rov_progress() returned: sends that found the
 * window full, or no connection inside a callback, go out in order as far
 * as the window now allows. */
void mca_btl_railover_flush_pending(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    mca_btl_base_endpoint_t *ep;

    OPAL_LIST_FOREACH (ep, &c->endpoints, mca_btl_base_endpoint_t) {
        opal_list_item_t *item;

        if (NULL == ep->conn && !ep->failed && !opal_list_is_empty(&ep->pending)) {
            int rc = endpoint_connect(ep);

            if (OPAL_ERR_OUT_OF_RESOURCE == rc)
                continue; /* a local limit: the next progress tries again */
            if (OPAL_SUCCESS != rc) {
                pending_fail(ep, OPAL_ERR_UNREACH); /* endpoint_fail said why */
                continue;
            }
        }
        while (NULL != ep->conn && !ep->failed &&
               (item = opal_list_get_first(&ep->pending)) != opal_list_get_end(&ep->pending)) {
            mca_btl_railover_frag_t *frag = (mca_btl_railover_frag_t *) item;
            rov_status_t st = frag_try(ep, frag);

            if (send_later(st))
                break;
            opal_list_remove_item(&ep->pending, item);
            c->npending--;
            if (ROV_OK == st)
                frag_complete(frag, OPAL_SUCCESS);
            else if (ROV_INPROGRESS != st)
                frag_complete(frag, OPAL_ERR_UNREACH);
        }
    }
}

/* After the context is destroyed: the records of connections it freed
 * without a CLOSED event (a close that had not finished). */
void mca_btl_railover_conns_forget_all(void)
{
    opal_list_item_t *item;

    while (NULL != (item = opal_list_remove_first(&mca_btl_railover_component.conn_list))) {
        mca_btl_railover_component.conns--;
        OBJ_RELEASE(item);
    }
}

void mca_btl_railover_endpoint_release(mca_btl_base_endpoint_t *ep)
{
    /* Sends still waiting (none in a correct program, whose finalize
     * drains them first) complete as failed: ob1 never waits for them. */
    pending_fail(ep, OPAL_ERR_UNREACH);
    if (NULL != ep->conn)
        conn_close(ep->conn);
    if (NULL != ep->proc) {
        OBJ_RELEASE(ep->proc);
        ep->proc = NULL;
    }
}

/* A message from a peer: handed to the callback ob1 registered for its tag,
 * in place (Railover's buffer is valid during the call). */
void mca_btl_railover_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data,
                           size_t len)
{
    railover_conn_t *rc = rov_conn_get_user(conn);
    mca_btl_active_message_callback_t *reg;
    mca_btl_base_segment_t seg = {.seg_addr.pval = (void *) data, .seg_len = len};
    mca_btl_base_descriptor_t des = {.des_segments = &seg, .des_segment_count = 1};

    if (OPAL_UNLIKELY(NULL == rc || mca_btl_railover_component.finalizing))
        return;
    if (OPAL_UNLIKELY(tag >= MCA_BTL_TAG_MAX ||
                      NULL == mca_btl_base_active_message_trigger[tag].cbfunc)) {
        opal_output(0, "btl railover: a message from %s with tag %u, which nobody handles, "
                    "was dropped", conn_peer(conn), tag);
        return;
    }
    reg = &mca_btl_base_active_message_trigger[tag];
    reg->cbfunc(&mca_btl_railover_module.super, (mca_btl_base_tag_t) tag, &des, reg->cbdata);
}
