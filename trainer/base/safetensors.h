/* safetensors.h - read and write safetensors files.
 *
 * Checkpoints, initial weights and gradient dumps are safetensors files
 * keyed by the tensor names of docs/model.md §5.  Layout: an 8-byte little-endian
 * header length N, N bytes of JSON header, then the data section.  The
 * header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the data section) and may hold one
 * "__metadata__" object of string values.
 *
 * Reader: nothing in a file is trusted.  Before any tensor is exposed the
 * whole header is validated: length within the file, valid JSON object, each
 * entry an object with exactly the three keys, a known dtype, a shape of
 * non-negative integers whose element and byte counts do not overflow,
 * data_offsets two integers with begin <= end, byte count = dtype size x
 * element count, tensors that tile the data section exactly (no overlap, no
 * hole, no trailing bytes - the rule of the reference implementation, which
 * rules out polyglot files), no duplicate names.  JSON numbers must be
 * integer-valued and at most 2^53 (cJSON holds numbers as doubles).  Errors
 * return LS_ERR_TRUNCATED (the file ends before its header does) or
 * LS_ERR_FORMAT, with a message naming the tensor ("tensor 'x': ...") or
 * "header" written into the caller's buffer.  The library never prints.
 *
 * All dtypes of the format are recognised (their sizes are validated);
 * conversion to float/double is provided for F32, F64 and BF16, and the
 * writer stores those three.  Data is little-endian on disk and is decoded
 * bytewise, so any host byte order and any data alignment work.
 *
 * Writer: collect named tensors (borrowed pointers to double or float data),
 * then write once.  Output is deterministic: "__metadata__" first (keys
 * sorted), then tensors sorted by name (strcmp order); data contiguous in
 * that order; the header padded with spaces to a multiple of 8 bytes so the
 * data section starts 8-byte aligned, as the reference writer does.  The file
 * is written to PATH.tmp.<pid>, flushed, fsync'd and renamed over PATH; on any
 * failure the temporary file is removed and an existing PATH is left intact.
 * (Two threads of one process must not write the same PATH at once.)
 *
 * Memory: every buffer this module allocates is charged to LS_MEM_SCRATCH
 * in the memory tracker (a file read by ls_safetensors_open is held in full
 * until ls_safetensors_free).  cJSON's transient parse/print trees, the
 * canonical JSON text and libcrypto's digest contexts of the digests below
 * use the system allocator and are freed before each call returns.
 *
 * Error buffers: every `err, err_len` pair may be NULL/0; when given, the
 * message is NUL-terminated and truncated to fit.  On success err is "".
 */
#ifndef LS_TRAINER_SAFETENSORS_H
#define LS_TRAINER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef enum {
    LS_SAFETENSORS_F32 = 0,
    LS_SAFETENSORS_F64,
    LS_SAFETENSORS_BF16,
    /* recognised and size-checked, but not convertible or writable: */
    LS_SAFETENSORS_F16,
    LS_SAFETENSORS_BOOL,
    LS_SAFETENSORS_U8,
    LS_SAFETENSORS_I8,
    LS_SAFETENSORS_F8_E4M3,
    LS_SAFETENSORS_F8_E5M2,
    LS_SAFETENSORS_I16,
    LS_SAFETENSORS_U16,
    LS_SAFETENSORS_I32,
    LS_SAFETENSORS_U32,
    LS_SAFETENSORS_I64,
    LS_SAFETENSORS_U64,
    LS_SAFETENSORS_DTYPE_COUNT
} ls_safetensors_dtype;

/* The format's name of a dtype ("F32", "BF16", ...); "unknown" outside the
 * enum.  Static, never NULL. */
const char *ls_safetensors_dtype_name(ls_safetensors_dtype dtype);

/* Bytes per element of a dtype; 0 outside the enum. */
size_t ls_safetensors_dtype_size(ls_safetensors_dtype dtype);

/* ---- reading ------------------------------------------------------------ */

/* One tensor of an open file.  Every pointer is owned by the ls_safetensors
 * it came from and valid until ls_safetensors_free. */
typedef struct {
    const char *name;           /* NUL-terminated */
    ls_safetensors_dtype dtype;
    size_t ndim;                /* 0 for a scalar */
    const uint64_t *shape;      /* [ndim]; NULL when ndim == 0 */
    uint64_t numel;             /* product of shape (1 for a scalar) */
    size_t nbytes;              /* numel x dtype size */
    uint64_t offset;            /* begin offset within the data section */
    const unsigned char *data;  /* [nbytes] raw little-endian, unaligned */
} ls_safetensors_tensor;

typedef struct ls_safetensors ls_safetensors;

/* Read the file at `path` in full and validate it.  On LS_OK *out owns the
 * file's bytes and must be released with ls_safetensors_free; on error *out
 * is NULL.  Returns LS_ERR_ARG (NULL out/path), LS_ERR_IO (open/read, with
 * the path and strerror in err), LS_ERR_NOMEM, LS_ERR_TRUNCATED or
 * LS_ERR_FORMAT. */
ls_status ls_safetensors_open(ls_safetensors **out, const char *path, char *err, size_t err_len);

/* Validate the `len` bytes at `buf` as a safetensors file.  The buffer is
 * borrowed, not copied: it must stay valid and unchanged until
 * ls_safetensors_free(*out).  buf may be NULL only when len == 0.  Same
 * statuses as ls_safetensors_open except LS_ERR_IO. */
ls_status ls_safetensors_parse(ls_safetensors **out, const void *buf, size_t len, char *err,
                               size_t err_len);

/* Release a file and everything it owns.  NULL is a no-op. */
void ls_safetensors_free(ls_safetensors *st);

/* Number of tensors (the "__metadata__" entry is not a tensor). */
size_t ls_safetensors_count(const ls_safetensors *st);

/* The i-th tensor in name (strcmp) order, or NULL when i >= count. */
const ls_safetensors_tensor *ls_safetensors_at(const ls_safetensors *st, size_t i);

/* The tensor called `name`, or NULL when absent (or name is NULL). */
const ls_safetensors_tensor *ls_safetensors_find(const ls_safetensors *st, const char *name);

/* Number of "__metadata__" entries, and the i-th in key order (returns
 * LS_ERR_ARG when i >= count).  Strings are owned by st. */
size_t ls_safetensors_metadata_count(const ls_safetensors *st);
ls_status ls_safetensors_metadata_at(const ls_safetensors *st, size_t i, const char **key,
                                     const char **value);

/* Value of metadata `key`, or NULL when absent. */
const char *ls_safetensors_metadata_get(const ls_safetensors *st, const char *key);

/* Convert a tensor's elements into the caller's array `out[n]`; n must equal
 * t->numel (else LS_ERR_ARG).  F32/F64/BF16 only (LS_ERR_UNSUPPORTED for
 * others).  F64 -> float rounds to nearest-even; every other conversion is
 * exact.  out may be NULL only when n == 0. */
ls_status ls_safetensors_read_f64(const ls_safetensors_tensor *t, double *out, size_t n);
ls_status ls_safetensors_read_f32(const ls_safetensors_tensor *t, float *out, size_t n);

/* Find `name`, check that its shape is exactly shape[ndim], and convert it
 * into out[product(shape)].  LS_ERR_FORMAT when the tensor is missing or its
 * shape differs (err names the tensor and both shapes), LS_ERR_UNSUPPORTED
 * for an unconvertible dtype.  shape may be NULL when ndim == 0. */
ls_status ls_safetensors_load_f64(const ls_safetensors *st, const char *name,
                                  const uint64_t *shape, size_t ndim, double *out, char *err,
                                  size_t err_len);
ls_status ls_safetensors_load_f32(const ls_safetensors *st, const char *name,
                                  const uint64_t *shape, size_t ndim, float *out, char *err,
                                  size_t err_len);

/* ---- BF16 --------------------------------------------------------------- */

/* Round to the nearest BF16, ties to even; NaN stays a (quiet) NaN with its
 * sign, overflow gives +-Inf.  The double version rounds once, directly from
 * the double (no double rounding through float). */
uint16_t ls_safetensors_bf16_from_f32(float x);
uint16_t ls_safetensors_bf16_from_f64(double x);
/* Exact. */
float ls_safetensors_bf16_to_f32(uint16_t b);

/* ---- writing ------------------------------------------------------------ */

typedef struct ls_safetensors_writer ls_safetensors_writer;

/* Start an empty writer; release with ls_safetensors_writer_free. */
ls_status ls_safetensors_writer_init(ls_safetensors_writer **out);

/* Release a writer (never the borrowed tensor data).  NULL is a no-op. */
void ls_safetensors_writer_free(ls_safetensors_writer *w);

/* Add tensor `name` stored as `dtype` (F32, F64 or BF16) with shape
 * shape[ndim] (ndim 0 = scalar, shape may then be NULL); `data` holds
 * product(shape) elements and is borrowed: it must stay valid and unchanged
 * until ls_safetensors_writer_write returns (it may be NULL only when the
 * product is 0).  The name and shape are copied.  Returns LS_ERR_ARG for a
 * NULL/empty name, "__metadata__", a name already added, or a NULL data
 * pointer with elements; LS_ERR_UNSUPPORTED for another dtype; LS_ERR_NOMEM. */
ls_status ls_safetensors_writer_add_f64(ls_safetensors_writer *w, const char *name,
                                        ls_safetensors_dtype dtype, const uint64_t *shape,
                                        size_t ndim, const double *data);
ls_status ls_safetensors_writer_add_f32(ls_safetensors_writer *w, const char *name,
                                        ls_safetensors_dtype dtype, const uint64_t *shape,
                                        size_t ndim, const float *data);

/* Set metadata key -> value (both copied; setting a key again replaces its
 * value).  LS_ERR_ARG for a NULL key or value. */
ls_status ls_safetensors_writer_set_metadata(ls_safetensors_writer *w, const char *key,
                                             const char *value);

/* Write everything added so far to `path` atomically (see the top).  The
 * writer stays usable.  LS_ERR_IO (err names the path and the failing step,
 * with strerror), LS_ERR_NOMEM, LS_ERR_ARG (NULL w/path). */
ls_status ls_safetensors_writer_write(const ls_safetensors_writer *w, const char *path,
                                      char *err, size_t err_len);

/* ---- digests ------------------------------------------------------------ */

/* LongStraw's files carry digests of their content in two metadata entries
 * (both written by ls_safetensors_writer_set_digests, checked by
 * ls_safetensors_verify_digests):
 *   tensor_sha256   canonical JSON (keys sorted bytewise, no whitespace) of
 *                   an object mapping every tensor's name to the lowercase
 *                   hex SHA-256 of its data bytes as stored (little-endian,
 *                   its data_offsets range), so that a corrupt tensor is
 *                   named;
 *   content_sha256  lowercase hex SHA-256 of the canonical JSON text of
 *                   {"metadata": {every other metadata entry: key -> value},
 *                    "tensors": {name: {"dtype": "F32", "shape": [dims],
 *                                       "sha256": hex}}}
 *                   (every tensor), so that a changed metadata value, dtype
 *                   or shape is seen too.
 * A safetensors file with neither entry is simply undigested. */
#define LS_SAFETENSORS_TENSOR_DIGESTS "tensor_sha256"
#define LS_SAFETENSORS_CONTENT_DIGEST "content_sha256"

/* Digest every tensor added so far (in its stored bytes) and set the two
 * entries above, replacing earlier ones.  Call it after the last tensor and
 * the last other metadata entry.  LS_ERR_NOMEM, LS_ERR_INTERNAL (libcrypto),
 * LS_ERR_ARG (NULL w). */
ls_status ls_safetensors_writer_set_digests(ls_safetensors_writer *w);

/* The SHA-256 (lowercase hex) of the exact bytes ls_safetensors_writer_write
 * would write now, computed without writing them.  LS_ERR_NOMEM,
 * LS_ERR_INTERNAL, LS_ERR_ARG (err says which). */
ls_status ls_safetensors_writer_sha256(const ls_safetensors_writer *w, char hex[65], char *err, size_t err_len);

/* Check the two entries above against the file.  Neither present: LS_OK
 * with *digested = 0 (nothing checked).  Both present and every digest
 * equal: LS_OK with *digested = 1.  Otherwise (*digested = 0) LS_ERR_FORMAT
 * (one entry without the other, an entry that is not as described, a
 * tensor without a digest or a digest of no tensor, each named) or
 * LS_ERR_CORRUPT: the first tensor, in name order, whose bytes differ from
 * its recorded digest ("tensor 'x': its data does not match ..."), or the
 * content digest when every tensor matches (a metadata value, a dtype or a
 * shape changed).  LS_ERR_NOMEM, LS_ERR_INTERNAL. */
ls_status ls_safetensors_verify_digests(const ls_safetensors *st, int *digested, char *err, size_t err_len);

#endif
