/* trace_lex.h - internal to receipts/: the strict checks the trace reader
 * makes on each line: the token lexer and repeated-key search around
 * cJSON's parse (the header line), and the one-pass strict parser that
 * does both for every other line (trace_reader.c).  Not part of
 * the contract; trace_reader.h is and says what a line must be. */
#ifndef LS_RECEIPTS_TRACE_LEX_H
#define LS_RECEIPTS_TRACE_LEX_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Nodes for ls_trace_lex_parse: blocks of cJSON structs reused line after
 * line (no allocation per node).  Zero-initialise; ls_trace_pool_reset
 * before each parse; ls_trace_pool_free at the end.  bytes: allocated. */
typedef struct ls_trace_pool_block ls_trace_pool_block;
typedef struct {
    ls_trace_pool_block *head, *cur;
    size_t used;  /* nodes used in cur */
    size_t bytes; /* bytes held by all blocks */
} ls_trace_pool;

void ls_trace_pool_reset(ls_trace_pool *pool);
void ls_trace_pool_free(ls_trace_pool *pool);

/* Parses p[0..n) (p[n] must be writable; p is overwritten) strictly: the
 * tokens of ls_trace_lex_json, RFC 8259's grammar, at most 1000 levels of
 * nesting (cJSON's limit), no key repeated within an object, surrounding whitespace space, tab or CR
 * only.  On success returns NULL and *out is the value, built of the
 * pool's nodes (valid until the next reset; never cJSON_Delete it) with its
 * strings decoded in place in p.  Else the reason (a static string) and *at
 * the column (0-based); *out NULL, and for a repeated key *dup that key
 * (in p, valid until the next reset).  The value may be of any type. */
const char *ls_trace_lex_parse(ls_trace_pool *pool, char *p, size_t n, size_t *at, cJSON **out,
                               const char **dup);

/* NULL when p[0..n) is made of valid JSON tokens (RFC 8259: strict
 * numbers, escapes and literals, UTF-8, no raw control characters), else
 * the reason (a static string), with *at the offending column (0-based).
 * Only the tokens are checked, not the grammar: cJSON parses after. */
const char *ls_trace_lex_json(const unsigned char *p, size_t n, size_t *at);

/* The first key repeated within one object anywhere in v (an object or an
 * array is searched recursively), or NULL; the key points into v.  NULL
 * also when a scratch allocation fails (large objects are sorted). */
const char *ls_trace_lex_repeated_key(const cJSON *v);

#endif
