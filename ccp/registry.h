/*
 * The job registry (docs/ccp.md): a directory per job under the registry's
 * base directory (RAILOVER_JOB_DIR, else <run directory>/jobs), holding
 *
 *   secret      the job's key, 64 hex digits, mode 0600: whoever reads it
 *               drives the job (the proof on the ranks' network control
 *               endpoints) and can check the records
 *   rank.<r>    one record per rank (below), replaced whole (rename)
 *   lock        flock()ed by the one client driving the job
 *
 * The job's directory is the owner's only (0700), created by the first of
 * its processes; the secret by whichever process links it first.
 *
 * A record is text, "key=value" lines after a first line "railover-rank 1",
 * ending with "seal=<hex>": an HMAC under the secret over every byte
 * before it.  A record that is truncated, malformed or not sealed by the
 * job's key is refused as a whole.
 */
#ifndef ROV_CCP_REGISTRY_H
#define ROV_CCP_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "railover/railover.h"
#include "transport/auth.h"
#include "transport/config.h"

#define CCP_DIR_MAX 200
#define CCP_HOST_MAX 64
#define CCP_PATH_MAX 108
#define CCP_WHERE_MAX 64
#define CCP_BLOB_MAX 512
#define CCP_RECORD_MAX 4096

/* ccp_record.ckpt_rc: the rank refused to run its checkpoint command (a
 * link or a file not its own where it would write: a tampered registry). */
#define CCP_CKPT_REFUSED (-3)

struct ccp_record {
    char job[ROV_JOB_MAX + 1];
    long rank;
    int pid;
    unsigned uid;
    char host[CCP_HOST_MAX];
    char ctl_path[CCP_PATH_MAX];   /* "" none */
    char ctl_net[CCP_WHERE_MAX];   /* "" none */
    uint8_t endpoint[CCP_BLOB_MAX];
    size_t endpoint_len;           /* 0: none */
    /* The root of the process tree a checkpoint images with this rank
     * (RAILOVER_CHECKPOINT_TREE): its own pid, or its parent's (an MPI
     * launcher's daemon).  Ranks of one host with one tree are one unit,
     * imaged once, by the lowest of them (ccp_unit_of()). */
    int tree;
    /* Checkpoints this rank took part in, and the last one's result: the
     * checkpoint command's exit status (-1: it did not run; -2: no
     * status; CCP_CKPT_REFUSED: not run, a file of the registry it would
     * write is a link or not the rank's own) and how long it took. */
    long ckpt_count;
    long ckpt_rc;
    long ckpt_ms;
    /* The rank's checkpoint stage (rov_context_stage_str()) as of its last
     * tick; "" in a record that has none. */
    char stage[16];
};

/** The registry's base directory: job_dir (RAILOVER_JOB_DIR) if set, else
 * <run_dir>/jobs (RAILOVER_RUN_DIR), else <the per-user run directory>/jobs
 * (rov_ctl_run_dir()).  ROV_ERR_INVAL: too long for out (len bytes). */
rov_status_t ccp_base_dir(const char *job_dir, const char *run_dir, char *out, size_t len);

/** <base>/<job>; with create, made (0700) when missing.  Refused
 * (ROV_ERR_REFUSED) when it is not a directory of ours with mode 0700,
 * ROV_ERR_NOT_FOUND when missing and not create. */
rov_status_t ccp_job_dir(const char *base, const char *job, bool create, char *out, size_t len,
                         char *err, size_t err_len);

/** The job's secret; with create, made when there is none yet.
 * ROV_ERR_REFUSED: unreadable (not ours); ROV_ERR_PROTO: malformed. */
rov_status_t ccp_secret(const char *jobdir, bool create, uint8_t key[ROV_KEY_LEN], char *err,
                        size_t err_len);

/**
 * Open a file of the registry (open(2) flags and mode): never through a
 * symbolic link (O_NOFOLLOW), and only a regular file of this user; opened
 * for writing, also only one with no other name (a hard link planted there
 * would carry the writes to another file).  *fd_p is the descriptor (close
 * on exec) on ROV_OK, else -1.  ROV_ERR_NOT_FOUND: missing;
 * ROV_ERR_PROTO: a link, not a regular file, another user's, or (with
 * O_EXCL) already there: the registry was tampered with; ROV_ERR_REFUSED:
 * permission denied; ROV_ERR_IO: other errors.  err says why in one line.
 */
rov_status_t ccp_open(const char *path, int flags, mode_t mode, int *fd_p, char *err,
                      size_t err_len);

/** A directory of the registry (with create, made 0700 when missing):
 * ROV_OK when it is a directory of this user with mode 0700, reached
 * without following a symbolic link at its last component; ROV_ERR_PROTO
 * (a link, another user's, another mode: tampered with), else as
 * ccp_open(). */
rov_status_t ccp_own_dir(const char *path, bool create, char *err, size_t err_len);

/** Write rec as rank.<rank>, sealed, replacing the old one at once. */
rov_status_t ccp_record_write(const char *jobdir, const uint8_t key[ROV_KEY_LEN],
                              const struct ccp_record *rec);
/** Read and check the record at path.  ROV_ERR_PROTO (with err) when it is
 * malformed, truncated or not sealed by key; ROV_ERR_NOT_FOUND when gone. */
rov_status_t ccp_record_read(const char *path, const uint8_t key[ROV_KEY_LEN],
                             struct ccp_record *rec, char *err, size_t err_len);
/** Read every rank's record of jobdir (ccp_record_read()) and hand each to
 * fn (records that vanish meanwhile are skipped).  Stops at the first
 * error, which it returns (err says why), or when fn returns false. */
rov_status_t ccp_records(const char *jobdir, const uint8_t key[ROV_KEY_LEN],
                         bool (*fn)(void *arg, const struct ccp_record *rec), void *arg,
                         char *err, size_t err_len);
/** The lowest rank of recs[i]'s unit: the ranks of its host with its tree
 * (recs: n records). */
long ccp_unit_of(const struct ccp_record *recs, size_t n, size_t i);

/** A sealed text file (a record, a checkpoint set's manifest): text, then
 * "seal=<hex>\n", an HMAC under key over everything before the hex; written
 * whole to a fresh name and renamed over path. */
rov_status_t ccp_sealed_write(const char *path, const uint8_t key[ROV_KEY_LEN], const char *text,
                              size_t len);
/** Read a sealed file into text (max bytes, NUL-terminated, its seal cut
 * off; *len_p its length): ROV_ERR_PROTO (err names `what` and path) when it
 * does not start with magic, is truncated or not sealed by key. */
rov_status_t ccp_sealed_read(const char *path, const uint8_t key[ROV_KEY_LEN], const char *magic,
                             const char *what, char *text, size_t max, size_t *len_p, char *err,
                             size_t err_len);
/** The value of the line "key=..." of text (not empty, shorter than len). */
bool ccp_field(const char *text, const char *key, char *out, size_t len);
/** ccp_field() as a decimal number in [min, max]. */
bool ccp_number(const char *text, const char *key, long min, long max, long *out);

/** tmpl with each %<letter> that vals names (vals['x' - 'a']) replaced by
 * that value quoted for /bin/sh (one word, nothing in it runs), any other
 * %<c> by c (so %% is %).  false when it does not fit out (len bytes). */
bool ccp_expand(const char *tmpl, const char *const vals[26], char *out, size_t len);

/** Remove rank's record; the last one out removes the job's directory. */
void ccp_record_remove(const char *jobdir, long rank);

#endif
