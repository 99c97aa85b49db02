/*
 * mca_btl_railover: an Open MPI 4.1 BTL (API 3.1) over Railover connections.
 *
 * One Railover context and one endpoint per process; one connection per
 * peer process, made on first use and shared by both directions.  ob1 sees
 * an ordinary send/receive BTL: a rail failing underneath is handled inside
 * Railover (failover, failback); only a connection that fails on every rail
 * reaches ob1, through the registered error callback.
 *
 * Locking: a Railover context is used by one thread at a time, so every
 * call into it is made under mca_btl_railover_component.lock, a recursive
 * mutex (ob1's callbacks, which run inside rov_progress(), send again).
 * Progress only try-locks: a thread that finds it busy has nothing to do;
 * and it stands back while a sender waits for the lock, since a thread
 * polling progress would otherwise take it again and again before a sender
 * asleep on it is scheduled (measured: 5x slower MPI_THREAD_MULTIPLE).
 */
#ifndef MCA_BTL_RAILOVER_H
#define MCA_BTL_RAILOVER_H

#include "opal_config.h"

#include <stdatomic.h>
#include <time.h>

#include "opal/class/opal_free_list.h"
#include "opal/class/opal_hash_table.h"
#include "opal/class/opal_list.h"
#include "opal/mca/btl/btl.h"
#include "opal/threads/mutex.h"
#include "opal/util/proc.h"

#include "railover/railover.h"

BEGIN_C_DECLS

/* A peer process.  Created by add_procs (with its address from the modex)
 * or by an accepted connection that names it (a peer may connect before
 * ob1 has added it); freed at finalize, after its connections are gone. */
struct mca_btl_base_endpoint_t {
    opal_list_item_t super;
    opal_process_name_t name;
    opal_proc_t *proc;       /* NULL until add_procs names it, and after del_procs */
    void *addr;              /* the peer's address blob (from the modex), or NULL */
    size_t addr_len;
    rov_conn_t *conn;        /* the connection sends use; NULL until first use */
    bool conn_is_ours;       /* conn was made by this process (not accepted) */
    opal_list_t pending;     /* frags Railover could not take yet (send_later()), in order */
    bool failed;             /* every rail to the peer is gone: sends are refused */
    bool connect_deferred;   /* a connect hit a local limit: said once, retried */
    double connect_again;    /* then: not before this (CLOCK_MONOTONIC, seconds) */
};
typedef struct mca_btl_base_endpoint_t mca_btl_base_endpoint_t;
OBJ_CLASS_DECLARATION(mca_btl_base_endpoint_t);

/* A send descriptor with its payload buffer (from one of the free lists).
 * segments[0] is in that buffer (ob1's header, and the data packed behind
 * it); a fragment sent in place has the data in segments[1], the user's
 * memory, and goes as one message, segments[0] its prefix. */
typedef struct mca_btl_railover_frag_t {
    mca_btl_base_descriptor_t base;
    mca_btl_base_segment_t segments[2];
    mca_btl_base_endpoint_t *endpoint;
    opal_free_list_t *list;  /* the free list it returns to */
    mca_btl_base_tag_t tag;
} mca_btl_railover_frag_t;
OBJ_CLASS_DECLARATION(mca_btl_railover_frag_t);

typedef struct mca_btl_railover_module_t {
    mca_btl_base_module_t super;
    mca_btl_base_module_error_cb_fn_t error_cb;
} mca_btl_railover_module_t;

typedef struct mca_btl_railover_component_t {
    mca_btl_base_component_t super;
    int verbose;                 /* the component's opal_output stream */
    int verbosity;               /* btl_railover_verbose; the stream's is the higher of
                                  * this and btl_base_verbose */
    opal_recursive_mutex_t lock; /* every call into the Railover context */
    atomic_int lock_waiters;     /* senders waiting for the lock: progress stands back */
    rov_context_t *ctx;
    rov_endpoint_t *rov_ep;
    rov_limits_t limits;
    opal_hash_table_t peers;     /* uint64 process name -> endpoint */
    opal_list_t endpoints;       /* every endpoint, for finalize */
    int npending;                /* frags waiting in the endpoints' pending lists */
    opal_list_t dead_frags;      /* sends Railover could not deliver, completed after progress */
    opal_free_list_t eager_frags;
    opal_free_list_t max_frags;
    int conns;                   /* connections not yet freed */
    opal_list_t conn_list;       /* their records (btl_railover_endpoint.c) */
    bool in_progress;            /* inside rov_progress(): no second entry */
    bool finalizing;             /* no more deliveries to ob1 */
} mca_btl_railover_component_t;

OPAL_MODULE_DECLSPEC extern mca_btl_railover_component_t mca_btl_railover_component;
extern mca_btl_railover_module_t mca_btl_railover_module;

static inline double mca_btl_railover_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* The lock for everything but progress (which try-locks). */
static inline void mca_btl_railover_lock(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;

    if (OPAL_UNLIKELY(opal_using_threads())) {
        atomic_fetch_add_explicit(&c->lock_waiters, 1, memory_order_relaxed);
        opal_mutex_lock(&c->lock);
        atomic_fetch_sub_explicit(&c->lock_waiters, 1, memory_order_relaxed);
    }
}

static inline void mca_btl_railover_unlock(void)
{
    OPAL_THREAD_UNLOCK(&mca_btl_railover_component.lock);
}

/* A message of help-btl-railover.txt, printed by this process. */
void mca_btl_railover_show_help(const char *topic, ...);

/* Railover's log lines through opal_output on `stream` (btl_railover_log.c):
 * open installs the hook, with Railover's levels raised as verbosity asks
 * (mca_btl_railover_log_level()); close removes it.  Lines of Railover's
 * progress helper wait for the next progress unless MPI is thread-safe:
 * progress calls flush when mca_btl_railover_log_pending is set. */
void mca_btl_railover_log_open(int stream, int verbosity);
void mca_btl_railover_log_close(void);
void mca_btl_railover_log_flush(void);
rov_log_level_t mca_btl_railover_log_level(int verbosity);
extern atomic_int mca_btl_railover_log_pending;

/* btl_railover_params.c: the MCA parameters made from Railover's
 * settings, and the configuration they give. */
int mca_btl_railover_params_register(void);
int mca_btl_railover_params_config(rov_config_t **config_p);
void mca_btl_railover_param_accepts(const rov_config_var_t *var, char *buf, size_t len);
/* The BTL sizes the user set (btl_railover_eager_limit, rndv_eager_limit,
 * max_send_size): a value that is not a size, or an eager limit too small
 * for the PML's headers, is refused with a message naming the parameter
 * (OPAL_ERR_BAD_PARAM). */
int mca_btl_railover_params_check_sizes(void);
/* The rails of config: an in-process rail (loop), which reaches no other
 * process, is refused with a message naming the parameter. */
int mca_btl_railover_params_check_rails(const rov_config_t *config);

/* btl_railover.c: the module's functions, and what the context's
 * callbacks hand over. */
void mca_btl_railover_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data,
                           size_t len);
void mca_btl_railover_event(void *arg, const rov_event_t *event);
void mca_btl_railover_flush_pending(void);
void mca_btl_railover_complete_dead(void);

/* btl_railover_rdma.c: RDMA get (registration, get, gets that fell back). */
void mca_btl_railover_rdma_init(bool flags_set);
bool mca_btl_railover_gets_pending(void);
void mca_btl_railover_gets_failed(void);

END_C_DECLS

#endif
