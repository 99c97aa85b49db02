/*
 * The module: peers (add_procs/del_procs), descriptors, sends, finalize.
 */
#include "opal_config.h"

#include <string.h>

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"

#include "btl_railover.h"
#include "btl_railover_endpoint.h"

#define ADDR_MAX 4096           /* a larger modex entry is not a Railover address */
#define FINALIZE_WAIT_S 10      /* graceful closes at finalize take at most this */

static void frag_construct(mca_btl_railover_frag_t *frag)
{
    frag->base.des_segments = frag->segments;
    frag->base.des_segment_count = 1;
}

OBJ_CLASS_INSTANCE(mca_btl_railover_frag_t, mca_btl_base_descriptor_t, frag_construct, NULL);

/* ------------------------------------------------------------------------ */
/* Descriptors                                                               */

static mca_btl_railover_frag_t *frag_alloc(size_t size)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    opal_free_list_t *list;
    mca_btl_railover_frag_t *frag;

    if (size <= mca_btl_railover_module.super.btl_eager_limit)
        list = &c->eager_frags;
    else if (size <= mca_btl_railover_module.super.btl_max_send_size)
        list = &c->max_frags;
    else
        return NULL;
    frag = (mca_btl_railover_frag_t *) opal_free_list_get(list);
    if (OPAL_UNLIKELY(NULL == frag))
        return NULL;
    frag->list = list;
    frag->base.des_segment_count = 1;
    frag->segments[0].seg_addr.pval = frag->base.super.ptr;
    frag->segments[0].seg_len = size;
    frag->base.des_cbfunc = NULL;
    frag->base.des_cbdata = NULL;
    frag->base.des_context = NULL;
    frag->base.order = MCA_BTL_NO_ORDER;
    frag->endpoint = NULL;
    return frag;
}

void mca_btl_railover_frag_free(mca_btl_railover_frag_t *frag)
{
    opal_free_list_return(frag->list, &frag->base.super);
}

static mca_btl_base_descriptor_t *railover_alloc(mca_btl_base_module_t *btl,
                                                 mca_btl_base_endpoint_t *endpoint,
                                                 uint8_t order, size_t size, uint32_t flags)
{
    mca_btl_railover_frag_t *frag = frag_alloc(size);

    if (OPAL_UNLIKELY(NULL == frag))
        return NULL;
    frag->base.des_flags = flags;
    frag->endpoint = endpoint;
    return &frag->base;
}

static int railover_free(mca_btl_base_module_t *btl, mca_btl_base_descriptor_t *des)
{
    mca_btl_railover_frag_free((mca_btl_railover_frag_t *) des);
    return OPAL_SUCCESS;
}

/* The data goes behind the caller's reserve (ob1's header), packed into
 * the descriptor's buffer, or, when it is contiguous and large enough that
 * Railover would not copy it anyway, sent in place from the user's memory:
 * the header goes as the message's prefix (rov_send_params_t.prefix) and
 * Railover references the data until the peer has it, which is when ob1's
 * callback runs (ob1 calls prepare_src for the fragments of rendezvous and
 * pipelined messages, whose buffers it keeps until then).  A 1 MiB message
 * was packed 256 KiB at a time: one copy more than btl tcp (which sends in
 * place too), and about a third of the time of a 1 MiB ping-pong
 * (bench/README.md, "MPI as users run it").  No MCA_BTL_FLAGS_SEND_INPLACE:
 * with it ob1 would prepare eager sends too, and complete them only at the
 * peer's acknowledgement instead of at once. */
static mca_btl_base_descriptor_t *railover_prepare_src(mca_btl_base_module_t *btl,
                                                       mca_btl_base_endpoint_t *endpoint,
                                                       opal_convertor_t *convertor,
                                                       uint8_t order, size_t reserve,
                                                       size_t *size, uint32_t flags)
{
    size_t max = btl->btl_max_send_size;
    mca_btl_railover_frag_t *frag;
    struct iovec iov;
    uint32_t iov_count = 1;
    size_t max_data;

    if (OPAL_UNLIKELY(reserve > max))
        return NULL;
    if (*size > max - reserve)
        *size = max - reserve;
    if (reserve <= ROV_SEND_PREFIX_MAX &&
        reserve + *size > mca_btl_railover_component.limits.eager_limit &&
        !opal_convertor_need_buffers(convertor)) {
        frag = frag_alloc(reserve);
        if (OPAL_UNLIKELY(NULL == frag))
            return NULL;
        iov.iov_base = NULL;
        iov.iov_len = max_data = *size;
        if (OPAL_UNLIKELY(opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0)) {
            mca_btl_railover_frag_free(frag);
            return NULL;
        }
        *size = max_data;
        frag->segments[1].seg_addr.pval = iov.iov_base;
        frag->segments[1].seg_len = max_data;
        frag->base.des_segment_count = 2;
        frag->base.des_flags = flags;
        frag->endpoint = endpoint;
        return &frag->base;
    }
    frag = frag_alloc(reserve + *size);
    if (OPAL_UNLIKELY(NULL == frag))
        return NULL;
    iov.iov_base = (IOVBASE_TYPE *) ((unsigned char *) frag->segments[0].seg_addr.pval + reserve);
    iov.iov_len = max_data = *size;
    if (OPAL_UNLIKELY(opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0)) {
        mca_btl_railover_frag_free(frag);
        return NULL;
    }
    *size = max_data;
    frag->segments[0].seg_len = reserve + max_data;
    frag->base.des_flags = flags;
    frag->endpoint = endpoint;
    return &frag->base;
}

/* ------------------------------------------------------------------------ */
/* Sends                                                                     */

/* A send that btl_send reported as done (1): the callback only if asked
 * for, the descriptor back to us if we own it. */
static void frag_done_inline(mca_btl_railover_frag_t *frag)
{
    int own = frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;

    if ((frag->base.des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) && frag->base.des_cbfunc)
        frag->base.des_cbfunc(&mca_btl_railover_module.super, frag->endpoint, &frag->base,
                              OPAL_SUCCESS);
    if (own)
        mca_btl_railover_frag_free(frag);
}

static int railover_send(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                         mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag)
{
    mca_btl_railover_frag_t *frag = (mca_btl_railover_frag_t *) des;
    int rc;

    frag->endpoint = endpoint;
    frag->tag = tag;
    mca_btl_railover_lock();
    rc = mca_btl_railover_endpoint_send(endpoint, frag);
    mca_btl_railover_unlock();
    /* Completed at once (Railover copied it): callbacks outside the lock. */
    if (1 == rc)
        frag_done_inline(frag);
    return rc;
}

static int sendi_busy(mca_btl_base_endpoint_t *endpoint, size_t size, uint32_t flags,
                      mca_btl_base_descriptor_t **descriptor)
{
    if (NULL != descriptor)
        *descriptor = railover_alloc(&mca_btl_railover_module.super, endpoint,
                                     MCA_BTL_NO_ORDER, size, flags);
    return OPAL_ERR_RESOURCE_BUSY;
}

/* Header and payload go out together in one copied message: with sends
 * already waiting for window space on this peer (or no room for a
 * descriptor), ob1 gets a descriptor to queue behind them instead; a send
 * that finds the window full here waits in the peer's queue like any. */
static int railover_sendi(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                          opal_convertor_t *convertor, void *header, size_t header_size,
                          size_t payload_size, uint8_t order, uint32_t flags,
                          mca_btl_base_tag_t tag, mca_btl_base_descriptor_t **descriptor)
{
    size_t size = header_size + payload_size;
    mca_btl_railover_frag_t *frag;
    int rc;

    if (OPAL_UNLIKELY(size > btl->btl_eager_limit))
        return sendi_busy(endpoint, size, flags, descriptor);
    mca_btl_railover_lock();
    rc = mca_btl_railover_endpoint_can_send(endpoint);
    if (OPAL_SUCCESS != rc) {
        mca_btl_railover_unlock();
        return OPAL_ERR_RESOURCE_BUSY == rc ? sendi_busy(endpoint, size, flags, descriptor) : rc;
    }
    frag = frag_alloc(size);
    if (OPAL_UNLIKELY(NULL == frag)) {
        mca_btl_railover_unlock();
        return sendi_busy(endpoint, size, flags, descriptor);
    }
    memcpy(frag->segments[0].seg_addr.pval, header, header_size);
    if (payload_size > 0) {
        struct iovec iov = {
            .iov_base = (IOVBASE_TYPE *) ((unsigned char *) frag->segments[0].seg_addr.pval +
                                          header_size),
            .iov_len = payload_size,
        };
        uint32_t iov_count = 1;
        size_t max_data = payload_size;

        if (OPAL_UNLIKELY(opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0)) {
            mca_btl_railover_frag_free(frag);
            mca_btl_railover_unlock();
            return OPAL_ERROR;
        }
        frag->segments[0].seg_len = header_size + max_data;
    }
    frag->base.des_flags = flags | MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    frag->endpoint = endpoint;
    frag->tag = tag;
    rc = mca_btl_railover_endpoint_send(endpoint, frag);
    mca_btl_railover_unlock();
    /* Queued (OPAL_SUCCESS): freed when Railover is done with it. */
    if (1 == rc || rc < 0)
        mca_btl_railover_frag_free(frag);
    return rc < 0 ? rc : OPAL_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Peers                                                                     */

/* The peer's address blob from the modex; NULL (peer not reachable by us)
 * when it published none, or something that cannot be one. */
static void *peer_address(opal_proc_t *proc, size_t *len_p)
{
    void *blob = NULL;
    size_t len = 0;
    int rc;

    OPAL_MODEX_RECV(rc, &mca_btl_railover_component.super.btl_version, &proc->proc_name,
                    (void **) &blob, &len);
    if (OPAL_SUCCESS != rc || NULL == blob) {
        opal_output_verbose(10, mca_btl_railover_component.verbose,
                            "btl railover: %s published no railover address",
                            OPAL_NAME_PRINT(proc->proc_name));
        return NULL;
    }
    if (0 == len || len > ADDR_MAX) {
        opal_output(0, "btl railover: the railover address of %s is %zu bytes long: ignored",
                    OPAL_NAME_PRINT(proc->proc_name), len);
        free(blob);
        return NULL;
    }
    *len_p = len;
    return blob;
}

static int railover_add_procs(mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **procs,
                              mca_btl_base_endpoint_t **peers, opal_bitmap_t *reachable)
{
    opal_proc_t *me = opal_proc_local_get();

    for (size_t i = 0; i < nprocs; i++) {
        mca_btl_base_endpoint_t *ep;
        size_t len = 0;
        void *addr;

        peers[i] = NULL;
        if (procs[i] == me || 0 == opal_compare_proc(procs[i]->proc_name, me->proc_name))
            continue; /* btl self's */
        /* Outside the lock: a direct modex fetch may block (PMIx), and
         * other threads' progress must not wait for it. */
        addr = peer_address(procs[i], &len);
        if (NULL == addr)
            continue;
        mca_btl_railover_lock();
        ep = mca_btl_railover_endpoint_lookup(procs[i]->proc_name, true);
        if (NULL != ep)
            mca_btl_railover_endpoint_set_proc(ep, procs[i], addr, len);
        mca_btl_railover_unlock();
        if (NULL == ep) {
            free(addr);
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
        peers[i] = ep;
        if (NULL != reachable)
            opal_bitmap_set_bit(reachable, (int) i);
    }
    return OPAL_SUCCESS;
}

/* The peer is gone from ob1's view: its connection closes gracefully
 * (what was sent is delivered); the endpoint stays until finalize, since
 * Railover reports the close later. */
static int railover_del_procs(mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **procs,
                              mca_btl_base_endpoint_t **peers)
{

    mca_btl_railover_lock();
    for (size_t i = 0; i < nprocs; i++)
        if (NULL != peers[i])
            mca_btl_railover_endpoint_release(peers[i]);
    mca_btl_railover_unlock();
    return OPAL_SUCCESS;
}

static int railover_register_error(mca_btl_base_module_t *btl,
                                   mca_btl_base_module_error_cb_fn_t cbfunc)
{
    mca_btl_railover_module.error_cb = cbfunc;
    return OPAL_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Finalize                                                                  */

/* Close every connection gracefully and wait (bounded) until Railover has
 * delivered what they carried; then the context goes, with whatever is
 * left (a peer that died without closing). */
static int railover_finalize(mca_btl_base_module_t *btl)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    mca_btl_base_endpoint_t *ep, *next;
    double deadline;

    mca_btl_railover_lock();
    c->finalizing = true;
    OPAL_LIST_FOREACH (ep, &c->endpoints, mca_btl_base_endpoint_t)
        mca_btl_railover_endpoint_release(ep);
    deadline = mca_btl_railover_now() + FINALIZE_WAIT_S;
    while (c->conns > 0 && mca_btl_railover_now() < deadline)
        rov_context_wait(c->ctx, 10);
    if (c->conns > 0)
        opal_output_verbose(10, c->verbose,
                            "btl railover: %d connection(s) still closing at finalize",
                            c->conns);
    rov_endpoint_destroy(c->rov_ep);
    c->rov_ep = NULL;
    rov_context_destroy(c->ctx);
    c->ctx = NULL;
    mca_btl_railover_conns_forget_all();
    mca_btl_railover_complete_dead();
    mca_btl_railover_gets_failed(); /* finalizing: freed, not reported */
    OPAL_LIST_FOREACH_SAFE (ep, next, &c->endpoints, mca_btl_base_endpoint_t) {
        opal_list_remove_item(&c->endpoints, &ep->super);
        OBJ_RELEASE(ep);
    }
    opal_hash_table_remove_all(&c->peers);
    mca_btl_railover_unlock();
    return OPAL_SUCCESS;
}

mca_btl_railover_module_t mca_btl_railover_module = {
    .super = {
        .btl_component = &mca_btl_railover_component.super,
        .btl_add_procs = railover_add_procs,
        .btl_del_procs = railover_del_procs,
        .btl_finalize = railover_finalize,
        .btl_alloc = railover_alloc,
        .btl_free = railover_free,
        .btl_prepare_src = railover_prepare_src,
        .btl_send = railover_send,
        .btl_sendi = railover_sendi,
        .btl_dump = mca_btl_base_dump,
        .btl_register_error = railover_register_error,
    },
};
