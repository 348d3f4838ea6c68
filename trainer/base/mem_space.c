/* mem_space.c - the memory spaces (mem_space.h): names, access, the
 * providers' registry and the operations that dispatch to them. */
#include "trainer/base/mem_space.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

static const char *const NAMES[LS_MEM_SPACE_COUNT] = {"host", "host_pinned", "device"};
static const unsigned ACCESS[LS_MEM_SPACE_COUNT] = {LS_MEM_ACCESS_HOST, LS_MEM_ACCESS_HOST | LS_MEM_ACCESS_DEVICE,
                                                    LS_MEM_ACCESS_DEVICE};

static _Atomic(const ls_mem_space_ops *) providers[LS_MEM_SPACE_COUNT];

static int in_range(ls_mem_space s) { return (int)s >= 0 && s < LS_MEM_SPACE_COUNT; }

unsigned ls_mem_space_access(ls_mem_space s) { return in_range(s) ? ACCESS[s] : 0; }
int ls_mem_space_host_readable(ls_mem_space s) { return (ls_mem_space_access(s) & LS_MEM_ACCESS_HOST) != 0; }
const char *ls_mem_space_name(ls_mem_space s) { return in_range(s) ? NAMES[s] : "unknown"; }

int ls_mem_space_from_name(const char *name) {
    for (int i = 0; name && i < LS_MEM_SPACE_COUNT; i++)
        if (strcmp(NAMES[i], name) == 0) return i;
    return -1;
}

ls_status ls_mem_space_register(const ls_mem_space_ops *ops) {
    if (!ops || !in_range(ops->space) || ops->space == LS_MEM_SPACE_HOST || !ops->name || !ops->alloc ||
        !ops->free || !ops->copy || !ops->zero || !ops->sum_ordered)
        return LS_ERR_ARG;
    atomic_store(&providers[ops->space], ops);
    return LS_OK;
}

void ls_mem_space_unregister(ls_mem_space s) {
    if (in_range(s)) atomic_store(&providers[s], NULL);
}

const ls_mem_space_ops *ls_mem_space_provider(ls_mem_space s) {
    return in_range(s) ? atomic_load(&providers[s]) : NULL;
}

/* The provider that must touch bytes of space s: NULL when the host may (host-readable and no provider),
 * *bad set when s is out of range or not host-readable without a provider. */
static const ls_mem_space_ops *toucher(ls_mem_space s, int *bad) {
    if (!in_range(s)) {
        *bad = 1;
        return NULL;
    }
    const ls_mem_space_ops *p = ls_mem_space_host_readable(s) ? NULL : ls_mem_space_provider(s);
    if (!p && !ls_mem_space_host_readable(s)) *bad = 1;
    return p;
}

ls_status ls_mem_copy(void *dst, ls_mem_space ds, const void *src, ls_mem_space ss, size_t bytes) {
    int bad = 0;
    const ls_mem_space_ops *pd = toucher(ds, &bad), *ps = toucher(ss, &bad);
    if (bad || (pd && ps && pd != ps)) return LS_ERR_ARG;
    if (bytes == 0) return LS_OK;
    const ls_mem_space_ops *p = pd ? pd : ps;
    if (p) p->copy(dst, pd != NULL, src, ps != NULL, bytes);
    else memcpy(dst, src, bytes);
    return LS_OK;
}

ls_status ls_mem_zero(void *p, ls_mem_space s, size_t bytes) {
    int bad = 0;
    const ls_mem_space_ops *o = toucher(s, &bad);
    if (bad) return LS_ERR_ARG;
    if (bytes == 0) return LS_OK;
    if (o) o->zero(p, bytes);
    else memset(p, 0, bytes);
    return LS_OK;
}

/* The host's fixed-order sum (the association every provider reproduces). */
static void host_sum(void *dst, const void *src, size_t k, int parts, ls_mem_elem e) {
    switch (e) {
    case LS_MEM_ELEM_F32: {
        float *d = dst;
        const float *s = src;
        memcpy(d, s, k * sizeof *d);
        for (int r = 1; r < parts; r++)
            for (size_t i = 0; i < k; i++) d[i] += s[(size_t)r * k + i];
        break;
    }
    case LS_MEM_ELEM_F64: {
        double *d = dst;
        const double *s = src;
        memcpy(d, s, k * sizeof *d);
        for (int r = 1; r < parts; r++)
            for (size_t i = 0; i < k; i++) d[i] += s[(size_t)r * k + i];
        break;
    }
    default: { /* i64: wraps modulo 2^64 (unsigned arithmetic: defined) */
        unsigned char *d = dst;
        const unsigned char *s = src;
        for (size_t i = 0; i < k; i++) {
            uint64_t acc = 0, v;
            for (int r = 0; r < parts; r++) {
                memcpy(&v, s + ((size_t)r * k + i) * 8, 8);
                acc += v;
            }
            memcpy(d + i * 8, &acc, 8);
        }
        break;
    }
    }
}

ls_status ls_mem_sum_ordered(void *dst, const void *src, size_t k, int parts, ls_mem_elem e, ls_mem_space s) {
    int bad = 0;
    const ls_mem_space_ops *o = toucher(s, &bad);
    if (bad || parts < 1 || (int)e < 0 || e > LS_MEM_ELEM_I64) return LS_ERR_ARG;
    if (k == 0) return LS_OK;
    if (o) o->sum_ordered(dst, src, k, parts, e);
    else host_sum(dst, src, k, parts, e);
    return LS_OK;
}

void ls_mem_space_host_sum(void *dst, const void *src, size_t k, int parts, ls_mem_elem e) {
    host_sum(dst, src, k, parts, e);
}
