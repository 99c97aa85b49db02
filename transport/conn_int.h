/*
 * Inside the connection protocol: what its four files share, and nothing
 * else includes.
 *
 *   conn.c            the data path (send, retain, push, receive, deliver,
 *                     acks), the rail switch, close and failure, the frame
 *                     dispatcher rov_conn_on_frame()
 *   conn_handshake.c  the challenge, HELLO and HELLO_ACK with their proofs,
 *                     the connection secret, a channel joining (or being
 *                     parked for) its connection, proofs before a channel
 *   conn_connect.c    the first connect: a rail, then the next, the retries
 *                     of rails that timed out or dropped the connect; the
 *                     peer's address
 *   conn_stage.c      the checkpoint stages of a connection: drain to the
 *                     end markers, quiesced, resumed, reopened and
 *                     reconnected
 */
#ifndef ROV_CONN_INT_H
#define ROV_CONN_INT_H

#include "transport/core.h"

#define B ROV_STATE_BIT
/* The states in which sends are held (quiesce), and in which retained
 * messages go out (conn_push()). */
#define HOLD_STATES (B(ROV_CONN_DRAINING) | B(ROV_CONN_QUIESCED) | B(ROV_CONN_REOPENING))
#define PUSH_STATES (B(ROV_CONN_ESTABLISHED) | ROV_CONN_CLOSING_STATES | B(ROV_CONN_DRAINING))
#define CLOSING(conn) ROV_CONN_IS_CLOSING((conn)->state)

/* A reconnect after a reopen that failed is tried again after this,
 * doubling (conn_reopen_failed()). */
#define REOPEN_RETRY_MIN_NS (20ull * 1000000ull)
#define REOPEN_RETRY_MAX_NS (1000ull * 1000000ull)

/* conn.c */
bool conn_set_state(struct rov_conn *conn, enum rov_conn_state state, const char *why);
int conn_peer_rail(const struct rov_conn *conn, int rail);
void conn_ctrl_hdr(const struct rov_chan *chan, uint8_t type, uint32_t flags, size_t len,
                   uint8_t hdrbuf[ROV_WIRE_HDR_LEN]);
rov_status_t conn_ctrl_send(struct rov_chan *chan, const uint8_t *hdrbuf, const void *payload,
                            size_t len);
rov_status_t conn_send_ctrl(struct rov_chan *chan, uint8_t type, uint32_t flags,
                            const void *payload, size_t len);
void conn_fail(struct rov_conn *conn, rov_status_t status, const char *why);
void conn_fail_unreachable(struct rov_conn *conn, const rov_status_t last[ROV_MAX_RAILS],
                           const char *what, const char *setting);
void conn_release_held(struct rov_conn *conn);
uint32_t conn_hold_flag(const struct rov_conn *conn);
void conn_peer_synced(struct rov_conn *conn, struct rov_chan *chan, uint64_t last);
bool conn_peer_moves(struct rov_conn *conn, struct rov_chan *chan, uint32_t tag);
void conn_peer_request_done(struct rov_conn *conn, struct rov_chan *chan, uint32_t tag);
void conn_up(struct rov_conn *conn);
ROV_COLD void conn_protocol_error(struct rov_chan *chan, const char *why);
bool conn_apply_ack(struct rov_conn *conn, struct rov_chan *chan, uint64_t ack);

/* conn_handshake.c */
ROV_COLD void conn_handle_hello(struct rov_chan *chan, const struct rov_wire_hdr *hdr,
                                const uint8_t *payload);
ROV_COLD void conn_handle_hello_ack(struct rov_conn *conn, struct rov_chan *chan,
                                    const struct rov_wire_hdr *hdr, const uint8_t *payload);
ROV_COLD void conn_handle_challenge(struct rov_chan *chan, const uint8_t *payload);
void conn_adopt(struct rov_conn *conn, struct rov_chan *chan, uint32_t flags, uint64_t ack);
void conn_abort_hello(struct rov_chan *chan, rov_status_t status);

/* conn_connect.c */
rov_status_t conn_set_peer_addr(struct rov_conn *conn, const void *blob, size_t len,
                                const char **why_p);
ROV_COLD void conn_first_connect_failed(struct rov_conn *conn, int rail, rov_status_t status);
void conn_connect_again_at(struct rov_conn *conn, uint64_t when);

/* conn_stage.c */
void conn_drained_check(struct rov_conn *conn);
void conn_running(struct rov_conn *conn, const char *why);
bool conn_reopen_from(struct rov_conn *conn, int from);
void conn_reopen_failed(struct rov_conn *conn, int rail, rov_status_t status);
ROV_COLD void conn_handle_quiesce(struct rov_conn *conn, struct rov_chan *chan,
                                  const struct rov_wire_hdr *hdr, const uint8_t *payload);

#endif
