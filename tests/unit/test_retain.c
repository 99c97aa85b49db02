/* Unit tests for transport/retain.c: retention queue and reorder buffer. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/retain.h"

/* ---- helpers ------------------------------------------------------------ */

static struct rov_retain rq;

static void rq_setup(void)
{
    rov_retain_init(&rq, 8, 1000);
}

static void free_list(struct rov_msg *m)
{
    while (m) {
        struct rov_msg *next = m->next;

        free(m);
        m = next;
    }
}

static void rq_teardown(void)
{
    free_list(rov_retain_drain(&rq));
}

static struct rov_msg *push_len(size_t len)
{
    struct rov_msg *m = rov_retain_msg_alloc(NULL, len, 0);

    ck_assert_ptr_nonnull(m);
    rov_retain_push(&rq, m);
    return m;
}

static void push_n(unsigned n, size_t len)
{
    for (unsigned i = 0; i < n; i++)
        push_len(len);
}

/* Check the list holds exactly sequences first..last, in order. */
static void assert_list(const struct rov_msg *m, uint64_t first, uint64_t last)
{
    uint64_t want = first;

    for (; m; m = m->next, want++) {
        ck_assert_uint_le(want, last);
        ck_assert_uint_eq(m->seq, want);
    }
    ck_assert_uint_eq(want, last + 1);
}

/* Walk the queue and check head/tail/count/bytes agree with its contents. */
static void assert_consistent(const struct rov_retain *r)
{
    uint64_t n = 0, bytes = 0, prev = 0;
    const struct rov_msg *m, *last = NULL;
    int next_tx_found = r->next_tx == NULL;

    for (m = r->head; m; m = m->next) {
        if (n)
            ck_assert_uint_eq(m->seq, prev + 1);
        prev = m->seq;
        n++;
        bytes += m->len;
        last = m;
        if (m == r->next_tx)
            next_tx_found = 1;
    }
    ck_assert_uint_eq(n, r->count);
    ck_assert_uint_eq(bytes, r->bytes);
    ck_assert_ptr_eq(last, r->tail);
    ck_assert_msg(next_tx_found, "next_tx is not in the queue");
    if (r->tail)
        ck_assert_uint_eq(r->tail->seq, r->next_seq - 1);
}

/* What a rail transmission does: take next_tx and move on. */
static const struct rov_msg *transmit(struct rov_retain *r)
{
    const struct rov_msg *m = r->next_tx;

    ck_assert_ptr_nonnull(m);
    r->next_tx = m->next;
    return m;
}

/* ---- retention queue ---------------------------------------------------- */

START_TEST(test_init)
{
    struct rov_retain r;

    memset(&r, 0xff, sizeof(r));
    rov_retain_init(&r, 3, 4096);
    ck_assert_ptr_null(r.head);
    ck_assert_ptr_null(r.tail);
    ck_assert_ptr_null(r.next_tx);
    ck_assert_uint_eq(r.next_seq, 1);
    ck_assert_uint_eq(r.count, 0);
    ck_assert_uint_eq(r.bytes, 0);
    ck_assert_uint_eq(r.max_msgs, 3);
    ck_assert_uint_eq(r.max_bytes, 4096);
    ck_assert_uint_eq(rov_retain_acked(&r), 0);
    ck_assert_ptr_null(rov_retain_drain(&r));
}
END_TEST

START_TEST(test_seq_from_one)
{
    struct rov_msg *a = push_len(10), *b = push_len(20), *c = push_len(0);

    ck_assert_uint_eq(a->seq, 1);
    ck_assert_uint_eq(b->seq, 2);
    ck_assert_uint_eq(c->seq, 3);
    ck_assert_ptr_eq(rq.head, a);
    ck_assert_ptr_eq(rq.tail, c);
    ck_assert_ptr_eq(a->next, b);
    ck_assert_ptr_null(c->next);
    ck_assert_ptr_eq(rq.next_tx, a);
    ck_assert_uint_eq(rq.count, 3);
    ck_assert_uint_eq(rq.bytes, 30);
    ck_assert_uint_eq(rq.next_seq, 4);
    ck_assert_uint_eq(rov_retain_acked(&rq), 0);
    assert_consistent(&rq);
}
END_TEST

START_TEST(test_window_msgs)
{
    struct rov_msg *acked;

    /* rq: 8 messages, 1000 bytes. */
    for (int i = 0; i < 8; i++) {
        ck_assert(rov_retain_has_room(&rq, 0, 0, 1));
        push_len(1);
    }
    ck_assert(!rov_retain_has_room(&rq, 0, 0, 0));
    ck_assert(!rov_retain_has_room(&rq, 0, 0, 1));
    ck_assert_int_eq(rov_retain_ack(&rq, 1, &acked), ROV_OK);
    free_list(acked);
    ck_assert(rov_retain_has_room(&rq, 0, 0, 1));
}
END_TEST

START_TEST(test_window_bytes)
{
    struct rov_msg *acked;

    push_len(600);
    ck_assert(rov_retain_has_room(&rq, 0, 0, 400));
    ck_assert(!rov_retain_has_room(&rq, 0, 0, 401));
    push_len(400);
    ck_assert_uint_eq(rq.bytes, 1000);
    ck_assert(rov_retain_has_room(&rq, 0, 0, 0)); /* empty messages still fit */
    ck_assert(!rov_retain_has_room(&rq, 0, 0, 1));
    ck_assert_int_eq(rov_retain_ack(&rq, 1, &acked), ROV_OK);
    free_list(acked);
    ck_assert_uint_eq(rq.bytes, 400);
    ck_assert(rov_retain_has_room(&rq, 0, 0, 600));
    ck_assert(!rov_retain_has_room(&rq, 0, 0, 601));
    /* Messages held outside the queue count against the same window. */
    ck_assert(rov_retain_has_room(&rq, 1, 100, 500));
    ck_assert(!rov_retain_has_room(&rq, 1, 100, 501));
}
END_TEST

START_TEST(test_window_oversized)
{
    struct rov_msg *acked;

    /* One message larger than the whole byte window fits an empty queue,
     * not one that only held messages keep from being empty. */
    ck_assert(rov_retain_has_room(&rq, 0, 0, 1000000));
    ck_assert(rov_retain_has_room(&rq, 0, 0, SIZE_MAX));
    ck_assert(!rov_retain_has_room(&rq, 1, 1, 1000000));
    push_len(5000);
    ck_assert(!rov_retain_has_room(&rq, 0, 0, 0));
    ck_assert(!rov_retain_has_room(&rq, 0, 0, 1));
    ck_assert_int_eq(rov_retain_ack(&rq, 1, &acked), ROV_OK);
    assert_list(acked, 1, 1);
    free_list(acked);
    ck_assert(rov_retain_has_room(&rq, 0, 0, 5000));
}
END_TEST

START_TEST(test_window_one_msg)
{
    struct rov_retain r;
    struct rov_msg *m = rov_retain_msg_alloc(NULL, 1, 0), *acked;

    rov_retain_init(&r, 1, 1u << 20);
    ck_assert(rov_retain_has_room(&r, 0, 0, 1));
    rov_retain_push(&r, m);
    ck_assert(!rov_retain_has_room(&r, 0, 0, 0));
    ck_assert_int_eq(rov_retain_ack(&r, 1, &acked), ROV_OK);
    ck_assert_ptr_eq(acked, m);
    free_list(acked);
}
END_TEST

START_TEST(test_ack_cumulative)
{
    struct rov_msg *acked = (struct rov_msg *)&acked;

    push_n(5, 10);
    ck_assert_int_eq(rov_retain_ack(&rq, 3, &acked), ROV_OK);
    assert_list(acked, 1, 3);
    free_list(acked);
    ck_assert_uint_eq(rq.count, 2);
    ck_assert_uint_eq(rq.bytes, 20);
    ck_assert_uint_eq(rq.head->seq, 4);
    ck_assert_uint_eq(rov_retain_acked(&rq), 3);
    assert_consistent(&rq);

    ck_assert_int_eq(rov_retain_ack(&rq, 4, &acked), ROV_OK);
    assert_list(acked, 4, 4);
    free_list(acked);
    ck_assert_uint_eq(rov_retain_acked(&rq), 4);

    ck_assert_int_eq(rov_retain_ack(&rq, 5, &acked), ROV_OK);
    assert_list(acked, 5, 5);
    free_list(acked);
    ck_assert_ptr_null(rq.head);
    ck_assert_ptr_null(rq.tail);
    ck_assert_ptr_null(rq.next_tx);
    ck_assert_uint_eq(rq.count, 0);
    ck_assert_uint_eq(rq.bytes, 0);
    ck_assert_uint_eq(rov_retain_acked(&rq), 5);
    assert_consistent(&rq);

    /* Numbering continues after the queue emptied. */
    ck_assert_uint_eq(push_len(1)->seq, 6);
    ck_assert_ptr_eq(rq.head, rq.tail);
    ck_assert_ptr_eq(rq.next_tx, rq.head);
    assert_consistent(&rq);
}
END_TEST

START_TEST(test_ack_all_at_once)
{
    struct rov_msg *acked;

    push_n(8, 100);
    ck_assert_int_eq(rov_retain_ack(&rq, 8, &acked), ROV_OK);
    assert_list(acked, 1, 8);
    free_list(acked);
    ck_assert_uint_eq(rq.count, 0);
    ck_assert_uint_eq(rq.bytes, 0);
    ck_assert_ptr_null(rq.head);
    ck_assert_ptr_null(rq.tail);
}
END_TEST

START_TEST(test_ack_beyond_sent)
{
    struct rov_msg *acked = (struct rov_msg *)&acked;

    /* Nothing sent yet: acking 1 is a lie. */
    ck_assert_int_eq(rov_retain_ack(&rq, 1, &acked), ROV_ERR_PROTO);
    ck_assert_ptr_null(acked);
    ck_assert_int_eq(rov_retain_ack(&rq, UINT64_MAX, &acked), ROV_ERR_PROTO);

    push_n(3, 10);
    ck_assert_int_eq(rov_retain_ack(&rq, 4, &acked), ROV_ERR_PROTO);
    ck_assert_ptr_null(acked);
    ck_assert_int_eq(rov_retain_ack(&rq, UINT64_MAX, &acked), ROV_ERR_PROTO);
    /* State untouched. */
    ck_assert_uint_eq(rq.count, 3);
    ck_assert_uint_eq(rq.bytes, 30);
    ck_assert_uint_eq(rq.head->seq, 1);
    ck_assert_ptr_eq(rq.next_tx, rq.head);
    assert_consistent(&rq);

    /* After acking everything, the next unsent number is still a lie. */
    ck_assert_int_eq(rov_retain_ack(&rq, 3, &acked), ROV_OK);
    free_list(acked);
    ck_assert_int_eq(rov_retain_ack(&rq, 4, &acked), ROV_ERR_PROTO);
    ck_assert_ptr_null(acked);
}
END_TEST

START_TEST(test_ack_old_is_noop)
{
    struct rov_msg *acked = (struct rov_msg *)&acked;

    ck_assert_int_eq(rov_retain_ack(&rq, 0, &acked), ROV_OK); /* empty, ack 0 */
    ck_assert_ptr_null(acked);
    push_n(4, 10);
    ck_assert_int_eq(rov_retain_ack(&rq, 0, &acked), ROV_OK);
    ck_assert_ptr_null(acked);
    ck_assert_uint_eq(rq.count, 4);
    ck_assert_int_eq(rov_retain_ack(&rq, 2, &acked), ROV_OK);
    free_list(acked);
    /* Duplicate and older acks (acks may arrive on any rail, out of order). */
    for (uint64_t ack = 0; ack <= 2; ack++) {
        acked = (struct rov_msg *)&acked;
        ck_assert_int_eq(rov_retain_ack(&rq, ack, &acked), ROV_OK);
        ck_assert_ptr_null(acked);
        ck_assert_uint_eq(rq.count, 2);
        ck_assert_uint_eq(rq.bytes, 20);
        ck_assert_uint_eq(rq.head->seq, 3);
    }
    assert_consistent(&rq);
}
END_TEST

START_TEST(test_next_tx_and_rewind)
{
    struct rov_msg *acked;

    push_n(5, 1);
    ck_assert_uint_eq(transmit(&rq)->seq, 1);
    ck_assert_uint_eq(transmit(&rq)->seq, 2);
    ck_assert_uint_eq(transmit(&rq)->seq, 3);
    ck_assert_uint_eq(rq.next_tx->seq, 4);

    /* Peer has up to 1: resend from 2. */
    rov_retain_rewind(&rq, 1);
    ck_assert_uint_eq(rq.next_tx->seq, 2);
    /* Peer has nothing. */
    rov_retain_rewind(&rq, 0);
    ck_assert_ptr_eq(rq.next_tx, rq.head);
    /* Peer has everything: nothing to transmit. */
    rov_retain_rewind(&rq, 5);
    ck_assert_ptr_null(rq.next_tx);
    rov_retain_rewind(&rq, 4);
    ck_assert_uint_eq(rq.next_tx->seq, 5);
    ck_assert_uint_eq(transmit(&rq)->seq, 5);
    ck_assert_ptr_null(rq.next_tx);

    /* A push when everything was transmitted becomes next_tx. */
    ck_assert_ptr_eq(rq.next_tx, NULL);
    ck_assert_ptr_eq(push_len(1), rq.next_tx);
    ck_assert_uint_eq(rq.next_tx->seq, 6);
    /* But not when something earlier is still pending. */
    rov_retain_rewind(&rq, 2);
    push_len(1);
    ck_assert_uint_eq(rq.next_tx->seq, 3);
    assert_consistent(&rq);

    /* Rewind to below what is already acknowledged: start at the head. */
    ck_assert_int_eq(rov_retain_ack(&rq, 3, &acked), ROV_OK);
    free_list(acked);
    rov_retain_rewind(&rq, 1);
    ck_assert_ptr_eq(rq.next_tx, rq.head);
    ck_assert_uint_eq(rq.next_tx->seq, 4);
    assert_consistent(&rq);
}
END_TEST

START_TEST(test_ack_moves_next_tx)
{
    struct rov_msg *acked;

    push_n(6, 1);
    transmit(&rq); /* 1 */
    ck_assert_uint_eq(rq.next_tx->seq, 2);

    /* Peer got 1..3 on a previous rail we thought had lost them. */
    ck_assert_int_eq(rov_retain_ack(&rq, 3, &acked), ROV_OK);
    assert_list(acked, 1, 3);
    free_list(acked);
    ck_assert_uint_eq(rq.next_tx->seq, 4);
    ck_assert_ptr_eq(rq.next_tx, rq.head);
    assert_consistent(&rq);

    /* An ack below next_tx leaves it alone. */
    transmit(&rq); /* 4 */
    transmit(&rq); /* 5 */
    ck_assert_int_eq(rov_retain_ack(&rq, 4, &acked), ROV_OK);
    free_list(acked);
    ck_assert_uint_eq(rq.next_tx->seq, 6);

    /* An ack covering everything leaves nothing to transmit. */
    ck_assert_int_eq(rov_retain_ack(&rq, 6, &acked), ROV_OK);
    assert_list(acked, 5, 6);
    free_list(acked);
    ck_assert_ptr_null(rq.next_tx);
    assert_consistent(&rq);
}
END_TEST

START_TEST(test_ack_when_all_transmitted)
{
    struct rov_msg *acked;

    push_n(3, 1);
    transmit(&rq);
    transmit(&rq);
    transmit(&rq);
    ck_assert_ptr_null(rq.next_tx);
    ck_assert_int_eq(rov_retain_ack(&rq, 2, &acked), ROV_OK);
    free_list(acked);
    ck_assert_ptr_null(rq.next_tx); /* must not resurrect a sent message */
    assert_consistent(&rq);
}
END_TEST

START_TEST(test_msg_copy)
{
    char src[64];
    struct rov_msg *m;

    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (char)('a' + i % 26);
    m = rov_retain_msg_alloc(src, sizeof(src), 1);
    ck_assert_ptr_nonnull(m);
    ck_assert(m->flags & ROV_MSG_COPIED);
    ck_assert_uint_eq(m->len, sizeof(src));
    ck_assert_ptr_ne(m->data, src);
    ck_assert_ptr_eq(m->data, m->payload);
    ck_assert_mem_eq(m->data, src, sizeof(src));
    /* The user reuses the buffer at once: the copy must not change. */
    memset(src, 'X', sizeof(src));
    ck_assert_uint_eq(((const char *)m->data)[0], 'a');
    ck_assert_uint_eq(((const char *)m->data)[63], (unsigned char)('a' + 63 % 26));
    ck_assert_ptr_null(m->next);
    ck_assert_uint_eq(m->seq, 0);
    ck_assert_uint_eq(m->rail_refs, 0);
    ck_assert_ptr_null(m->cb);
    free(m);

    /* Zero-length copies, with and without a source pointer. */
    m = rov_retain_msg_alloc(NULL, 0, 1);
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_eq(m->len, 0);
    ck_assert(m->flags & ROV_MSG_COPIED);
    free(m);
    m = rov_retain_msg_alloc(src, 0, 1);
    ck_assert_ptr_nonnull(m);
    free(m);
}
END_TEST

START_TEST(test_msg_reference)
{
    char src[1 << 16];
    struct rov_msg *m;

    memset(src, 1, sizeof(src));
    m = rov_retain_msg_alloc(src, sizeof(src), 0);
    ck_assert_ptr_nonnull(m);
    ck_assert(!(m->flags & ROV_MSG_COPIED));
    ck_assert_ptr_eq(m->data, src); /* zero-copy: the user's buffer */
    ck_assert_uint_eq(m->len, sizeof(src));
    src[0] = 2;
    ck_assert_uint_eq(((const char *)m->data)[0], 2);
    free(m);
}
END_TEST

START_TEST(test_push_keeps_fields)
{
    static const char data[] = "hello";
    struct rov_msg *m = rov_retain_msg_alloc(data, sizeof(data), 1), *acked;

    m->tag = 77;
    m->flags |= ROV_MSG_NOTIFY;
    rov_retain_push(&rq, m);
    ck_assert_uint_eq(m->seq, 1);
    ck_assert_uint_eq(m->tag, 77);
    ck_assert(m->flags & ROV_MSG_NOTIFY);
    ck_assert_int_eq(rov_retain_ack(&rq, 1, &acked), ROV_OK);
    ck_assert_ptr_eq(acked, m);
    ck_assert_ptr_null(acked->next);
    ck_assert_str_eq(acked->data, "hello");
    free_list(acked);
}
END_TEST

START_TEST(test_drain)
{
    struct rov_msg *all, *acked;

    push_n(5, 7);
    transmit(&rq);
    ck_assert_int_eq(rov_retain_ack(&rq, 2, &acked), ROV_OK);
    free_list(acked);
    all = rov_retain_drain(&rq);
    assert_list(all, 3, 5);
    ck_assert_ptr_null(rq.head);
    ck_assert_ptr_null(rq.tail);
    ck_assert_ptr_null(rq.next_tx);
    ck_assert_uint_eq(rq.count, 0);
    ck_assert_uint_eq(rq.bytes, 0);
    ck_assert(rov_retain_has_room(&rq, 0, 0, 1000));
    ck_assert_ptr_null(rov_retain_drain(&rq));
    free_list(all);
}
END_TEST

START_TEST(test_many)
{
    /* A long run with ragged acks keeps the accounting straight. */
    struct rov_retain r;
    uint64_t acked_to = 0, pushed = 0;
    size_t bytes = 0;

    rov_retain_init(&r, 64, 1u << 20);
    for (unsigned round = 0; round < 2000; round++) {
        struct rov_msg *acked;

        while (rov_retain_has_room(&r, 0, 0, round % 97)) {
            struct rov_msg *m = rov_retain_msg_alloc(NULL, round % 97, 0);

            ck_assert_ptr_nonnull(m);
            rov_retain_push(&r, m);
            ck_assert_uint_eq(m->seq, ++pushed);
            bytes += m->len;
        }
        ck_assert_uint_le(r.count, 64);
        if (round % 3 == 0)
            rov_retain_rewind(&r, acked_to + round % 5);
        ck_assert_int_eq(rov_retain_ack(&r, acked_to + (round % 7) % (r.count + 1), &acked),
                         ROV_OK);
        for (struct rov_msg *m = acked; m; m = m->next) {
            ck_assert_uint_eq(m->seq, ++acked_to);
            bytes -= m->len;
        }
        free_list(acked);
        ck_assert_uint_eq(rov_retain_acked(&r), acked_to);
        ck_assert_uint_eq(r.bytes, bytes);
        assert_consistent(&r);
    }
    free_list(rov_retain_drain(&r));
}
END_TEST

/* ---- reorder buffer ----------------------------------------------------- */

static struct rov_reorder ro;

/* The byte bound of the tests that are about something else. */
#define NO_BYTE_BOUND UINT64_MAX

static void ro_setup(void)
{
    ck_assert_int_eq(rov_reorder_init(&ro, 8), ROV_OK);
}

static void ro_teardown(void)
{
    rov_reorder_fini(&ro);
}

static void insert_str(uint64_t expected, uint64_t seq, rov_status_t want)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "msg %llu", (unsigned long long)seq);
    ck_assert_int_eq(rov_reorder_insert(&ro, expected, seq, (uint32_t)seq * 10, 0, buf,
                                        strlen(buf) + 1, NO_BYTE_BOUND),
                     want);
}

static void take_str(uint64_t seq)
{
    struct rov_reorder_slot s;
    char want[32];

    snprintf(want, sizeof(want), "msg %llu", (unsigned long long)seq);
    ck_assert_msg(rov_reorder_take(&ro, seq, &s), "seq %llu not held", (unsigned long long)seq);
    ck_assert_uint_eq(s.seq, seq);
    ck_assert_uint_eq(s.tag, (uint32_t)seq * 10);
    ck_assert_uint_eq(s.len, strlen(want) + 1);
    ck_assert_str_eq(s.data, want);
    free(s.data);
}

START_TEST(test_reorder_in_order_take)
{
    struct rov_reorder_slot s;
    uint64_t expected = 1;

    /* 1 is missing; 5, 3, 2, 4 arrive early. */
    insert_str(expected, 5, ROV_OK);
    insert_str(expected, 3, ROV_OK);
    insert_str(expected, 2, ROV_OK);
    insert_str(expected, 4, ROV_OK);
    ck_assert_uint_eq(ro.count, 4);
    ck_assert(!rov_reorder_take(&ro, 1, &s));
    ck_assert(!rov_reorder_take(&ro, 6, &s));
    /* 1 arrives and is delivered directly; then drain in order. */
    expected = 2;
    for (; rov_reorder_take(&ro, expected, &s); expected++) {
        char want[32];

        snprintf(want, sizeof(want), "msg %llu", (unsigned long long)expected);
        ck_assert_str_eq(s.data, want);
        free(s.data);
    }
    ck_assert_uint_eq(expected, 6);
    ck_assert_uint_eq(ro.count, 0);
}
END_TEST

START_TEST(test_reorder_copy)
{
    char buf[16] = "original";
    struct rov_reorder_slot s;

    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 2, 0, 0, buf, sizeof(buf), NO_BYTE_BOUND),
                     ROV_OK);
    strcpy(buf, "clobbered"); /* the rail's receive buffer is reused */
    ck_assert(rov_reorder_take(&ro, 2, &s));
    ck_assert_ptr_ne(s.data, buf);
    ck_assert_str_eq(s.data, "original");
    free(s.data);

    /* Empty messages are held too (data points at the frame's end). */
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 3, 9, 0, buf, 0, NO_BYTE_BOUND), ROV_OK);
    ck_assert(rov_reorder_take(&ro, 3, &s));
    ck_assert_uint_eq(s.len, 0);
    ck_assert_uint_eq(s.tag, 9);
    ck_assert_ptr_nonnull(s.data);
    free(s.data);
}
END_TEST

START_TEST(test_reorder_duplicate)
{
    char other[] = "other";
    struct rov_reorder_slot s;

    insert_str(1, 3, ROV_OK);
    /* Same sequence again (resent after a switch): ignored, first copy kept. */
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 3, 0, 0, other, sizeof(other), NO_BYTE_BOUND),
                     ROV_INPROGRESS);
    ck_assert_int_eq(rov_reorder_insert(&ro, 2, 3, 0, 0, other, sizeof(other), NO_BYTE_BOUND),
                     ROV_INPROGRESS);
    ck_assert_uint_eq(ro.count, 1);
    take_str(3);
    ck_assert_uint_eq(ro.count, 0);
    ck_assert(!rov_reorder_take(&ro, 3, &s)); /* taken once only */
}
END_TEST

START_TEST(test_reorder_not_early)
{
    char b[1] = {0};

    /* seq <= expected is not an early arrival: the caller delivers or drops it. */
    ck_assert_int_eq(rov_reorder_insert(&ro, 5, 5, 0, 0, b, 1, NO_BYTE_BOUND), ROV_ERR_AGAIN);
    ck_assert_int_eq(rov_reorder_insert(&ro, 5, 4, 0, 0, b, 1, NO_BYTE_BOUND), ROV_ERR_AGAIN);
    ck_assert_int_eq(rov_reorder_insert(&ro, 5, 0, 0, 0, b, 1, NO_BYTE_BOUND), ROV_ERR_AGAIN);
    ck_assert_int_eq(rov_reorder_insert(&ro, UINT64_MAX, 1, 0, 0, b, 1, NO_BYTE_BOUND),
                     ROV_ERR_AGAIN);
    ck_assert_uint_eq(ro.count, 0);
}
END_TEST

START_TEST(test_reorder_beyond_capacity)
{
    char b[1] = {0};
    struct rov_reorder_slot s;

    /* cap 8, expected 10: far beyond the buffer is refused and not stored. */
    ck_assert_int_eq(rov_reorder_insert(&ro, 10, 10 + 8 + 1, 0, 0, b, 1, NO_BYTE_BOUND),
                     ROV_ERR_AGAIN);
    ck_assert_int_eq(rov_reorder_insert(&ro, 10, 10 + 100, 0, 0, b, 1, NO_BYTE_BOUND),
                     ROV_ERR_AGAIN);
    ck_assert_int_eq(rov_reorder_insert(&ro, 10, UINT64_MAX, 0, 0, b, 1, NO_BYTE_BOUND),
                     ROV_ERR_AGAIN);
    ck_assert_int_eq(rov_reorder_insert(&ro, 0, UINT64_MAX, 0, 0, b, 1, NO_BYTE_BOUND),
                     ROV_ERR_AGAIN);
    ck_assert_uint_eq(ro.count, 0);
    ck_assert(!rov_reorder_take(&ro, 10 + 8 + 1, &s));
    /* The nearest early arrivals fit. */
    insert_str(10, 11, ROV_OK);
    insert_str(10, 17, ROV_OK);
    ck_assert_uint_eq(ro.count, 2);
}
END_TEST

START_TEST(test_reorder_full_capacity)
{
    /* A buffer of cap slots holds cap early arrivals: with expected missing,
     * expected+1 .. expected+cap map to cap distinct slots. */
    struct rov_reorder one;
    struct rov_reorder_slot s;
    char b[1] = {7};

    for (uint64_t seq = 11; seq <= 10 + 8; seq++)
        ck_assert_msg(rov_reorder_insert(&ro, 10, seq, 0, 0, b, 1, NO_BYTE_BOUND) == ROV_OK,
                      "seq %llu (expected 10, cap 8) refused", (unsigned long long)seq);
    ck_assert_uint_eq(ro.count, 8);

    /* RAILOVER_REORDER_MSGS=1 (its documented minimum) must buffer one. */
    ck_assert_int_eq(rov_reorder_init(&one, 1), ROV_OK);
    ck_assert_int_eq(rov_reorder_insert(&one, 1, 2, 0, 0, b, 1, NO_BYTE_BOUND), ROV_OK);
    ck_assert(rov_reorder_take(&one, 2, &s));
    free(s.data);
    rov_reorder_fini(&one);
}
END_TEST

START_TEST(test_reorder_stale_replaced)
{
    struct rov_reorder_slot s;

    /* 3 is buffered, then arrives again in order on another rail and is
     * delivered directly; its slot is now stale. */
    insert_str(1, 3, ROV_OK);
    ck_assert_uint_eq(ro.count, 1);
    /* expected is now 5; 11 maps to the same slot (11 % 8 == 3). */
    insert_str(5, 11, ROV_OK);
    ck_assert_uint_eq(ro.count, 1);
    ck_assert(!rov_reorder_take(&ro, 3, &s));
    take_str(11);
    ck_assert_uint_eq(ro.count, 0);
}
END_TEST

START_TEST(test_reorder_count)
{
    struct rov_reorder_slot s;

    ck_assert_uint_eq(ro.count, 0);
    ck_assert(!rov_reorder_take(&ro, 1, &s));
    insert_str(1, 2, ROV_OK);
    insert_str(1, 4, ROV_OK);
    insert_str(1, 6, ROV_OK);
    ck_assert_uint_eq(ro.count, 3);
    insert_str(1, 4, ROV_INPROGRESS);
    ck_assert_uint_eq(ro.count, 3);
    ck_assert(!rov_reorder_take(&ro, 3, &s));
    ck_assert(!rov_reorder_take(&ro, 10, &s)); /* same slot as 2, other seq */
    ck_assert_uint_eq(ro.count, 3);
    take_str(2);
    ck_assert_uint_eq(ro.count, 2);
    take_str(6);
    take_str(4);
    ck_assert_uint_eq(ro.count, 0);
    ck_assert(!rov_reorder_take(&ro, 4, &s));
}
END_TEST

/* Early arrivals are bounded in bytes as well as in count
 * (RAILOVER_REORDER_BYTES): what would take the held payload past the bound
 * is refused (the caller drops it and asks for a resend), whatever the
 * free slots. */
START_TEST(test_reorder_byte_bound)
{
    char b[64];
    struct rov_reorder_slot s;

    memset(b, 1, sizeof(b));
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 2, 0, 0, b, 40, 100), ROV_OK);
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 3, 0, 0, b, 40, 100), ROV_OK);
    ck_assert_uint_eq(ro.bytes, 80);
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 4, 0, 0, b, 30, 100), ROV_ERR_AGAIN);
    ck_assert_uint_eq(ro.count, 2);
    ck_assert_uint_eq(ro.bytes, 80);
    ck_assert(!rov_reorder_take(&ro, 4, &s));
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 5, 0, 0, b, 20, 100), ROV_OK); /* exactly full */
    ck_assert_uint_eq(ro.bytes, 100);
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 6, 0, 0, b, 0, 100), ROV_OK);  /* empty: fits */
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 7, 0, 0, b, 1, 100), ROV_ERR_AGAIN);
    /* A duplicate of what is held stays a duplicate, even when full. */
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 3, 0, 0, b, 40, 100), ROV_INPROGRESS);
    /* Taking one out makes room again. */
    ck_assert(rov_reorder_take(&ro, 2, &s));
    free(s.data);
    ck_assert_uint_eq(ro.bytes, 60);
    ck_assert_int_eq(rov_reorder_insert(&ro, 2, 4, 0, 0, b, 30, 100), ROV_OK);
    ck_assert_uint_eq(ro.bytes, 90);
    ck_assert_uint_eq(ro.count, 4);
    /* One message larger than the bound is never held, not even alone. */
    rov_reorder_fini(&ro);
    ck_assert_int_eq(rov_reorder_init(&ro, 8), ROV_OK);
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 2, 0, 0, b, 64, 63), ROV_ERR_AGAIN);
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 2, 0, 0, b, 1, 0), ROV_ERR_AGAIN);
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 2, 0, 0, b, 0, 0), ROV_OK);
    ck_assert_uint_eq(ro.bytes, 0);
}
END_TEST

/* A stale slot's bytes leave the count when it is replaced. */
START_TEST(test_reorder_byte_bound_stale)
{
    char b[64];
    struct rov_reorder_slot s;

    memset(b, 2, sizeof(b));
    ck_assert_int_eq(rov_reorder_insert(&ro, 1, 3, 0, 0, b, 60, 64), ROV_OK);
    /* 3 was delivered on another rail; expected is now 5 and 11 takes
     * 3's slot (11 % 8 == 3): 60 stale bytes + 50 would pass 64, 50 alone
     * does not. */
    ck_assert_int_eq(rov_reorder_insert(&ro, 5, 11, 0, 0, b, 50, 64), ROV_OK);
    ck_assert_uint_eq(ro.bytes, 50);
    ck_assert_uint_eq(ro.count, 1);
    ck_assert(rov_reorder_take(&ro, 11, &s));
    free(s.data);
    ck_assert_uint_eq(ro.bytes, 0);
}
END_TEST

/* The case: RAILOVER_REORDER_MSGS (256) early frames of 1 MiB held
 * 256 MiB per connection.  With the default byte bound (4 MiB) only four
 * are held; every other one is refused. */
START_TEST(test_reorder_byte_bound_large_frames)
{
    struct rov_reorder r;
    const size_t len = 1u << 20;
    char *frame = malloc(len);
    unsigned held = 0;

    ck_assert_ptr_nonnull(frame);
    memset(frame, 5, len);
    ck_assert_int_eq(rov_reorder_init(&r, 256), ROV_OK);
    for (uint64_t seq = 2; seq <= 257; seq++) {
        rov_status_t st = rov_reorder_insert(&r, 1, seq, 0, 0, frame, len, 4u << 20);

        ck_assert(st == ROV_OK || st == ROV_ERR_AGAIN);
        held += st == ROV_OK;
    }
    ck_assert_uint_eq(held, 4);
    ck_assert_uint_eq(r.count, 4);
    ck_assert_uint_le(r.bytes, 4u << 20);
    rov_reorder_fini(&r);
    ck_assert_uint_eq(r.bytes, 0);
    free(frame);
}
END_TEST

START_TEST(test_reorder_fini_frees)
{
    struct rov_reorder r;
    char big[4096];

    memset(big, 3, sizeof(big));
    ck_assert_int_eq(rov_reorder_init(&r, 64), ROV_OK);
    for (uint64_t seq = 2; seq < 60; seq += 2)
        ck_assert_int_eq(rov_reorder_insert(&r, 1, seq, 0, 0, big, sizeof(big), NO_BYTE_BOUND),
                         ROV_OK);
    /* Leaks (if any) show under valgrind / ASan's leak checker. */
    rov_reorder_fini(&r);
    ck_assert_ptr_null(r.slots);
    ck_assert_uint_eq(r.count, 0);
    rov_reorder_fini(&r); /* idempotent */
}
END_TEST

START_TEST(test_reorder_long_run)
{
    /* Deliver 1..N where every block of 7 arrives reversed. */
    uint64_t expected = 1;
    const uint64_t n = 4000;

    for (uint64_t base = 1; base <= n; base += 7) {
        for (uint64_t seq = base + 6; seq >= base; seq--) {
            struct rov_reorder_slot s;

            if (seq > n)
                continue;
            if (seq != expected) {
                insert_str(expected, seq, ROV_OK);
                continue;
            }
            expected++;
            while (rov_reorder_take(&ro, expected, &s)) {
                free(s.data);
                expected++;
            }
        }
    }
    ck_assert_uint_eq(expected, n + 1);
    ck_assert_uint_eq(ro.count, 0);
}
END_TEST

static Suite *retain_suite(void)
{
    Suite *s = suite_create("retain");
    TCase *tc;

    tc = tcase_create("retain");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, rq_setup, rq_teardown);
    tcase_add_test(tc, test_init);
    tcase_add_test(tc, test_seq_from_one);
    tcase_add_test(tc, test_window_msgs);
    tcase_add_test(tc, test_window_bytes);
    tcase_add_test(tc, test_window_oversized);
    tcase_add_test(tc, test_window_one_msg);
    tcase_add_test(tc, test_ack_cumulative);
    tcase_add_test(tc, test_ack_all_at_once);
    tcase_add_test(tc, test_ack_beyond_sent);
    tcase_add_test(tc, test_ack_old_is_noop);
    tcase_add_test(tc, test_next_tx_and_rewind);
    tcase_add_test(tc, test_ack_moves_next_tx);
    tcase_add_test(tc, test_ack_when_all_transmitted);
    tcase_add_test(tc, test_msg_copy);
    tcase_add_test(tc, test_msg_reference);
    tcase_add_test(tc, test_push_keeps_fields);
    tcase_add_test(tc, test_drain);
    tcase_add_test(tc, test_many);
    suite_add_tcase(s, tc);

    tc = tcase_create("reorder");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, ro_setup, ro_teardown);
    tcase_add_test(tc, test_reorder_in_order_take);
    tcase_add_test(tc, test_reorder_copy);
    tcase_add_test(tc, test_reorder_duplicate);
    tcase_add_test(tc, test_reorder_not_early);
    tcase_add_test(tc, test_reorder_beyond_capacity);
    tcase_add_test(tc, test_reorder_full_capacity);
    tcase_add_test(tc, test_reorder_stale_replaced);
    tcase_add_test(tc, test_reorder_count);
    tcase_add_test(tc, test_reorder_byte_bound);
    tcase_add_test(tc, test_reorder_byte_bound_stale);
    tcase_add_test(tc, test_reorder_byte_bound_large_frames);
    tcase_add_test(tc, test_reorder_fini_frees);
    tcase_add_test(tc, test_reorder_long_run);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(retain_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
