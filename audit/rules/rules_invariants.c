/* rules_invariants.c - rule run.invariants (level 2): what the figures of
 * every step_metrics event must satisfy by the mathematics of the GRPO
 * objective (docs/model.md §4) and the way the trainer computes them
 * (trainer/step/grpo_stats.c: the statistics in double from the log-probs
 * the step used; kernels/cpu/grpo.c: the advantages and the loss).  Each
 * check is exact where the arithmetic allows and otherwise bounded by the
 * rounding it can hold, derived below and in docs/audit.md
 * ("run.invariants"); a violation names the rank, the trace, the event's
 * seq, the step and the numbers.
 *
 * What a step_metrics event holds (receipts/format/trace_step_metrics.h): the
 * step's figures over all its groups (B > 1: every member of every group,
 * every token); no per-group figure is in the trace (the --metrics file's
 * "groups" are outside the run directory), so a check of a group is the
 * check of the step.  Every group of a task run has G members of R tokens,
 * which keeps the step's identities those of one group. */
/* Evidence and messages are one bounded line each: truncation is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>


#define U 0x1p-53 /* the unit roundoff of double, in which the statistics are computed */
#define ADV_EPS 1e-4 /* the advantages' std + 1e-4 (docs/model.md §4) */
#define BIT(f) (1u << LS_AUDIT_SM_##f)

enum { INPUT_UNKNOWN, INPUT_TASK, INPUT_ROLLOUTS };
/* where the old-policy log-probs of the run's GRPO steps came from */
enum { OLD_UNKNOWN, OLD_COMPUTED, OLD_GIVEN };

/* What the configuration says the checks need. */
typedef struct {
    double udt;           /* the unit roundoff of the run's dtype: 2^-24 (f32, or not recorded), 2^-53 (f64) */
    bool f64;
    bool have_eps, have_beta;
    double eps, beta;
    int input;            /* options.input */
    int old;              /* OLD_*: the config's paths.old_logprobs (or, before paths were recorded, options.input) */
    bool naive;           /* strategy "naive" */
    int64_t B;            /* groups per step (options.prompts_per_step; 1 when not recorded) */
    int64_t members;      /* members per step of a task run (config group x B), -1 otherwise */
    int64_t R;            /* options.response_len of a task run, -1 otherwise */
    /* counts for the message */
    uint64_t events, on_policy, naive_steps, given_steps, unknown_steps, lacking;
} inv_ctx;

static void read_config(const ls_audit_run *run, inv_ctx *c) {
    memset(c, 0, sizeof *c);
    c->udt = 0x1p-24;
    c->B = 1;
    c->members = c->R = -1;
    const cJSON *cfg = run->config;
    if (cfg == NULL) return;
    const char *dt = ls_audit_get_str(cfg, "dtype");
    if (dt && strcmp(dt, "f64") == 0) {
        c->f64 = true;
        c->udt = U;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cfg, "epsilon"), *b = cJSON_GetObjectItemCaseSensitive(cfg, "beta");
    c->have_eps = ls_json_is_number(e) && isfinite(e->valuedouble) && e->valuedouble > 0 && e->valuedouble < 1;
    c->have_beta = ls_json_is_number(b) && isfinite(b->valuedouble) && b->valuedouble >= 0;
    if (c->have_eps) c->eps = e->valuedouble;
    if (c->have_beta) c->beta = b->valuedouble;
    const char *st = ls_audit_get_str(cfg, "strategy");
    c->naive = st && strcmp(st, "naive") == 0;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(cfg, "options");
    const char *in = cJSON_IsObject(o) ? ls_audit_get_str(o, "input") : NULL;
    c->input = in == NULL ? INPUT_UNKNOWN : strcmp(in, "task") == 0 ? INPUT_TASK
             : strcmp(in, "rollouts") == 0 ? INPUT_ROLLOUTS : INPUT_UNKNOWN;
    int64_t v;
    if (cJSON_IsObject(o) && ls_audit_get_int(o, "prompts_per_step", &v) && v >= 1 && v <= LS_AUDIT_MAX_MEMBER)
        c->B = v;
    /* on policy: every GRPO step's old log-probs scored by the trainer itself, from the weights it then
       differentiates (a rollouts line may give them: then which step did is not recorded) */
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(cfg, "paths");
    const cJSON *old = cJSON_IsObject(paths) ? cJSON_GetObjectItemCaseSensitive(paths, "old_logprobs") : NULL, *it;
    if (cJSON_IsArray(old)) {
        c->old = OLD_COMPUTED;
        cJSON_ArrayForEach(it, old) if (!cJSON_IsString(it) || strcmp(it->valuestring, "given") == 0) c->old = OLD_GIVEN;
    } else if (!cJSON_IsObject(paths)) {
        c->old = c->input == INPUT_TASK ? OLD_COMPUTED : OLD_UNKNOWN; /* an older run: a rollouts line may give them */
    }
    if (c->input == INPUT_TASK) {
        c->members = run->cfg_group; /* group x B, -1 when not usable (load.c) */
        if (cJSON_IsObject(o) && ls_audit_get_int(o, "response_len", &v) && v >= 1 && v <= LS_TRACE_MAX_INT) c->R = v;
    }
}

typedef struct {
    ls_audit_rule *rule;
    const ls_audit_rank *r;
    const ls_audit_step_metric *m;
} at;

static void bad(const at *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(const at *a, const char *fmt, ...) {
    char d[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d, sizeof d, fmt, ap);
    va_end(ap);
    ls_audit_rule_fail(a->rule, a->r->rank, a->r->trace_file, a->m->seq, "step %lld: %s", (long long)a->m->step, d);
}

/* The checks of one step_metrics event. */
static void check_step(inv_ctx *c, const at *a) {
    const ls_audit_step_metric *m = a->m;
    const double *v = m->v;
    ls_audit_rule *rule = a->rule;
    bool grpo = !m->sft;
    /* the step's members: a task run's every group has the configured G; otherwise the members its trace shows */
    int64_t N = c->members;
    if (N <= 0) {
        const ls_audit_step *sf = ls_audit_step_of(a->r, m->step);
        N = sf != NULL && sf->g_local > 0 && !m->sft ? sf->g_local : -1;
    }
    const double Nd = (double)N;
    const double T = (m->have & BIT(TOKENS)) ? v[LS_AUDIT_SM_TOKENS] : -1;

    /* rewards: population moments of the step's members (ls_stats_moments, double) */
    double Mr = -1; /* the largest |reward| */
    if ((m->have & (BIT(REWARD_MEAN) | BIT(REWARD_STD) | BIT(REWARD_MIN) | BIT(REWARD_MAX))) ==
            (BIT(REWARD_MEAN) | BIT(REWARD_STD) | BIT(REWARD_MIN) | BIT(REWARD_MAX)) && N > 0) {
        double mean = v[LS_AUDIT_SM_REWARD_MEAN], sd = v[LS_AUDIT_SM_REWARD_STD];
        double lo = v[LS_AUDIT_SM_REWARD_MIN], hi = v[LS_AUDIT_SM_REWARD_MAX];
        Mr = fmax(fabs(lo), fabs(hi));
        /* the mean's sum and the variance's, each within (N + 4) u of the largest |reward| */
        double tr = 2 * (Nd + 4) * U * Mr;
        rule->matched += 3;
        if (!(lo <= hi)) bad(a, "reward_min %.17g above reward_max %.17g", lo, hi);
        else if (mean < lo - tr || mean > hi + tr)
            bad(a, "reward_mean %.17g outside [reward_min %.17g, reward_max %.17g] (rounding allowed: %.3g)", mean, lo,
                hi, tr);
        /* Popoviciu: values in [lo, hi] have a population std <= (hi - lo) / 2; two of them at lo and hi, >= (hi - lo) / sqrt(2N) */
        double top = (hi - lo) / 2, bottom = (hi - lo) / sqrt(2 * Nd);
        if (sd > top + tr)
            bad(a, "reward_std %.17g above (reward_max - reward_min) / 2 = %.17g, the largest population std of values "
                "in [min, max] (rounding allowed: %.3g)", sd, top, tr);
        else if (sd < bottom - tr)
            bad(a, "reward_std %.17g below (reward_max - reward_min) / sqrt(2 N) = %.17g for N = %lld members: the "
                "two extremes alone give more (rounding allowed: %.3g)", sd, bottom, (long long)N, tr);
    }
    if (!grpo) return; /* SFT: no advantage, ratio or KL */

    /* advantages: A_i = (r_i - mean)/(Bessel std + 1e-4) within each group, in double, stored in the dtype */
    double Mx = -1; /* a bound on max |A_i|: |mean| + std sqrt(N - 1) (population std) */
    bool adv = (m->have & (BIT(ADV_MEAN) | BIT(ADV_STD))) == (BIT(ADV_MEAN) | BIT(ADV_STD)) && N > 0;
    if (adv) {
        double am = v[LS_AUDIT_SM_ADV_MEAN], as = v[LS_AUDIT_SM_ADV_STD];
        Mx = fabs(am) + as * sqrt(Nd - 1);
        if (Mr >= 0) {
            /* each group's A_i sum to G (m - m~)/(std + 1e-4) with m~ its rounded mean reward, |m - m~| <=
               (G + 1) u max|r| and std + 1e-4 >= 1e-4; each A_i rounded to the dtype; the mean over N in double */
            double ta = 2 * ((c->udt + (Nd + 2) * U) * Mx + (Nd + 1) * U * Mr / ADV_EPS);
            rule->matched++;
            if (fabs(am) > ta)
                bad(a, "adv_mean %.17g: advantages normalised within each group have mean 0 (rounding allowed: %.3g)", am,
                    ta);
            /* one group (B = 1) of G members: std(A) = std(r) / (Bessel std(r) + 1e-4) */
            int64_t G = c->B == 1 ? N : c->members > 0 ? c->members / c->B : -1;
            if (c->B == 1 && G >= 2) {
                double k = sqrt((double)G / (double)(G - 1)), sr = v[LS_AUDIT_SM_REWARD_STD];
                double pred = sr / (k * sr + ADV_EPS);
                /* the rewards are rounded to the dtype before the kernel's moments: the population std moves by at
                   most udt max|r|; g(s) = s / (k s + 1e-4) has slope 1e-4 / (k s + 1e-4)^2 */
                double delta = 2 * (c->udt + (double)(G + 4) * U) * Mr, low = fmax(sr - delta, 0);
                double tstd = 2 * (ADV_EPS * delta / ((k * low + ADV_EPS) * (k * low + ADV_EPS)) + (double)(G + 4) * U +
                                   (c->udt + (Nd + 4) * U) * Mx);
                rule->matched++;
                if (fabs(as - pred) > tstd)
                    bad(a, "adv_std %.17g, want reward_std / (reward_std sqrt(G/(G-1)) + 1e-4) = %.17g for one group of "
                        "G = %lld (rounding allowed: %.3g)", as, pred, (long long)G, tstd);
            } else if (G >= 1 || c->B > 1) {
                /* several groups: each group's population variance of A is (G-1)/G (s/(s + 1e-4))^2 < (G-1)/G */
                double g = G >= 1 ? (double)G : Nd;
                double top = sqrt((g - 1) / g), tstd = 2 * (ta + (c->udt + (Nd + 4) * U) * Mx);
                rule->matched++;
                if (as > top + tstd)
                    bad(a, "adv_std %.17g above sqrt((G-1)/G) = %.17g, the most normalised advantages of groups of %g "
                        "reach (rounding allowed: %.3g)", as, top, g, tstd);
            }
        }
    }

    /* ratios: exp(logp - old) per token; min, sum / tokens, max */
    const unsigned RATIOS = BIT(RATIO_MIN) | BIT(RATIO_MEAN) | BIT(RATIO_MAX);
    bool ratios = (m->have & RATIOS) == RATIOS && T > 0;
    double rmin = v[LS_AUDIT_SM_RATIO_MIN], rmean = v[LS_AUDIT_SM_RATIO_MEAN], rmax = v[LS_AUDIT_SM_RATIO_MAX];
    if (ratios) {
        double tt = (T + 2) * U;
        rule->matched++;
        if (rmin > rmean * (1 + tt) || rmean > rmax * (1 + tt))
            bad(a, "ratio_min %.17g <= ratio_mean %.17g <= ratio_max %.17g does not hold", rmin, rmean, rmax);
        if (m->have & BIT(CLIP_FRACTION)) {
            double cf = v[LS_AUDIT_SM_CLIP_FRACTION], k = nearbyint(cf * T);
            rule->matched++;
            if (k / T != cf) /* the trainer's clipped / tokens, correctly rounded */
                bad(a, "clip_fraction %.17g is no count of the step's %.0f tokens (k / %.0f)", cf, T, T);
            else if (c->have_eps && rmin >= 1 - c->eps && rmax <= 1 + c->eps && cf != 0)
                bad(a, "clip_fraction %.17g with every ratio in [1 - eps, 1 + eps] = [%.17g, %.17g] (ratio_min %.17g, "
                    "ratio_max %.17g): no token can be clipped", cf, 1 - c->eps, 1 + c->eps, rmin, rmax);
        }
    }
    /* on policy: old log-probs scored by the trainer from the weights it then differentiates, on the path the
       replay takes (LongStraw: the same kernels from the same prompt state), so old == logp per token and
       exp(0) = 1 exactly; sum / tokens = 1 exactly */
    if (ratios && c->old == OLD_COMPUTED && !c->naive) {
        c->on_policy++;
        rule->matched++;
        if (!(rmin == 1 && rmean == 1 && rmax == 1))
            bad(a, "on-policy step (old log-probs computed by the trainer, strategy longstraw): ratio_min %.17g, ratio_mean %.17g, ratio_max %.17g; "
                "want exactly 1 (0 ulp)", rmin, rmean, rmax);
        else if ((m->have & (BIT(LOSS_POLICY) | BIT(ADV_MEAN))) == (BIT(LOSS_POLICY) | BIT(ADV_MEAN)) && Mx >= 0 &&
                 (c->input == INPUT_TASK || c->B == 1)) {
            /* at ratio 1 the clipped surrogate is -(1/B) sum_b (1/G) sum_i (1/R_i) sum_t A_i = -adv_mean (one group,
               or every group G members); the sums in double: (R + N + 8) u of max|A| */
            double lp = v[LS_AUDIT_SM_LOSS_POLICY], am = v[LS_AUDIT_SM_ADV_MEAN];
            double tp = 2 * (T + Nd + 8) * U * Mx;
            rule->matched++;
            if (fabs(lp + am) > tp)
                bad(a, "loss_policy %.17g at ratio 1, want -adv_mean = %.17g (rounding allowed: %.3g)", lp, -am, tp);
        }
    } else if (ratios) {
        if (c->old == OLD_COMPUTED) c->naive_steps++;
        else if (c->old == OLD_GIVEN) c->given_steps++;
        else c->unknown_steps++;
    }

    /* KL: k3 = exp(d) - d - 1 >= 0 per token; computed in double it is >= -4u, the mean >= -8u */
    if (m->have & BIT(KL_MEAN)) {
        double kl = v[LS_AUDIT_SM_KL_MEAN];
        rule->matched++;
        if (kl < -8 * U) bad(a, "kl_mean %.17g < 0: the k3 estimator is >= 0 for every token (rounding allowed: -8u)", kl);
        if (c->have_beta && (m->have & BIT(LOSS_KL))) {
            double lkl = v[LS_AUDIT_SM_LOSS_KL];
            rule->matched++;
            if (c->beta == 0) {
                if (lkl != 0) bad(a, "loss_kl %.17g with beta 0: want exactly 0", lkl);
                else if (c->input == INPUT_TASK && kl != 0)
                    bad(a, "kl_mean %.17g with beta 0: no reference policy (the policy is its own), want exactly 0", kl);
            } else if (lkl < -8 * U * c->beta) {
                bad(a, "loss_kl %.17g < 0 with beta %.17g", lkl, c->beta);
            } else if (c->input == INPUT_TASK && c->members > 0 && c->R > 0 && T >= 0 &&
                       (m->have & BIT(RESPONSE_LEN_MEAN))) {
                /* every response R tokens: loss_kl = beta (1/B) sum_b (1/(G R)) sum_{i,t} KL = beta kl_mean */
                double want_T = (double)c->members * (double)c->R;
                if (T != want_T || v[LS_AUDIT_SM_RESPONSE_LEN_MEAN] != (double)c->R)
                    bad(a, "tokens %.0f, response_len_mean %.17g: want %lld members x %lld tokens = %.0f", T,
                        v[LS_AUDIT_SM_RESPONSE_LEN_MEAN], (long long)c->members, (long long)c->R, want_T);
                else {
                    double want = c->beta * kl, tk = 2 * (T + Nd + 8) * U * c->beta * (fabs(kl) + 8 * U) + U * fabs(want);
                    if (fabs(lkl - want) > tk)
                        bad(a, "loss_kl %.17g, want beta x kl_mean = %.17g (rounding allowed: %.3g)", lkl, want, tk);
                }
            }
        }
    }

    /* loss = loss_policy + loss_kl: the loss kernel sums the same per-token terms as the statistics, with eps and
       beta rounded to the dtype (float32: beta's 2^-24 of loss_kl; eps's, only where a ratio lies that near 1 +- eps) */
    const unsigned LOSSES = BIT(LOSS) | BIT(LOSS_POLICY) | BIT(LOSS_KL);
    if ((m->have & LOSSES) == LOSSES && ratios && Mx >= 0 && c->have_eps && c->have_beta) {
        double L = v[LS_AUDIT_SM_LOSS], lp = v[LS_AUDIT_SM_LOSS_POLICY], lkl = v[LS_AUDIT_SM_LOSS_KL];
        double ur = c->f64 ? 0 : c->udt, eps = c->eps;
        bool near_edge = rmax >= 1 + eps - 2 * ur * eps || rmin <= 1 - eps + 2 * ur * eps;
        double tl = ur * (fabs(lkl) + (near_edge ? Mx * eps : 0)) +
                    2 * (T + Nd + 8) * U * (Mx * fmax(rmax, 1 + eps) + fabs(lkl) + 16 * U * c->beta);
        rule->matched++;
        if (fabs(L - (lp + lkl)) > tl)
            bad(a, "loss %.17g, want loss_policy + loss_kl = %.17g (rounding allowed: %.3g)", L, lp + lkl, tl);
    }
}

ls_status ls_audit_rules_invariants(ls_audit_run *run) {
    uint64_t events = 0;
    for (uint32_t i = 0; i < run->world; i++) events += run->ranks[i].trace_present ? run->ranks[i].n_metrics : 0;
    bool v2 = run->evidence_version == 2;
    /* deny by default: a v1 run of longstraw-train writes one step_metrics event a step on every rank, so a
       step without one fails; only a v2 run is outside the rule (its figures are its trainer's own, and no
       profile can promise LongStraw's estimators) */
    ls_audit_rule *rule = ls_audit_rule_add(run, "run.invariants", 2,
                                            "the GRPO figures of every step obey their mathematics (ratio 1 on "
                                            "policy, KL >= 0, rewards and advantages consistent)",
                                            !v2);
    if (rule == NULL) return LS_ERR_NOMEM;
    if (v2) {
        snprintf(rule->message, sizeof rule->message, "not applicable: a v2 run's step_metrics are its trainer's own "
                 "figures (docs/contract.md §1), not LongStraw's estimators: its profile%s%s promises none of them",
                 run->profile_used[0] ? " " : "", run->profile_used);
        ls_audit_rule_close(rule);
        return LS_OK;
    }
    /* every step of the run has its figures on every rank */
    uint64_t missing = 0;
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        if (!r->trace_present) {
            ls_audit_rule_fail(rule, i, r->trace_file, -1, "rank %u: no trace, no step's figures", (unsigned)i);
            continue;
        }
        for (int64_t s = run->first_step; s < run->n_run_steps; s++) {
            const ls_audit_step *sf = ls_audit_step_of(r, s);
            if (sf != NULL && sf->metrics_seen) continue;
            if (missing++ < 4)
                ls_audit_rule_fail(rule, i, r->trace_file, r->last_seq, "step %lld: no step_metrics event on rank %u: "
                                   "the step's figures cannot be checked", (long long)s, (unsigned)i);
        }
    }
    if (missing > 4)
        ls_audit_rule_fail(rule, -1, ".", -1, "%llu (rank, step) pairs without a step_metrics event in all",
                           (unsigned long long)missing);
    if (events == 0) {
        rule->matched = rule->matched ? rule->matched : 1;
        if (rule->n_ev == 0) /* a run of no step (a configuration asks for at least one) */
            ls_audit_rule_fail(rule, -1, ".", -1, "the traces hold no step_metrics event: no step's figures could "
                               "be checked");
        snprintf(rule->message, sizeof rule->message, "the traces hold no step_metrics event (no step finished, or "
                 "an older run): no step's figures could be checked");
        ls_audit_rule_close(rule);
        return LS_OK;
    }
    inv_ctx c;
    read_config(run, &c);
    for (uint32_t i = 0; i < run->world; i++) {
        const ls_audit_rank *r = &run->ranks[i];
        if (!r->trace_present) continue;
        for (size_t k = 0; k < r->n_metrics; k++) {
            at a = {.rule = rule, .r = r, .m = &r->metrics[k]};
            c.events++;
            /* longstraw-train records every figure of every step: one it left out (or made non-finite) is a
               check that cannot be done, not one that passed */
            unsigned lacks = ((1u << LS_AUDIT_SM_COUNT) - 1) & ~a.m->have;
            if (lacks != 0 && c.lacking++ < 4) {
                char names[200] = "";
                for (int f = 0; f < LS_AUDIT_SM_COUNT; f++)
                    if (lacks & (1u << f))
                        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                                 ls_audit_sm_name((ls_audit_sm_field)f));
                bad(&a, "the step_metrics event lacks %s (absent or not a finite number): the checks that need them "
                    "cannot be done", names);
            }
            check_step(&c, &a);
        }
    }
    if (rule->matched == 0 && rule->n_ev == 0) {
        ls_audit_rule_fail(rule, -1, ".", -1, "%llu step_metrics event(s), none with the figures a check needs "
                           "(members, tokens, rewards, ratios): nothing could be checked",
                           (unsigned long long)c.events);
    } else if (rule->n_ev == 0) {
        char why[200] = "";
        if (c.naive_steps)
            snprintf(why, sizeof why, "; ratio 1 not checked on %llu naive step(s): old log-probs from the captured "
                     "prompt state, the replay over the full sequence", (unsigned long long)c.naive_steps);
        else if (c.given_steps)
            snprintf(why, sizeof why, "; ratio 1 not checked on %llu step(s): the input gave old log-probs (paths), "
                     "to which steps is not recorded", (unsigned long long)c.given_steps);
        else if (c.unknown_steps)
            snprintf(why, sizeof why, "; ratio 1 not checked on %llu step(s): no paths.old_logprobs in the "
                     "configuration, and its input is no task (a rollouts line may give them)", (unsigned long long)c.unknown_steps);
        char onp[64] = "";
        if (c.on_policy) snprintf(onp, sizeof onp, "; ratio exactly 1 on %llu on-policy step(s)",
                                  (unsigned long long)c.on_policy);
        snprintf(rule->message, sizeof rule->message, "%llu check(s) of %llu step_metrics event(s)%s%s%s",
                 (unsigned long long)rule->matched, (unsigned long long)c.events,
                 c.B > 1 ? " (each the step's figures over its groups)" : "", onp, why);
    }
    ls_audit_rule_close(rule);
    return LS_OK;
}
