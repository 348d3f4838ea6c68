/* test_trace_metrics.c - the step_metrics event and prefix-frozen marking:
 *  - every field of step_metrics survives writer -> file -> reader ->
 *    decoder bit for bit (random doubles, all field subsets), and the
 *    event's fields are exactly ls_trace_step_metrics_to_json's object (the
 *    trainer's --metrics line);
 *  - NaN/Inf in any written field is refused with LS_ERR_NONFINITE naming
 *    the field, ranges with LS_ERR_ARG naming the field, leaving no trace
 *    and no seq gap;
 *  - in prefix-frozen mode every event with a step, and only those, carries
 *    "prefix_frozen":true, seen in the raw file text (parsed with cJSON, not
 *    the reader) and through the reader's ls_trace_event.prefix_frozen;
 *  - the gradient comparison's members (grad_cosine, grad_norm_detached,
 *    grad_norm_full) come together, the cosine in [-1, 1]. */
#include <math.h>
#include <stddef.h>

#include "tests/receipts/test_trace_util.h"

static const char *const ENVELOPE[] = {"v", "rank", "seq", "ts_ns", "ev"};

/* Opens dir/events.jsonl for writing with the test header. */
static ls_trace_writer *open_writer(char dir[64], char path[128]) {
    tt_mkdtemp(dir);
    snprintf(path, 128, "%s/events.jsonl", dir);
    ls_trace_header h = tt_header();
    ls_trace_writer *w = NULL;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_OK);
    return w;
}

/* The file's event lines (header skipped) parsed by cJSON alone. */
static size_t raw_events(const char *path, cJSON **out, size_t cap) {
    size_t len, n = 0;
    char *text = (char *)tt_slurp(path, &len);
    char *p = strchr(text, '\n');
    cr_assert_not_null(p);
    for (p++; *p; ) {
        char *nl = strchr(p, '\n');
        cr_assert_not_null(nl, "unterminated line");
        *nl = '\0';
        cr_assert_lt(n, cap);
        out[n] = cJSON_Parse(p);
        cr_assert_not_null(out[n], "not JSON: %s", p);
        n++;
        p = nl + 1;
    }
    free(text);
    return n;
}

/* Every member of `a` bit-identical to `b`'s (doubles compared as bits). */
static void expect_same(const ls_trace_step_metrics *a, const ls_trace_step_metrics *b, size_t i) {
#define SAME_D(f)                                                                              \
    cr_assert(memcmp(&a->f, &b->f, sizeof(double)) == 0, "event %zu: " #f " %.17g != %.17g", i, \
              a->f, b->f)
    cr_assert_eq(a->step, b->step, "event %zu: step", i);
    cr_assert_eq(a->prefix_frozen, b->prefix_frozen, "event %zu: prefix_frozen", i);
    cr_assert_eq(a->objective, b->objective, "event %zu: objective", i);
    cr_assert_eq(a->has_reward_parts, b->has_reward_parts, "event %zu: has_reward_parts", i);
    cr_assert_eq(a->has_grad_compare, b->has_grad_compare, "event %zu: has_grad_compare", i);
    cr_assert_eq(a->has_grad_cosine, b->has_grad_cosine, "event %zu: has_grad_cosine", i);
    cr_assert_eq(a->tokens, b->tokens, "event %zu: tokens", i);
    cr_assert_eq(a->tokens_per_s_mask, b->tokens_per_s_mask, "event %zu: mask", i);
    SAME_D(reward_mean);
    SAME_D(reward_std);
    SAME_D(reward_min);
    SAME_D(reward_max);
    if (a->has_reward_parts) {
        SAME_D(reward_retrieval);
        SAME_D(reward_format);
    }
    SAME_D(adv_mean);
    SAME_D(adv_std);
    SAME_D(loss);
    SAME_D(loss_policy);
    SAME_D(loss_kl);
    SAME_D(kl_mean);
    SAME_D(clip_fraction);
    SAME_D(ratio_min);
    SAME_D(ratio_mean);
    SAME_D(ratio_max);
    SAME_D(response_len_mean);
    SAME_D(grad_norm);
    if (a->has_grad_compare) {
        SAME_D(grad_norm_detached);
        SAME_D(grad_norm_full);
    }
    if (a->has_grad_cosine) SAME_D(grad_cosine);
    SAME_D(lr);
    SAME_D(step_wall_s);
    for (int p = 0; p < LS_PHASE_COUNT; p++)
        if (a->tokens_per_s_mask & (1u << p)) SAME_D(tokens_per_s[p]);
#undef SAME_D
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
/* A double in [0, scale) with all 52 mantissa bits random. */
static double rnd(double scale) { return (double)(next_u64() >> 11) * 0x1p-53 * scale; }

static ls_trace_step_metrics random_metrics(int64_t step) {
    ls_trace_step_metrics m = tt_step_metrics(step, (step % 3) ? LS_TRACE_OBJECTIVE_GRPO : LS_TRACE_OBJECTIVE_SFT,
                                              step % 2 == 0);
    m.prefix_frozen = step % 5 == 1;
    m.reward_mean = rnd(2) - 1;
    m.reward_std = rnd(1);
    m.reward_min = rnd(1) - 1;
    m.reward_max = rnd(1e6);
    m.reward_retrieval = -rnd(1e-300);
    m.reward_format = rnd(1);
    m.adv_mean = rnd(1e-15) - 5e-16;
    m.adv_std = rnd(3);
    m.loss = rnd(10) - 5;
    m.loss_policy = -rnd(1e300);
    m.loss_kl = rnd(1e-3);
    m.kl_mean = rnd(1);
    m.clip_fraction = step % 7 == 0 ? 1.0 : rnd(1);
    m.ratio_min = 4.9e-324 + rnd(1); /* the smallest subnormal stays > 0 */
    m.ratio_mean = 1 + rnd(1e-9);
    m.ratio_max = rnd(1e10) + 1;
    m.response_len_mean = rnd(4096);
    m.tokens = (int64_t)(next_u64() >> 11);
    m.grad_norm = rnd(1e3);
    m.has_grad_compare = step % 4 != 3; /* --grad-cosine-every: the norms, the cosine unless undefined */
    m.has_grad_cosine = m.has_grad_compare && step % 8 != 2;
    m.grad_cosine = step % 16 == 5 ? -1.0 : step % 16 == 6 ? 1.0 : rnd(2) - 1;
    m.grad_norm_detached = rnd(1e3);
    m.grad_norm_full = step % 8 == 2 ? 0 : rnd(1e3);
    m.lr = rnd(1e-3);
    m.tokens_per_s_mask = (unsigned)(next_u64() & LS_TRACE_RATE_PHASE_MASK);
    for (int p = 0; p < LS_PHASE_COUNT; p++) m.tokens_per_s[p] = rnd(1e7);
    m.step_wall_s = rnd(1e4);
    return m;
}

#define N_RANDOM 400

Test(trace_metrics, every_field_round_trips_bit_for_bit) {
    char dir[64], path[128];
    ls_trace_writer *w = open_writer(dir, path);
    static ls_trace_step_metrics sent[N_RANDOM];
    for (int i = 0; i < N_RANDOM; i++) {
        sent[i] = random_metrics(i);
        cr_assert_eq(ls_trace_emit_step_metrics(w, &sent[i]), LS_OK, "%d: %s", i,
                     ls_trace_writer_last_error(w));
    }
    cr_assert_eq(ls_trace_emit_rank_complete(w, N_RANDOM), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);

    ls_trace_reader *r = NULL;
    cr_assert_eq(ls_trace_reader_open(&r, path), LS_OK);
    const ls_trace_event *ev;
    size_t i = 0;
    while (ls_trace_reader_next(r, &ev) == LS_OK && ev != NULL && ev->kind == LS_TRACE_STEP_METRICS) {
        cr_assert_lt(i, (size_t)N_RANDOM);
        cr_assert_eq(ev->flags, 0u, "event %zu flagged %#x", i, ev->flags);
        cr_assert_eq(ev->prefix_frozen, sent[i].prefix_frozen, "event %zu", i);
        ls_trace_step_metrics got;
        cr_assert_eq(ls_trace_decode_step_metrics(ev->json, &got), LS_OK);
        expect_same(&got, &sent[i], i);
        /* the event minus its envelope is exactly the --metrics object */
        cJSON *fields = cJSON_Duplicate(ev->json, 1);
        for (size_t k = 0; k < 5; k++) cJSON_DeleteItemFromObjectCaseSensitive(fields, ENVELOPE[k]);
        cJSON *line = NULL;
        cr_assert_eq(ls_trace_step_metrics_to_json(&sent[i], &line), LS_OK);
        cr_assert(cJSON_Compare(fields, line, 1), "event %zu differs from to_json", i);
        /* optional members present exactly when asked for */
        cr_assert_eq(cJSON_HasObjectItem(line, "reward_retrieval"), sent[i].has_reward_parts);
        cr_assert_eq(cJSON_HasObjectItem(line, "reward_format"), sent[i].has_reward_parts);
        cr_assert_eq(cJSON_HasObjectItem(line, "prefix_frozen"), sent[i].prefix_frozen);
        cr_assert_eq(cJSON_HasObjectItem(line, "grad_norm_detached"), sent[i].has_grad_compare);
        cr_assert_eq(cJSON_HasObjectItem(line, "grad_norm_full"), sent[i].has_grad_compare);
        cr_assert_eq(cJSON_HasObjectItem(line, "grad_cosine"), sent[i].has_grad_cosine);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(line, "tokens_per_s")),
                     __builtin_popcount(sent[i].tokens_per_s_mask));
        /* the decoder reads the bare line too */
        ls_trace_step_metrics again;
        cr_assert_eq(ls_trace_decode_step_metrics(line, &again), LS_OK);
        expect_same(&again, &sent[i], i);
        cJSON_Delete(fields);
        cJSON_Delete(line);
        i++;
    }
    cr_assert_eq(i, (size_t)N_RANDOM);
    cr_assert_not_null(ev);
    cr_assert_eq(ev->kind, LS_TRACE_RANK_COMPLETE);
    cr_assert_eq(ls_trace_reader_next(r, &ev), LS_OK);
    cr_assert_null(ev);
    cr_assert_eq(ls_trace_report_status(ls_trace_reader_report(r)), LS_OK);
    ls_trace_reader_close(r);
    tt_rmdir(dir);
}

/* The offset of each double the emitter must check, with its field name. */
static const struct {
    const char *name;
    size_t off;
} DOUBLES[] = {
#define D(f) {#f, offsetof(ls_trace_step_metrics, f)}
    D(reward_mean), D(reward_std), D(reward_min), D(reward_max), D(reward_retrieval),
    D(reward_format), D(adv_mean), D(adv_std), D(loss), D(loss_policy), D(loss_kl),
    D(kl_mean), D(clip_fraction), D(ratio_min), D(ratio_mean), D(ratio_max),
    D(response_len_mean), D(grad_norm), D(grad_cosine), D(grad_norm_detached), D(grad_norm_full), D(lr),
    D(step_wall_s),
    {"tokens_per_s.capture", offsetof(ls_trace_step_metrics, tokens_per_s) + 0 * sizeof(double)},
    {"tokens_per_s.score", offsetof(ls_trace_step_metrics, tokens_per_s) + 2 * sizeof(double)},
    {"tokens_per_s.prompt_bwd", offsetof(ls_trace_step_metrics, tokens_per_s) + 4 * sizeof(double)},
#undef D
};

static void poke(ls_trace_step_metrics *m, size_t off, double v) { memcpy((char *)m + off, &v, sizeof v); }

Test(trace_metrics, nonfinite_refused_naming_the_field) {
    char dir[64], path[128];
    ls_trace_writer *w = open_writer(dir, path);
    const double bad[] = {NAN, INFINITY, -INFINITY};
    size_t refused = 0;
    for (size_t d = 0; d < sizeof DOUBLES / sizeof DOUBLES[0]; d++)
        for (size_t b = 0; b < 3; b++) {
            ls_trace_step_metrics m = tt_step_metrics(1, LS_TRACE_OBJECTIVE_GRPO, true);
            m.clip_fraction = 7; /* out of range too: non-finite must be what is reported */
            m.has_grad_compare = m.has_grad_cosine = true;
            poke(&m, DOUBLES[d].off, bad[b]);
            if (strcmp(DOUBLES[d].name, "clip_fraction") == 0) m.clip_fraction = bad[b];
            int64_t seq = ls_trace_writer_seq(w);
            cr_assert_eq(ls_trace_emit_step_metrics(w, &m), LS_ERR_NONFINITE, "%s = %g", DOUBLES[d].name,
                         bad[b]);
            char want[80];
            snprintf(want, sizeof want, "step_metrics.%s:", DOUBLES[d].name);
            cr_assert_not_null(strstr(ls_trace_writer_last_error(w), want), "%s: %s", want,
                               ls_trace_writer_last_error(w));
            cr_assert_eq(ls_trace_writer_seq(w), seq, "a refused event consumed a seq");
            cJSON *o = (cJSON *)&m; /* anything non-NULL: must be reset */
            cr_assert_eq(ls_trace_step_metrics_to_json(&m, &o), LS_ERR_NONFINITE);
            cr_assert_null(o);
            char why[160];
            cr_assert_eq(ls_trace_step_metrics_check(&m, why, sizeof why), LS_ERR_NONFINITE);
            cr_assert_not_null(strstr(why, want), "%s", why);
            refused++;
        }
    /* a NaN in a member that is not written is not looked at */
    ls_trace_step_metrics m = tt_step_metrics(2, LS_TRACE_OBJECTIVE_GRPO, false);
    m.reward_retrieval = NAN;
    m.tokens_per_s_mask = 1u << LS_PHASE_ROLLOUT;
    m.tokens_per_s[LS_PHASE_REPLAY] = NAN;
    cr_assert_eq(ls_trace_emit_step_metrics(w, &m), LS_OK, "%s", ls_trace_writer_last_error(w));
    cr_assert_eq(ls_trace_emit_rank_complete(w, 1), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    /* the file holds exactly the two good events, seq 0 and 1 */
    cJSON *ev[4];
    cr_assert_eq(raw_events(path, ev, 4), 2u);
    cr_assert_eq(cJSON_GetObjectItem(ev[0], "seq")->valuedouble, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(ev[1], "ev")->valuestring, "rank_complete");
    for (int i = 0; i < 2; i++) cJSON_Delete(ev[i]);
    tt_rmdir(dir);
    cr_log_info("non-finite refusals checked: %zu", refused);
}

Test(trace_metrics, ranges_refused_naming_the_field) {
    char dir[64], path[128];
    ls_trace_writer *w = open_writer(dir, path);
    /* each mutation is applied to a fresh good sample */
    for (int k = 0; k < 16; k++) {
        ls_trace_step_metrics m = tt_step_metrics(3, LS_TRACE_OBJECTIVE_SFT, true);
        m.has_grad_compare = m.has_grad_cosine = true;
        m.grad_cosine = 0.5;
        m.grad_norm_detached = m.grad_norm_full = 1;
        const char *field;
        switch (k) {
        case 0: m.clip_fraction = 1.0000000000000002; field = "clip_fraction"; break;
        case 1: m.clip_fraction = -1e-300; field = "clip_fraction"; break;
        case 2: m.ratio_min = 0; field = "ratio_min"; break;
        case 3: m.ratio_max = -1; field = "ratio_max"; break;
        case 4: m.reward_std = -0.5; field = "reward_std"; break;
        case 5: m.adv_std = -1e-9; field = "adv_std"; break;
        case 6: m.step = -1; field = "step"; break;
        case 7: m.tokens = LS_TRACE_MAX_INT + 1; field = "tokens"; break;
        case 8: m.objective = LS_TRACE_OBJECTIVE_COUNT; field = "objective"; break;
        case 9: m.tokens_per_s_mask |= 1u << LS_PHASE_FINALIZE; field = "tokens_per_s"; break;
        case 10: m.tokens_per_s[LS_PHASE_ROLLOUT] = -2; field = "tokens_per_s.rollout"; break;
        case 11: m.lr = -3e-4; field = "lr"; break;
        case 12: m.grad_cosine = 1.0000000000000002; field = "grad_cosine"; break;
        case 13: m.grad_cosine = -1.0000000000000002; field = "grad_cosine"; break;
        case 14: m.grad_norm_full = -1e-300; field = "grad_norm_full"; break;
        default: m.step_wall_s = -1; field = "step_wall_s"; break;
        }
        int64_t seq = ls_trace_writer_seq(w);
        cr_expect_eq(ls_trace_emit_step_metrics(w, &m), LS_ERR_ARG, "case %d (%s)", k, field);
        char want[80];
        snprintf(want, sizeof want, "step_metrics.%s:", field);
        cr_expect_not_null(strstr(ls_trace_writer_last_error(w), want), "case %d: %s", k,
                           ls_trace_writer_last_error(w));
        cr_expect_eq(ls_trace_writer_seq(w), seq, "case %d consumed a seq", k);
        cJSON *o = NULL;
        cr_expect_eq(ls_trace_step_metrics_to_json(&m, &o), LS_ERR_ARG, "case %d", k);
        cr_expect_null(o);
    }
    cr_assert_eq(ls_trace_emit_step_metrics(w, NULL), LS_ERR_ARG);
    cr_assert_eq(ls_trace_emit_step_metrics(NULL, NULL), LS_ERR_ARG);
    /* the edges are accepted */
    ls_trace_step_metrics m = tt_step_metrics(0, LS_TRACE_OBJECTIVE_GRPO, true);
    m.clip_fraction = 0;
    m.ratio_min = 4.9e-324;
    m.tokens = LS_TRACE_MAX_INT;
    m.tokens_per_s_mask = 0;
    cr_assert_eq(ls_trace_emit_step_metrics(w, &m), LS_OK, "%s", ls_trace_writer_last_error(w));
    m.clip_fraction = 1;
    cr_assert_eq(ls_trace_emit_step_metrics(w, &m), LS_OK, "%s", ls_trace_writer_last_error(w));
    cr_assert_eq(ls_trace_writer_seq(w), 2);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    tt_rmdir(dir);
}

/* The gradient comparison's members (--grad-cosine-every) come together: both norms or neither, the cosine
 * only beside them; the check names the missing one. */
Test(trace_metrics, grad_compare_members_come_together) {
    ls_trace_step_metrics m = tt_step_metrics(4, LS_TRACE_OBJECTIVE_GRPO, false);
    m.has_grad_compare = m.has_grad_cosine = true;
    m.grad_cosine = -0.25;
    m.grad_norm_detached = 2;
    m.grad_norm_full = 3;
    cJSON *o = NULL;
    cr_assert_eq(ls_trace_step_metrics_to_json(&m, &o), LS_OK);
    cr_assert_eq(ls_trace_event_check(LS_TRACE_STEP_METRICS, o, NULL, 0), LS_OK);
    const char *drop[] = {"grad_norm_full", "grad_norm_detached"};
    for (int k = 0; k < 2; k++) {
        cJSON *c = cJSON_Duplicate(o, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(c, drop[k]);
        char why[200];
        cr_expect_eq(ls_trace_event_check(LS_TRACE_STEP_METRICS, c, why, sizeof why), LS_ERR_SCHEMA, "%s dropped",
                     drop[k]);
        cr_expect_not_null(strstr(why, drop[k]), "%s dropped: %s", drop[k], why);
        cJSON_DeleteItemFromObjectCaseSensitive(c, drop[1 - k]); /* the cosine alone */
        cr_expect_eq(ls_trace_event_check(LS_TRACE_STEP_METRICS, c, why, sizeof why), LS_ERR_SCHEMA,
                     "the cosine without its norms");
        cJSON_DeleteItemFromObjectCaseSensitive(c, "grad_cosine"); /* none: an unmeasured step */
        cr_expect_eq(ls_trace_event_check(LS_TRACE_STEP_METRICS, c, why, sizeof why), LS_OK, "%s", why);
        cJSON_Delete(c);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(o, "grad_cosine", cJSON_CreateNumber(1.5));
    cr_expect_eq(ls_trace_event_check(LS_TRACE_STEP_METRICS, o, NULL, 0), LS_ERR_SCHEMA, "a cosine above 1");
    cJSON_Delete(o);
}

/* Emits one event of every kind (and two generic ones) at step s. */
static void emit_all(ls_trace_writer *w, int64_t s) {
    uint8_t sha[32] = {0};
    ls_trace_layer_end l = TT_L1;
    l.step = s;
    ls_trace_memory mem = TT_MEM;
    mem.step = s;
    ls_trace_step_metrics m = tt_step_metrics(s, LS_TRACE_OBJECTIVE_GRPO, true);
    cr_assert_eq(ls_trace_emit_phase_begin(w, "capture", s), LS_OK);
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_OK);
    cr_assert_eq(ls_trace_emit_collective(w, &TT_C0), LS_OK);
    cr_assert_eq(ls_trace_emit_memory(w, &mem), LS_OK);
    cr_assert_eq(ls_trace_emit_step_metrics(w, &m), LS_OK);
    cr_assert_eq(ls_trace_emit_optimizer_step(w, s, 10, 1e-3, 0.5), LS_OK);
    cr_assert_eq(ls_trace_emit_param_digest(w, s, "trainable", sha), LS_OK);
    cr_assert_eq(ls_trace_emit_error(w, LS_ERR_IO, "x"), LS_OK);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "step", (double)s);
    cr_assert_eq(ls_trace_emit_json(w, "custom_with_step", f), LS_OK);
    cr_assert_eq(ls_trace_emit_json(w, "phase_begin", f), LS_ERR_ARG, "phase missing");
    cJSON_AddStringToObject(f, "phase", "replay");
    cr_assert_eq(ls_trace_emit_json(w, "phase_begin", f), LS_OK);
    cJSON_Delete(f);
    f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "n", 1);
    cr_assert_eq(ls_trace_emit_json(w, "custom_without_step", f), LS_OK);
    cJSON_Delete(f);
    cr_assert_eq(ls_trace_emit_phase_end(w, "capture", s, 5, true), LS_OK);
}
#define N_ALL 12 /* events emit_all writes */

static bool has_step(const char *kind) {
    return strcmp(kind, "collective") != 0 && strcmp(kind, "error") != 0 &&
           strcmp(kind, "custom_without_step") != 0 && strcmp(kind, "rank_complete") != 0;
}

Test(trace_metrics, prefix_frozen_marks_every_event_with_a_step) {
    char dir[64], path[128];
    ls_trace_writer *w = open_writer(dir, path);
    cr_assert_eq(ls_trace_writer_prefix_frozen(w), false);
    emit_all(w, 0);                                   /* exact */
    cr_assert_eq(ls_trace_writer_set_prefix_frozen(w, true), LS_OK);
    cr_assert_eq(ls_trace_writer_prefix_frozen(w), true);
    emit_all(w, 1);                                   /* prefix-frozen */
    emit_all(w, 2);
    cr_assert_eq(ls_trace_writer_set_prefix_frozen(w, false), LS_OK);
    emit_all(w, 3);                                   /* exact again */
    /* an event may mark itself with the mode off */
    ls_trace_layer_end l = TT_L1;
    l.step = 4;
    l.prefix_frozen = true;
    cr_assert_eq(ls_trace_emit_layer_end(w, &l), LS_OK);
    ls_trace_step_metrics m = tt_step_metrics(4, LS_TRACE_OBJECTIVE_SFT, false);
    m.prefix_frozen = true;
    cr_assert_eq(ls_trace_emit_step_metrics(w, &m), LS_OK);
    cr_assert_eq(ls_trace_emit_rank_complete(w, 5), LS_OK);
    cr_assert_eq(ls_trace_writer_set_prefix_frozen(NULL, true), LS_ERR_ARG);
    cr_assert_eq(ls_trace_writer_prefix_frozen(NULL), false);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    const size_t total = 4 * N_ALL + 3;

    /* the raw text, parsed by cJSON alone */
    static cJSON *ev[64];
    cr_assert_eq(raw_events(path, ev, 64), total);
    size_t marked = 0;
    for (size_t i = 0; i < total; i++) {
        const char *kind = cJSON_GetObjectItem(ev[i], "ev")->valuestring;
        bool frozen_step = i >= N_ALL && i < 3 * N_ALL;
        bool want = (frozen_step && has_step(kind)) || i == 4 * N_ALL || i == 4 * N_ALL + 1;
        const cJSON *pf = cJSON_GetObjectItem(ev[i], "prefix_frozen");
        cr_assert_eq(pf != NULL, want, "event %zu (%s): prefix_frozen %s", i, kind,
                     pf ? "present" : "absent");
        if (pf) cr_assert(cJSON_IsTrue(pf), "event %zu: prefix_frozen is not true", i);
        marked += pf != NULL;
    }
    cr_assert_eq(marked, 2 * 9 + 2u, "9 events with a step per emit_all");
    /* step_metrics keeps its field order: prefix_frozen right after step */
    const cJSON *sm = ev[N_ALL + 4];
    cr_assert_str_eq(cJSON_GetObjectItem(sm, "ev")->valuestring, "step_metrics");
    cr_assert_str_eq(cJSON_GetObjectItem(sm, "step")->next->string, "prefix_frozen");

    /* the reader: flags clean, prefix_frozen as in the text, decoders agree */
    tt_run run;
    size_t len;
    unsigned char *text = tt_slurp(path, &len);
    tt_read_mem(text, len, &run);
    cr_assert_eq(run.n, total);
    cr_assert_eq(ls_trace_report_status(&run.rep), LS_OK, "unknown kinds are warnings only");
    cr_assert_eq(tt_errors(&run.rep), 0u);
    tt_run_free(&run);
    ls_trace_reader *r = NULL;
    cr_assert_eq(ls_trace_reader_open_mem(&r, text, len, "mem"), LS_OK);
    const ls_trace_event *e;
    size_t i = 0;
    while (ls_trace_reader_next(r, &e) == LS_OK && e != NULL) {
        bool want = cJSON_IsTrue(cJSON_GetObjectItem(ev[i], "prefix_frozen"));
        cr_assert_eq(e->prefix_frozen, want, "event %zu", i);
        cr_assert_eq(e->flags & ~LS_TRACE_EVF_UNKNOWN_KIND, 0u, "event %zu flagged %#x", i, e->flags);
        if (e->kind == LS_TRACE_LAYER_END) {
            ls_trace_layer_end got;
            cr_assert_eq(ls_trace_decode_layer_end(e->json, &got), LS_OK);
            cr_assert_eq(got.prefix_frozen, want, "layer_end %zu", i);
        }
        if (e->kind == LS_TRACE_STEP_METRICS) {
            ls_trace_step_metrics got;
            cr_assert_eq(ls_trace_decode_step_metrics(e->json, &got), LS_OK);
            cr_assert_eq(got.prefix_frozen, want, "step_metrics %zu", i);
        }
        i++;
    }
    cr_assert_eq(i, total);
    ls_trace_reader_close(r);
    free(text);
    for (i = 0; i < total; i++) cJSON_Delete(ev[i]);
    tt_rmdir(dir);
}

/* A reader meets marks that the format forbids: false, a string, a mark on a
 * kind without a step.  Each is a field diagnostic and flagged. */
Test(trace_metrics, reader_flags_bad_marks) {
    static const char *const BAD[] = {
        "{\"v\":1,\"rank\":1,\"seq\":0,\"ts_ns\":1,\"ev\":\"phase_begin\",\"phase\":\"capture\",\"step\":0,"
        "\"prefix_frozen\":false}",
        "{\"v\":1,\"rank\":1,\"seq\":1,\"ts_ns\":2,\"ev\":\"optimizer_step\",\"step\":0,\"n_params\":1,"
        "\"lr\":0,\"grad_norm\":0,\"prefix_frozen\":\"true\"}",
        "{\"v\":1,\"rank\":1,\"seq\":2,\"ts_ns\":3,\"ev\":\"error\",\"code\":1,\"status\":\"x\","
        "\"message\":\"m\",\"prefix_frozen\":true}",
        "{\"v\":1,\"rank\":1,\"seq\":3,\"ts_ns\":4,\"ev\":\"phase_end\",\"phase\":\"capture\",\"step\":0,"
        "\"wall_ns\":1,\"ok\":true,\"prefix_frozen\":true}",
    };
    ls_trace_header h = tt_header();
    char dir[64], path[128];
    tt_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/h.jsonl", dir);
    ls_trace_writer *w;
    cr_assert_eq(ls_trace_writer_open(&w, path, &h), LS_OK);
    cr_assert_eq(ls_trace_writer_close(w), LS_OK);
    size_t hl;
    char *hdr = (char *)tt_slurp(path, &hl);
    size_t cap = hl + 4096;
    char *text = malloc(cap);
    size_t n = (size_t)snprintf(text, cap, "%s", hdr);
    for (size_t i = 0; i < 4; i++) n += (size_t)snprintf(text + n, cap - n, "%s\n", BAD[i]);
    tt_run run;
    tt_read_mem(text, n, &run);
    cr_assert_eq(run.n, 4u);
    for (size_t i = 0; i < 3; i++)
        cr_expect(run.flags[i] & LS_TRACE_EVF_FIELDS, "line %zu not flagged", i + 2);
    cr_expect_eq(run.flags[3] & LS_TRACE_EVF_FIELDS, 0u, "a proper mark flagged");
    cr_expect_eq(run.rep.counts[LS_TRACE_DIAG_FIELD], 3u);
    const ls_trace_diag *d = tt_find(&run.rep, LS_TRACE_DIAG_FIELD);
    cr_assert_not_null(d);
    cr_expect_not_null(strstr(d->message, "phase_begin.prefix_frozen"), "%s", d->message);
    tt_run_free(&run);
    free(text);
    free(hdr);
    tt_rmdir(dir);
}

Test(trace_metrics, decoder_refuses_bad_objects) {
    cJSON *good = NULL;
    ls_trace_step_metrics m = tt_step_metrics(9, LS_TRACE_OBJECTIVE_GRPO, true);
    cr_assert_eq(ls_trace_step_metrics_to_json(&m, &good), LS_OK);
    ls_trace_step_metrics out;
    cr_assert_eq(ls_trace_decode_step_metrics(good, &out), LS_OK);
    cr_assert_eq(ls_trace_decode_step_metrics(NULL, &out), LS_ERR_ARG);
    cr_assert_eq(ls_trace_decode_step_metrics(good, NULL), LS_ERR_ARG);
    static const char *const DROP[] = {"loss", "tokens_per_s", "reward_format", "objective", "step"};
    for (size_t i = 0; i < sizeof DROP / sizeof DROP[0]; i++) {
        cJSON *bad = cJSON_Duplicate(good, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(bad, DROP[i]);
        cr_expect_eq(ls_trace_decode_step_metrics(bad, &out), LS_ERR_SCHEMA, "without %s", DROP[i]);
        char why[160];
        cr_expect_eq(ls_trace_event_check(LS_TRACE_STEP_METRICS, bad, why, sizeof why), LS_ERR_SCHEMA);
        cr_expect_not_null(strstr(why, DROP[i]), "without %s: %s", DROP[i], why);
        cJSON_Delete(bad);
    }
    cJSON *bad = cJSON_Duplicate(good, 1);
    cJSON_AddNumberToObject(bad, "entropy", 0.5);
    cr_expect_eq(ls_trace_decode_step_metrics(bad, &out), LS_ERR_SCHEMA, "unknown field");
    cJSON_Delete(bad);
    bad = cJSON_Duplicate(good, 1);
    cJSON_ReplaceItemInObject(bad, "clip_fraction", cJSON_CreateNumber(1.5));
    cr_expect_eq(ls_trace_decode_step_metrics(bad, &out), LS_ERR_SCHEMA, "clip_fraction 1.5");
    cJSON_Delete(bad);
    cJSON_Delete(good);
}
