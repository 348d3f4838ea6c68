/* batch.h - one GRPO step's inputs (docs/model.md §4, §6): prompt, G responses of
 * possibly different lengths, rewards, advantages, old- and reference-policy
 * log-probs.  Numbers are doubles whatever the compute dtype.  Also the
 * batch dump (--dump-batch, JSON: writer and strict reader) and the
 * external rollouts file (--rollouts, JSONL, one step's group per line:
 * a streaming reader over a path, standard input or a descriptor, and the
 * one-line parser it runs per line) formats.  dtype-independent.  The
 * batch is batch.c's, the rollouts format rollouts.c's, the dump
 * batch_dump.c's. */
#ifndef LS_TRAINER_BATCH_H
#define LS_TRAINER_BATCH_H
#include <stddef.h>
#include <stdint.h>
#include "common/status.h"
#include "trainer/model/config.h"

typedef struct {
    int32_t *prompt;
    size_t P;
    size_t G;
    int32_t **resp;   /* [G][R[i]] */
    size_t *R;        /* [G] */
    double *rewards;  /* [G] */
    double *adv;      /* [G] */
    double **old_lp;  /* [G][R[i]], NULL rows until scored or supplied */
    double **ref_lp;  /* [G][R[i]] */
    int old_supplied; /* old log-probs came from the input (rollouts line or dump) */
    int ref_supplied; /* reference log-probs came from the input (rollouts line or dump) */
} ls_batch;

/* Allocate an empty batch for G members (prompt/responses set by the caller
 * with ls_batch_set_*).  Free with ls_batch_free (NULL ok). */
ls_status ls_batch_alloc(ls_batch **out, size_t G);
ls_status ls_batch_set_prompt(ls_batch *b, const int32_t *ids, size_t P);
ls_status ls_batch_set_response(ls_batch *b, size_t i, const int32_t *ids, size_t R);
void ls_batch_free(ls_batch *b);

/* Longest rollouts line read (bytes before its newline, a CR included):
 * 256 MiB.  A longer line is refused naming the source and line, after
 * reading at most this many bytes of it plus one. */
#define LS_BATCH_MAX_LINE ((size_t)256 << 20)

/* Parse the first line (up to the first '\n' or the end) of the rollouts
 * JSONL bytes buf[0..len): {"prompt": [ids], "responses": [[ids]...],
 * "rewards": [...], "old_logprobs": [[...]...] (optional), "ref_logprobs":
 * [[...]...] (optional)} (schemas/rollouts-line.schema.json).  Strict JSON
 * (no duplicate keys, nothing after the object but whitespace, so a CR
 * before the newline is accepted), no other keys, ids in [0, vocab),
 * prompt >= 2 tokens, responses >= 1 token each, one reward per response,
 * finite numbers; each log-prob array holds one row per response of that
 * response's length, finite and <= 0.  A first line longer than max_line
 * bytes (0: LS_BATCH_MAX_LINE) or empty is refused.  Errors name `where`,
 * the line and the field ("FILE: line 1: field 'responses[2][5]': ...").
 * *out is the caller's (ls_batch_free), NULL on failure; adv is zero,
 * old_lp / ref_lp zero unless supplied (old_supplied / ref_supplied). */
ls_status ls_batch_parse_rollouts(ls_batch **out, const char *buf, size_t len, const char *where, int vocab,
                                  size_t max_line, char *err, size_t err_len);

/* The streaming rollouts reader: one group per line, read as it arrives
 * (a pipe from an inference engine that writes slowly is fine), never
 * seeking and never holding more than max_line + 1 bytes (its one buffer:
 * the current line and what was read after it).  Lines are numbered from 1,
 * every line counted.  A line holding only spaces, tabs and CRs is skipped
 * (still counted) unless it is over the limit; a final line without a newline is read like any other;
 * each other line goes through the checks of ls_batch_parse_rollouts.  The
 * reader stops at the first bad line: that ls_rollouts_next and every later
 * one return its error status. */
typedef struct ls_rollouts_reader ls_rollouts_reader;

/* Open path, or standard input when path is "-" (named "<stdin>" in
 * errors, not closed by ls_rollouts_close).  vocab >= 1 bounds the ids;
 * max_line 0 means LS_BATCH_MAX_LINE.  LS_ERR_IO when path cannot be
 * opened, LS_ERR_ARG for bad arguments.  *out is the caller's
 * (ls_rollouts_close). */
ls_status ls_rollouts_open(ls_rollouts_reader **out, const char *path, int vocab, size_t max_line, char *err,
                           size_t err_len);
/* The same over an open descriptor (a pipe, a socket, a file), named
 * `name` in errors; the descriptor stays the caller's (not closed). */
ls_status ls_rollouts_open_fd(ls_rollouts_reader **out, int fd, const char *name, int vocab, size_t max_line,
                              char *err, size_t err_len);

/* The next line's group.  LS_OK with *out set (the caller's, ls_batch_free)
 * for a group; LS_OK with *out NULL at the clean end of the input (and on
 * every call after it); an error (LS_ERR_FORMAT, LS_ERR_NONFINITE, LS_ERR_IO,
 * LS_ERR_NOMEM) with *out NULL and err naming the source, the line and the
 * field: "FILE: line 7: field 'responses[2][5]': not a token id in [0, 256)".
 * Blocks until a whole line (or the end) has arrived. */
ls_status ls_rollouts_next(ls_rollouts_reader *r, ls_batch **out, char *err, size_t err_len);

/* Number of the last line read (0 before the first); after a group it is
 * that group's line.  Bytes read from the source so far.  NULL gives 0. */
size_t ls_rollouts_line(const ls_rollouts_reader *r);
uint64_t ls_rollouts_bytes_read(const ls_rollouts_reader *r);

/* The lowercase hex SHA-256 of the bytes the reader has handed out so far
 * into hex (65 bytes), their count into *bytes: every line returned, skipped
 * or refused by the line parser, each with its newline; that is, the input
 * from its first byte to the end of the last line read (the whole input
 * once ls_rollouts_next reported its end).  Bytes read ahead past that line
 * are not counted, so the digest does not depend on the pieces the input
 * arrived in.  LS_OK; LS_ERR_ARG (a NULL argument), LS_ERR_INTERNAL. */
ls_status ls_rollouts_digest(const ls_rollouts_reader *r, char hex[65], uint64_t *bytes);

/* Test hook: at most n >= 1 bytes per read(2) call (default 64 KiB), to
 * exercise lines split across reads. */
void ls_rollouts_set_read_size(ls_rollouts_reader *r, size_t n);

/* Close the reader (and its file, unless it is standard input or a caller's
 * descriptor).  NULL ok. */
void ls_rollouts_close(ls_rollouts_reader *r);

/* The number of groups a rollouts file holds if every line is valid: its
 * lines that are not blank (as ls_rollouts_next skips them), a final line
 * without a newline included; read in fixed 64 KiB pieces, up to the size
 * the file had when opened.  For "-" and anything not a regular file (a
 * pipe, a FIFO, a device) the count is unknown: LS_OK with *known = 0 and
 * *lines = 0, nothing read.  LS_ERR_IO when path cannot be opened or read. */
ls_status ls_rollouts_count_lines(const char *path, size_t *lines, int *known, char *err, size_t err_len);

/* The first group of the rollouts file at path (ls_rollouts_open +
 * ls_rollouts_next once: blank lines before it skipped, the lines after it
 * not parsed); a file without a group is refused.  The _max form takes the
 * line limit (0: default). */
ls_status ls_batch_read_rollouts(ls_batch **out, const char *path, int vocab, char *err, size_t err_len);
ls_status ls_batch_read_rollouts_max(ls_batch **out, const char *path, int vocab, size_t max_line, char *err,
                                     size_t err_len);

/* The docs/model.md §6 batch dump as one line of JSON text (*text is the
 * caller's, NUL-terminated, *len bytes): config (model and objective keys,
 * obj required), prompt, responses, rewards, advantages, old_logprobs,
 * ref_logprobs.  LS_ERR_NONFINITE when a number is not finite. */
ls_status ls_batch_format_dump(const ls_batch *b, const ls_model_config *cfg, const ls_objective *obj,
                               char **text, size_t *len, char *err, size_t err_len);

/* Write the batch dump atomically (ls_batch_format_dump + atomic write). */
ls_status ls_batch_write_dump(const ls_batch *b, const ls_model_config *cfg, const ls_objective *obj,
                              const char *path, char *err, size_t err_len);

/* Parse a batch dump from buf[0..len) (`where` names it in errors).  Strict:
 * exactly the seven top-level fields; the config holds exactly the model
 * keys of its family (checked by ls_config_from_json and ls_config_check)
 * plus the eight objective keys (train_mode "lora"/"full", lora_r integer in
 * [1, 1024], lora_alpha in [1e-6, 1e6], lora_experts bool, grad_mode
 * "detached"/"full", epsilon in [0, 1], beta in [0, 100], temperature in
 * [1e-3, 1e3]); ids in [0, vocab); prompt >= 2 tokens; G >= 1 responses of
 * >= 1 token; G rewards and advantages, finite; old/ref log-prob rows of the
 * response lengths, finite and <= 0.  Errors name the field, e.g.
 * "FILE: field 'old_logprobs[3][7]': not a finite log-prob <= 0".  On
 * success *out (old_supplied = ref_supplied = 1), *cfg and *obj (lora_init_random = 0) are
 * set; on failure *out is NULL. */
ls_status ls_batch_parse_dump(ls_batch **out, ls_model_config *cfg, ls_objective *obj, const char *buf,
                              size_t len, const char *where, char *err, size_t err_len);
/* Read a whole dump file (size-capped by ls_json_read_bytes) and parse it. */
ls_status ls_batch_read_dump(ls_batch **out, ls_model_config *cfg, ls_objective *obj, const char *path,
                             char *err, size_t err_len);
#endif
