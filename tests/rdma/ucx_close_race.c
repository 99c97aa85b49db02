/*
 * A UCX rail that closes while a peer's connection request is on its way
 * must not crash.  UCX 1.13 (and upstream, issue #11087) hands a request
 * whose private data arrives after ucp_listener_destroy() to the freed
 * listener from its async thread; the rail refuses requests until they
 * have been quiet for a while before it destroys the listener (ucx/ucx.c,
 * drain_requests).  This program makes that race on purpose: per round,
 * CONNECTORS contexts start a connection each to a listener context, wait
 * a varying time, and the listener context is destroyed first.
 *
 *   rov_ucx_close_race [ROUNDS [CONNECTORS]]   with RAILOVER_RAILS=ucx@lo,
 *                                              UCX_TLS=tcp
 *
 * Exit 0 when every round ended without a crash (a crash kills the
 * process: SIGSEGV in UCX's async thread), 77 when the UCX rail cannot be
 * opened here, 1 on any other failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "railover/railover.h"

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    (void)arg; (void)conn; (void)tag; (void)data; (void)len;
}

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static rov_status_t open_side(rov_context_t **ctx_p, rov_endpoint_t **ep_p)
{
    rov_context_params_t p = {.recv_cb = on_recv};
    rov_status_t st = rov_context_create(&p, ctx_p);

    if (st != ROV_OK)
        return st;
    st = rov_endpoint_create(*ctx_p, ep_p);
    if (st != ROV_OK)
        rov_context_destroy(*ctx_p);
    return st;
}

#define MAX_CONNECTORS 32

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    int nconn = argc > 2 ? atoi(argv[2]) : 8;
    uint64_t t0 = now_us();

    if (rounds <= 0 || nconn <= 0 || nconn > MAX_CONNECTORS) {
        fprintf(stderr, "usage: rov_ucx_close_race [ROUNDS > 0 [CONNECTORS 1..%d]]\n",
                MAX_CONNECTORS);
        return 1;
    }
    for (int i = 0; i < rounds; i++) {
        rov_context_t *lctx, *cctx[MAX_CONNECTORS];
        rov_endpoint_t *lep, *cep;
        rov_conn_t *conn;
        unsigned char blob[1024];
        size_t len = sizeof(blob);
        rov_status_t st = open_side(&lctx, &lep);

        if (st != ROV_OK) {
            printf("SKIP: cannot open the listener's rails: %s\n", rov_status_str(st));
            return 77;
        }
        if (rov_endpoint_address(lep, blob, &len) != ROV_OK) {
            fprintf(stderr, "FAIL: round %d: no listener address\n", i);
            return 1;
        }
        for (int k = 0; k < nconn; k++) {
            if (open_side(&cctx[k], &cep) != ROV_OK) {
                fprintf(stderr, "FAIL: round %d: opening connector %d\n", i, k);
                return 1;
            }
            st = rov_conn_connect(cep, blob, len, &conn);
            if (st != ROV_OK) {
                fprintf(stderr, "FAIL: round %d: rov_conn_connect: %s\n", i, rov_status_str(st));
                return 1;
            }
        }
        /* Let the requests get under way for 0..3 ms (the listener's async
         * thread accepts them meanwhile), then close the listener first,
         * with requests' data still in flight. */
        uint64_t until = now_us() + (uint64_t)(i % 16) * 200u;

        do
            for (int k = 0; k < nconn; k++)
                rov_progress(cctx[k]);
        while (now_us() < until);
        rov_context_destroy(lctx);
        for (int k = 0; k < nconn; k++)
            rov_context_destroy(cctx[k]);
    }
    printf("PASS: %d rounds of a listener closing under %d connection requests, no crash "
           "(%.1f s)\n", rounds, nconn, (double)(now_us() - t0) / 1e6);
    return 0;
}
