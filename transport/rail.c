#include "transport/rail.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/core.h"
#include "transport/log.h"

#define MAX_KINDS 16

static struct rov_rail_ops registry[MAX_KINDS];
static int nkinds;

static void stub_unlisten(struct rov_rail *rail)
{
}

static void stub_accept_resume(struct rov_rail *rail)
{
}

static int stub_progress(struct rov_rail *rail)
{
    return 0;
}

static int stub_ready(struct rov_rail *rail)
{
    return 1;
}

static rov_status_t stub_chan_flush(struct rov_chan *chan)
{
    return ROV_ERR_UNSUPPORTED;
}

static void stub_chan_str(struct rov_chan *chan, char *buf, size_t len)
{
    snprintf(buf, len, "?");
}

static void stub_addr_str(const void *addr, size_t len, char *buf, size_t buf_len)
{
    snprintf(buf, buf_len, "<%zu bytes>", len);
}

static uint64_t stub_path_key(const void *addr, size_t len)
{
    uint64_t h = rov_hash_bytes(ROV_HASH_INIT, addr, len);

    return h ? h : 1;
}

static rov_status_t stub_mem_reg(struct rov_rail *rail, void *addr, size_t len,
                                 void **handle_p, uint32_t *key_p)
{
    return ROV_ERR_UNSUPPORTED;
}

static void stub_mem_dereg(struct rov_rail *rail, void *handle)
{
}

static rov_status_t stub_get(struct rov_chan *chan, void *local, void *handle, uint64_t raddr,
                             uint32_t key, size_t len, void *cookie)
{
    return ROV_ERR_UNSUPPORTED;
}

void rov_rail_register(const struct rov_rail_ops *ops)
{
    struct rov_rail_ops *r;

    if (!ops->name || !ops->open || !ops->close || !ops->listen || !ops->connect ||
        !ops->send || !ops->chan_close || !ops->mem_reg != !ops->get ||
        !ops->mem_reg != !ops->mem_dereg) {
        /* A bug in the rail, found before any traffic. */
        fprintf(stderr,
                "railover: rail '%s' lacks a mandatory op (or has half of get); not registered\n",
                ops->name ? ops->name : "?");
        abort();
    }
    if (nkinds == MAX_KINDS || rov_rail_lookup(ops->name)) {
        fprintf(stderr, "railover: cannot register rail '%s' (duplicate or table full)\n",
                ops->name);
        abort();
    }
    r = &registry[nkinds++];
    *r = *ops;
    if (r->settings)
        rov_settings_register(r->settings);
    if (!r->unlisten)
        r->unlisten = stub_unlisten;
    if (!r->accept_resume)
        r->accept_resume = stub_accept_resume;
    if (!r->progress)
        r->progress = stub_progress;
    if (!r->ready)
        r->ready = stub_ready;
    if (!r->chan_flush)
        r->chan_flush = stub_chan_flush;
    if (!r->chan_str)
        r->chan_str = stub_chan_str;
    if (!r->addr_str)
        r->addr_str = stub_addr_str;
    if (!r->path_key)
        r->path_key = stub_path_key;
    if (!r->mem_reg) {
        r->mem_reg = stub_mem_reg;
        r->mem_dereg = stub_mem_dereg;
        r->get = stub_get;
    }
}

const struct rov_rail_ops *rov_rail_lookup(const char *kind)
{
    for (int i = 0; i < nkinds; i++)
        if (strcmp(registry[i].name, kind) == 0)
            return &registry[i];
    return NULL;
}

void rov_rail_kinds(char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (int i = 0; i < nkinds && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? "," : "", registry[i].name);
}

bool rov_rail_state_change(struct rov_rail *rail, const struct rov_state_info *table, int from,
                           int to, const char *what, const char *why)
{
    return rov_state_change(table, from, to, rail->ops.name, what, why,
                            &rail->ctx->illegal_transitions);
}
