/* What the checkpoint client's files share (client.c: the stages;
 * restart.c: the restart): the job as the client holds it, and its
 * requests to the ranks.  Nothing else includes this. */
#ifndef ROV_CCP_CLIENT_INT_H
#define ROV_CCP_CLIENT_INT_H

#include "ccp/registry.h"
#include "railover/ccp.h"

/* How often a rank is asked whether it got there. */
#define POLL_S 0.005
/* One request's limit; a rank that takes longer is unreachable. */
#define REQUEST_S 5.0

struct rov_job {
    char id[ROV_JOB_MAX + 1];
    char dir[CCP_DIR_MAX + ROV_JOB_MAX + 2];
    char host[CCP_HOST_MAX];
    uint8_t key[ROV_KEY_LEN];
    size_t n;
    struct ccp_record *recs;
    rov_job_rank_t *ranks;
    int lock_fd;
    double until;          /* the running stage's time limit (ccp_now_s()), 0: none */
    long keep;             /* complete checkpoint sets kept (rov_job_set_keep()) */
};

double ccp_now_s(void);
/** (Re)read every rank's record. */
rov_status_t ccp_job_load(rov_job_t *job, char *err, size_t err_len);
/** Take the job's lock (one client at a time: ROV_ERR_AGAIN) / let it go. */
rov_status_t ccp_job_lock(rov_job_t *job, char *err, size_t err_len);
void ccp_job_unlock(rov_job_t *job);
/** One request to rank i; ROV_OK with its answer's last line "ok" (and the
 * stage it reports in ranks[i].stage), or why not in ranks[i].error. */
rov_status_t ccp_job_ask(rov_job_t *job, size_t i, const char *verb);
/** A RAILOVER_* setting as a rank reads it (bad values refused, err says
 * which). */
rov_status_t ccp_client_setting(const char *name, char *out, size_t len, char *err,
                                size_t err_len);

#endif
