/* run_obs.c - trace events, phase totals and progress of a run. */
#include "trainer/run/run_obs.h"

#include <limits.h>
#include <assert.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainer/base/mem_tracker.h"

int64_t ls_run_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const char *ls_run_human_bytes(char *buf, size_t cap, double bytes) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

static int phase_index(const char *ph) {
    for (int i = 0; i < LS_PHASE_COUNT; i++)
        if (!strcmp(ls_trace_phase_name((ls_trace_phase)i), ph)) return i;
    return strcmp(ph, "probe") == 0 ? LS_RUN_OBS_PROBE : -1;
}

void ls_run_obs_note(ls_run_obs *o, ls_status st) {
    if (st == LS_OK || o->emit_err != LS_OK) return;
    o->emit_err = st;
    snprintf(o->emit_msg, sizeof o->emit_msg, "%s", ls_trace_writer_last_error(o->w));
}

void ls_run_obs_init(ls_run_obs *o, ls_trace_writer *w, const ls_model_config *cfg, int quiet) {
    memset(o, 0, sizeof *o);
    o->w = w;
    o->cfg = cfg;
    o->quiet = quiet;
    o->tty = isatty(STDERR_FILENO);
    o->kill_phase = -1;
    o->kill_layer = INT_MIN;
}

void ls_run_obs_arm_kill(ls_run_obs *o, int phase, int at_layer, int layer) {
    o->kill_phase = phase;
    o->kill_layer = at_layer ? layer : INT_MIN;
}

/* The kill point reached: what the trace has is on disk, then the rank dies
 * mid-step (the others must not hang). */
static void maybe_kill(ls_run_obs *o, const char *phase, int at_layer, int layer) {
    if (o->kill_phase < 0 || phase_index(phase) != o->kill_phase) return;
    if (at_layer ? o->kill_layer != layer : o->kill_layer != INT_MIN) return;
    ls_run_obs_note(o, ls_trace_writer_flush(o->w));
    raise(SIGKILL);
}

void ls_run_obs_print(ls_run_obs *o, const char *line) {
    if (o->line_open) fputs("\r\033[K", stderr);
    o->line_open = 0;
    fprintf(stderr, "%s\n", line);
}

/* A progress update: on a terminal it replaces the phase's line; otherwise
 * a plain line at most every 5 s, so that logs stay short. */
static void progress_line(ls_run_obs *o, const char *text) {
    if (o->quiet) return;
    int64_t now = ls_run_now_ns();
    if (o->tty) {
        fprintf(stderr, "\r\033[K%s", text);
        fflush(stderr);
        o->line_open = 1;
    } else if (now - o->last_print >= 5000000000LL) {
        fprintf(stderr, "%s\n", text);
        o->last_print = now;
    }
}

static void emit_memory(ls_run_obs *o, const char *phase) {
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    ls_trace_mem_category cats[LS_MEM_COUNT];
    for (int c = 0; c < LS_MEM_COUNT; c++) {
        cats[c].name = ls_mem_cat_name((ls_mem_cat)c);
        cats[c].live = (int64_t)s.live_bytes[c];
        cats[c].peak = (int64_t)s.peak_bytes[c];
        cats[c].host = ls_mem_cat_tier((ls_mem_cat)c) == LS_TIER_HOST;
    }
    ls_trace_memory m = {.step = o->step, .phase = phase, .categories = cats, .n_categories = LS_MEM_COUNT,
                         .total_live = (int64_t)s.live_total, .total_peak = (int64_t)s.peak_total,
                         .rss_peak = (int64_t)ls_mem_peak_rss_bytes(), .host_live = (int64_t)s.host_live_total,
                         .host_peak = (int64_t)s.host_peak_total};
    ls_run_obs_note(o, ls_trace_emit_memory(o->w, &m));
}

void ls_run_obs_begin(ls_run_obs *o, const char *phase) {
    ls_run_obs_note(o, ls_trace_emit_phase_begin(o->w, phase, o->step));
    o->phase_t0 = ls_run_now_ns();
    o->last_print = o->phase_t0;
    maybe_kill(o, phase, 0, 0);
}

void ls_run_obs_end(ls_run_obs *o, const char *phase, int64_t wall_ns, int ok) {
    int i = phase_index(phase);
    if (i >= 0) {
        o->count[i]++;
        o->ns[i] += (uint64_t)wall_ns;
    }
    ls_run_obs_note(o, ls_trace_emit_phase_end(o->w, phase, o->step, wall_ns, ok != 0));
    emit_memory(o, phase);
    if (o->quiet) return;
    char line[160];
    snprintf(line, sizeof line, "[step %lld] %-10s %9.3f s%s", (long long)o->step + 1, phase, wall_ns * 1e-9,
             ok ? "" : "  FAILED");
    /* on a terminal, short phases share the step's line; long ones and failures stay */
    if (o->tty && ok && wall_ns < 1000000000LL) progress_line(o, line);
    else ls_run_obs_print(o, line);
}

static void on_begin(void *u, const char *phase) { ls_run_obs_begin(u, phase); }

static void on_end(void *u, const char *phase, int64_t wall_ns, int ok) { ls_run_obs_end(u, phase, wall_ns, ok); }

/* The trace's layer kind named by the family's layer kind name (ls_trace_layer_kind_name); a name the trace
 * vocabulary lacks is a family's programming error (tests/trainer/test_family.c checks every registered one). */
static ls_trace_layer_kind trace_kind(const char *name) {
    for (int k = 0; k < LS_TRACE_LAYER_KIND_COUNT; k++)
        if (!strcmp(ls_trace_layer_kind_name((ls_trace_layer_kind)k), name)) return (ls_trace_layer_kind)k;
    assert(!"a family's layer kind is not a trace layer kind");
    return LS_TRACE_LAYER_HEAD;
}

static void on_layer(void *u, const char *phase, int member, int layer, int dir, size_t tokens, int64_t wall_ns,
                     double norm) {
    ls_run_obs *o = u;
    int L = o->cfg->n_layers;
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    ls_trace_layer_kind kind = layer < 0    ? LS_TRACE_LAYER_EMBED
                               : layer >= L ? LS_TRACE_LAYER_HEAD
                                            : trace_kind(ls_config_layer_kind(o->cfg, layer));
    ls_trace_layer_end e = {.phase = phase, .step = o->step, .member = member, .layer = layer, .kind = kind,
                            .dir = dir ? LS_TRACE_DIR_BWD : LS_TRACE_DIR_FWD, .tokens = (int64_t)tokens,
                            .live_bytes = (int64_t)s.live_total, .peak_bytes = (int64_t)s.peak_total,
                            .wall_ns = wall_ns, .out_norm = isfinite(norm) ? norm : 0};
    if (!isfinite(norm)) ls_run_obs_note(o, ls_trace_emit_error(o->w, LS_ERR_NONFINITE, "non-finite activation norm"));
    ls_run_obs_note(o, ls_trace_emit_layer_end(o->w, &e));
    maybe_kill(o, phase, 1, layer);
    /* progress for long layer-by-layer phases */
    if (tokens >= 2048 && layer >= 0 && layer < L && member < 0) {
        int done = dir ? L - layer : layer + 1;
        double el = (ls_run_now_ns() - o->phase_t0) * 1e-9;
        double rate = el > 0 ? (double)tokens * done / el : 0;
        char line[160];
        snprintf(line, sizeof line, "[step %lld] %s: layer %d/%d  %.0f tok/s  ETA %.1f s", (long long)o->step + 1,
                 phase, done, L, rate, rate > 0 ? (double)tokens * (L - done) / rate : 0.0);
        progress_line(o, line);
    }
}

static void on_progress(void *u, const char *phase, size_t done, size_t total) {
    ls_run_obs *o = u;
    double el = (ls_run_now_ns() - o->phase_t0) * 1e-9;
    char line[160];
    snprintf(line, sizeof line, "[step %lld] %s: member %zu/%zu  ETA %.1f s", (long long)o->step + 1, phase, done,
             total, done ? el / (double)done * (double)(total - done) : 0.0);
    progress_line(o, line);
}

ls_step_observer ls_run_obs_observer(ls_run_obs *o) {
    return (ls_step_observer){.user = o, .phase_begin = on_begin, .phase_end = on_end, .layer_end = on_layer,
                              .progress = on_progress};
}
