/* Unit tests for transport/config.c: value parsers and the RAILOVER_* table. */
#include <arpa/inet.h>
#include <check.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/config.h"
#include "transport/log.h"
#include "transport/netaddr.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define MS 1000000ull
#define SEC 1000000000ull
#define SENTINEL 0x5a5a5a5a5a5a5a5aull

static const char *const all_vars[] = {
    "RAILOVER_RAILS",        "RAILOVER_TCP_IF",     "RAILOVER_LOG",
    "RAILOVER_WINDOW_MSGS",  "RAILOVER_WINDOW_BYTES", "RAILOVER_WINDOW_TOTAL",
    "RAILOVER_WINDOW_TIME",
    "RAILOVER_EAGER_LIMIT",
    "RAILOVER_MAX_MSG",      "RAILOVER_REORDER_MSGS", "RAILOVER_ACK_DELAY",
    "RAILOVER_TCP_RXBUF",    "RAILOVER_FAILOVER",   "RAILOVER_FAILOVER_TIMEOUT",
    "RAILOVER_KEEPALIVE",    "RAILOVER_FAILBACK",   "RAILOVER_FAILBACK_DWELL",
    "RAILOVER_FAILBACK_RETRY", "RAILOVER_FAILBACK_RETRY_MAX", "RAILOVER_FAULT",
    "RAILOVER_VERBS_DEV",    "RAILOVER_VERBS_CM",   "RAILOVER_VERBS_GID_INDEX",
    "RAILOVER_VERBS_TIMEOUT", "RAILOVER_VERBS_RETRY", "RAILOVER_VERBS_EAGER",
    "RAILOVER_VERBS_RECV",   "RAILOVER_VERBS_REGCACHE",
    "RAILOVER_CONTROL",      "RAILOVER_RUN_DIR",    "RAILOVER_CONNECT_TIMEOUT",
    "RAILOVER_SPIN",         "RAILOVER_REORDER_BYTES", "RAILOVER_UNREACHABLE_TIMEOUT",
    "RAILOVER_PROGRESS_THREAD", "RAILOVER_JOB_DIR",  "RAILOVER_CCP_ADDR",
    "RAILOVER_CHECKPOINT_SIGNAL", "RAILOVER_CHECKPOINT_CMD", "RAILOVER_CHECKPOINT_TIMEOUT",
    "RAILOVER_CHECKPOINT_TREE", "RAILOVER_RESTORE_CMD", "RAILOVER_CCP_AGENT", "RAILOVER_JOBID",
    "RAILOVER_RANK",         "RAILOVER_BOND",       "RAILOVER_BOND_MIN",
    "RAILOVER_TCP_CONGESTION",
};
#define NVARS (sizeof(all_vars) / sizeof(all_vars[0]))

static void clean_env(void)
{
    for (size_t i = 0; i < NVARS; i++)
        unsetenv(all_vars[i]);
    /* rov_config_read() logs what it rejects; keep the test output readable. */
    rov_log_set_level(-1);
}

static void restore_log(void)
{
    clean_env();
    rov_log_set_level(ROV_LOG_WARN);
}

/* A failed parse must leave the output alone and explain itself, naming the
 * offending text (quoted as the parsers do). */
static void assert_err_names(const char *err, const char *what)
{
    char quoted[256];

    ck_assert_msg(err[0] != '\0', "empty error message for '%s'", what);
    snprintf(quoted, sizeof(quoted), "'%s'", what);
    ck_assert_msg(strstr(err, quoted) != NULL, "error \"%s\" does not name %s", err, quoted);
}

/* Value-wise comparison over every layer's variables (rov_parse_rails()
 * leaves bytes past each string's NUL and in unused rail slots unspecified,
 * so memcmp() is not meaningful). */
static int config_equal(const struct rov_config *a, const struct rov_config *b)
{
    char va[256], vb[256];

    for (int i = 0; i < rov_config_var_count(); i++) {
        const char *name = rov_config_var(i)->name;

        if (rov_config_get(a, name, va, sizeof(va)) != ROV_OK ||
            rov_config_get(b, name, vb, sizeof(vb)) != ROV_OK || strcmp(va, vb) != 0)
            return 0;
    }
    return 1;
}

/* The effective value of a variable, as rov_config_get() gives it. */
static void assert_value(const struct rov_config *c, const char *name, const char *want)
{
    char buf[256];

    ck_assert_int_eq(rov_config_get(c, name, buf, sizeof(buf)), ROV_OK);
    ck_assert_msg(strcmp(buf, want) == 0, "%s=%s, want %s", name, buf, want);
}

/* Whether this build has the verbs rail (and so its variables). */
static bool have_verbs(void)
{
    char buf[64];
    struct rov_config c;

    rov_config_defaults(&c);
    return rov_config_get(&c, "RAILOVER_VERBS_CM", buf, sizeof(buf)) == ROV_OK;
}

/* Variables this build knows: all_vars less those of rails it lacks. */
static size_t known_vars(void)
{
    size_t n = 0;

    for (size_t i = 0; i < NVARS; i++)
        n += have_verbs() || strncmp(all_vars[i], "RAILOVER_VERBS_", 15) != 0;
    return n;
}

/* ---- rov_parse_u64 ------------------------------------------------------ */

struct num_case {
    const char *s;
    uint64_t min, max, want;
};

static const struct num_case u64_good[] = {
    {"0", 0, 10, 0},
    {"10", 0, 10, 10},
    {"42", 1, 1000, 42},
    {"007", 0, 10, 7},
    {"18446744073709551615", 0, UINT64_MAX, UINT64_MAX},
};

START_TEST(test_u64_good)
{
    const struct num_case *c = &u64_good[_i];
    uint64_t v = SENTINEL;
    char err[256] = "";

    ck_assert_int_eq(rov_parse_u64(c->s, c->min, c->max, &v, err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(v, c->want);
}
END_TEST

static const struct num_case u64_bad[] = {
    {"", 0, UINT64_MAX, 0},
    {"-1", 0, UINT64_MAX, 0},
    {"+1", 0, UINT64_MAX, 0},
    {" 1", 0, UINT64_MAX, 0},
    {"1 ", 0, UINT64_MAX, 0},
    {"12x", 0, UINT64_MAX, 0},
    {"0x10", 0, UINT64_MAX, 0},
    {"1.5", 0, UINT64_MAX, 0},
    {"1k", 0, UINT64_MAX, 0},
    {"abc", 0, UINT64_MAX, 0},
    {"99999999999999999999", 0, UINT64_MAX, 0},
    {"18446744073709551616", 0, UINT64_MAX, 0},
    {"0", 1, 10, 0},
    {"11", 1, 10, 0},
    {"1048577", 1, 1u << 20, 0},
};

START_TEST(test_u64_bad)
{
    const struct num_case *c = &u64_bad[_i];
    uint64_t v = SENTINEL;
    char err[256] = "";

    ck_assert_int_eq(rov_parse_u64(c->s, c->min, c->max, &v, err, sizeof(err)), ROV_ERR_INVAL);
    ck_assert_uint_eq(v, SENTINEL);
    assert_err_names(err, c->s);
}
END_TEST

START_TEST(test_u64_null_and_short_err)
{
    uint64_t v = SENTINEL;
    char err[8];

    /* No error buffer at all, and a tiny one: no crash, NUL-terminated. */
    ck_assert_int_eq(rov_parse_u64("x", 0, 1, &v, NULL, 0), ROV_ERR_INVAL);
    memset(err, 'Z', sizeof(err));
    ck_assert_int_eq(rov_parse_u64("999999", 0, 1, &v, err, sizeof(err)), ROV_ERR_INVAL);
    ck_assert_uint_lt(strnlen(err, sizeof(err)), sizeof(err));
    ck_assert_uint_eq(v, SENTINEL);
}
END_TEST

/* ---- rov_parse_size ----------------------------------------------------- */

static const struct num_case size_good[] = {
    {"0", 0, UINT64_MAX, 0},
    {"4096", 0, UINT64_MAX, 4096},
    {"512B", 0, UINT64_MAX, 512},
    {"64k", 0, UINT64_MAX, 64 * KiB},
    {"64K", 0, UINT64_MAX, 64 * KiB},
    {"64KiB", 0, UINT64_MAX, 64 * KiB},
    {"16MiB", 0, UINT64_MAX, 16 * MiB},
    {"16M", 0, UINT64_MAX, 16 * MiB},
    {"2m", 0, UINT64_MAX, 2 * MiB},
    {"1G", 0, UINT64_MAX, GiB},
    {"1g", 0, UINT64_MAX, GiB},
    {"64GiB", 0, UINT64_MAX, 64 * GiB},
    {"17179869183G", 0, UINT64_MAX, 17179869183ull * GiB}, /* largest G that fits */
    {"4k", 4 * KiB, 4 * KiB, 4 * KiB},
    {"0k", 0, 1, 0},
};

START_TEST(test_size_good)
{
    const struct num_case *c = &size_good[_i];
    uint64_t v = SENTINEL;
    char err[256] = "";

    ck_assert_msg(rov_parse_size(c->s, c->min, c->max, &v, err, sizeof(err)) == ROV_OK,
                  "'%s' rejected: %s", c->s, err);
    ck_assert_uint_eq(v, c->want);
}
END_TEST

static const struct num_case size_bad[] = {
    {"", 0, UINT64_MAX, 0},
    {"-1", 0, UINT64_MAX, 0},
    {"12x", 0, UINT64_MAX, 0},
    {"1.5M", 0, UINT64_MAX, 0},
    {"16 MiB", 0, UINT64_MAX, 0},
    {"16mib", 0, UINT64_MAX, 0},
    {"16MB", 0, UINT64_MAX, 0},
    {"k", 0, UINT64_MAX, 0},
    {"64kk", 0, UINT64_MAX, 0},
    {"99999999999999999999", 0, UINT64_MAX, 0},
    {"17179869184G", 0, UINT64_MAX, 0},  /* 2^64: overflows after scaling */
    {"18014398509481984k", 0, UINT64_MAX, 0},
    {"4095", 4 * KiB, 64 * GiB, 0},
    {"65GiB", 4 * KiB, 64 * GiB, 0},
    {"2M", 0, 1 * MiB, 0},
};

START_TEST(test_size_bad)
{
    const struct num_case *c = &size_bad[_i];
    uint64_t v = SENTINEL;
    char err[256] = "";

    ck_assert_int_eq(rov_parse_size(c->s, c->min, c->max, &v, err, sizeof(err)), ROV_ERR_INVAL);
    ck_assert_uint_eq(v, SENTINEL);
    assert_err_names(err, c->s);
}
END_TEST

/* ---- rov_parse_duration ------------------------------------------------- */

static const struct num_case dur_good[] = {
    {"250ms", 0, UINT64_MAX, 250 * MS},
    {"2s", 0, UINT64_MAX, 2 * SEC},
    {"0s", 0, UINT64_MAX, 0},
    {"1us", 0, UINT64_MAX, 1000},
    {"5ns", 0, UINT64_MAX, 5},
    {"1000ms", 1000, 1000 * MS, 1000 * MS},
    {"1us", 1000, 1000 * MS, 1000},
    {"18446744073s", 0, UINT64_MAX, 18446744073ull * SEC},
};

START_TEST(test_duration_good)
{
    const struct num_case *c = &dur_good[_i];
    uint64_t v = SENTINEL;
    char err[256] = "";

    ck_assert_msg(rov_parse_duration(c->s, c->min, c->max, &v, err, sizeof(err)) == ROV_OK,
                  "'%s' rejected: %s", c->s, err);
    ck_assert_uint_eq(v, c->want);
}
END_TEST

static const struct num_case dur_bad[] = {
    {"", 0, UINT64_MAX, 0},
    {"250", 0, UINT64_MAX, 0}, /* a duration needs a unit */
    {"0", 0, UINT64_MAX, 0},
    {"-1s", 0, UINT64_MAX, 0},
    {"1.5s", 0, UINT64_MAX, 0},
    {"2 s", 0, UINT64_MAX, 0},
    {"2sec", 0, UINT64_MAX, 0},
    {"2S", 0, UINT64_MAX, 0},
    {"2m", 0, UINT64_MAX, 0}, /* minutes are not a unit; neither is "m" as ms */
    {"s", 0, UINT64_MAX, 0},
    {"ms250", 0, UINT64_MAX, 0},
    {"18446744074s", 0, UINT64_MAX, 0}, /* overflows after scaling */
    {"99999999999999999999ns", 0, UINT64_MAX, 0},
    {"999ns", 1000, 1000 * MS, 0},
    {"2s", 1000, 1000 * MS, 0},
};

START_TEST(test_duration_bad)
{
    const struct num_case *c = &dur_bad[_i];
    uint64_t v = SENTINEL;
    char err[256] = "";

    ck_assert_int_eq(rov_parse_duration(c->s, c->min, c->max, &v, err, sizeof(err)),
                     ROV_ERR_INVAL);
    ck_assert_uint_eq(v, SENTINEL);
    assert_err_names(err, c->s);
}
END_TEST

/* ---- rov_parse_rails ---------------------------------------------------- */

START_TEST(test_rails_good)
{
    struct rov_rail_spec r[ROV_MAX_RAILS];
    unsigned n = 99;
    char err[256] = "";

    ck_assert_int_eq(rov_parse_rails("tcp", r, &n, err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(r[0].kind, "tcp");
    ck_assert_str_eq(r[0].arg, "");
    ck_assert_str_eq(r[0].name, "tcp");

    ck_assert_int_eq(rov_parse_rails("tcp@lo,tcp@eth0", r, &n, err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(r[0].kind, "tcp");
    ck_assert_str_eq(r[0].arg, "lo");
    ck_assert_str_eq(r[0].name, "tcp@lo");
    ck_assert_str_eq(r[1].kind, "tcp");
    ck_assert_str_eq(r[1].arg, "eth0");
    ck_assert_str_eq(r[1].name, "tcp@eth0");

    ck_assert_int_eq(rov_parse_rails("verbs@mlx5_0:1,ucx,tcp@eth0.100", r, &n, err, sizeof(err)),
                     ROV_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(r[0].kind, "verbs");
    ck_assert_str_eq(r[0].arg, "mlx5_0:1");
    ck_assert_str_eq(r[1].name, "ucx");
    ck_assert_str_eq(r[2].arg, "eth0.100");

    /* Same kind with and without an argument are different rails. */
    ck_assert_int_eq(rov_parse_rails("tcp,tcp@lo", r, &n, err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(n, 2);

    /* Exactly ROV_MAX_RAILS, longest kind (15) and argument (63). */
    ck_assert_int_eq(rov_parse_rails("a,b,c,d,e,f,g,h", r, &n, err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(n, ROV_MAX_RAILS);
    ck_assert_str_eq(r[7].name, "h");
    ck_assert_int_eq(rov_parse_rails("abcdefghijklmno@"
                                     "0123456789012345678901234567890123456789012345678901234567"
                                     "89012",
                                     r, &n, err, sizeof(err)),
                     ROV_OK);
    ck_assert_uint_eq(strlen(r[0].kind), 15);
    ck_assert_uint_eq(strlen(r[0].arg), 63);

    /* Addresses of this host's own are fine. */
    ck_assert_int_eq(rov_parse_rails("tcp@127.0.0.1,tcp@::1,tcp@192.0.2.1,ucx@10.0.0.255", r, &n,
                                     err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(n, 4);
}
END_TEST

/* The reason is given: an unspecified address is accepted by bind() and
 * was advertised to peers as the rail's address. */
START_TEST(test_rails_unusable_reason)
{
    struct rov_rail_spec r[ROV_MAX_RAILS];
    unsigned n = 99;
    char err[256] = "";

    ck_assert_int_eq(rov_parse_rails("tcp@0.0.0.0", r, &n, err, sizeof(err)), ROV_ERR_INVAL);
    ck_assert_msg(strstr(err, "unspecified"), "%s", err);
    ck_assert_int_eq(rov_parse_rails("tcp@ff02::1", r, &n, err, sizeof(err)), ROV_ERR_INVAL);
    ck_assert_msg(strstr(err, "multicast"), "%s", err);
    ck_assert_int_eq(rov_parse_rails("tcp@255.255.255.255", r, &n, err, sizeof(err)),
                     ROV_ERR_INVAL);
    ck_assert_msg(strstr(err, "broadcast"), "%s", err);
    ck_assert_uint_eq(n, 99);
}
END_TEST

/* At rail open (rov_net_resolve): the same, and an interface's broadcast
 * address, which only the interfaces tell. */
START_TEST(test_resolve_unusable)
{
    struct sockaddr_storage ss;
    socklen_t len;
    struct ifaddrs *ifs;
    char bcast[INET_ADDRSTRLEN] = "";

    rov_log_set_level(-1); /* it logs what it refuses */
    ck_assert_int_eq(rov_net_resolve("test", "127.0.0.1", &ss, &len, NULL, 0), ROV_OK);
    ck_assert_int_eq(rov_net_resolve("test", "0.0.0.0", &ss, &len, NULL, 0), ROV_ERR_INVAL);
    ck_assert_int_eq(rov_net_resolve("test", "::", &ss, &len, NULL, 0), ROV_ERR_INVAL);
    ck_assert_int_eq(rov_net_resolve("test", "224.0.0.1", &ss, &len, NULL, 0), ROV_ERR_INVAL);
    ck_assert_int_eq(rov_net_resolve("test", "255.255.255.255", &ss, &len, NULL, 0),
                     ROV_ERR_INVAL);
    ck_assert_int_eq(getifaddrs(&ifs), 0);
    for (struct ifaddrs *ifa = ifs; ifa && !bcast[0]; ifa = ifa->ifa_next)
        if ((ifa->ifa_flags & IFF_BROADCAST) && ifa->ifa_broadaddr &&
            ifa->ifa_broadaddr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)ifa->ifa_broadaddr)->sin_addr, bcast,
                      sizeof(bcast));
    freeifaddrs(ifs);
    if (!bcast[0] || strcmp(bcast, "0.0.0.0") == 0) {
        fprintf(stderr, "test_resolve_unusable: no interface with an IPv4 broadcast address: "
                "that case skipped\n");
        return;
    }
    ck_assert_msg(rov_net_resolve("test", bcast, &ss, &len, NULL, 0) == ROV_ERR_INVAL,
                  "broadcast address %s accepted", bcast);
    rov_log_set_level(ROV_LOG_WARN);
}
END_TEST

/* A rail's path key (failover's one probe per path): the same host on
 * another port is the same path, another address or family is not, and a
 * malformed address still gets a key. */
static uint64_t path_of(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    uint8_t blob[ROV_NET_ADDR_MAX];

    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        ck_assert_int_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        ck_assert_int_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
    }
    return rov_net_addr_path_key(blob, rov_net_addr_encode(&ss, blob));
}

START_TEST(test_path_key)
{
    const uint8_t junk[3] = {9, 1, 2};

    ck_assert_uint_eq(path_of("192.0.2.1", 5000), path_of("192.0.2.1", 41234));
    ck_assert_uint_ne(path_of("192.0.2.1", 5000), path_of("192.0.2.2", 5000));
    ck_assert_uint_ne(path_of("192.0.2.1", 5000), path_of("198.51.100.1", 5000));
    ck_assert_uint_eq(path_of("2001:db8::1", 1), path_of("2001:db8::1", 2));
    ck_assert_uint_ne(path_of("2001:db8::1", 1), path_of("2001:db8::2", 1));
    ck_assert_uint_ne(path_of("::ffff:192.0.2.1", 1), path_of("192.0.2.1", 1));
    ck_assert_uint_ne(rov_net_addr_path_key(junk, sizeof(junk)), 0);
    ck_assert_uint_ne(rov_net_addr_path_key(junk, 0), 0);
}
END_TEST

struct rails_bad {
    const char *s;
    const char *named; /* what the message must quote; NULL: only non-empty */
};

static const struct rails_bad rails_bad[] = {
    {"", NULL},
    {"tcp,,tcp", NULL},
    {",tcp", NULL},
    {"tcp,", NULL},
    {"tcp@", "tcp@"},
    {"@lo", "@lo"},
    {"tcp@lo@x", "tcp@lo@x"},
    {"tcp;rm", "tcp;rm"},
    {"tcp@lo;rm -rf", "tcp@lo;rm -rf"},
    {"tcp lo", "tcp lo"},
    {"tcp,tcp", "tcp"},
    {"tcp@lo,verbs,tcp@lo", "tcp@lo"},
    {"a,b,c,d,e,f,g,h,i", NULL},
    {"abcdefghijklmnop", "abcdefghijklmnop"}, /* kind of 16 chars */
    {"tcp@0123456789012345678901234567890123456789012345678901234567890123", NULL},
    /* IP literals peers cannot connect to: they would be advertised. */
    {"tcp@0.0.0.0", "tcp@0.0.0.0"},
    {"tcp@lo,tcp@0.0.0.0", "tcp@0.0.0.0"},
    {"tcp@0.1.2.3", "tcp@0.1.2.3"},
    {"tcp@::", "tcp@::"},
    {"tcp@0::0", "tcp@0::0"},
    {"tcp@::ffff:0.0.0.0", "tcp@::ffff:0.0.0.0"},
    {"tcp@255.255.255.255", "tcp@255.255.255.255"},
    {"tcp@224.0.0.1", "tcp@224.0.0.1"},
    {"tcp@239.255.255.250", "tcp@239.255.255.250"},
    {"tcp@ff02::1", "tcp@ff02::1"},
    {"tcp@::ffff:224.0.0.1", "tcp@::ffff:224.0.0.1"},
    {"ucx@0.0.0.0", "ucx@0.0.0.0"},
};

START_TEST(test_rails_bad)
{
    const struct rails_bad *c = &rails_bad[_i];
    struct rov_rail_spec r[ROV_MAX_RAILS];
    unsigned n = 99;
    char err[256] = "";

    ck_assert_msg(rov_parse_rails(c->s, r, &n, err, sizeof(err)) == ROV_ERR_INVAL,
                  "rail list \"%s\" accepted", c->s);
    ck_assert_uint_eq(n, 99);
    ck_assert_msg(err[0] != '\0', "empty error message for \"%s\"", c->s);
    if (c->named)
        assert_err_names(err, c->named);
}
END_TEST

/* ---- rov_config_read ---------------------------------------------------- */

START_TEST(test_read_defaults)
{
    rov_config_t *c = NULL;
    char err[512] = "";

    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(c->nrails, 1);
    ck_assert_str_eq(c->rails[0].name, "tcp");
    ck_assert_str_eq(c->tcp_if, "");
    ck_assert_int_eq(c->log.dflt, ROV_LOG_WARN);
    ck_assert_uint_eq(c->window_msgs, 8192);
    ck_assert_uint_eq(c->window_bytes, 16 * MiB);
    ck_assert_uint_eq(c->eager_limit, 8 * KiB);
    ck_assert_uint_eq(c->max_msg, 64 * MiB);
    ck_assert_uint_eq(c->reorder_msgs, 256);
    ck_assert_uint_eq(c->reorder_bytes, 4 * MiB);
    ck_assert_uint_eq(c->ack_delay_ns, 200 * 1000);
    ck_assert_uint_eq(c->spin_ns, 50 * 1000);
    assert_value(c, "RAILOVER_TCP_RXBUF", "262144");
    ck_assert_uint_le(c->eager_limit, c->max_msg);
    rov_config_free(c);
}
END_TEST

START_TEST(test_read_good)
{
    rov_config_t *c = NULL;
    char err[512] = "";

    setenv("RAILOVER_RAILS", "tcp@lo,tcp@eth0", 1);
    setenv("RAILOVER_TCP_IF", "eth1", 1);
    setenv("RAILOVER_LOG", "debug", 1);
    setenv("RAILOVER_WINDOW_MSGS", "64", 1);
    setenv("RAILOVER_WINDOW_BYTES", "16MiB", 1);
    setenv("RAILOVER_EAGER_LIMIT", "64k", 1);
    setenv("RAILOVER_MAX_MSG", "2M", 1);
    setenv("RAILOVER_REORDER_MSGS", "32", 1);
    setenv("RAILOVER_REORDER_BYTES", "512KiB", 1);
    setenv("RAILOVER_ACK_DELAY", "250ms", 1);
    setenv("RAILOVER_TCP_RXBUF", "1MiB", 1);
    setenv("RAILOVER_SPIN", "0s", 1);
    ck_assert_msg(rov_config_read(err, sizeof(err), &c) == ROV_OK, "rejected: %s", err);
    ck_assert_uint_eq(c->nrails, 2);
    ck_assert_str_eq(c->rails[0].name, "tcp@lo");
    ck_assert_str_eq(c->rails[1].name, "tcp@eth0");
    ck_assert_str_eq(c->tcp_if, "eth1");
    ck_assert_int_eq(c->log.dflt, ROV_LOG_DEBUG);
    ck_assert_uint_eq(c->window_msgs, 64);
    ck_assert_uint_eq(c->window_bytes, 16 * MiB);
    ck_assert_uint_eq(c->eager_limit, 64 * KiB);
    ck_assert_uint_eq(c->max_msg, 2 * MiB);
    ck_assert_uint_eq(c->reorder_msgs, 32);
    ck_assert_uint_eq(c->reorder_bytes, 512 * KiB);
    ck_assert_uint_eq(c->ack_delay_ns, 250 * MS);
    assert_value(c, "RAILOVER_TCP_RXBUF", "1048576");
    ck_assert_uint_eq(c->spin_ns, 0);
    rov_config_free(c);
}
END_TEST

START_TEST(test_read_empty_tcp_if)
{
    rov_config_t *c = NULL;
    char err[512] = "";

    setenv("RAILOVER_TCP_IF", "", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    ck_assert_str_eq(c->tcp_if, "");
    rov_config_free(c);
}
END_TEST

struct env_bad {
    const char *name, *value;
};

static const struct env_bad env_bad[] = {
    {"RAILOVER_RAILS", ""},
    {"RAILOVER_RAILS", "tcp,,tcp"},
    {"RAILOVER_RAILS", "tcp;rm"},
    {"RAILOVER_RAILS", "tcp,tcp"},
    {"RAILOVER_TCP_IF", "eth0;rm"},
    {"RAILOVER_TCP_IF", "eth 0"},
    {"RAILOVER_TCP_IF", "0.0.0.0"},
    {"RAILOVER_TCP_IF", "::"},
    {"RAILOVER_TCP_IF", "255.255.255.255"},
    {"RAILOVER_TCP_IF", "ff02::1"},
    {"RAILOVER_TCP_IF", "0123456789012345678901234567890123456789012345678901234567890123"},
    {"RAILOVER_LOG", "verbose"},
    {"RAILOVER_LOG", ""},
    {"RAILOVER_WINDOW_MSGS", "0"},
    {"RAILOVER_WINDOW_MSGS", "1048577"},
    {"RAILOVER_WINDOW_MSGS", "10k"},
    {"RAILOVER_WINDOW_MSGS", "-1"},
    {"RAILOVER_WINDOW_BYTES", "1k"},
    {"RAILOVER_WINDOW_BYTES", "65GiB"},
    {"RAILOVER_WINDOW_BYTES", "12x"},
    {"RAILOVER_EAGER_LIMIT", "2M"},
    {"RAILOVER_EAGER_LIMIT", ""},
    {"RAILOVER_MAX_MSG", "1023"},
    {"RAILOVER_MAX_MSG", "2G"},
    {"RAILOVER_REORDER_MSGS", "0"},
    {"RAILOVER_REORDER_MSGS", "65537"},
    {"RAILOVER_REORDER_BYTES", "65GiB"},
    {"RAILOVER_REORDER_BYTES", "4 MiB"},
    {"RAILOVER_REORDER_BYTES", "-1"},
    {"RAILOVER_ACK_DELAY", "250"},
    {"RAILOVER_ACK_DELAY", "1.5s"},
    {"RAILOVER_ACK_DELAY", "2s"},
    {"RAILOVER_ACK_DELAY", "999ns"},
    {"RAILOVER_TCP_RXBUF", "99999999999999999999"},
    {"RAILOVER_TCP_RXBUF", "128M"},
    {"RAILOVER_SPIN", "2s"},
    {"RAILOVER_SPIN", "-1us"},
    {"RAILOVER_SPIN", "50"},
    {"RAILOVER_BOND", "yes please"},
    {"RAILOVER_BOND_MIN", "512"},
    {"RAILOVER_BOND_MIN", "2GiB"},
};

START_TEST(test_read_bad)
{
    const struct env_bad *c = &env_bad[_i];
    rov_config_t *cfg = (rov_config_t *)&cfg; /* must stay untouched */
    char err[512] = "";

    setenv(c->name, c->value, 1);
    ck_assert_msg(rov_config_read(err, sizeof(err), &cfg) == ROV_ERR_INVAL,
                  "%s=\"%s\" accepted", c->name, c->value);
    ck_assert_ptr_eq(cfg, (rov_config_t *)&cfg);
    ck_assert_msg(strstr(err, c->name) != NULL, "error \"%s\" does not name %s", err, c->name);
    if (strcmp(c->name, "RAILOVER_RAILS") != 0 && c->value[0])
        ck_assert_msg(strstr(err, c->value) != NULL, "error \"%s\" does not quote \"%s\"", err,
                      c->value);
    /* A NULL error buffer is allowed. */
    ck_assert_int_eq(rov_config_read(NULL, 0, &cfg), ROV_ERR_INVAL);
}
END_TEST

START_TEST(test_read_eager_over_max)
{
    rov_config_t *c = NULL;
    char err[512] = "";

    setenv("RAILOVER_EAGER_LIMIT", "1M", 1);
    setenv("RAILOVER_MAX_MSG", "64k", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_ERR_INVAL);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err, "RAILOVER_EAGER_LIMIT"));
    ck_assert_ptr_nonnull(strstr(err, "RAILOVER_MAX_MSG"));

    /* Equal is fine. */
    setenv("RAILOVER_MAX_MSG", "1M", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    ck_assert_uint_eq(c->eager_limit, c->max_msg);
    rov_config_free(c);
}
END_TEST

START_TEST(test_read_err_truncated)
{
    rov_config_t *c = NULL;
    char err[16];

    memset(err, 'Z', sizeof(err));
    setenv("RAILOVER_WINDOW_MSGS", "nonsense", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_ERR_INVAL);
    ck_assert_uint_eq(strnlen(err, sizeof(err)), sizeof(err) - 1);
    ck_assert_int_eq(strncmp(err, "RAILOVER_WINDOW", 15), 0);
}
END_TEST

/* ---- rov_config_set ----------------------------------------------------- */

static struct rov_config *default_config(void)
{
    rov_config_t *c = NULL;

    ck_assert_int_eq(rov_config_read(NULL, 0, &c), ROV_OK);
    return c;
}

START_TEST(test_set_unknown)
{
    struct rov_config *c = default_config(), before = *c;
    char err[256] = "";

    ck_assert_int_eq(rov_config_set(c, "RAILOVER_NOPE", "1", err, sizeof(err)),
                     ROV_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err, "RAILOVER_NOPE"));
    ck_assert_int_eq(rov_config_set(c, "railover_rails", "tcp", err, sizeof(err)),
                     ROV_ERR_NOT_FOUND);
    ck_assert_int_eq(rov_config_set(c, "", "tcp", err, sizeof(err)), ROV_ERR_NOT_FOUND);
    ck_assert(config_equal(c, &before));
    rov_config_free(c);
}
END_TEST

START_TEST(test_set_good)
{
    struct rov_config *c = default_config();
    char err[256] = "";

    ck_assert_int_eq(rov_config_set(c, "RAILOVER_RAILS", "tcp@lo,tcp@eth0", err, sizeof(err)),
                     ROV_OK);
    ck_assert_uint_eq(c->nrails, 2);
    ck_assert_str_eq(c->rails[1].name, "tcp@eth0");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_ACK_DELAY", "1ms", err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(c->ack_delay_ns, MS);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_WINDOW_BYTES", "64k", err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(c->window_bytes, 64 * KiB);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_LOG", "trace", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(c->log.dflt, ROV_LOG_TRACE);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_TCP_IF", "eth0", err, sizeof(err)), ROV_OK);
    ck_assert_str_eq(c->tcp_if, "eth0");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_TCP_IF", "", err, sizeof(err)), ROV_OK);
    ck_assert_str_eq(c->tcp_if, "");
    rov_config_free(c);
}
END_TEST

START_TEST(test_set_bad_unchanged)
{
    struct rov_config *c = default_config(), before;
    char err[256];

    ck_assert_int_eq(rov_config_set(c, "RAILOVER_RAILS", "tcp@lo", NULL, 0), ROV_OK);
    before = *c;
    for (size_t i = 0; i < sizeof(env_bad) / sizeof(env_bad[0]); i++) {
        err[0] = '\0';
        ck_assert_msg(rov_config_set(c, env_bad[i].name, env_bad[i].value, err, sizeof(err)) ==
                          ROV_ERR_INVAL,
                      "%s=\"%s\" accepted", env_bad[i].name, env_bad[i].value);
        ck_assert_ptr_nonnull(strstr(err, env_bad[i].name));
        ck_assert_msg(config_equal(c, &before),
                      "config changed by rejected %s=\"%s\"", env_bad[i].name, env_bad[i].value);
    }
    /* A rail list that fails late (duplicate after good entries). */
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_RAILS", "ucx,verbs,tcp,ucx", err, sizeof(err)),
                     ROV_ERR_INVAL);
    ck_assert(config_equal(c, &before));
    ck_assert_str_eq(c->rails[0].name, "tcp@lo");
    rov_config_free(c);
}
END_TEST

START_TEST(test_set_eager_over_max)
{
    struct rov_config *c = default_config(), before = *c;
    char err[256] = "";

    /* Default eager limit is 8 KiB: a 4 KiB MAX_MSG would undercut it. */
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_MAX_MSG", "4k", err, sizeof(err)), ROV_ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "RAILOVER_EAGER_LIMIT"));
    ck_assert(config_equal(c, &before));
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_EAGER_LIMIT", "1M", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_MAX_MSG", "1023k", err, sizeof(err)),
                     ROV_ERR_INVAL);
    ck_assert_uint_eq(c->max_msg, 64 * MiB);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_EAGER_LIMIT", "0", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_MAX_MSG", "1k", err, sizeof(err)), ROV_OK);
    ck_assert_uint_eq(c->max_msg, KiB);
    rov_config_free(c);
}
END_TEST

/* ---- rov_config_print --------------------------------------------------- */

static char *print_config(const struct rov_config *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    ck_assert_ptr_nonnull(f);
    rov_config_print(c, f);
    ck_assert_int_eq(fclose(f), 0);
    return text;
}

START_TEST(test_bool)
{
    static const char *const yes[] = {"on", "ON", "yes", "true", "1"};
    static const char *const no[] = {"off", "Off", "no", "false", "0"};
    static const char *const bad[] = {"", "2", "onn", "y", " on", "enabled"};
    char err[256];
    int v;

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        v = 0;
        ck_assert_int_eq(rov_parse_bool(yes[i], &v, err, sizeof(err)), ROV_OK);
        ck_assert_int_eq(v, 1);
        ck_assert_int_eq(rov_parse_bool(no[i], &v, err, sizeof(err)), ROV_OK);
        ck_assert_int_eq(v, 0);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 7;
        ck_assert_int_eq(rov_parse_bool(bad[i], &v, err, sizeof(err)), ROV_ERR_INVAL);
        ck_assert_int_eq(v, 7);
        ck_assert_ptr_nonnull(strstr(err, "boolean"));
    }
}
END_TEST

struct name_value {
    const char *name, *value;
};

/* Each bad value is rejected with a message naming the variable, and the
 * configuration is left exactly as it was. */
static void set_all_rejected(struct rov_config *c, const struct name_value *bad, size_t n)
{
    char err[512];

    for (size_t i = 0; i < n; i++) {
        struct rov_config before = *c;

        err[0] = '\0';
        ck_assert_int_eq(rov_config_set(c, bad[i].name, bad[i].value, err, sizeof(err)),
                         ROV_ERR_INVAL);
        ck_assert_msg(strstr(err, bad[i].name) != NULL, "%s='%s': error does not name the "
                      "variable: %s", bad[i].name, bad[i].value, err);
        ck_assert_msg(memcmp(&before, c, sizeof(before)) == 0, "%s changed on a bad value",
                      bad[i].name);
    }
}

START_TEST(test_failover_vars)
{
    static const struct name_value bad[] = {
        {"RAILOVER_FAILOVER", "maybe"},
        {"RAILOVER_FAILOVER_TIMEOUT", "250"},       /* unit required */
        {"RAILOVER_FAILOVER_TIMEOUT", "1ms"},       /* below 10 ms */
        {"RAILOVER_KEEPALIVE", "-1s"},
        {"RAILOVER_CONNECT_TIMEOUT", "2h"},         /* above 3600 s */
        {"RAILOVER_CONNECT_TIMEOUT", "10"},         /* unit required */
        {"RAILOVER_FAILBACK_DWELL", "2 s"},
        {"RAILOVER_FAULT", "rail=0"},
        {"RAILOVER_FAULT", "rail=9,mode=error,after=1"},
        {"RAILOVER_FAULT", "rail=0,mode=loud,after=1"},
        {"RAILOVER_FAULT", "rail=0,mode=error,after=0"},
        {"RAILOVER_FAULT", "rail=0,mode=error,after=5,every=1"},
        {"RAILOVER_FAULT", "rail=0,mode=error,after=x"},
        {"RAILOVER_FAULT", "rail=0,mode=error,after=1,colour=red"},
        {"RAILOVER_FAULT", "rail=0,mode=silent,at=open"},
        {"RAILOVER_FAULT", "rail=0,mode=silent,at=close,after=3"},
        {"RAILOVER_FAULT", "rail=0,mode=silent,at=last-close,every=3"},
        {"RAILOVER_FAULT", "rail=0,mode=silent,at=close-last"},
        {"RAILOVER_FAULT", "rail=0,mode=error,at=answer"},
        {"RAILOVER_FAULT", "rail=0,mode=error,at=read"},
        {"RAILOVER_FAULT", "rail=0,mode=error,at=read,after=3,every=10"},
        {"RAILOVER_FAULT", "rail=0,mode=error,at=register"},
        {"RAILOVER_FAULT", "rail=0,mode=silent,at=register,after=2"},
        {"RAILOVER_FAULT", "rail=0,mode=error,at=register,after=2,every=5"},
        {"RAILOVER_RUN_DIR", "relative/dir"},
    };
    rov_config_t *c;
    char err[512];

    clean_env();
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    ck_assert_int_eq(c->failover, 1);
    ck_assert_uint_eq(c->failover_timeout_ns, 1000000000ull);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAILOVER_TIMEOUT", "250ms", err, sizeof(err)),
                     ROV_OK);
    ck_assert_uint_eq(c->failover_timeout_ns, 250000000ull);
    ck_assert_uint_eq(c->connect_timeout_ns, 0);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_CONNECT_TIMEOUT", "20s", err, sizeof(err)),
                     ROV_OK);
    ck_assert_uint_eq(c->connect_timeout_ns, 20000000000ull);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAILOVER", "off", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(c->failover, 0);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAULT", "rail=1,mode=silent,after=10,every=100",
                                    err, sizeof(err)), ROV_OK);
    ck_assert_str_eq(c->fault, "rail=1,mode=silent,after=10,every=100");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAULT", "rail=0,mode=error,at=close", err,
                                    sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAULT", "rail=1,mode=silent,at=last-close", err,
                                    sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAULT", "rail=0,mode=error,at=close-answer",
                                    err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAULT", "rail=0,mode=error,at=read,after=3",
                                    err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAULT", "rail=1,mode=error,at=register,after=2",
                                    err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAILBACK_RETRY", "10s", err, sizeof(err)),
                     ROV_ERR_INVAL); /* above RAILOVER_FAILBACK_RETRY_MAX */
    ck_assert_ptr_nonnull(strstr(err, "RAILOVER_FAILBACK_RETRY_MAX"));
    set_all_rejected(c, bad, sizeof(bad) / sizeof(bad[0]));
    rov_config_free(c);
}
END_TEST

/* RAILOVER_FAULT: a number that overflows is refused, not clamped to
 * 2^64-1 (every=2^64-1 made the next firing point divide by zero), and a
 * key given twice is refused, not silently overridden.  The message names
 * the variable and says what is wrong. */
/* The job's identity: a job id (which names a directory of the registry)
 * and a rank, each empty by default (a fresh UUID, the pid). */
START_TEST(test_job_vars)
{
    static const struct name_value bad[] = {
        {"RAILOVER_JOBID", "a b"},
        {"RAILOVER_JOBID", "../up"},
        {"RAILOVER_JOBID", ".hidden"},
        {"RAILOVER_JOBID", "x/y"},
        {"RAILOVER_JOBID", "jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj"},
        {"RAILOVER_RANK", "-1"},
        {"RAILOVER_RANK", "abc"},
        {"RAILOVER_RANK", "1.5"},
        {"RAILOVER_RANK", "2147483648"},
    };
    struct rov_config *c = default_config();
    char buf[128], err[512];

    ck_assert_str_eq(c->jobid, "");
    ck_assert_int_eq(c->rank, -1);
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_RANK", buf, sizeof(buf)), ROV_OK);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_JOBID", "ompi-1a2b.run_3", err, sizeof(err)),
                     ROV_OK);
    ck_assert_str_eq(c->jobid, "ompi-1a2b.run_3");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_RANK", "2147483647", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(c->rank, 2147483647);
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_RANK", buf, sizeof(buf)), ROV_OK);
    ck_assert_str_eq(buf, "2147483647");
    set_all_rejected(c, bad, sizeof(bad) / sizeof(bad[0]));
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_JOBID", "", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_RANK", "", err, sizeof(err)), ROV_OK);
    ck_assert_str_eq(c->jobid, "");
    ck_assert_int_eq(c->rank, -1);
    rov_config_free(c);

    /* From the environment, refused as any setting is: naming it, the
     * value and the rule. */
    setenv("RAILOVER_JOBID", "../up", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_ERR_INVAL);
    ck_assert_msg(strstr(err, "RAILOVER_JOBID='../up': '../up' is not a job id: 1 to 63 "
                          "characters") != NULL, "%s", err);
    setenv("RAILOVER_JOBID", "j0", 1);
    setenv("RAILOVER_RANK", "3", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    ck_assert_str_eq(c->jobid, "j0");
    ck_assert_int_eq(c->rank, 3);
    rov_config_free(c);
}
END_TEST

/* RAILOVER_CHECKPOINT_SIGNAL (ccp/cue.c): a signal the process can catch
 * and that no fault raises, by name or number; the refusal says why. */
START_TEST(test_checkpoint_signal)
{
    static const struct name_value bad[] = {
        {"RAILOVER_CHECKPOINT_SIGNAL", "KILL"},     {"RAILOVER_CHECKPOINT_SIGNAL", "SIGSTOP"},
        {"RAILOVER_CHECKPOINT_SIGNAL", "9"},        {"RAILOVER_CHECKPOINT_SIGNAL", "SEGV"},
        {"RAILOVER_CHECKPOINT_SIGNAL", "USR3"},     {"RAILOVER_CHECKPOINT_SIGNAL", "0"},
        {"RAILOVER_CHECKPOINT_SIGNAL", "33"},       {"RAILOVER_CHECKPOINT_SIGNAL", "65"},
        {"RAILOVER_CHECKPOINT_SIGNAL", "RTMIN+99"}, {"RAILOVER_CHECKPOINT_SIGNAL", "-12"},
        {"RAILOVER_CHECKPOINT_SIGNAL", "12x"},
    };
    static const char *const good[] = {"", "off", "USR2", "sigusr1", "12", "RTMIN", "RTMIN+3",
                                       "RTMAX-1", "HUP"};
    struct rov_config *c = default_config();
    char err[512];

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ck_assert_msg(rov_config_set(c, "RAILOVER_CHECKPOINT_SIGNAL", good[i], err,
                                     sizeof(err)) == ROV_OK, "'%s' refused: %s", good[i], err);
    set_all_rejected(c, bad, sizeof(bad) / sizeof(bad[0]));
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_CHECKPOINT_SIGNAL", "KILL", err, sizeof(err)),
                     ROV_ERR_INVAL);
    ck_assert_msg(strstr(err, "RAILOVER_CHECKPOINT_SIGNAL='KILL': SIGKILL cannot be caught"),
                  "%s", err);
    rov_config_free(c);

    setenv("RAILOVER_CHECKPOINT_SIGNAL", "STOP", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_ERR_INVAL);
    ck_assert_msg(strstr(err, "SIGSTOP cannot be caught") != NULL, "%s", err);
    setenv("RAILOVER_CHECKPOINT_SIGNAL", "nosuch", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_ERR_INVAL);
    ck_assert_msg(strstr(err, "'nosuch': not a signal") != NULL, "%s", err);
}
END_TEST

START_TEST(test_fault_strict)
{
    static const struct {
        const char *value, *why;
    } bad[] = {
        {"rail=0,mode=error,after=18446744073709551616", "out of range"},
        {"rail=0,mode=error,after=99999999999999999999999", "out of range"},
        {"rail=0,mode=error,after=281474976710657", "outside"},
        {"rail=0,mode=error,after=1,every=18446744073709551615", "outside"},
        {"rail=0,mode=error,after=1,seed=18446744073709551616", "out of range"},
        {"rail=18446744073709551616,mode=error,after=1", "out of range"},
        {"rail=0,mode=error,after=+5", "not a non-negative integer"},
        {"rail=0,rail=1,mode=error,after=1", "rail= is given twice"},
        {"rail=0,mode=error,mode=silent,after=1", "mode= is given twice"},
        {"rail=0,mode=error,after=1,after=2", "after= is given twice"},
        {"rail=0,mode=error,after=5,every=10,every=20", "every= is given twice"},
        {"rail=0,mode=error,after=5,seed=1,seed=2", "seed= is given twice"},
        {"rail=0,mode=silent,at=close,at=last-close", "at= is given twice"},
        {"rail=0,mode=error,after=1,colour=red", "unknown key 'colour'"},
    };
    struct rov_config *c = default_config();
    char err[512];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct rov_config before = *c;

        err[0] = '\0';
        ck_assert_msg(rov_config_set(c, "RAILOVER_FAULT", bad[i].value, err, sizeof(err)) ==
                          ROV_ERR_INVAL, "RAILOVER_FAULT=%s accepted", bad[i].value);
        ck_assert_msg(strstr(err, "RAILOVER_FAULT") && strstr(err, bad[i].why),
                      "RAILOVER_FAULT=%s: error \"%s\" does not name the variable and say "
                      "'%s'", bad[i].value, err, bad[i].why);
        ck_assert_msg(memcmp(&before, c, sizeof(before)) == 0, "changed on a bad value");
    }
    /* The largest counts and any 64-bit seed are fine. */
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAULT",
                                    "rail=7,mode=silent,after=281474976710656,"
                                    "every=281474976710656,seed=18446744073709551615",
                                    err, sizeof(err)), ROV_OK);
    rov_config_free(c);
}
END_TEST

START_TEST(test_verbs_vars)
{
    static const struct name_value bad[] = {
        {"RAILOVER_VERBS_CM", "ib"},
        {"RAILOVER_VERBS_CM", ""},
        {"RAILOVER_VERBS_CM", "oobx"},
        {"RAILOVER_VERBS_GID_INDEX", "256"},
        {"RAILOVER_VERBS_GID_INDEX", "Auto"},
        {"RAILOVER_VERBS_GID_INDEX", "-1"},
        {"RAILOVER_VERBS_TIMEOUT", "0"},
        {"RAILOVER_VERBS_TIMEOUT", "32"},
        {"RAILOVER_VERBS_RETRY", "0"},
        {"RAILOVER_VERBS_RETRY", "8"},
        {"RAILOVER_VERBS_EAGER", "100"},
        {"RAILOVER_VERBS_EAGER", "2M"},
        {"RAILOVER_VERBS_RECV", "3"},
        {"RAILOVER_VERBS_DEV", "mlx5_0;rm -rf"},
        {"RAILOVER_VERBS_DEV", "mlx5 0"},
    };
    rov_config_t *c;
    char err[512];

    clean_env();
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    if (!have_verbs()) {
        /* No verbs rail in this build: its variables are unknown, said so. */
        ck_assert_int_eq(rov_config_set(c, "RAILOVER_VERBS_CM", "oob", err, sizeof(err)),
                         ROV_ERR_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(err, "RAILOVER_VERBS_CM"));
        rov_config_free(c);
        return;
    }
    /* Defaults: checkpointable setup, automatic GID, a finite RC retry. */
    assert_value(c, "RAILOVER_VERBS_CM", "oob");
    assert_value(c, "RAILOVER_VERBS_GID_INDEX", "auto");
    assert_value(c, "RAILOVER_VERBS_RETRY", "6");
    assert_value(c, "RAILOVER_VERBS_TIMEOUT", "14");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_VERBS_CM", "rdmacm", err, sizeof(err)), ROV_OK);
    assert_value(c, "RAILOVER_VERBS_CM", "rdmacm");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_VERBS_GID_INDEX", "3", err, sizeof(err)),
                     ROV_OK);
    assert_value(c, "RAILOVER_VERBS_GID_INDEX", "3");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_VERBS_GID_INDEX", "auto", err, sizeof(err)),
                     ROV_OK);
    assert_value(c, "RAILOVER_VERBS_GID_INDEX", "auto");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_VERBS_DEV", "mlx5_0:1,rxe0", err, sizeof(err)),
                     ROV_OK);
    assert_value(c, "RAILOVER_VERBS_DEV", "mlx5_0:1,rxe0");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_VERBS_REGCACHE", "0", err, sizeof(err)),
                     ROV_OK);
    assert_value(c, "RAILOVER_VERBS_REGCACHE", "0");
    set_all_rejected(c, bad, sizeof(bad) / sizeof(bad[0]));
    rov_config_free(c);
}
END_TEST

START_TEST(test_print_names)
{
    struct rov_config *c = default_config();
    char *text, needle[64];

    ck_assert_int_eq(rov_config_set(c, "RAILOVER_RAILS", "tcp@lo,tcp@eth0", NULL, 0), ROV_OK);
    text = print_config(c);
    for (size_t i = 0; i < NVARS; i++) {
        if (!have_verbs() && strncmp(all_vars[i], "RAILOVER_VERBS_", 15) == 0)
            continue;
        snprintf(needle, sizeof(needle), "%s=", all_vars[i]);
        ck_assert_msg(strstr(text, needle) != NULL, "'%s' missing from:\n%s", needle, text);
    }
    ck_assert_ptr_nonnull(strstr(text, "RAILOVER_RAILS=tcp@lo,tcp@eth0"));
    ck_assert_ptr_nonnull(strstr(text, "RAILOVER_LOG=warn"));
    ck_assert_ptr_nonnull(strstr(text, "RAILOVER_WINDOW_MSGS=8192"));
    /* One line per variable, each with its explanation. */
    {
        size_t lines = 0, comments = 0;

        for (const char *p = text; *p; p++)
            lines += *p == '\n';
        for (const char *p = text; (p = strstr(p, "  # ")) != NULL; p++)
            comments++;
        ck_assert_uint_eq(lines, known_vars());
        ck_assert_uint_eq(comments, known_vars());
    }
    free(text);
    rov_config_free(c);
}
END_TEST

/* Feed every printed "NAME=value" back through rov_config_set(). */
static void reparse_printed(const char *text, struct rov_config *into)
{
    char *copy = strdup(text), *save = NULL;

    ck_assert_ptr_nonnull(copy);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '='), *comment = strstr(line, "  # ");
        char err[512] = "";

        ck_assert_ptr_nonnull(eq);
        ck_assert_ptr_nonnull(comment);
        *eq = '\0';
        *comment = '\0';
        ck_assert_msg(rov_config_set(into, line, eq + 1, err, sizeof(err)) == ROV_OK,
                      "printed %s=%s does not parse back: %s", line, eq + 1, err);
    }
    free(copy);
}

START_TEST(test_print_roundtrip)
{
    struct rov_config *c = default_config(), *d = default_config();
    char *text;

    ck_assert_int_eq(rov_config_set(c, "RAILOVER_RAILS", "verbs@mlx5_0,tcp@eth0", NULL, 0),
                     ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_TCP_IF", "eth1", NULL, 0), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_LOG", "info", NULL, 0), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_WINDOW_MSGS", "7", NULL, 0), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_WINDOW_BYTES", "5k", NULL, 0), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_ACK_DELAY", "3ms", NULL, 0), ROV_OK);
    text = print_config(c);
    ck_assert_int_eq(rov_config_set(d, "RAILOVER_RAILS", "ucx", NULL, 0), ROV_OK);
    reparse_printed(text, d);
    ck_assert_msg(config_equal(c, d), "printed configuration differs:\n%s", text);
    free(text);
    rov_config_free(c);
    rov_config_free(d);
}
END_TEST

/* The enumeration an embedder builds its own parameters from: every
 * variable once, with its default
 * that parses back, its help, a range for numbers, and
 * rov_config_get() giving the effective value. */
START_TEST(test_enumeration)
{
    struct rov_config *c = default_config(), *d = default_config();
    char buf[256], err[512];
    bool seen[NVARS] = {false};

    ck_assert_int_eq(rov_config_var_count(), (int)known_vars());
    ck_assert_ptr_null(rov_config_var(-1));
    ck_assert_ptr_null(rov_config_var((int)known_vars()));
    for (int i = 0; i < rov_config_var_count(); i++) {
        const rov_config_var_t *v = rov_config_var(i);

        size_t k = 0;

        ck_assert_ptr_nonnull(v);
        while (k < NVARS && strcmp(all_vars[k], v->name) != 0)
            k++;
        ck_assert_msg(k < NVARS, "%s is not a known variable", v->name);
        ck_assert_msg(!seen[k], "%s twice", v->name);
        seen[k] = true;
        ck_assert_msg(v->help[0] != '\0', "%s: no help", v->name);
        ck_assert_ptr_nonnull(v->units);
        ck_assert_ptr_nonnull(v->choices);
        /* The default is the effective value of an untouched configuration... */
        ck_assert_int_eq(rov_config_get(c, v->name, buf, sizeof(buf)), ROV_OK);
        ck_assert_str_eq(buf, v->default_value);
        /* ...and parses back to itself. */
        ck_assert_msg(rov_config_set(d, v->name, v->default_value, err, sizeof(err)) == ROV_OK,
                      "%s's default '%s' does not parse: %s", v->name, v->default_value, err);
        switch (v->type) {
        case ROV_CONFIG_COUNT:
        case ROV_CONFIG_SIZE:
        case ROV_CONFIG_DURATION:
            ck_assert_msg(v->min <= v->max && v->max > 0, "%s: range [%" PRIu64 ", %" PRIu64 "]",
                          v->name, v->min, v->max);
            break;
        case ROV_CONFIG_CHOICE:
            ck_assert_msg(strstr(v->choices, v->default_value) != NULL, "%s: %s not in %s",
                          v->name, v->default_value, v->choices);
            break;
        default:
            break;
        }
    }
    ck_assert_msg(config_equal(c, d), "the defaults do not give the default configuration");
    /* Effective values, and what does not fit. */
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAILOVER_TIMEOUT", "1500ms", NULL, 0), ROV_OK);
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_FAILOVER_TIMEOUT", buf, sizeof(buf)), ROV_OK);
    ck_assert_str_eq(buf, "1500ms");
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_FAILOVER_TIMEOUT", buf, 4), ROV_ERR_MSGSIZE);
    ck_assert_str_eq(buf, "150");
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_NO_SUCH", buf, sizeof(buf)), ROV_ERR_NOT_FOUND);
    rov_config_free(c);
    rov_config_free(d);
}
END_TEST

/* Each layer declares its own variables: the enumeration gives the
 * transport's first, then each other layer's (failover/, the tcp rail, the
 * verbs rail) together, by layer name; a variable of a layer is set and
 * read in that layer's block without touching another's. */
START_TEST(test_layer_tables)
{
    struct rov_config *c = default_config();
    const char *const firsts[] = {"RAILOVER_FAILBACK", "RAILOVER_TCP_RXBUF",
                                  "RAILOVER_VERBS_DEV"};
    int at[3], n = rov_config_var_count(), k = 0;

    ck_assert_str_eq(rov_config_var(0)->name, "RAILOVER_RAILS");
    for (int j = 0; j < 3; j++) {
        at[j] = -1;
        for (int i = 0; i < n; i++)
            if (strcmp(rov_config_var(i)->name, firsts[j]) == 0)
                at[j] = i;
    }
    ck_assert_int_gt(at[0], 0);
    ck_assert_int_gt(at[1], at[0]);
    if (have_verbs())
        ck_assert_int_gt(at[2], at[1]);
    /* failover/'s four, together */
    for (int i = at[0]; i < at[0] + 4; i++)
        k += strncmp(rov_config_var(i)->name, "RAILOVER_FAILBACK", 17) == 0;
    ck_assert_int_eq(k, 4);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_TCP_RXBUF", "64k", NULL, 0), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_FAILBACK_DWELL", "7s", NULL, 0), ROV_OK);
    assert_value(c, "RAILOVER_TCP_RXBUF", "65536");
    assert_value(c, "RAILOVER_FAILBACK_DWELL", "7s");
    assert_value(c, "RAILOVER_FAILBACK_RETRY_MAX", "5s");
    assert_value(c, "RAILOVER_WINDOW_MSGS", "8192");
    if (have_verbs())
        assert_value(c, "RAILOVER_VERBS_RECV", "64");
    rov_config_free(c);
}
END_TEST

START_TEST(test_print_roundtrip_sub_us_duration)
{
    /* The effective value must be printed exactly, even when RAILOVER_ACK_DELAY
     * is not a whole number of microseconds (1500ns is accepted). */
    struct rov_config *c = default_config(), *d = default_config();
    char *text;

    ck_assert_int_eq(rov_config_set(c, "RAILOVER_ACK_DELAY", "1500ns", NULL, 0), ROV_OK);
    ck_assert_uint_eq(c->ack_delay_ns, 1500);
    text = print_config(c);
    reparse_printed(text, d);
    ck_assert_msg(d->ack_delay_ns == 1500, "1500ns printed as something that reads back as "
                  "%" PRIu64 "ns:\n%s", d->ack_delay_ns, text);
    free(text);
    rov_config_free(c);
    rov_config_free(d);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc;

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
    tc = tcase_create("parse");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_u64_good, 0, N(u64_good));
    tcase_add_loop_test(tc, test_u64_bad, 0, N(u64_bad));
    tcase_add_test(tc, test_u64_null_and_short_err);
    tcase_add_loop_test(tc, test_size_good, 0, N(size_good));
    tcase_add_loop_test(tc, test_size_bad, 0, N(size_bad));
    tcase_add_loop_test(tc, test_duration_good, 0, N(dur_good));
    tcase_add_loop_test(tc, test_duration_bad, 0, N(dur_bad));
    tcase_add_test(tc, test_rails_good);
    tcase_add_loop_test(tc, test_rails_bad, 0, N(rails_bad));
    tcase_add_test(tc, test_rails_unusable_reason);
    tcase_add_test(tc, test_resolve_unusable);
    suite_add_tcase(s, tc);

    tc = tcase_create("env");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, clean_env, restore_log);
    tcase_add_test(tc, test_read_defaults);
    tcase_add_test(tc, test_read_good);
    tcase_add_test(tc, test_read_empty_tcp_if);
    tcase_add_loop_test(tc, test_read_bad, 0, N(env_bad));
    tcase_add_test(tc, test_read_eager_over_max);
    tcase_add_test(tc, test_read_err_truncated);
    suite_add_tcase(s, tc);

    tc = tcase_create("set_print");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, clean_env, restore_log);
    tcase_add_test(tc, test_set_unknown);
    tcase_add_test(tc, test_set_good);
    tcase_add_test(tc, test_set_bad_unchanged);
    tcase_add_test(tc, test_set_eager_over_max);
    tcase_add_test(tc, test_bool);
    tcase_add_test(tc, test_failover_vars);
    tcase_add_test(tc, test_fault_strict);
    tcase_add_test(tc, test_job_vars);
    tcase_add_test(tc, test_checkpoint_signal);
    tcase_add_test(tc, test_verbs_vars);
    tcase_add_test(tc, test_layer_tables);
    tcase_add_test(tc, test_print_names);
    tcase_add_test(tc, test_print_roundtrip);
    tcase_add_test(tc, test_print_roundtrip_sub_us_duration);
    tcase_add_test(tc, test_enumeration);
    tcase_add_test(tc, test_path_key);
    suite_add_tcase(s, tc);
#undef N
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
