/*
 * RDMA get, where a rail reads remote memory (verbs): ob1's RGET protocol
 * for messages above the eager limit.  The sender registers its buffer and
 * sends its key in the rendezvous header; the receiver reads the data
 * straight into its own buffer (rov_conn_get()) and ob1 tells the sender
 * it is done (FIN).  No copy and no fragmenting on either side.
 *
 * A connection that is not on such a rail now (it failed over to TCP, or
 * the peer has no verbs rail), and a read whose rail failed under it,
 * complete the get with an error: ob1 answers that by asking the sender
 * for the region by send (pml_ob1_recvreq.c, get_frag_failed), which goes
 * over whatever rail the connection is on and fails over like any send.
 * The job sees nothing of it.  Such failures are completed from progress,
 * never inside btl_get (ob1 does not expect its callback there).
 *
 * Memory Railover cannot register (out of memory, a rail's registration
 * failing) takes the same way: register_mem never answers NULL.  To ob1
 * 4.1, NULL means "no RDMA for this message", and it then moves a
 * contiguous message by its RDMA pipeline, where the receiver asks the
 * sender to *put* (pml_ob1_recvreq.c, recv_request_ack): this BTL has no
 * put, and ob1 calls btl_put regardless.  So a failed registration gets a
 * handle that names none (unregistered), the get of it fails, and ob1 sends
 * that message instead (mpi_register_fault).
 */
#include "opal_config.h"

#include <stdlib.h>

#include "opal/util/output.h"

#include "btl_railover.h"

/* What ob1 sends to the peer is the key (handle); the registration is ours. */
struct mca_btl_base_registration_handle_t {
    uint8_t key[ROV_MEM_KEY_LEN];
};

typedef struct railover_reg {
    mca_btl_base_registration_handle_t handle; /* first: ob1 copies it from here */
    rov_mem_t *mem;
} railover_reg_t;

/* A get in flight, or failed and waiting for progress to report it. */
typedef struct railover_get {
    struct railover_get *next;
    mca_btl_base_endpoint_t *ep;
    void *local;
    mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext, *cbdata;
    size_t size;
    rov_status_t status;
} railover_get_t;

static railover_get_t *failed_head, *failed_tail;

/* What a registration that could not be made answers: its key names no
 * registration (rov_conn_get() refuses it), and it has no memory. */
static railover_reg_t unregistered;

static mca_btl_base_registration_handle_t *
railover_register_mem(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *base,
                      size_t size, uint32_t flags)
{
    railover_reg_t *reg = malloc(sizeof(*reg));
    rov_status_t st = ROV_ERR_NOMEM;

    if (NULL != reg) {
        mca_btl_railover_lock();
        st = rov_mem_register(mca_btl_railover_component.ctx, base, size, &reg->mem);
        mca_btl_railover_unlock();
    }
    if (ROV_OK != st) {
        opal_output_verbose(20, mca_btl_railover_component.verbose,
                            "btl railover: cannot register %zu bytes for RDMA (%s): ob1 moves "
                            "them by send", size, rov_status_str(st));
        free(reg);
        return &unregistered.handle;
    }
    rov_mem_key(reg->mem, reg->handle.key);
    return &reg->handle;
}

static int railover_deregister_mem(mca_btl_base_module_t *btl,
                                   mca_btl_base_registration_handle_t *handle)
{
    railover_reg_t *reg = (railover_reg_t *) handle;

    if (reg == &unregistered)
        return OPAL_SUCCESS;
    mca_btl_railover_lock();
    /* After finalize the context, and the rails' registrations with it,
     * are gone: a late deregistration only frees our record. */
    if (NULL != mca_btl_railover_component.ctx)
        rov_mem_deregister(reg->mem);
    mca_btl_railover_unlock();
    free(reg);
    return OPAL_SUCCESS;
}

static void get_complete(railover_get_t *g)
{
    if (ROV_OK != g->status)
        opal_output_verbose(20, mca_btl_railover_component.verbose,
                            "btl railover: RDMA get of %zu bytes from %s not done (%s): "
                            "ob1 asks for it by send",
                            g->size, OPAL_NAME_PRINT(g->ep->name), rov_status_str(g->status));
    if (!mca_btl_railover_component.finalizing)
        g->cbfunc(&mca_btl_railover_module.super, g->ep, g->local, g->local_handle,
                  g->cbcontext, g->cbdata, ROV_OK == g->status ? OPAL_SUCCESS : OPAL_ERROR);
    free(g);
}

/* Railover's read completion, inside rov_progress(). */
static void get_done(void *arg, rov_status_t status)
{
    railover_get_t *g = arg;

    g->status = status;
    get_complete(g);
}

/* From progress, after rov_progress(): the gets btl_get could not start. */
void mca_btl_railover_gets_failed(void)
{
    while (NULL != failed_head) {
        railover_get_t *g = failed_head;

        failed_head = g->next;
        if (NULL == failed_head)
            failed_tail = NULL;
        get_complete(g);
    }
}

bool mca_btl_railover_gets_pending(void)
{
    return NULL != failed_head;
}

static int railover_get(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                        void *local_address, uint64_t remote_address,
                        mca_btl_base_registration_handle_t *local_handle,
                        mca_btl_base_registration_handle_t *remote_handle, size_t size, int flags,
                        int order, mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                        void *cbdata)
{
    railover_get_t *g = malloc(sizeof(*g));
    rov_status_t st = ROV_ERR_UNSUPPORTED;

    if (OPAL_UNLIKELY(NULL == g))
        return OPAL_ERR_OUT_OF_RESOURCE; /* ob1 retries, then sends */
    g->next = NULL;
    g->ep = endpoint;
    g->local = local_address;
    g->local_handle = local_handle;
    g->cbfunc = cbfunc;
    g->cbcontext = cbcontext;
    g->cbdata = cbdata;
    g->size = size;
    mca_btl_railover_lock();
    if (NULL != endpoint->conn && NULL != local_handle && NULL != remote_handle &&
        NULL != ((railover_reg_t *) local_handle)->mem)
        st = rov_conn_get(endpoint->conn, local_address, ((railover_reg_t *) local_handle)->mem,
                          remote_address, remote_handle->key, size, get_done, g);
    if (ROV_INPROGRESS != st) {
        g->status = st;
        if (NULL != failed_tail)
            failed_tail->next = g;
        else
            failed_head = g;
        failed_tail = g;
    }
    mca_btl_railover_unlock();
    return OPAL_SUCCESS;
}

/* Called by init once the context's limits are known: RDMA get only when
 * a rail reads remote memory, and never against the user's own flags. */
void mca_btl_railover_rdma_init(bool flags_set)
{
    mca_btl_base_module_t *m = &mca_btl_railover_module.super;
    size_t max = mca_btl_railover_component.limits.get_max;

    if (0 == max)
        m->btl_flags &= ~(uint32_t) MCA_BTL_FLAGS_GET;
    else if (!flags_set)
        m->btl_flags |= MCA_BTL_FLAGS_GET;
    m->btl_flags &= ~(uint32_t) MCA_BTL_FLAGS_PUT;
    if (!(m->btl_flags & MCA_BTL_FLAGS_GET))
        return;
    m->btl_register_mem = railover_register_mem;
    m->btl_deregister_mem = railover_deregister_mem;
    m->btl_get = railover_get;
    m->btl_registration_handle_size = sizeof(mca_btl_base_registration_handle_t);
    m->btl_get_limit = max;
    m->btl_get_alignment = 0;
}
