/* params_io.h - parameters to and from safetensors checkpoints under the
 * MODEL.md §5 names, in the compute dtype.  Numeric (LS_K names). */
#ifndef LS_TRAINER_PARAMS_IO_H
#define LS_TRAINER_PARAMS_IO_H
#include "trainer/params.h"

typedef enum { LS_PARAMS_WEIGHTS = 0, LS_PARAMS_TRAINABLE_GRADS = 1 } ls_params_what;

/* Write every tensor's weights, or the trainable tensors' gradients, to path
 * atomically.  Errors name the file. */
ls_status LS_K(ls_params_save)(const ls_params *p, ls_params_what what, const char *path, char *err,
                               size_t err_len);
/* Load every tensor of p from a checkpoint (F32, F64 or BF16, converted);
 * of a training checkpoint (trainer/checkpoint.h) only the weights (its
 * AdamW moments and reference copy are --resume's).  The loaded weights
 * become the reference policy.
 * Every tensor must be present with p's shape; a tensor the model does not
 * have is an error too (a checkpoint of another config).  Errors name the
 * file and the tensor.  On error p's weights may be partly overwritten. */
ls_status LS_K(ls_params_load)(ls_params *p, const char *path, char *err, size_t err_len);
#endif
