/* parity_train.c - longstraw-train command lines for parity's runs
 * (parity.h): the matrix entry's settings, the run's inputs and dumps, what
 * a path run forces (its extra arguments), --ep N for an expert-parallel run,
 * and mpirun for a world > 1; and the
 * removal of a run directory. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parity/plan/parity.h"

/* rm -rf path (no links followed), for a run directory the trainer must
 * find fresh. */
static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

void ls_parity_remove_tree(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

ls_status ls_parity_fresh_dir(const char *path, char *err, size_t errlen) {
    ls_parity_remove_tree(path);
    if (ls_parity_mkdirs(path) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    return LS_OK;
}

void ls_parity_train_job(const ls_parity_opts *o, const ls_parity_config *c, const ls_parity_train *t,
                         ls_parity_job *j) {
    memset(j, 0, sizeof *j);
    snprintf(j->log, sizeof j->log, "%s", t->log);
    if (t->world > 1) {
        ls_parity_job_arg(j, "%s", o->mpirun);
        ls_parity_job_arg(j, "--oversubscribe");
        ls_parity_job_arg(j, "--bind-to");
        ls_parity_job_arg(j, "none");
        if (geteuid() == 0) ls_parity_job_arg(j, "--allow-run-as-root");
        ls_parity_job_arg(j, "-np");
        ls_parity_job_arg(j, "%d", t->world);
    }
    ls_parity_job_arg(j, "%s", o->trainer);
    const char *kv[][2] = {
        {"--config", o->model_config}, {"--out", t->out},           {"--rollouts", t->rollouts},
        {"--dtype", ls_parity_dtype_name(t->dt)},        {"--steps", "1"},
        {"--train-mode", o->train_mode ? o->train_mode : c->train_mode},
        {"--lora-init", "random"},     {"--load", t->load},
        {"--save-init", t->save_init}, {"--dump-batch", t->dump_batch}, {"--dump-grads", t->dump_grads},
        {"--save", t->save},           {"--strategy", t->strategy}, {"--grad-mode", t->grad_mode},
        {"--fault", t->fault},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        if (kv[i][1] == NULL) continue;
        ls_parity_job_arg(j, "%s", kv[i][0]);
        ls_parity_job_arg(j, "%s", kv[i][1]);
    }
    if (t->ep > 1) { /* the CP x EP grid: world = cp x ep ranks under mpirun */
        ls_parity_job_arg(j, "--ep");
        ls_parity_job_arg(j, "%d", t->ep);
    }
    for (const char *const *e = t->extra; e != NULL && *e != NULL; e++) ls_parity_job_arg(j, "%s", *e);
    /* the objective's hyperparameters and the trainable set: what the report's coverage states */
    ls_parity_job_arg(j, "--temperature");
    ls_parity_job_arg(j, "%.17g", o->temperature);
    ls_parity_job_arg(j, "--epsilon");
    ls_parity_job_arg(j, "%.17g", o->epsilon);
    ls_parity_job_arg(j, "--beta");
    ls_parity_job_arg(j, "%.17g", o->beta);
    if (o->lora_r > 0) {
        ls_parity_job_arg(j, "--lora-r");
        ls_parity_job_arg(j, "%d", o->lora_r);
    }
    if (o->lora_alpha > 0) {
        ls_parity_job_arg(j, "--lora-alpha");
        ls_parity_job_arg(j, "%.17g", o->lora_alpha);
    }
    if (o->lora_experts) ls_parity_job_arg(j, "--lora-experts");
    ls_parity_job_arg(j, "--seed");
    ls_parity_job_arg(j, "%llu", (unsigned long long)(t->seed ? *t->seed : o->seed));
    ls_parity_job_arg(j, "--page-size");
    ls_parity_job_arg(j, "%d", c->page_size);
    ls_parity_job_arg(j, "--capture-chunk");
    ls_parity_job_arg(j, "%d", c->capture_chunk);
    ls_parity_job_arg(j, "--quiet");
}

