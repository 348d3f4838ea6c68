/* test_stage_space.c - the state tier through memory spaces
 * (trainer/model/stage.h, trainer/base/tier.h, mem_space.h): a host-tier
 * state staged for its reader with the device tier's space set to the
 * guarded device space (memory the host cannot touch):
 *  - the staged rows and fixed buffers land in device memory, bit for bit
 *    the state's, while the view's page tables stay host memory;
 *  - with the host tier in device memory too, appending the rows and
 *    staging them never dereference them on the host (any access faults);
 *  - the control: a staged row read on the host faults (the rows really
 *    are device memory), and the default spaces keep the host path. */
#include <criterion/criterion.h>

#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include "trainer/base/mem_space.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/model/stage.h"
#include "trainer/model/state.h"

enum { L = 3, T = 11, PAGE = 4, RK = 6, RV = 5 };

static sigjmp_buf jb;
static void on_segv(int sig) {
    (void)sig;
    siglongjmp(jb, 1);
}
static int read_faults(const ls_real *p) {
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_segv;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old);
    int caught = 0;
    if (sigsetjmp(jb, 1) == 0) {
        volatile ls_real x = *(volatile const ls_real *)p;
        (void)x;
    } else
        caught = 1;
    sigaction(SIGSEGV, &old, NULL);
    return caught;
}

static ls_real kval(int l, size_t t, size_t j) { return (ls_real)(l * 1000 + (int)t * 10 + (int)j) / 7; }

/* A host-tier state of L layers, T positions: k and v rows, one fixed buffer per layer. */
static void build(ls_state *s, ls_real *ks, ls_real *vs) {
    memset(s, 0, sizeof *s);
    s->n_layers = L;
    s->n_pos = T;
    s->page_size = PAGE;
    s->cat = LS_MEM_PROMPT_STATE_HOST;
    s->ly = ls_mem_alloc(LS_MEM_SCRATCH, L * sizeof *s->ly);
    cr_assert_not_null(s->ly);
    for (int l = 0; l < L; l++) {
        for (size_t t = 0; t < T; t++) {
            for (size_t j = 0; j < RK; j++) ks[t * RK + j] = kval(l, t, j);
            for (size_t j = 0; j < RV; j++) vs[t * RV + j] = -kval(l, t, j);
        }
        const ls_real *src[3] = {ks, vs, NULL};
        const size_t rows[3] = {RK, RV, 0};
        cr_assert_eq(LS_K(ls_state_append_pages)(s, l, src, rows, T, 0), LS_OK);
        ls_mem_space sp = ls_mem_cat_space(LS_MEM_PROMPT_STATE_HOST);
        s->ly[l].fixed0 = ls_mem_alloc_in(LS_MEM_PROMPT_STATE_HOST, sp, 8 * sizeof(ls_real));
        ls_real f[8];
        for (int i = 0; i < 8; i++) f[i] = (ls_real)(l + i) * 0.5;
        cr_assert_eq(ls_mem_copy(s->ly[l].fixed0, sp, f, LS_MEM_SPACE_HOST, sizeof f), LS_OK);
    }
}

static void drop(ls_state *s) {
    for (int l = 0; l < L; l++) {
        for (size_t i = 0; i < s->ly[l].n_pages; i++) {
            ls_mem_free(s->ly[l].pages[i].k);
            ls_mem_free(s->ly[l].pages[i].v);
        }
        ls_mem_free(s->ly[l].pages);
        ls_mem_free(s->ly[l].fixed0);
    }
    ls_mem_free(s->ly);
}

/* Stages every layer and checks its rows against kval, read back through the space's copy. */
static void stage_and_check(ls_state *s, ls_mem_space staged_in) {
    ls_stager sg;
    cr_assert_eq(LS_K(ls_stager_init)(&sg, s), LS_OK);
    cr_assert(sg.staging, "a host-tier state is staged");
    for (int l = 0; l < L; l++) {
        cr_assert_eq(LS_K(ls_stager_acquire)(&sg, l, l + 1 < L ? l + 1 : -1), LS_OK);
        const ls_layer_state *ly = &LS_K(ls_stager_state)(&sg)->ly[l];
        cr_assert_eq(ly->n_pages, (T + PAGE - 1) / PAGE);
        cr_assert_eq(ls_mem_space_of(ly->pages), LS_MEM_SPACE_HOST, "the page table is host memory");
        for (size_t i = 0; i < ly->n_pages; i++) {
            const ls_kv_page *pg = &ly->pages[i];
            cr_assert_eq(ls_mem_space_of(pg->k), staged_in, "layer %d page %zu", l, i);
            ls_real back[PAGE * RK], want[PAGE * RK];
            cr_assert_eq(ls_mem_copy(back, LS_MEM_SPACE_HOST, pg->k, staged_in, pg->n * RK * sizeof(ls_real)), LS_OK);
            for (size_t t = 0; t < pg->n; t++)
                for (size_t j = 0; j < RK; j++) want[t * RK + j] = kval(l, (size_t)pg->pos0 + t, j);
            cr_assert_eq(memcmp(back, want, pg->n * RK * sizeof(ls_real)), 0, "layer %d page %zu staged bitwise", l, i);
        }
        ls_real f[8];
        cr_assert_eq(ls_mem_copy(f, LS_MEM_SPACE_HOST, ly->fixed0, staged_in, sizeof f), LS_OK);
        cr_assert_eq(f[3], (ls_real)(l + 3) * 0.5);
        if (staged_in == LS_MEM_SPACE_DEVICE) cr_assert(read_faults(ly->pages[0].k), "staged rows are device memory");
        LS_K(ls_stager_release)(&sg, l);
    }
    LS_K(ls_stager_free)(&sg);
}

Test(stage_space, staged_into_device_memory) {
    cr_assert_eq(ls_mem_space_register(&ls_mem_space_guarded), LS_OK);
    cr_assert_eq(ls_mem_set_tier_space(LS_TIER_DEVICE, LS_MEM_SPACE_DEVICE), LS_OK);
    ls_real ks[T * RK], vs[T * RV];
    ls_state s;
    build(&s, ks, vs);
    cr_assert_eq(ls_mem_space_of(s.ly[0].pages[0].k), LS_MEM_SPACE_HOST, "host tier: host_pinned, host memory");
    stage_and_check(&s, LS_MEM_SPACE_DEVICE);
    drop(&s);
    ls_tier_shutdown();
}

Test(stage_space, host_rows_never_touched_on_the_host) {
    cr_assert_eq(ls_mem_space_register(&ls_mem_space_guarded), LS_OK);
    cr_assert_eq(ls_mem_set_tier_space(LS_TIER_DEVICE, LS_MEM_SPACE_DEVICE), LS_OK);
    cr_assert_eq(ls_mem_set_tier_space(LS_TIER_HOST, LS_MEM_SPACE_DEVICE), LS_OK);
    ls_real ks[T * RK], vs[T * RV];
    ls_state s;
    build(&s, ks, vs); /* appended through the provider: a host write would fault */
    cr_assert_eq(ls_mem_space_of(s.ly[1].pages[2].v), LS_MEM_SPACE_DEVICE);
    cr_assert(read_faults(s.ly[1].pages[2].v), "the host-tier rows are device memory here");
    stage_and_check(&s, LS_MEM_SPACE_DEVICE);
    drop(&s);
    ls_tier_shutdown();
}

Test(stage_space, default_spaces_stay_host) {
    ls_real ks[T * RK], vs[T * RV];
    ls_state s;
    build(&s, ks, vs);
    cr_assert(!read_faults(s.ly[0].pages[0].k));
    stage_and_check(&s, LS_MEM_SPACE_HOST);
    drop(&s);
    ls_tier_shutdown();
}
