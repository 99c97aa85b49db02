/*
 * Checkpoint sets (docs/ccp.md, "Checkpoint sets"): each `cprclient JOBID
 * checkpoint` writes one numbered set in the job's directory,
 *
 *   sets/<n>/            mode 0700
 *       unit.<r>/        the images of one unit (ccp_unit_of()): RAILOVER_CHECKPOINT_CMD's %d
 *       unit.<r>.log     "+ <command>" and its output
 *       ready.<r>        rank r has closed its control endpoints (its unit's
 *                        command waits for every member's)
 *       status.<r>       rank r's result: "<checkpoint number> <exit status> <ms>"
 *       ranks            every rank of the set, one a line, written when it
 *                        is made (what a checkpoint command waits for, below)
 *       dumped.<r>/      rank r's unit is imaged and its tree still frozen
 *                        (made by the command: railover-criu-tree)
 *       abort            cprclient gave the checkpoint up (a rank failed or
 *                        did not answer): a command waiting for the others
 *                        stops waiting
 *       manifest         written last, sealed, only when every rank succeeded
 *
 * A set without a valid manifest is incomplete (failed half-way, or being
 * written) and never restarted from.
 */
#ifndef ROV_CCP_SETS_H
#define ROV_CCP_SETS_H

#include <stdbool.h>
#include <stddef.h>

#include "ccp/registry.h"

/* One rank of a complete set. */
struct ccp_set_rank {
    long rank;
    int pid;
    int tree;               /* the root of its unit's process tree */
    long unit;              /* its unit (the lowest rank of it) */
    char host[CCP_HOST_MAX];
};

struct ccp_manifest {
    char job[ROV_JOB_MAX + 1];
    long set;
    long long time;         /* when it was written (Unix time) */
    size_t n;
    struct ccp_set_rank *ranks; /* by rank */
};

struct ccp_set_info {
    long set;
    bool complete;          /* its manifest is there and sealed */
    long long time;
    size_t ranks;
};

/** <jobdir>/sets/<set>, then "/leaf" when leaf is not NULL; false: too long. */
bool ccp_set_path(const char *jobdir, long set, const char *leaf, char *out, size_t len);

/** Make a new set, numbered after every set there is (*set_p), with its
 * `ranks` file: the ranks of recs (n of them), the job that is imaged. */
rov_status_t ccp_set_new(const char *jobdir, const struct ccp_record *recs, size_t n,
                         long *set_p, char *err, size_t err_len);

/** Mark a set given up (its `abort`): the units' commands stop waiting for
 * each other.  Best effort: a mark already there is fine. */
void ccp_set_abort(const char *jobdir, long set);

/** Write the manifest of a set whose every rank succeeded (recs: the
 * ranks' records, n of them). */
rov_status_t ccp_manifest_write(const char *jobdir, const uint8_t key[ROV_KEY_LEN], long set,
                                const struct ccp_record *recs, size_t n, char *err,
                                size_t err_len);

/** Read and check a set's manifest (ROV_ERR_NOT_FOUND: none, the set is
 * incomplete; ROV_ERR_PROTO: malformed or not sealed by key).  Free with
 * ccp_manifest_free(). */
rov_status_t ccp_manifest_read(const char *jobdir, const uint8_t key[ROV_KEY_LEN], long set,
                               struct ccp_manifest *m, char *err, size_t err_len);
void ccp_manifest_free(struct ccp_manifest *m);

/** The job's sets, oldest first (*sets_p: *n_p of them, free()). */
rov_status_t ccp_set_list(const char *jobdir, const uint8_t key[ROV_KEY_LEN],
                          struct ccp_set_info **sets_p, size_t *n_p, char *err, size_t err_len);

/** After set `done` completed: remove every incomplete set older than it
 * and every complete set but the newest `keep`.  Returns how many were
 * removed; err names the first that could not be. */
int ccp_set_prune(const char *jobdir, const uint8_t key[ROV_KEY_LEN], long done, long keep,
                  char *err, size_t err_len);

#endif
