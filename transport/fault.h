/*
 * Library fault injection (RAILOVER_FAULT), for fast deterministic tests of
 * the failover engine, next to the real faults (links down, nftables) the
 * test tiers inject.  Rail-agnostic: it acts on channels as the transport
 * sees them.
 *
 *   RAILOVER_FAULT=rail=N,mode=error|silent,after=N[,every=M][,seed=S]
 *   RAILOVER_FAULT=rail=N,mode=error|silent,at=close|last-close|close-answer
 *   RAILOVER_FAULT=rail=N,mode=error|silent,at=read,after=N
 *   RAILOVER_FAULT=rail=N,mode=error,at=register,after=N
 *
 * After `after` data frames sent on rail N (counted over all its channels),
 * the channel that sent the last one fails: `error` as a failed send does
 * (like a reset or an error completion; from the next progress when the
 * send came from rov_conn_send(), whose callers see no callback inside it); `silent` makes it drop every
 * frame both ways from then on, as a dead path does, so only the
 * lack-of-progress timer can find it.  With `every`, the fault re-arms after
 * a random count in [M/2, 3M/2] (from `seed`).  With `at=close` instead of
 * `after`, the first channel of rail N about to send a connection's CLOSE
 * fails (silent: the CLOSE is lost with it), once; with `at=last-close`, the
 * first about to send a CLOSE that goes second (the peer's is here); with
 * `at=close-answer`, the first about to answer the peer's CLOSE.  With
 * `at=read,after=N`, the channel that completes the Nth read (a
 * rov_conn_get(), or a part of one, counted over rail N's channels) fails
 * right after it, as a failed send does (from progress), with any other
 * read in flight on it: so that a read in parts fails after some parts
 * arrived.  With `at=register,after=N`, the Nth registration of memory on
 * rail N (rov_mem_register(), counted over the context's registrations)
 * fails as a rail's own does (ibv_reg_mr out of locked memory): the
 * registration fails, no channel does.  Each key
 * at most once; after= and every= up to 2^48, and a number that does not
 * fit is refused, never clamped.
 */
#ifndef ROV_FAULT_H
#define ROV_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "railover/railover.h"
#include "transport/compiler.h"

struct rov_chan;

enum rov_fault_mode { ROV_FAULT_ERROR = 1, ROV_FAULT_SILENT = 2 };
/* Which CLOSE frame a connection is about to send (and at= fires on). */
enum rov_fault_close { ROV_FAULT_CLOSE_FIRST = 1, ROV_FAULT_CLOSE_SECOND, ROV_FAULT_CLOSE_ANSWER };

struct rov_fault {
    int rail;                 /* -1: no fault configured */
    enum rov_fault_mode mode;
    uint64_t after, every, seed;
    uint64_t sent;            /* data frames sent on the rail so far */
    uint64_t next;            /* fire when sent reaches this; 0: never again */
    uint64_t rng;
    uint64_t fired;
    unsigned at_close;        /* at=: fire on a CLOSE instead: bit 1 << rov_fault_close */
    bool at_read;             /* at=read: fire on the after'th read completed */
    uint64_t reads;           /* reads completed on the rail so far (at=read) */
    bool at_register;         /* at=register: fail the after'th registration */
    uint64_t regs;            /* registrations on the rail so far (at=register) */
};

/** Parse a spec; f may be NULL to validate only.  An empty spec disarms. */
rov_status_t rov_fault_parse(const char *spec, struct rov_fault *f, char *why, size_t why_len);

/** Count one data frame sent on chan; fire the fault if it is due. */
ROV_COLD void rov_fault_data_sent(struct rov_fault *f, struct rov_chan *chan);
/** A read on chan completed; fire an at=read fault if it is due (true: it
 * fired; with mode=error, chan->send_error says so to the next push). */
ROV_COLD bool rov_fault_read_done(struct rov_fault *f, struct rov_chan *chan);
/** Memory is about to be registered on rail index rail: true when an
 * at=register fault fails this registration. */
ROV_COLD bool rov_fault_register(struct rov_fault *f, int rail);
/** chan is about to send a CLOSE frame of this kind; fire an at= fault for it (once). */
ROV_COLD void rov_fault_close_sending(struct rov_fault *f, struct rov_chan *chan,
                                      enum rov_fault_close kind);

#endif
