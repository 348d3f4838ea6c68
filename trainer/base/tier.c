/* tier.c - see tier.h: one helper thread copies the staged rows in the
 * order begun; a handle is the copy's ticket. */
#include "trainer/base/tier.h"

#include "trainer/base/mem_tracker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    ls_mem_space ds, ss; /* their spaces (ls_mem_space_of, taken at begin) */
} job;

/* The copy of one job: through the spaces' provider when either is not host-readable. */
static void run_copy(const job *j) {
    if (ls_mem_space_host_readable(j->ds) && ls_mem_space_host_readable(j->ss)) memcpy(j->dst, j->src, j->bytes);
    else (void)ls_mem_copy(j->dst, j->ds, j->src, j->ss, j->bytes); /* spaces of live provider blocks: copyable */
}

#define QCAP 4096 /* jobs in flight before begin blocks */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t more, done; /* a job queued (or stop); a job completed */
    job q[QCAP];
    uint64_t issued, completed; /* tickets: job k has ticket k + 1 */
    int running, stop, failed;
    pthread_t th;
    _Atomic uint64_t bytes, copies;
    _Atomic int64_t copy_ns, wait_ns;
} t = {.mu = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *helper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&t.mu);
    for (;;) {
        while (t.completed == t.issued && !t.stop) pthread_cond_wait(&t.more, &t.mu);
        if (t.completed == t.issued) break; /* stopped and drained */
        job j = t.q[t.completed % QCAP];
        pthread_mutex_unlock(&t.mu);
        int64_t t0 = now_ns();
        run_copy(&j);
        atomic_fetch_add(&t.copy_ns, now_ns() - t0);
        pthread_mutex_lock(&t.mu);
        t.completed++;
        pthread_cond_broadcast(&t.done);
    }
    pthread_mutex_unlock(&t.mu);
    return NULL;
}

/* Under t.mu: the helper running (0: it could not be started). */
static int ensure_helper(void) {
    if (t.running) return 1;
    if (t.failed) return 0;
    t.stop = 0;
    if (pthread_create(&t.th, NULL, helper, NULL) != 0) {
        t.failed = 1;
        return 0;
    }
    static int registered;
    if (!registered) {
        registered = 1;
        atexit(ls_tier_shutdown);
    }
    t.running = 1;
    return 1;
}

ls_tier_handle ls_tier_stage_begin(void *dst_device, const void *src_host, size_t bytes) {
    job j = {dst_device, src_host, bytes, LS_MEM_SPACE_HOST, LS_MEM_SPACE_HOST};
    if (bytes) j.ds = ls_mem_space_of(dst_device), j.ss = ls_mem_space_of(src_host);
    pthread_mutex_lock(&t.mu);
    if (bytes == 0) {
        ls_tier_handle h = t.issued;
        pthread_mutex_unlock(&t.mu);
        return h;
    }
    atomic_fetch_add(&t.bytes, bytes);
    atomic_fetch_add(&t.copies, 1);
    if (!ensure_helper()) { /* synchronous, behind the same calls */
        int64_t t0 = now_ns();
        run_copy(&j);
        atomic_fetch_add(&t.copy_ns, now_ns() - t0);
        ls_tier_handle h = t.issued;
        pthread_mutex_unlock(&t.mu);
        return h;
    }
    while (t.issued - t.completed >= QCAP) pthread_cond_wait(&t.done, &t.mu);
    t.q[t.issued % QCAP] = j;
    ls_tier_handle h = ++t.issued;
    pthread_cond_signal(&t.more);
    pthread_mutex_unlock(&t.mu);
    return h;
}

void ls_tier_stage_wait(ls_tier_handle h) {
    int64_t t0 = now_ns();
    pthread_mutex_lock(&t.mu);
    while (t.completed < h) pthread_cond_wait(&t.done, &t.mu);
    pthread_mutex_unlock(&t.mu);
    atomic_fetch_add(&t.wait_ns, now_ns() - t0);
}

void ls_tier_stats_get(ls_tier_stats *out) {
    out->bytes = atomic_load(&t.bytes);
    out->copies = atomic_load(&t.copies);
    out->copy_ns = atomic_load(&t.copy_ns);
    out->wait_ns = atomic_load(&t.wait_ns);
}

void ls_tier_shutdown(void) {
    pthread_mutex_lock(&t.mu);
    if (!t.running) {
        pthread_mutex_unlock(&t.mu);
        return;
    }
    t.stop = 1;
    pthread_cond_signal(&t.more);
    pthread_mutex_unlock(&t.mu);
    pthread_join(t.th, NULL);
    pthread_mutex_lock(&t.mu);
    t.running = 0;
    pthread_mutex_unlock(&t.mu);
}
