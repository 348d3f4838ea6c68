/* parity_proc.c - trainer runs as child processes (parity.h): a small pool
 * that keeps at most `parallel` running, each in its own process group (so
 * that a timeout kills mpirun and every rank), output to its log, with
 * hooks before and after each job; and a job started alone in the
 * background, beside a pool (each waits for its own processes only). */
/* Paths are bounded: --out is at most LS_PARITY_OUT_MAX characters, so that
 * every path derived from it fits LS_PARITY_PATH. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parity/plan/parity.h"

double ls_parity_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ls_parity_job_arg(ls_parity_job *j, const char *fmt, ...) {
    if (j->argc >= (int)(sizeof j->argv / sizeof j->argv[0]) - 1) return; /* the runs use < 60 */
    char buf[LS_PARITY_PATH + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    j->argv[j->argc] = strdup(buf);
    if (j->argv[j->argc] != NULL) j->argc++;
    j->argv[j->argc] = NULL;
}

void ls_parity_job_free(ls_parity_job *j) {
    for (int i = 0; i < j->argc; i++) free(j->argv[i]);
    j->argc = 0;
    j->argv[0] = NULL;
}

/* Two mpirun jobs at once share Open MPI's per-user session directory under
 * /tmp, and one ending removes it while the other is creating its own inside
 * ("orte_session_dir failed", seen in CI as a control run exiting 1): every
 * job gets a short directory of its own for it, removed when the job ends. */
static void own_tmp(ls_parity_job *j) {
    const char *base = getenv("TMPDIR");
    if (base == NULL || base[0] == 0 || strlen(base) > 40) base = "/tmp"; /* short: unix sockets live there */
    snprintf(j->tmp, sizeof j->tmp, "%s/lsp-XXXXXX", base);
    if (mkdtemp(j->tmp) == NULL) j->tmp[0] = 0;
}

static void end_tmp(ls_parity_job *j) {
    if (j->tmp[0]) ls_parity_remove_tree(j->tmp);
    j->tmp[0] = 0;
}

static int start(ls_parity_job *j) {
    own_tmp(j);
    pid_t pid = fork();
    if (pid < 0) {
        end_tmp(j);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(j->log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) {
            dup2(nul, 0);
            close(nul);
        }
        /* every run single-threaded whatever the caller's environment: an OpenMP reduction combines its
           threads' partial sums in the order they finish, and a BLAS splits its sums by thread count, so a
           float32 result could change with the machine's load or core count; one thread makes each run's
           every sum one fixed order (the report states it: LS_PARITY_RUN_ENV) */
        setenv("OMP_NUM_THREADS", "1", 1);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        setenv("OMP_DYNAMIC", "false", 1);
        if (j->tmp[0]) setenv("OMPI_MCA_orte_tmpdir_base", j->tmp, 1);
        execvp(j->argv[0], j->argv);
        fprintf(stderr, "longstraw-parity: cannot run %s: %s\n", j->argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* both sides: whichever runs first */
    j->pid = (int)pid;
    j->t0 = ls_parity_now();
    return 0;
}

/* Whether job j (running: pid > 0) has ended, waiting for it when block;
 * if so its rc, secs, pid < 0 and its session directory removed. */
static bool reap(ls_parity_job *j, bool block) {
    int status = 0;
    pid_t w;
    while ((w = waitpid(j->pid, &status, block ? 0 : WNOHANG)) < 0 && errno == EINTR) {}
    if (w == 0) return false;
    j->rc = w < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    j->secs = ls_parity_now() - j->t0;
    j->pid = -j->pid; /* finished */
    end_tmp(j);
    return true;
}

ls_status ls_parity_job_start(ls_parity_job *j, char *err, size_t errlen) {
    j->rc = -1;
    j->pid = 0;
    if (start(j) != 0) {
        snprintf(err, errlen, "cannot fork for %s: %s", j->argv[0], strerror(errno));
        return LS_ERR_IO;
    }
    return LS_OK;
}

void ls_parity_job_wait(ls_parity_job *j, int timeout_s, bool stop) {
    if (j->pid <= 0) return;
    if (stop) kill(-j->pid, SIGKILL);
    while (!reap(j, false)) {
        if (timeout_s > 0 && ls_parity_now() - j->t0 > timeout_s) {
            kill(-j->pid, SIGKILL);
            reap(j, true);
            return;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

ls_status ls_parity_jobs_run(ls_parity_job *jobs, size_t n, int parallel, int timeout_s, char *err,
                             size_t errlen) {
    return ls_parity_jobs_run_hooked(jobs, n, parallel, timeout_s, NULL, NULL, NULL, err, errlen);
}

/* Kills every running job's process group and reaps it (a job that was
 * started and has not ended: pid > 0). */
static void kill_running(ls_parity_job *jobs, size_t next) {
    for (size_t k = 0; k < next; k++)
        if (jobs[k].pid > 0) kill(-jobs[k].pid, SIGKILL);
    for (size_t k = 0; k < next; k++)
        if (jobs[k].pid > 0) reap(&jobs[k], true);
}

ls_status ls_parity_jobs_run_hooked(ls_parity_job *jobs, size_t n, int parallel, int timeout_s,
                                    ls_parity_job_hook before, ls_parity_job_hook after, void *ctx, char *err,
                                    size_t errlen) {
    if (parallel < 1) parallel = 1;
    size_t next = 0, done = 0;
    int running = 0;
    ls_status s = LS_OK;
    for (size_t i = 0; i < n; i++) {
        jobs[i].rc = -1;
        jobs[i].pid = 0;
    }
    while (done < next || (s == LS_OK && next < n)) {
        while (s == LS_OK && running < parallel && next < n) {
            if (before && (s = before(ctx, next, err, errlen)) != LS_OK) break;
            jobs[next].rc = -1;
            jobs[next].pid = 0;
            if (start(&jobs[next]) != 0) {
                snprintf(err, errlen, "cannot fork for %s: %s", jobs[next].argv[0], strerror(errno));
                kill_running(jobs, next);
                return LS_ERR_IO;
            }
            running++;
            next++;
        }
        /* its own jobs only: a job ls_parity_job_start started may be running beside the pool */
        bool ended = false;
        for (size_t k = 0; k < next && !ended; k++) {
            if (jobs[k].pid <= 0 || !reap(&jobs[k], false)) continue;
            ended = true;
            running--;
            done++;
            if (after && s == LS_OK) s = after(ctx, k, err, errlen);
        }
        if (ended) continue;
        if (running == 0) break; /* nothing left to wait for (a hook stopped the starts) */
        double now = ls_parity_now();
        for (size_t k = 0; k < next; k++) {
            if (jobs[k].pid > 0 && timeout_s > 0 && now - jobs[k].t0 > timeout_s) {
                kill(-jobs[k].pid, SIGKILL); /* reaped above, rc 128 + 9 */
                jobs[k].t0 = now + 1e9;       /* once */
            }
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return s;
}
