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
/** Remove rank's record; the last one out removes the job's directory. */
void ccp_record_remove(const char *jobdir, long rank);

#endif
