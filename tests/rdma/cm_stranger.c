/*
 * A stranger's rdma_cm connect requests against a verbs rail's rdma_cm
 * listener (RAILOVER_VERBS_CM=rdmacm), for tests/rdma/hostile_cm.py.
 *
 *   rov_cm_stranger IP PORT KIND N
 *
 * Sends N connect requests, up to 32 at a time, each from its own id and
 * without a QP (rdma_cm sends a qp_num in its place), and counts how the
 * listener answers each: "challenge" (a reject carrying a challenge),
 * "reject" (a plain reject), "accepted" (a connect response: the listener
 * made a QP for it) or "error" (unreachable, timeout).  KIND:
 *
 *   old     the private data of the setup before challenges (struct vb_oob,
 *           version 2, plausible parameters): a peer that knows the format
 *           but not the key
 *   ask     asks for a challenge and never answers it
 *   wrong   asks, then answers the challenge with a random proof (the
 *           answer is what is counted)
 *   replay  answers a random slot with a random proof, as a recorded
 *           request replayed would (the slot used or expired)
 *
 * Prints one line: "KIND n=N challenge=C reject=R accepted=A error=E" and
 * exits 0 when every request was answered (2 on a usage or setup error).
 * The wire layout is verbs/cm.c's, written out here as a stranger would.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#define CM_MAGIC 0x52564331u
#define CM_VERSION 1
#define CM_ASK 0xffff
#define OOB_MAGIC 0x52564230u
#define IN_FLIGHT 32

struct cm_req {
    uint32_t magic;
    uint16_t version;
    uint16_t slot;
    uint64_t ka_addr;
    uint32_t nrecv, eager, ka_rkey;
    uint8_t proof[24];
};

struct cm_challenge {
    uint32_t magic;
    uint16_t version;
    uint16_t slot;
    uint8_t nonce[16];
};

struct old_oob {
    uint32_t magic;
    uint16_t version, lid;
    uint32_t qpn, psn;
    uint8_t gid[16];
    uint32_t nrecv, eager, mtu, ka_rkey;
    uint64_t ka_addr;
};

enum kind { OLD, ASK, WRONG, REPLAY };

struct req {
    int stage;      /* WRONG: 0 asking, 1 answering */
    uint16_t slot;  /* WRONG: the challenge's */
};

static struct sockaddr_in dst;
static struct rdma_event_channel *ec;
static enum kind kind;
static int outstanding, answered, challenge, rejected, accepted, errors;

static void rnd(void *p, size_t n)
{
    uint8_t *b = p;

    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)random();
}

static int start(struct req *q)
{
    struct rdma_cm_id *id;

    if (rdma_create_id(ec, &id, q, RDMA_PS_TCP)) {
        perror("rdma_create_id");
        return -1;
    }
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000)) {
        perror("rdma_resolve_addr");
        rdma_destroy_id(id);
        return -1;
    }
    outstanding++;
    return 0;
}

static void connect_req(struct rdma_cm_id *id, struct req *q)
{
    struct rdma_conn_param p;
    struct cm_req r;
    struct old_oob o;

    memset(&p, 0, sizeof(p));
    memset(&r, 0, sizeof(r));
    r.magic = htonl(CM_MAGIC);
    r.version = htons(CM_VERSION);
    p.responder_resources = p.initiator_depth = 1;
    p.retry_count = 7;
    p.qp_num = (uint32_t)random() & 0xffffff;
    p.private_data = &r;
    p.private_data_len = sizeof(r);
    if (kind == OLD) {
        memset(&o, 0, sizeof(o));
        o.magic = htonl(OOB_MAGIC);
        o.version = htons(2);
        o.qpn = htonl(p.qp_num);
        o.psn = htonl((uint32_t)random() & 0xffffff);
        o.nrecv = htonl(64);
        o.eager = htonl(8192);
        o.mtu = htonl(3);
        o.ka_rkey = htonl((uint32_t)random());
        o.ka_addr = (uint64_t)random();
        p.private_data = &o;
        p.private_data_len = sizeof(o);
    } else if (kind == ASK || (kind == WRONG && q->stage == 0)) {
        r.slot = htons(CM_ASK);
    } else {
        r.slot = kind == WRONG ? htons(q->slot) : htons((uint16_t)(random() % 256));
        r.ka_addr = (uint64_t)random();
        r.nrecv = htonl(64);
        r.eager = htonl(8192);
        r.ka_rkey = htonl((uint32_t)random());
        rnd(r.proof, sizeof(r.proof));
    }
    if (rdma_connect(id, &p)) {
        perror("rdma_connect");
        errors++;
        answered++;
        outstanding--;
        rdma_destroy_id(id);
    }
}

static void done(struct rdma_cm_id *id)
{
    outstanding--;
    answered++;
    free(id->context);
    rdma_destroy_id(id);
}

static void on_event(struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    struct req *q = id->context;
    enum rdma_cm_event_type t = ev->event;
    struct cm_challenge ch;
    int is_challenge = 0;

    if (t == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data &&
        ev->param.conn.private_data_len >= sizeof(ch)) {
        memcpy(&ch, ev->param.conn.private_data, sizeof(ch));
        is_challenge = ntohl(ch.magic) == CM_MAGIC && ntohs(ch.version) == CM_VERSION;
    }
    rdma_ack_cm_event(ev);
    switch (t) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id, 2000)) {
            errors++;
            done(id);
        }
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        connect_req(id, q);
        return;
    case RDMA_CM_EVENT_REJECTED:
        if (kind == WRONG && q->stage == 0 && is_challenge) {
            struct req *next = calloc(1, sizeof(*next));

            /* The answer comes from a new id (a rejected one cannot
             * connect again); only it is counted. */
            next->stage = 1;
            next->slot = ntohs(ch.slot);
            outstanding--;
            rdma_destroy_id(id);
            free(q);
            if (start(next)) {
                free(next);
                errors++;
                answered++;
            }
            return;
        }
        if (is_challenge)
            challenge++;
        else
            rejected++;
        done(id);
        return;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
    case RDMA_CM_EVENT_ESTABLISHED:
        accepted++;
        done(id);
        return;
    default:
        fprintf(stderr, "cm_stranger: %s (status %d)\n", rdma_event_str(t), ev->status);
        errors++;
        done(id);
        return;
    }
}

int main(int argc, char **argv)
{
    int n, started = 0;
    time_t end;

    if (argc != 5) {
        fprintf(stderr, "usage: %s IP PORT old|ask|wrong|replay N\n", argv[0]);
        return 2;
    }
    memset(&dst, 0, sizeof(dst));
    dst.sin_family = AF_INET;
    dst.sin_port = htons((uint16_t)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
        fprintf(stderr, "cm_stranger: bad address %s\n", argv[1]);
        return 2;
    }
    if (!strcmp(argv[3], "old"))
        kind = OLD;
    else if (!strcmp(argv[3], "ask"))
        kind = ASK;
    else if (!strcmp(argv[3], "wrong"))
        kind = WRONG;
    else if (!strcmp(argv[3], "replay"))
        kind = REPLAY;
    else {
        fprintf(stderr, "cm_stranger: unknown kind %s\n", argv[3]);
        return 2;
    }
    n = atoi(argv[4]);
    srandom((unsigned)time(NULL) ^ (unsigned)getpid());
    ec = rdma_create_event_channel();
    if (!ec) {
        perror("rdma_create_event_channel");
        return 2;
    }
    end = time(NULL) + 120;
    while (answered < n && time(NULL) < end) {
        struct pollfd pfd = {.fd = ec->fd, .events = POLLIN};
        struct rdma_cm_event *ev;

        while (started < n && outstanding < IN_FLIGHT) {
            struct req *q = calloc(1, sizeof(*q));

            if (!q || start(q)) {
                free(q);
                return 2;
            }
            started++;
        }
        if (poll(&pfd, 1, 1000) <= 0)
            continue;
        if (rdma_get_cm_event(ec, &ev) == 0)
            on_event(ev);
    }
    printf("%s n=%d challenge=%d reject=%d accepted=%d error=%d\n", argv[3], n, challenge,
           rejected, accepted, errors);
    return answered == n ? 0 : 1;
}
