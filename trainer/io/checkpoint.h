/* checkpoint.h - training checkpoints: everything a run needs to continue bit
 * for bit, in one safetensors file (trainer/base/safetensors.h) written atomically.
 * Numeric (compiled per real type, LS_K names).
 *
 * Tensors, all in the compute dtype (F32 in an f32 run, F64 in an f64 run):
 *   <name>              every tensor's weights, docs/model.md §5 names (frozen
 *                       base weights in lora mode included)
 *   optimizer.m.<name>  AdamW first moment of every trainable tensor
 *   optimizer.v.<name>  AdamW second moment of every trainable tensor
 *   reference.<name>    full train mode only: the frozen reference-policy copy
 *                       of every base tensor (ls_params_ref_view); in lora
 *                       mode the reference is the base weights with adapters
 *                       off, so there is nothing separate to save
 * Gradients are not saved (every step recomputes them; load zeroes them).
 *
 * "__metadata__" (every value a string; schemas/checkpoint-metadata.schema.json):
 *   format        "longstraw.checkpoint.v2"
 *   dtype         "f32" or "f64"
 *   step          optimizer steps done, decimal (the next AdamW step is step+1)
 *   seed          the run's seed, decimal in [0, 2^64)
 *   rng_scheme    how the run derives every random draw from (seed, step);
 *                 no generator state is saved because none is carried
 *                 between steps (see LS_CHECKPOINT_RNG_SCHEME)
 *   config        the model config and objective, canonical JSON
 *                 (ls_config_to_json with the objective, keys sorted)
 *   lr, beta1, beta2, eps, weight_decay   the AdamW settings, exact decimal
 *                 (for information: load returns them, compares nothing)
 *   tensor_sha256, content_sha256   the digests of safetensors.h ("digests"):
 *                 every tensor's sha256 by name, and one over the metadata
 *                 above and every tensor's name, dtype, shape and digest
 * v2 is v1 plus the two digests.  A v1 file (written before digests) still
 * loads, unverified: info->digested says so, and the caller warns.
 *
 * Loading treats the file as hostile: it is refused from its size before it
 * is read when it is larger than any checkpoint of the model can be, and the
 * safetensors reader validates the header before anything is looked at.  The
 * first mismatch is named: a file without checkpoint metadata (a weights-only
 * file from --save-init: use --load for those), unknown or missing metadata
 * keys, malformed numbers, another dtype, another family, config or
 * objective (the stored config is compared with p's key by key in
 * ls_config_to_json order, naming the key and both values), then (v2) the
 * first tensor whose bytes do not match their digest (LS_ERR_CORRUPT, naming
 * the tensor) or the content digest, then a missing or extra tensor, a wrong
 * dtype or shape, a value that is not finite or a negative second moment. */
#ifndef LS_TRAINER_CHECKPOINT_H
#define LS_TRAINER_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>

#include "trainer/model/params.h"

#define LS_CHECKPOINT_FORMAT "longstraw.checkpoint.v2"
/* The format before digests: loaded, not written. */
#define LS_CHECKPOINT_FORMAT_V1 "longstraw.checkpoint.v1"

/* The derivation trainer/run/train_run.c uses today: step s (0-based) draws its
 * synthetic task from seed + s and its sampling seed is seed + 1000003 s;
 * initial weights from (seed, tensor name).  A run that changes how draws are
 * derived must change this name, and a resuming run refuses a checkpoint
 * whose rng_scheme is not its own (the caller compares: the library only
 * stores and returns it). */
#define LS_CHECKPOINT_RNG_SCHEME "longstraw.seed-step.v1"

/* Longest rng_scheme, NUL included. */
#define LS_CHECKPOINT_SCHEME_MAX 128

typedef struct {
    int64_t step;    /* optimizer steps done, >= 0 */
    uint64_t seed;   /* the run's seed */
    char rng_scheme[LS_CHECKPOINT_SCHEME_MAX]; /* printable ASCII, non-empty */
    double lr, beta1, beta2, eps, weight_decay; /* AdamW settings, finite */
    /* set by load, ignored by save: */
    int digested;    /* 1: a v2 file whose digests were checked; 0: a v1 file (no digests) */
    char sha256[65]; /* lowercase hex SHA-256 of the file's bytes as read */
} ls_checkpoint_info;

/* Write p (weights, moments, reference copy) and info to path atomically
 * (temp file + rename: an existing path is intact on failure).  p must not be
 * a reference view.  Returns LS_ERR_ARG (bad info field, named),
 * LS_ERR_NONFINITE (a weight or moment is NaN or infinite: named, nothing
 * written, since no checkpoint holding it would load), LS_ERR_IO
 * (naming the path and the failing step), LS_ERR_NOMEM.  Memory: the
 * reference view's tables (scoring category) and the writer's buffers
 * (scratch), freed before it returns. */
ls_status LS_K(ls_checkpoint_save)(const ls_params *p, const ls_checkpoint_info *info, const char *path,
                                   char *err, size_t err_len);

/* Read the checkpoint at path into p, whose config, objective and dtype must
 * be the checkpoint's (p from ls_params_init with the run's settings: every
 * weight, moment and the reference copy are overwritten, gradients zeroed).
 * info (may be NULL) receives the metadata.  A file larger than
 * ls_checkpoint_max_bytes(p) is refused before it is read (only its header
 * is, to name the first config key that differs when it has one); otherwise
 * the whole file is held in memory (scratch category) while it loads.  Returns LS_ERR_IO (cannot open
 * or read, naming the path), LS_ERR_TRUNCATED, LS_ERR_FORMAT (every refusal
 * above, the message naming the path and the first mismatch), LS_ERR_CORRUPT
 * (a digest mismatch: "checkpoint PATH: tensor 'x': its data ... does not
 * match its sha256 ..."),
 * LS_ERR_NONFINITE (a NaN or infinite value, named), LS_ERR_NOMEM,
 * LS_ERR_ARG (p is a view).  On error p's weights and moments may be partly
 * overwritten (discard p) and *info is untouched. */
ls_status LS_K(ls_checkpoint_load)(ls_params *p, const char *path, ls_checkpoint_info *info, char *err,
                                   size_t err_len);

/* ls_checkpoint_load from the len bytes at buf (borrowed), `where` naming the
 * source in messages (NULL: "checkpoint").  Same statuses except LS_ERR_IO;
 * no size cap (the caller holds the bytes already). */
ls_status LS_K(ls_checkpoint_load_bytes)(ls_params *p, const void *buf, size_t len, const char *where,
                                         ls_checkpoint_info *info, char *err, size_t err_len);

/* The largest file size ls_checkpoint_load accepts for p: the tensor bytes
 * of a checkpoint of p plus a header allowance.  Saturates at SIZE_MAX. */
size_t LS_K(ls_checkpoint_max_bytes)(const ls_params *p);
#endif
