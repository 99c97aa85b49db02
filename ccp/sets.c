/* Checkpoint sets and their manifests (sets.h): written and pruned by the
 * client (client.c), read by the restart (restart.c); the ranks write only
 * inside a set (ccp.c). */
#define _GNU_SOURCE
#include "ccp/sets.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST_MAGIC "railover-checkpoint 1\n"
/* A manifest's size: a line per rank. */
#define MANIFEST_MAX (64 + 2048 * (CCP_HOST_MAX + 96))

bool ccp_set_path(const char *jobdir, long set, const char *leaf, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/sets/%ld%s%s", jobdir, set, leaf ? "/" : "", leaf ? leaf : "");

    return n > 0 && (size_t)n < len;
}

/* The set numbers in <jobdir>/sets, ascending (a name that is not a number
 * is not a set). */
static rov_status_t set_numbers(const char *jobdir, long **nums_p, size_t *n_p, char *err,
                                size_t err_len)
{
    char dir[CCP_DIR_MAX + ROV_JOB_MAX + 16];
    size_t n = 0, cap = 0;
    long *nums = NULL;
    struct dirent *e;
    DIR *d;

    snprintf(dir, sizeof(dir), "%s/sets", jobdir);
    *nums_p = NULL;
    *n_p = 0;
    d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return ROV_OK;
        snprintf(err, err_len, "cannot list %s: %s", dir, strerror(errno));
        return errno == EACCES ? ROV_ERR_REFUSED : ROV_ERR_IO;
    }
    while ((e = readdir(d)) != NULL) {
        char *end;
        long v;

        errno = 0;
        v = strtol(e->d_name, &end, 10);
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || *end || errno || v > INT32_MAX)
            continue;
        if (n == cap) {
            long *more = realloc(nums, (cap = cap ? 2 * cap : 8) * sizeof(*more));

            if (!more) {
                free(nums);
                closedir(d);
                return ROV_ERR_NOMEM;
            }
            nums = more;
        }
        nums[n++] = v;
    }
    closedir(d);
    for (size_t i = 1; i < n; i++) /* (a handful) */
        for (size_t j = i; j > 0 && nums[j - 1] > nums[j]; j--) {
            long t = nums[j];

            nums[j] = nums[j - 1];
            nums[j - 1] = t;
        }
    *nums_p = nums;
    *n_p = n;
    return ROV_OK;
}

/* The set's `ranks`: one a line, so that a command's shell reads it. */
static rov_status_t ranks_write(const char *jobdir, long set, const struct ccp_record *recs,
                                size_t n, char *err, size_t err_len)
{
    char path[CCP_DIR_MAX + ROV_JOB_MAX + 40];
    rov_status_t st;
    FILE *f;
    int fd;

    if (!ccp_set_path(jobdir, set, "ranks", path, sizeof(path)))
        return ROV_ERR_INVAL;
    st = ccp_open(path, O_WRONLY | O_CREAT | O_EXCL, 0600, &fd, err, err_len);
    if (st != ROV_OK)
        return st;
    f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
        return ROV_ERR_IO;
    }
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%ld\n", recs[i].rank);
    if (fclose(f) != 0) {
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
        return ROV_ERR_IO;
    }
    return ROV_OK;
}

rov_status_t ccp_set_new(const char *jobdir, const struct ccp_record *recs, size_t nrecs,
                         long *set_p, char *err, size_t err_len)
{
    char path[CCP_DIR_MAX + ROV_JOB_MAX + 40];
    long *nums, next;
    size_t n;
    rov_status_t st;

    snprintf(path, sizeof(path), "%s/sets", jobdir);
    st = ccp_own_dir(path, true, err, err_len);
    if (st == ROV_OK)
        st = set_numbers(jobdir, &nums, &n, err, err_len);
    if (st != ROV_OK)
        return st;
    next = n ? nums[n - 1] + 1 : 1;
    free(nums);
    /* (the job's lock is held: nobody else makes one meanwhile; a directory
     * that appears anyway is not taken over) */
    for (;; next++) {
        if (!ccp_set_path(jobdir, next, NULL, path, sizeof(path)))
            return ROV_ERR_INVAL;
        if (mkdir(path, 0700) == 0)
            break;
        if (errno != EEXIST) {
            snprintf(err, err_len, "cannot create %s: %s", path, strerror(errno));
            return ROV_ERR_IO;
        }
    }
    *set_p = next;
    st = ccp_own_dir(path, false, err, err_len);
    return st == ROV_OK ? ranks_write(jobdir, next, recs, nrecs, err, err_len) : st;
}

void ccp_set_abort(const char *jobdir, long set)
{
    char path[CCP_DIR_MAX + ROV_JOB_MAX + 40], err[256];
    int fd;

    if (ccp_set_path(jobdir, set, "abort", path, sizeof(path)) &&
        ccp_open(path, O_WRONLY | O_CREAT | O_EXCL, 0600, &fd, err, sizeof(err)) == ROV_OK)
        close(fd);
}

rov_status_t ccp_manifest_write(const char *jobdir, const uint8_t key[ROV_KEY_LEN], long set,
                                const struct ccp_record *recs, size_t n, char *err,
                                size_t err_len)
{
    size_t cap = 128 + n * (CCP_HOST_MAX + 96), len;
    char *text = malloc(cap), path[CCP_DIR_MAX + ROV_JOB_MAX + 40];
    rov_status_t st;
    int k;

    if (!text)
        return ROV_ERR_NOMEM;
    k = snprintf(text, cap, MANIFEST_MAGIC "job=%s\nset=%ld\ntime=%lld\nranks=%zu\n",
                 n ? recs[0].job : "", set, (long long)time(NULL), n);
    len = (size_t)k;
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "rank=%ld pid=%d tree=%d unit=%ld host=%s\n",
                                recs[i].rank, recs[i].pid, recs[i].tree,
                                ccp_unit_of(recs, n, i), recs[i].host);
    if (!ccp_set_path(jobdir, set, "manifest", path, sizeof(path)) || len >= MANIFEST_MAX) {
        free(text);
        snprintf(err, err_len, "the manifest of set %ld is too large", set);
        return ROV_ERR_INVAL;
    }
    st = ccp_sealed_write(path, key, text, len);
    if (st != ROV_OK)
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
    free(text);
    return st;
}

rov_status_t ccp_manifest_read(const char *jobdir, const uint8_t key[ROV_KEY_LEN], long set,
                               struct ccp_manifest *m, char *err, size_t err_len)
{
    char path[CCP_DIR_MAX + ROV_JOB_MAX + 40], *text = malloc(MANIFEST_MAX), *line;
    long v, count;
    size_t len;
    rov_status_t st;

    memset(m, 0, sizeof(*m));
    if (!text)
        return ROV_ERR_NOMEM;
    if (!ccp_set_path(jobdir, set, "manifest", path, sizeof(path))) {
        free(text);
        return ROV_ERR_INVAL;
    }
    st = ccp_sealed_read(path, key, MANIFEST_MAGIC, "checkpoint manifest", text, MANIFEST_MAX,
                         &len, err, err_len);
    if (st == ROV_OK &&
        (!ccp_field(text, "job", m->job, sizeof(m->job)) ||
         !ccp_number(text, "set", set, set, &v) || !ccp_number(text, "ranks", 1, 1 << 20, &count) ||
         !ccp_field(text, "time", path, sizeof(path)))) {
        snprintf(err, err_len, "checkpoint manifest of set %ld lacks a field or has one out of "
                 "range", set);
        st = ROV_ERR_PROTO;
    }
    if (st == ROV_OK) {
        m->set = set;
        m->time = strtoll(path, NULL, 10);
        m->ranks = calloc((size_t)count, sizeof(*m->ranks));
        if (!m->ranks)
            st = ROV_ERR_NOMEM;
    }
    for (line = text; st == ROV_OK && line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        struct ccp_set_rank *r = &m->ranks[m->n];
        int used = 0;

        if (strncmp(line, "rank=", 5) != 0)
            continue;
        if (m->n == (size_t)count ||
            sscanf(line, "rank=%ld pid=%d tree=%d unit=%ld host=%63[^\n]%n", &r->rank, &r->pid,
                   &r->tree, &r->unit, r->host, &used) != 5 || r->rank < 0 || r->pid < 1 ||
            r->tree < 1 || r->unit < 0) {
            snprintf(err, err_len, "checkpoint manifest of set %ld has a malformed rank line",
                     set);
            st = ROV_ERR_PROTO;
        }
        m->n++;
    }
    if (st == ROV_OK && m->n != (size_t)count) {
        snprintf(err, err_len, "checkpoint manifest of set %ld lists %zu ranks, not %ld", set,
                 m->n, count);
        st = ROV_ERR_PROTO;
    }
    free(text);
    if (st != ROV_OK)
        ccp_manifest_free(m);
    return st;
}

void ccp_manifest_free(struct ccp_manifest *m)
{
    free(m->ranks);
    m->ranks = NULL;
    m->n = 0;
}

rov_status_t ccp_set_list(const char *jobdir, const uint8_t key[ROV_KEY_LEN],
                          struct ccp_set_info **sets_p, size_t *n_p, char *err, size_t err_len)
{
    struct ccp_set_info *sets;
    long *nums;
    size_t n;
    rov_status_t st = set_numbers(jobdir, &nums, &n, err, err_len);

    *sets_p = NULL;
    *n_p = 0;
    if (st != ROV_OK)
        return st;
    sets = calloc(n ? n : 1, sizeof(*sets));
    if (!sets) {
        free(nums);
        return ROV_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct ccp_manifest m;
        char why[256];

        sets[i].set = nums[i];
        if (ccp_manifest_read(jobdir, key, nums[i], &m, why, sizeof(why)) == ROV_OK) {
            sets[i].complete = true;
            sets[i].time = m.time;
            sets[i].ranks = m.n;
            ccp_manifest_free(&m);
        }
    }
    free(nums);
    *sets_p = sets;
    *n_p = n;
    return ROV_OK;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

int ccp_set_prune(const char *jobdir, const uint8_t key[ROV_KEY_LEN], long done, long keep,
                  char *err, size_t err_len)
{
    struct ccp_set_info *sets;
    size_t n;
    long kept = 0;
    int removed = 0;

    if (ccp_set_list(jobdir, key, &sets, &n, err, err_len) != ROV_OK)
        return 0;
    err[0] = '\0';
    for (size_t i = n; i-- > 0;) {
        char path[CCP_DIR_MAX + ROV_JOB_MAX + 40];

        if (sets[i].complete && kept < keep) {
            kept++;
            continue;
        }
        if (sets[i].set >= done || !ccp_set_path(jobdir, sets[i].set, NULL, path, sizeof(path)))
            continue; /* (the newest, being written, is never removed here) */
        /* Depth first, never following a link (FTW_PHYS), never leaving the
         * filesystem (FTW_MOUNT). */
        if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) == 0)
            removed++;
        else if (!err[0])
            snprintf(err, err_len, "cannot remove checkpoint set %s: %s", path, strerror(errno));
    }
    free(sets);
    return removed;
}
