/* The job registry's files (registry.h): shared by the ranks (ccp.c writes
 * their records) and the client (client.c reads them). */
#define _GNU_SOURCE
#include "ccp/registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RECORD_MAGIC "railover-rank 1\n"
#define SEAL_LABEL "railover job record"

rov_status_t ccp_base_dir(const char *job_dir, const char *run_dir, char *out, size_t len)
{
    char run[ROV_CTL_RUN_DIR_MAX];
    int n;

    if (job_dir[0])
        n = snprintf(out, len, "%s", job_dir);
    else if (run_dir[0])
        n = snprintf(out, len, "%s/jobs", run_dir);
    else if (rov_ctl_run_dir(NULL, run, sizeof(run)) == ROV_OK)
        n = snprintf(out, len, "%s/jobs", run);
    else
        return ROV_ERR_INVAL;
    return n > 0 && (size_t)n < len ? ROV_OK : ROV_ERR_INVAL;
}

/* mkdir -p, the directories it makes owner-only. */
static int mkdirs(const char *path)
{
    char buf[CCP_DIR_MAX];

    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

rov_status_t ccp_job_dir(const char *base, const char *job, bool create, char *out, size_t len,
                         char *err, size_t err_len)
{
    struct stat st;
    int n = snprintf(out, len, "%s/%s", base, job);

    if (!rov_jobid_ok(job)) {
        snprintf(err, err_len, "'%s' is not a job id (1 to %d of A-Z a-z 0-9 . _ -)", job,
                 ROV_JOB_MAX);
        return ROV_ERR_INVAL;
    }
    if (n < 0 || (size_t)n >= len) {
        snprintf(err, err_len, "registry path too long: %s/%s", base, job);
        return ROV_ERR_INVAL;
    }
    if (create && mkdirs(out) < 0) {
        snprintf(err, err_len, "cannot create %s: %s", out, strerror(errno));
        return ROV_ERR_IO;
    }
    if (lstat(out, &st) < 0) {
        if (errno == EACCES || errno == EPERM) {
            snprintf(err, err_len, "job %s: the registry %s is not readable by this user "
                     "(uid %u): not your job", job, base, (unsigned)geteuid());
            return ROV_ERR_REFUSED;
        }
        snprintf(err, err_len, "no job %s in the registry %s", job, base);
        return ROV_ERR_NOT_FOUND;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        snprintf(err, err_len, "job %s: %s is not a directory of this user (uid %u) with mode "
                 "0700: not your job", job, out, (unsigned)geteuid());
        return ROV_ERR_REFUSED;
    }
    return ROV_OK;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static bool unhex(const char *s, size_t slen, uint8_t *b, size_t n)
{
    if (slen != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        char two[3] = {s[2 * i], s[2 * i + 1], 0};
        char *end;

        v = (unsigned)strtoul(two, &end, 16);
        if (*end || !two[0] || !two[1] || two[0] == '+' || two[0] == '-' || two[0] == ' ')
            return false;
        b[i] = (uint8_t)v;
    }
    return true;
}

rov_status_t ccp_open(const char *path, int flags, mode_t mode, int *fd_p, char *err,
                      size_t err_len)
{
    const char *what = NULL;
    struct stat st;
    int fd, e;

    *fd_p = -1;
    /* O_NONBLOCK: a FIFO planted there must not hang the open. */
    fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
    if (fd < 0) {
        e = errno;
        if (e == ELOOP) {
            snprintf(err, err_len, "%s is a symbolic link: the job's registry was tampered with "
                     "(refusing to follow it)", path);
            return ROV_ERR_PROTO;
        }
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(e));
        errno = e;
        return e == ENOENT ? ROV_ERR_NOT_FOUND
                           : e == EACCES || e == EPERM ? ROV_ERR_REFUSED
                           : e == EEXIST ? ROV_ERR_PROTO : ROV_ERR_IO;
    }
    if (fstat(fd, &st) < 0) {
        e = errno;
        snprintf(err, err_len, "cannot stat %s: %s", path, strerror(e));
        close(fd);
        errno = e;
        return ROV_ERR_IO;
    }
    if (!S_ISREG(st.st_mode))
        what = "is not a regular file";
    else if (st.st_uid != geteuid())
        what = "belongs to another user";
    else if ((flags & O_ACCMODE) != O_RDONLY && st.st_nlink != 1)
        what = "has another name (a hard link)";
    if (what) {
        snprintf(err, err_len, "%s %s: the job's registry was tampered with (refusing to use it)",
                 path, what);
        close(fd);
        errno = EPERM;
        return ROV_ERR_PROTO;
    }
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
        e = errno;
        close(fd);
        errno = e;
        return ROV_ERR_IO;
    }
    *fd_p = fd;
    return ROV_OK;
}

rov_status_t ccp_own_dir(const char *path, bool create, char *err, size_t err_len)
{
    struct stat st;
    int fd;

    if (create && mkdir(path, 0700) < 0 && errno != EEXIST) {
        snprintf(err, err_len, "cannot create %s: %s", path, strerror(errno));
        return ROV_ERR_IO;
    }
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;

        if (e == ELOOP || e == ENOTDIR) {
            snprintf(err, err_len, "%s is %s: the job's registry was tampered with (refusing to "
                     "use it)", path, e == ELOOP ? "a symbolic link" : "not a directory");
            return ROV_ERR_PROTO;
        }
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(e));
        return e == ENOENT ? ROV_ERR_NOT_FOUND : ROV_ERR_IO;
    }
    if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
        snprintf(err, err_len, "%s is not a directory of this user (uid %u) with mode 0700: the "
                 "job's registry was tampered with (refusing to use it)", path,
                 (unsigned)geteuid());
        close(fd);
        return ROV_ERR_PROTO;
    }
    close(fd);
    return ROV_OK;
}

/* Read a small registry file whole (at most max - 1 bytes) into buf. */
static rov_status_t slurp(const char *path, char *buf, size_t max, ssize_t *len_p, char *err,
                          size_t err_len)
{
    ssize_t len = 0, n;
    rov_status_t st;
    int fd;

    st = ccp_open(path, O_RDONLY, 0, &fd, err, err_len);
    if (st != ROV_OK)
        return st;
    while ((size_t)len < max - 1 && (n = read(fd, buf + len, max - 1 - (size_t)len)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            snprintf(err, err_len, "cannot read %s: %s", path, strerror(errno));
            close(fd);
            return ROV_ERR_IO;
        }
        len += n;
    }
    close(fd);
    buf[len] = '\0';
    *len_p = len;
    return ROV_OK;
}

/* Write data to path atomically: a temporary file of a fresh name (made
 * with O_CREAT | O_EXCL: whatever was planted at some name is never opened),
 * then rename (or link, which fails if path exists: exclusive).  Neither
 * follows a link at path: rename replaces the link itself. */
static int write_atomic(const char *path, const void *data, size_t len, bool exclusive)
{
    char tmp[CCP_DIR_MAX + 64];
    int fd, rc, n;

    n = snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path);
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (write(fd, data, len) != (ssize_t)len) {
        int e = errno ? errno : EIO;

        close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
    close(fd);
    rc = exclusive ? link(tmp, path) : rename(tmp, path);
    if (exclusive || rc < 0) {
        int e = errno;

        unlink(tmp);
        errno = e;
    }
    return rc;
}

rov_status_t ccp_secret(const char *jobdir, bool create, uint8_t key[ROV_KEY_LEN], char *err,
                        size_t err_len)
{
    char path[CCP_DIR_MAX + 16], text[2 * ROV_KEY_LEN + 3]; /* + '\n', one more, NUL */
    rov_status_t st;
    ssize_t n;

    snprintf(path, sizeof(path), "%s/secret", jobdir);
    if (create) {
        uint8_t fresh[ROV_KEY_LEN];

        if (rov_auth_random(fresh, sizeof(fresh)) != ROV_OK) {
            snprintf(err, err_len, "no random bytes for the job's secret");
            return ROV_ERR_IO;
        }
        hex(fresh, sizeof(fresh), text);
        text[2 * ROV_KEY_LEN] = '\n';
        if (write_atomic(path, text, 2 * ROV_KEY_LEN + 1, true) < 0 && errno != EEXIST) {
            snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
            return ROV_ERR_IO;
        }
    }
    st = slurp(path, text, sizeof(text), &n, err, err_len);
    if (st == ROV_ERR_REFUSED)
        snprintf(err, err_len, "cannot read the job's secret %s: %s (only the job's owner drives "
                 "it)", path, strerror(EACCES));
    if (st != ROV_OK)
        return st;
    if (n != 2 * ROV_KEY_LEN + 1 || text[2 * ROV_KEY_LEN] != '\n' ||
        !unhex(text, 2 * ROV_KEY_LEN, key, ROV_KEY_LEN)) {
        snprintf(err, err_len, "the job's secret %s is malformed", path);
        return ROV_ERR_PROTO;
    }
    return ROV_OK;
}

/* value quoted for /bin/sh: in single quotes, each ' as '\'' (nothing in
 * single quotes is special to the shell, so a value with a space, a quote or
 * "$(...)" stays one word and runs nothing).  false when it does not fit. */
static bool sh_quote(const char *value, char *out, size_t len)
{
    size_t n = 0;

    if (len < 3)
        return false;
    out[n++] = '\'';
    for (const char *p = value; *p; p++) {
        if (*p == '\'') {
            if (n + 4 >= len)
                return false;
            memcpy(out + n, "'\\''", 4);
            n += 4;
        } else {
            if (n + 1 >= len)
                return false;
            out[n++] = *p;
        }
    }
    if (n + 2 > len)
        return false;
    out[n++] = '\'';
    out[n] = '\0';
    return true;
}

bool ccp_expand(const char *tmpl, const char *const vals[26], char *out, size_t len)
{
    size_t n = 0;

    for (const char *p = tmpl; *p; p++) {
        char raw[2] = {*p, '\0'}, v[4 * CCP_DIR_MAX + 3];
        const char *val = raw;
        int k;

        if (*p == '%' && p[1]) {
            p++;
            raw[0] = *p;
            if (*p >= 'a' && *p <= 'z' && vals[*p - 'a']) {
                if (!sh_quote(vals[*p - 'a'], v, sizeof(v)))
                    return false;
                val = v;
            }
        }
        k = snprintf(out + n, len - n, "%s", val);
        if (k < 0 || (size_t)k >= len - n)
            return false;
        n += (size_t)k;
    }
    return true;
}

static void seal(const uint8_t key[ROV_KEY_LEN], const char *text, size_t len,
                 uint8_t mac[ROV_MAC_LEN])
{
    const struct rov_auth_piece piece = {text, len};

    rov_auth_mac(key, SEAL_LABEL, &piece, 1, mac);
}

rov_status_t ccp_sealed_write(const char *path, const uint8_t key[ROV_KEY_LEN], const char *text,
                              size_t len)
{
    uint8_t mac[ROV_MAC_LEN];
    char *buf = malloc(len + 2 * ROV_MAC_LEN + 8);
    int rc;

    if (!buf)
        return ROV_ERR_NOMEM;
    memcpy(buf, text, len);
    memcpy(buf + len, "seal=", 5);
    seal(key, buf, len + 5, mac);
    hex(mac, sizeof(mac), buf + len + 5);
    buf[len + 5 + 2 * ROV_MAC_LEN] = '\n';
    rc = write_atomic(path, buf, len + 6 + 2 * ROV_MAC_LEN, false);
    free(buf);
    return rc < 0 ? ROV_ERR_IO : ROV_OK;
}

rov_status_t ccp_record_write(const char *jobdir, const uint8_t key[ROV_KEY_LEN],
                              const struct ccp_record *rec)
{
    char text[CCP_RECORD_MAX], path[CCP_DIR_MAX + 32], blob[2 * CCP_BLOB_MAX + 1] = "-";
    int n;

    if (rec->endpoint_len)
        hex(rec->endpoint, rec->endpoint_len, blob);
    n = snprintf(text, sizeof(text),
                 RECORD_MAGIC "job=%s\nrank=%ld\npid=%d\nuid=%u\nhost=%s\nctl_path=%s\n"
                 "ctl_net=%s\nendpoint=%s\ntree=%d\nckpt_count=%ld\nckpt_rc=%ld\nckpt_ms=%ld\n"
                 "stage=%s\n",
                 rec->job, rec->rank, rec->pid, rec->uid, rec->host,
                 rec->ctl_path[0] ? rec->ctl_path : "-", rec->ctl_net[0] ? rec->ctl_net : "-",
                 blob, rec->tree, rec->ckpt_count, rec->ckpt_rc, rec->ckpt_ms,
                 rec->stage[0] ? rec->stage : "-");
    if (n < 0 || (size_t)n + 2 * ROV_MAC_LEN + 7 > sizeof(text))
        return ROV_ERR_INVAL;
    snprintf(path, sizeof(path), "%s/rank.%ld", jobdir, rec->rank);
    return ccp_sealed_write(path, key, text, (size_t)n);
}

void ccp_record_remove(const char *jobdir, long rank)
{
    char path[CCP_DIR_MAX + 32];
    struct dirent *e;
    bool empty = true;
    DIR *d;

    snprintf(path, sizeof(path), "%s/rank.%ld", jobdir, rank);
    unlink(path);
    /* The last rank out removes the job (a rank that registers meanwhile
     * finds no directory: ccp.c makes it again), unless checkpoints of it
     * are there: a restart from them needs its secret. */
    d = opendir(jobdir);
    if (!d)
        return;
    while (empty && (e = readdir(d)) != NULL)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                !strcmp(e->d_name, "secret") || !strcmp(e->d_name, "lock");
    closedir(d);
    if (!empty)
        return;
    snprintf(path, sizeof(path), "%s/secret", jobdir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock", jobdir);
    unlink(path);
    rmdir(jobdir);
}

/* The value of "key=" on its own line in text, copied into out (len);
 * false when missing, empty or too long. */
bool ccp_field(const char *text, const char *key, char *out, size_t len)
{
    size_t kl = strlen(key);

    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const char *v = p + kl + 1, *end = strchr(v, '\n');
            size_t vl = end ? (size_t)(end - v) : strlen(v);

            if (vl == 0 || vl >= len)
                return false;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return true;
        }
    }
    return false;
}

bool ccp_number(const char *text, const char *key, long min, long max, long *out)
{
    char v[32], *end;

    if (!ccp_field(text, key, v, sizeof(v)))
        return false;
    errno = 0;
    *out = strtol(v, &end, 10);
    return !errno && !*end && *out >= min && *out <= max && (v[0] == '-' || (v[0] >= '0' &&
                                                                              v[0] <= '9'));
}

rov_status_t ccp_records(const char *jobdir, const uint8_t key[ROV_KEY_LEN],
                         bool (*fn)(void *arg, const struct ccp_record *rec), void *arg,
                         char *err, size_t err_len)
{
    DIR *d = opendir(jobdir);
    struct dirent *e;
    rov_status_t st = ROV_OK;

    if (!d) {
        snprintf(err, err_len, "cannot list %s: %s", jobdir, strerror(errno));
        return errno == ENOENT ? ROV_ERR_NOT_FOUND : ROV_ERR_IO;
    }
    while (st == ROV_OK && (e = readdir(d)) != NULL) {
        char path[CCP_DIR_MAX + 300], *end;
        struct ccp_record rec;

        if (strncmp(e->d_name, "rank.", 5) != 0 || (strtol(e->d_name + 5, &end, 10), *end))
            continue; /* the secret, the lock, a record being written */
        snprintf(path, sizeof(path), "%s/%s", jobdir, e->d_name);
        st = ccp_record_read(path, key, &rec, err, err_len);
        if (st == ROV_ERR_NOT_FOUND)
            st = ROV_OK; /* its process ended meanwhile */
        else if (st == ROV_OK && !fn(arg, &rec))
            break;
    }
    closedir(d);
    return st;
}

rov_status_t ccp_sealed_read(const char *path, const uint8_t key[ROV_KEY_LEN], const char *magic,
                             const char *what, char *text, size_t max, size_t *len_p, char *err,
                             size_t err_len)
{
    uint8_t got[ROV_MAC_LEN], want[ROV_MAC_LEN];
    ssize_t n;
    rov_status_t st = slurp(path, text, max, &n, err, err_len);
    char *at;

    if (st != ROV_OK)
        return st;
    at = strstr(text, "\nseal=");
    if (strncmp(text, magic, strlen(magic)) != 0 || !at ||
        (size_t)n != (size_t)(at - text) + 6 + 2 * ROV_MAC_LEN + 1 || text[n - 1] != '\n') {
        snprintf(err, err_len, "%s %s is truncated or malformed", what, path);
        return ROV_ERR_PROTO;
    }
    at += 6;
    if (!unhex(at, 2 * ROV_MAC_LEN, got, ROV_MAC_LEN)) {
        snprintf(err, err_len, "%s %s has a malformed seal", what, path);
        return ROV_ERR_PROTO;
    }
    seal(key, text, (size_t)(at - text), want);
    if (!rov_auth_mac_equal(got, want)) {
        snprintf(err, err_len, "%s %s does not carry the job's seal: changed by someone "
                 "without the job's secret", what, path);
        return ROV_ERR_PROTO;
    }
    at[-5] = '\0'; /* the text, without its seal */
    *len_p = (size_t)(at - 5 - text);
    return ROV_OK;
}

rov_status_t ccp_record_read(const char *path, const uint8_t key[ROV_KEY_LEN],
                             struct ccp_record *rec, char *err, size_t err_len)
{
    char text[CCP_RECORD_MAX + 1], blob[2 * CCP_BLOB_MAX + 2];
    size_t n;
    rov_status_t st;
    long pid, uid, tree;

    memset(rec, 0, sizeof(*rec));
    st = ccp_sealed_read(path, key, RECORD_MAGIC, "registry record", text, sizeof(text), &n, err,
                         err_len);
    if (st != ROV_OK)
        return st;
    if (!ccp_field(text, "job", rec->job, sizeof(rec->job)) ||
        !ccp_number(text, "rank", 0, INT32_MAX, &rec->rank) ||
        !ccp_number(text, "pid", 1, INT32_MAX, &pid) ||
        !ccp_number(text, "uid", 0, UINT32_MAX, &uid) ||
        !ccp_field(text, "host", rec->host, sizeof(rec->host)) ||
        !ccp_field(text, "ctl_path", rec->ctl_path, sizeof(rec->ctl_path)) ||
        !ccp_field(text, "ctl_net", rec->ctl_net, sizeof(rec->ctl_net)) ||
        !ccp_field(text, "endpoint", blob, sizeof(blob)) ||
        !ccp_number(text, "tree", 1, INT32_MAX, &tree) ||
        !ccp_number(text, "ckpt_count", 0, INT32_MAX, &rec->ckpt_count) ||
        !ccp_number(text, "ckpt_rc", CCP_CKPT_REFUSED, 255, &rec->ckpt_rc) ||
        !ccp_number(text, "ckpt_ms", 0, INT32_MAX, &rec->ckpt_ms)) {
        snprintf(err, err_len, "registry record %s lacks a field or has one out of range", path);
        return ROV_ERR_PROTO;
    }
    rec->pid = (int)pid;
    rec->tree = (int)tree;
    rec->uid = (unsigned)uid;
    /* (optional: a record of an older rank has none) */
    if (!ccp_field(text, "stage", rec->stage, sizeof(rec->stage)) || strcmp(rec->stage, "-") == 0)
        rec->stage[0] = '\0';
    if (strcmp(rec->ctl_path, "-") == 0)
        rec->ctl_path[0] = '\0';
    if (strcmp(rec->ctl_net, "-") == 0)
        rec->ctl_net[0] = '\0';
    if (strcmp(blob, "-") != 0) {
        rec->endpoint_len = strlen(blob) / 2;
        if (!unhex(blob, strlen(blob), rec->endpoint, rec->endpoint_len)) {
            snprintf(err, err_len, "registry record %s has a malformed endpoint", path);
            return ROV_ERR_PROTO;
        }
    }
    return ROV_OK;
}

long ccp_unit_of(const struct ccp_record *recs, size_t n, size_t i)
{
    long unit = recs[i].rank;

    for (size_t j = 0; j < n; j++)
        if (recs[j].tree == recs[i].tree && recs[j].rank < unit &&
            strcmp(recs[j].host, recs[i].host) == 0)
            unit = recs[j].rank;
    return unit;
}
