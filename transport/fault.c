#include "transport/fault.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/core.h"
#include "transport/log.h"

static uint64_t splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The keys of a spec, each allowed once. */
static const char *const fault_keys[] = {"rail", "mode", "at", "after", "every", "seed"};

/* after= and every= count frames: far beyond what a test sends, and small
 * enough that the next firing point (sent + every * 3/2) cannot wrap. */
#define FAULT_COUNT_MAX (1ull << 48)

rov_status_t rov_fault_parse(const char *spec, struct rov_fault *out, char *why, size_t why_len)
{
    struct rov_fault f = {.rail = -1, .seed = 1};
    char buf[256], *save = NULL;
    bool have_rail = false, have_mode = false, have_after = false;
    unsigned seen = 0;

    if (!*spec) {
        if (out)
            *out = f;
        return ROV_OK;
    }
    if (strlen(spec) >= sizeof(buf)) {
        snprintf(why, why_len, "spec too long");
        return ROV_ERR_INVAL;
    }
    strcpy(buf, spec);
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '='), *end;
        unsigned long long v;
        size_t k;

        if (!eq) {
            snprintf(why, why_len, "'%s' is not key=value", kv);
            return ROV_ERR_INVAL;
        }
        *eq++ = '\0';
        for (k = 0; k < sizeof(fault_keys) / sizeof(fault_keys[0]); k++)
            if (strcmp(kv, fault_keys[k]) == 0)
                break;
        if (k == sizeof(fault_keys) / sizeof(fault_keys[0])) {
            snprintf(why, why_len, "unknown key '%s' (rail, mode, after, every, seed, at)", kv);
            return ROV_ERR_INVAL;
        }
        if (seen & 1u << k) {
            snprintf(why, why_len, "%s= is given twice", kv);
            return ROV_ERR_INVAL;
        }
        seen |= 1u << k;
        if (strcmp(kv, "mode") == 0) {
            if (strcmp(eq, "error") == 0)
                f.mode = ROV_FAULT_ERROR;
            else if (strcmp(eq, "silent") == 0)
                f.mode = ROV_FAULT_SILENT;
            else {
                snprintf(why, why_len, "mode '%s' is not error or silent", eq);
                return ROV_ERR_INVAL;
            }
            have_mode = true;
            continue;
        }
        if (strcmp(kv, "at") == 0) {
            if (strcmp(eq, "close") == 0)
                f.at_close = 1u << ROV_FAULT_CLOSE_FIRST | 1u << ROV_FAULT_CLOSE_SECOND;
            else if (strcmp(eq, "last-close") == 0)
                f.at_close = 1u << ROV_FAULT_CLOSE_SECOND;
            else if (strcmp(eq, "close-answer") == 0)
                f.at_close = 1u << ROV_FAULT_CLOSE_ANSWER;
            else if (strcmp(eq, "read") == 0)
                f.at_read = true;
            else if (strcmp(eq, "register") == 0)
                f.at_register = true;
            else {
                snprintf(why, why_len,
                         "at='%s' is not close, last-close, close-answer, read or register", eq);
                return ROV_ERR_INVAL;
            }
            if (f.at_close)
                have_after = true;
            continue;
        }
        if (*eq < '0' || *eq > '9') {
            snprintf(why, why_len, "%s='%s' is not a non-negative integer", kv, eq);
            return ROV_ERR_INVAL;
        }
        errno = 0;
        v = strtoull(eq, &end, 10);
        if (*end) {
            snprintf(why, why_len, "%s='%s' is not a non-negative integer", kv, eq);
            return ROV_ERR_INVAL;
        }
        if (errno == ERANGE) {
            snprintf(why, why_len, "%s='%s' is out of range", kv, eq);
            return ROV_ERR_INVAL;
        }
        if (strcmp(kv, "rail") == 0) {
            if (v >= ROV_MAX_RAILS) {
                snprintf(why, why_len, "rail=%llu is not below %d", v, ROV_MAX_RAILS);
                return ROV_ERR_INVAL;
            }
            f.rail = (int)v;
            have_rail = true;
        } else if (strcmp(kv, "seed") == 0) {
            f.seed = v;
        } else if (strcmp(kv, "after") == 0) {
            if (v < 1 || v > FAULT_COUNT_MAX) {
                snprintf(why, why_len, "after=%s is outside [1, %llu]", eq, FAULT_COUNT_MAX);
                return ROV_ERR_INVAL;
            }
            f.after = v;
            have_after = true;
        } else {
            if (v < 2 || v > FAULT_COUNT_MAX) {
                snprintf(why, why_len, "every=%s is outside [2, %llu]", eq, FAULT_COUNT_MAX);
                return ROV_ERR_INVAL;
            }
            f.every = v;
        }
    }
    if ((f.at_read || f.at_register) && f.every) {
        snprintf(why, why_len, "at=%s excludes every=", f.at_read ? "read" : "register");
        return ROV_ERR_INVAL;
    }
    if (!have_rail || !have_mode || !have_after) {
        snprintf(why, why_len, "rail=, mode= and after= (or at=close) are required");
        return ROV_ERR_INVAL;
    }
    if (f.at_register && f.mode != ROV_FAULT_ERROR) {
        snprintf(why, why_len, "at=register takes mode=error (a registration fails; no "
                 "channel goes silent)");
        return ROV_ERR_INVAL;
    }
    if (f.at_close && (f.after || f.every)) {
        snprintf(why, why_len, "at= excludes after= and every=");
        return ROV_ERR_INVAL;
    }
    f.next = f.at_read || f.at_register ? 0 : f.after; /* 0 with at=: never on data */
    f.rng = f.seed;
    if (out)
        *out = f;
    return ROV_OK;
}

/* as_send: the fault hits a data frame being sent, so an error fails the
 * channel as a failed send does (conn.c's push_failed(): from progress if
 * the send came from rov_conn_send()); else at once. */
static void fire(struct rov_fault *f, struct rov_chan *chan, const char *when, bool as_send)
{
    f->fired++;
    rov_info("fault", "RAILOVER_FAULT: %s channel of conn %llu %s %s", chan->rail->spec->name,
             chan->conn ? (unsigned long long)chan->conn->id : 0ull,
             f->mode == ROV_FAULT_ERROR ? "fails" : "goes silent", when);
    if (f->mode == ROV_FAULT_SILENT) {
        chan->silent = 1;
        chan->silent_since_ns = rov_now_ns();
        return;
    }
    if (as_send) {
        chan->send_error = ROV_ERR_IO;
        chan->send_reason = ROV_REASON_FAIL_INJECTED;
        return;
    }
    rov_conn_chan_failed_reason(chan, ROV_ERR_IO, "injected fault (RAILOVER_FAULT)",
                                ROV_REASON_FAIL_INJECTED);
}

void rov_fault_data_sent(struct rov_fault *f, struct rov_chan *chan)
{
    char when[64];

    if (chan->rail->index != f->rail || ++f->sent != f->next)
        return;
    f->next = f->every ? f->sent + f->every / 2 + splitmix(&f->rng) % (f->every + 1) : 0;
    snprintf(when, sizeof(when), "after %" PRIu64 " data frames on the rail", f->sent);
    fire(f, chan, when, true);
}

bool rov_fault_read_done(struct rov_fault *f, struct rov_chan *chan)
{
    char when[64];

    if (!f->at_read || chan->rail->index != f->rail || ++f->reads != f->after)
        return false;
    snprintf(when, sizeof(when), "as read %" PRIu64 " on the rail completes", f->reads);
    fire(f, chan, when, true);
    return true;
}

bool rov_fault_register(struct rov_fault *f, int rail)
{
    if (!f->at_register || rail != f->rail || ++f->regs != f->after)
        return false;
    f->fired++;
    rov_info("fault", "RAILOVER_FAULT: registration %" PRIu64 " on rail %d fails", f->regs,
             rail);
    return true;
}

void rov_fault_close_sending(struct rov_fault *f, struct rov_chan *chan,
                             enum rov_fault_close kind)
{
    static const char *const when[] = {
        [ROV_FAULT_CLOSE_FIRST] = "as it sends the first CLOSE",
        [ROV_FAULT_CLOSE_SECOND] = "as it sends the second CLOSE",
        [ROV_FAULT_CLOSE_ANSWER] = "as it answers the peer's CLOSE",
    };

    if (!(f->at_close & 1u << kind) || f->fired || chan->rail->index != f->rail)
        return;
    fire(f, chan, when[kind], false);
}
