/* probe.h - the in-run gradient probe (longstraw-train --probe-every K,
 * docs/train.md, docs/evidence.md "The run's own gradient: the probe").
 *
 * Parity proves the gradient at reduced size; the probe checks the run's
 * own gradient at its full size.  After a step's gradients are finalized
 * and before the optimizer applies them, with the step's batch held fixed
 * (every group's responses, old and reference log-probs, advantages), it
 * draws a random unit direction v over the trainable tensors and takes
 * directional finite differences of the step's loss: the loss at
 * theta + h v, theta - h v, theta + h/2 v, theta - h/2 v, each one capture
 * of every group's prompt without checkpoints and one scoring pass of its
 * members (no backward, no layer hooks: the probe adds no layer_end event),
 * then docs/model.md §4's loss from those log-probs.  Richardson's
 * D = (4 D(h/2) - D(h)) / 3 is compared with the applied gradient along v.
 *
 * Directions: every trainable tensor T has its own Gaussian unit vector u_T
 * (seeded by the probe's seed and T's name); a group of k tensors moves
 * along u_T / sqrt(k) over its members (parity's --fd-groups layer), so the
 * group's direction has norm 1 and every member weighs the same.  Grouping
 * "all": one group of every trainable tensor; "layer": one per layers.N and
 * one ("other") for the trainable tensors outside the layers.
 *
 * The applied side: <g, v> over the weights as actually moved (theta + s h v
 * rounded to the dtype, less theta), combined as the losses are, so that the
 * dtype's rounding of the moved weights is no error of the comparison.
 *
 * Error budget of a group: est = |D(h) - D(h/2)| / 3 (D(h/2)'s truncation
 * error, which bounds Richardson's), floor = 3 x 4 ulp(dtype) x M / h, M the
 * largest over the evaluations of |L| and of the loss's rounding scale
 * sum |dL/dlogp| |logp| (each log-prob taken to carry 4 ulps; a GRPO loss is
 * near 0 at the step's own policy while its terms are not).  Verdict pass
 * when |D - <g, v>| <= max(tol |D|, 2 floor + est).
 *
 * Under context parallelism every rank takes part (the captures and scoring
 * are collective); every number but the time is the same on every rank, and
 * a digest of them is compared across the ranks (one all-reduce, purpose
 * probe_agree): ranks that disagree fail the probe on every rank.  A family
 * that makes discrete decisions (mla) must make the same ones in the four
 * evaluations of a group (kernels/decisions.h; probe_decisions under CP),
 * else the group is differenced again at h / 8, at most 3 times (the +-h
 * pair is evaluated and compared first: a flip there skips the +-h/2 pair).
 * A group whose error budget exceeds a tenth of |D| is not judged
 * (not_applicable): it could not see the errors it is for.
 *
 * theta is restored by copy (never by subtracting) after every evaluation;
 * the gradients are not touched; the run's decision ledger is not fed.
 * Numeric (compiled per real type), apart from probe_result.c's functions. */
#ifndef LS_TRAINER_PROBE_H
#define LS_TRAINER_PROBE_H
#include <stddef.h>
#include <stdint.h>

#include "trainer/step/step.h"

typedef enum {
    LS_PROBE_PASS = 0,
    LS_PROBE_FAIL,
    LS_PROBE_REPORTED,       /* detached mode: the applied gradient is not the loss's; measured only */
    LS_PROBE_NOT_APPLICABLE, /* nothing to judge (a prefix-frozen step): reason says why */
} ls_probe_verdict;

typedef enum { LS_PROBE_GROUPS_ALL = 0, LS_PROBE_GROUPS_LAYER = 1 } ls_probe_grouping;

typedef struct {
    ls_probe_grouping grouping;
    double h;          /* the finite-difference step; 0: the dtype's (ls_probe_default_h) */
    double tol;        /* the relative tolerance; 0: the dtype's (ls_probe_default_tol) */
    int prefix_frozen; /* the step reused a stale prompt state: not_applicable, nothing evaluated */
} ls_probe_options;

typedef struct {
    char name[32];           /* "all", "layers.N", "other" */
    size_t tensors;          /* trainable tensors the group moves */
    double derivative;       /* Richardson's D */
    double applied;          /* <g, v> */
    double error_estimate;   /* |D(h) - D(h/2)| / 3 */
    double rounding_floor;   /* 12 ulp(dtype) M / h */
    double rel_error;        /* |D - applied| / |D| (D = 0: over (2 floor + est) / tol) */
    double tolerance;        /* max(tol, (2 floor + est) / |D|): pass when rel_error <= tolerance */
    double h;                /* the step its differences used (h / 8^k after k retries) */
    int decided_alike;       /* its four evaluations made the same discrete decisions */
    int nonfinite;           /* a loss or the applied gradient was not finite: the figures above are 0 */
    int unresolved;          /* its error budget exceeds a tenth of |D|: not judged (verdict not_applicable) */
    ls_probe_verdict verdict; /* pass, fail, reported, or not_applicable (unresolved) */
} ls_probe_group;

typedef struct {
    ls_probe_verdict verdict; /* pass: every group passed and the ranks agree */
    char reason[256];         /* why not_applicable, or what failed ("" none) */
    int sft;                  /* the step's objective was sft */
    int full;                 /* full gradient mode (detached: reported) */
    ls_probe_grouping grouping;
    double h, tol, seconds;   /* h 0 when nothing was evaluated */
    uint64_t seed;            /* the directions' seed, below 2^53 */
    int64_t evaluations;      /* loss evaluations (captures of every group plus scoring) */
    int ranks_agree;          /* 1 on one rank */
    ls_probe_group *groups;   /* [n_groups], owned: ls_probe_result_free */
    size_t n_groups;
} ls_probe_result;

/* probe_result.c (dtype-independent). */
/* "pass", "fail", "reported", "not_applicable" ("unknown" out of range); static. */
const char *ls_probe_verdict_name(ls_probe_verdict v);
/* "all", "layer" ("unknown" out of range); static. */
const char *ls_probe_grouping_name(ls_probe_grouping g);
/* The dtype's finite-difference step and relative tolerance (f64: 1, else
 * float32), docs/train.md "The gradient probe". */
double ls_probe_default_h(int f64);
double ls_probe_default_tol(int f64);
/* The directions' seed of a step whose seed is step_seed (53 bits). */
uint64_t ls_probe_seed(uint64_t step_seed);
/* Frees r's groups and zeroes r; NULL is a no-op. */
void ls_probe_result_free(ls_probe_result *r);

/* Probes the step just computed: p's trainable .g hold its finalized
 * gradients, bs[0..B) its groups as ls_step_grads_groups left them (tasks
 * may be NULL unless the objective is sft), o the step's options (seed,
 * objective, pages, chunk, CP group and faults).  res is filled (zeroed
 * first; the caller frees it with ls_probe_result_free).  p's weights are
 * the same bits on return, its gradients untouched.  LS_OK whatever the
 * verdict; LS_ERR_NOMEM, a capture's or a collective's failure otherwise
 * (err says which; under CP the other ranks may wait in a collective: the
 * caller ends the job). */
ls_status LS_K(ls_probe_step)(ls_params *p, ls_batch *const *bs, const ls_task *const *tasks, size_t B,
                              const ls_step_options *o, const ls_probe_options *po, ls_probe_result *res,
                              char *err, size_t err_len);
#endif
