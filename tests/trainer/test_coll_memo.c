/* test_coll_memo.c - the checkpointed replay's guards, float64:
 *  - trainer/base/coll_memo.h: a recorded call is taken again only under its
 *    own key (op, purpose, layer, size, input digest); another call, other
 *    input bytes, a call too many or one too few fail with LS_ERR_INTERNAL;
 *    a replayed collective sends nothing (no traffic counted);
 *  - trainer/model/seg_frame.c: a checkpointed segment (ls_seg_io.checkpointed)
 *    gives the taped segment's log-probs and gradients bit for bit with a
 *    smaller tape, and a layer input changed between the forward and the
 *    backward (the injected fault) fails the backward with LS_ERR_INTERNAL
 *    instead of differentiating another forward.
 * The independent composition is the taped segment: every layer's tape kept
 * from its own forward. */
#include <string.h>

#include "tests/trainer/test_hybrid_util.h"
#include "trainer/base/coll_memo.h"
#include "trainer/dist/comm.h"
#include "trainer/model/seg_frame.h"

Test(coll_memo, a_recorded_call_is_taken_again_only_under_its_key) {
    ls_arena a;
    ls_arena_init(&a, LS_MEM_BRANCH, 0);
    ls_coll_memo m;
    ls_coll_memo_init(&m, &a);
    double in[3] = {1, 2, 3}, out[3] = {4, 5, 6}, got[3] = {0};
    uint64_t dg = ls_coll_memo_digest(in, sizeof in);
    ls_coll_memo *prev = ls_coll_memo_use(&m, LS_COLL_MEMO_RECORD);
    ls_coll_memo_put("allreduce_sum", "out_sum", 3, dg, out, sizeof out);
    ls_coll_memo_put("allreduce_max", "lse_max", 3, dg, in, sizeof in);
    ls_coll_memo_restore(prev);
    cr_assert_eq(m.n, 2);
    cr_assert_eq(ls_coll_memo_finish(&m), LS_OK);
    /* replayed in order under the same keys: the recorded results */
    ls_status st = LS_ERR_ARG;
    ls_coll_memo_use(&m, LS_COLL_MEMO_REPLAY);
    cr_assert(ls_coll_memo_take("allreduce_sum", "out_sum", 3, dg, got, sizeof got, &st));
    cr_assert_eq(st, LS_OK);
    cr_assert(memcmp(got, out, sizeof out) == 0);
    cr_assert(ls_coll_memo_take("allreduce_max", "lse_max", 3, dg, got, sizeof got, &st));
    cr_assert_eq(st, LS_OK);
    cr_assert_eq(ls_coll_memo_finish(&m), LS_OK);
    /* a call too many */
    cr_assert(ls_coll_memo_take("allreduce_sum", "dq_sum", 3, dg, got, sizeof got, &st));
    cr_assert_eq(st, LS_ERR_INTERNAL, "%s", m.err);
    /* other input bytes, another purpose, another layer, another size: each fails */
    struct { const char *purpose; int layer; uint64_t dg; size_t bytes; const char *why; } bad[] = {
        {"out_sum", 3, dg ^ 1, sizeof got, "other input bytes"},
        {"lse_sum", 3, dg, sizeof got, "another"},
        {"out_sum", 2, dg, sizeof got, "another"},
        {"out_sum", 3, dg, sizeof got - 8, "another size"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ls_coll_memo_use(&m, LS_COLL_MEMO_REPLAY);
        m.st = LS_OK;
        cr_assert(ls_coll_memo_take("allreduce_sum", bad[i].purpose, bad[i].layer, bad[i].dg, got, bad[i].bytes, &st));
        cr_expect_eq(st, LS_ERR_INTERNAL, "case %zu", i);
        cr_expect(strstr(m.err, bad[i].why) != NULL, "case %zu: %s", i, m.err);
    }
    /* one too few: the replay ends before the second recorded call */
    ls_coll_memo_use(&m, LS_COLL_MEMO_REPLAY);
    m.st = LS_OK;
    cr_assert(ls_coll_memo_take("allreduce_sum", "out_sum", 3, dg, got, sizeof got, &st));
    cr_assert_eq(ls_coll_memo_finish(&m), LS_ERR_INTERNAL);
    cr_expect(strstr(m.err, "lse_max") != NULL, "%s", m.err);
    ls_coll_memo_restore(NULL);
    ls_arena_free(&a);
}

Test(coll_memo, a_replayed_collective_sends_nothing) {
    ls_comm *c = NULL;
    char err[256];
    cr_assert_eq(ls_comm_open(&c, NULL, NULL, err, sizeof err), LS_OK, "%s", err);
    ls_comm_group *g = ls_comm_cp(c);
    ls_arena a;
    ls_arena_init(&a, LS_MEM_BRANCH, 0);
    ls_coll_memo m;
    ls_coll_memo_init(&m, &a);
    double x[4] = {1, 2, 3, 4}, y[4] = {1, 2, 3, 4};
    ls_coll_memo_use(&m, LS_COLL_MEMO_RECORD);
    cr_assert_eq(ls_group_allreduce_sum(g, x, 4, LS_TRACE_DTYPE_F64, "out_sum", 0), LS_OK);
    ls_coll_memo_restore(NULL);
    uint64_t sent = ls_comm_bytes_sent(c);
    ls_comm_stat st[8];
    size_t n0 = ls_comm_stats(c, st, 8);
    uint64_t calls0 = n0 ? st[0].calls : 0;
    ls_coll_memo_use(&m, LS_COLL_MEMO_REPLAY);
    cr_assert_eq(ls_group_allreduce_sum(g, y, 4, LS_TRACE_DTYPE_F64, "out_sum", 0), LS_OK);
    cr_assert_eq(ls_coll_memo_finish(&m), LS_OK);
    /* the same call with other input bytes is refused, not reduced */
    ls_coll_memo_use(&m, LS_COLL_MEMO_REPLAY);
    y[0] = 9;
    cr_assert_eq(ls_group_allreduce_sum(g, y, 4, LS_TRACE_DTYPE_F64, "out_sum", 0), LS_ERR_INTERNAL);
    ls_coll_memo_restore(NULL);
    cr_expect_eq(ls_comm_bytes_sent(c), sent);
    cr_expect_eq(ls_comm_stats(c, st, 8), n0);
    cr_expect_eq(n0 ? st[0].calls : 0, calls0, "a replayed call is not counted as traffic");
    ls_arena_free(&a);
    ls_comm_close(c);
}

/* One member's segment from a captured prompt state: its log-probs and gradients, taped or checkpointed;
 * corrupt: change layer 1's stored input between the forward and the backward. */
static ls_status member(ls_params *p, const ls_state *ps, const int32_t *tok, const int32_t *tg, size_t T, int64_t pos0,
                        int checkpointed, int corrupt, ls_real *lp, double **grads, size_t *tape_bytes) {
    K(ls_params_zero_grads)(p);
    ls_seg_tape *tape = NULL;
    ls_seg_io io = {.tokens = tok, .T = T, .pos0 = pos0, .ctx = ps, .targets = tg, .logp = lp, .tape = &tape,
                    .tape_cat = LS_MEM_BRANCH, .checkpointed = checkpointed};
    cr_assert_eq(p->fam->segment_forward(p, &io), LS_OK);
    if (corrupt) tape->fr.ckpt[1][5] += (ls_real)1e-12;
    ls_real dlp[64];
    for (size_t t = 0; t < T; t++) dlp[t] = (ls_real)(0.1 * (double)(t + 1));
    ls_status st = p->fam->segment_backward(p, tape, dlp, NULL, NULL, NULL, NULL);
    *tape_bytes = p->fam->tape_bytes(tape);
    p->fam->tape_free(tape);
    *grads = st == LS_OK ? grads_of(p) : NULL;
    return st;
}

Test(coll_memo, checkpointed_segment_equals_taped_and_refuses_a_changed_input) {
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 7);
    jitter_trainable(p, 0.05, 8);
    size_t P = 40, T = 12;
    int32_t prompt[64], tok[64], tg[64];
    for (size_t i = 0; i < P; i++) prompt[i] = (int32_t)((i * 37 + 11) % 256);
    for (size_t i = 0; i < T; i++) tg[i] = (int32_t)((i * 53 + 7) % 256);
    tok[0] = prompt[P - 1];
    memcpy(tok + 1, tg, (T - 1) * sizeof *tok);
    ls_state ps;
    cr_assert_eq(p->fam->state_init(&ps, p, 8, LS_MEM_PROMPT_STATE), LS_OK);
    ls_seg_io cap = {.tokens = prompt, .T = P - 1, .state_out = &ps};
    cr_assert_eq(p->fam->segment_forward(p, &cap), LS_OK);
    ls_real lp_t[64], lp_c[64];
    double *g_t = NULL, *g_c = NULL;
    size_t b_t = 0, b_c = 0, n = 0;
    cr_assert_eq(member(p, &ps, tok, tg, T, (int64_t)P - 1, 0, 0, lp_t, &g_t, &b_t), LS_OK);
    cr_assert_eq(member(p, &ps, tok, tg, T, (int64_t)P - 1, 1, 0, lp_c, &g_c, &b_c), LS_OK);
    cr_assert(memcmp(lp_t, lp_c, T * sizeof *lp_t) == 0, "the log-probs differ");
    n = p->n_trainable;
    cr_assert_gt(n, 0);
    cr_assert(memcmp(g_t, g_c, n * sizeof *g_t) == 0, "the checkpointed gradients differ from the taped ones");
    cr_expect_lt(b_c, b_t, "checkpointed tape %zu bytes, taped %zu", b_c, b_t);
    double *g_x = NULL;
    size_t b_x = 0;
    cr_assert_eq(member(p, &ps, tok, tg, T, (int64_t)P - 1, 1, 1, lp_c, &g_x, &b_x), LS_ERR_INTERNAL,
                 "a changed layer input was differentiated");
    free(g_t);
    free(g_c);
    K(ls_state_free)(&ps);
    K(ls_params_free)(p);
}
