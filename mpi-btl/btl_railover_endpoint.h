/*
 * Endpoints (peer processes) and their connections.  Every function here is
 * called with mca_btl_railover_component.lock held.
 */
#ifndef MCA_BTL_RAILOVER_ENDPOINT_H
#define MCA_BTL_RAILOVER_ENDPOINT_H

#include "btl_railover.h"

BEGIN_C_DECLS

/** The endpoint of a process name; with create, a new one if there is none
 * (NULL only when out of memory). */
mca_btl_base_endpoint_t *mca_btl_railover_endpoint_lookup(opal_process_name_t name,
                                                          bool create);

/** ob1 added the peer: its proc (retained) and its address blob (taken over). */
void mca_btl_railover_endpoint_set_proc(mca_btl_base_endpoint_t *ep, opal_proc_t *proc,
                                        void *addr, size_t addr_len);

/** ob1 removed the peer, or finalize: close its connection gracefully and
 * drop the proc.  Frags still waiting for window space are dropped. */
void mca_btl_railover_endpoint_release(mca_btl_base_endpoint_t *ep);

/** OPAL_SUCCESS when a send to ep would go out now (connecting on first
 * use), OPAL_ERR_RESOURCE_BUSY when sends wait for window space,
 * OPAL_ERR_UNREACH when the peer cannot be reached. */
int mca_btl_railover_endpoint_can_send(mca_btl_base_endpoint_t *ep);

/** Send frag (endpoint and tag set): 1 when Railover copied it (done: the
 * caller runs the callback only if the descriptor asks for it with
 * MCA_BTL_DES_SEND_ALWAYS_CALLBACK), OPAL_SUCCESS when it was taken (the descriptor's callback
 * runs when the peer has it, then it is freed if the BTL owns it), or an
 * error (nothing taken). */
int mca_btl_railover_endpoint_send(mca_btl_base_endpoint_t *ep, mca_btl_railover_frag_t *frag);

/** Forget the records of connections the destroyed context freed. */
void mca_btl_railover_conns_forget_all(void);

void mca_btl_railover_frag_free(mca_btl_railover_frag_t *frag);

END_C_DECLS

#endif
