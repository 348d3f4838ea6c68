/* params_io.h - parameters to and from safetensors checkpoints under the
 * docs/model.md §5 names, in the compute dtype.  Numeric (LS_K names). */
#ifndef LS_TRAINER_PARAMS_IO_H
#define LS_TRAINER_PARAMS_IO_H
#include "trainer/model/params.h"

typedef enum { LS_PARAMS_WEIGHTS = 0, LS_PARAMS_TRAINABLE_GRADS = 1 } ls_params_what;

/* Write every tensor's weights, or the trainable tensors' gradients, to path
 * atomically, with metadata format "longstraw", dtype, content ("weights" or
 * "gradients") and the digests of safetensors.h (tensor_sha256,
 * content_sha256).  Errors name the file. */
ls_status LS_K(ls_params_save)(const ls_params *p, ls_params_what what, const char *path, char *err,
                               size_t err_len);

/* The lowercase hex SHA-256 of the exact bytes ls_params_save(p, what, ...)
 * would write now (nothing written): what `sha256sum` prints for that file.
 * LS_ERR_NOMEM or LS_ERR_INTERNAL, err saying so. */
ls_status LS_K(ls_params_sha256)(const ls_params *p, ls_params_what what, char hex[65], char *err, size_t err_len);

/* What a load learned of the file it read. */
typedef struct {
    char sha256[65]; /* lowercase hex SHA-256 of the file's bytes as read */
    int digested;    /* 1: its tensor and content digests were checked; 0: it carries none */
} ls_params_source;

/* Load every tensor of p from a checkpoint (F32, F64 or BF16, converted);
 * of a training checkpoint (trainer/io/checkpoint.h) only the weights (its
 * AdamW moments and reference copy are --resume's).  The loaded weights
 * become the reference policy.
 * The file is read once, whole (scratch category), and, when it carries the
 * digests of safetensors.h (a v2 training checkpoint always does; so do the
 * weights files ls_params_save writes), every tensor's bytes and the content
 * are checked against them before anything is loaded: a mismatch is
 * LS_ERR_CORRUPT naming the file and the tensor.  A v2 checkpoint without
 * its digests is refused (LS_ERR_FORMAT); a file without digests (a v1
 * checkpoint, an older or another program's file) loads with
 * src->digested = 0.
 * Every tensor must be present with p's shape; a tensor the model does not
 * have is an error too (a checkpoint of another config).  Errors name the
 * file and the tensor.  On error p's weights may be partly overwritten and
 * *src is untouched.  src may be NULL. */
ls_status LS_K(ls_params_load_source)(ls_params *p, const char *path, ls_params_source *src, char *err,
                                      size_t err_len);
/* ls_params_load_source without src. */
ls_status LS_K(ls_params_load)(ls_params *p, const char *path, char *err, size_t err_len);
#endif
