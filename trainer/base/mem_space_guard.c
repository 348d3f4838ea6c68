/* mem_space_guard.c - the guarded device space (mem_space.h:
 * ls_mem_space_guarded): device memory for the CPU build's tests and
 * debugging, made of host pages the host cannot touch.
 *
 * Every block is its own anonymous mapping of whole pages (zeroed by the
 * kernel), PROT_NONE.  The provider's operations open the pages they touch
 * (PROT_READ | PROT_WRITE), work, and close them again, under one
 * process-wide lock, so a host access outside them faults.  Imprecise only
 * in one way: another thread's stray access to the same pages during an
 * open window does not fault. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trainer/base/mem_space.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static size_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static size_t round_pages(size_t bytes) {
    size_t pg = page_size();
    return (bytes + pg - 1) / pg * pg;
}

/* The whole pages holding [p, p + bytes) set to prot. */
static void protect(const void *p, size_t bytes, int prot) {
    size_t pg = page_size();
    uintptr_t a = (uintptr_t)p / pg * pg, e = ((uintptr_t)p + bytes + pg - 1) / pg * pg;
    (void)mprotect((void *)a, e - a, prot);
}

static void *guard_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - page_size()) return NULL;
    void *p = mmap(NULL, round_pages(bytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void guard_free(void *p, size_t bytes) {
    if (p) munmap(p, round_pages(bytes));
}

static void guard_copy(void *dst, int dst_here, const void *src, int src_here, size_t bytes) {
    pthread_mutex_lock(&mu);
    if (src_here) protect(src, bytes, PROT_READ); /* first: a page both share ends writable */
    if (dst_here) protect(dst, bytes, PROT_READ | PROT_WRITE);
    memcpy(dst, src, bytes);
    if (src_here) protect(src, bytes, PROT_NONE);
    if (dst_here) protect(dst, bytes, PROT_NONE);
    pthread_mutex_unlock(&mu);
}

static void guard_zero(void *p, size_t bytes) {
    pthread_mutex_lock(&mu);
    protect(p, bytes, PROT_READ | PROT_WRITE);
    memset(p, 0, bytes);
    protect(p, bytes, PROT_NONE);
    pthread_mutex_unlock(&mu);
}

static size_t elem_size(ls_mem_elem e) { return e == LS_MEM_ELEM_F32 ? 4 : 8; }

static void guard_sum(void *dst, const void *src, size_t k, int parts, ls_mem_elem e) {
    size_t es = elem_size(e);
    pthread_mutex_lock(&mu);
    protect(src, k * es * (size_t)parts, PROT_READ); /* first: a page both share ends writable */
    protect(dst, k * es, PROT_READ | PROT_WRITE);
    ls_mem_space_host_sum(dst, src, k, parts, e);
    protect(src, k * es * (size_t)parts, PROT_NONE);
    protect(dst, k * es, PROT_NONE);
    pthread_mutex_unlock(&mu);
}

const ls_mem_space_ops ls_mem_space_guarded = {
    .name = "guarded",
    .space = LS_MEM_SPACE_DEVICE,
    .alloc = guard_alloc,
    .free = guard_free,
    .copy = guard_copy,
    .zero = guard_zero,
    .sum_ordered = guard_sum,
};
