/* trace_lex.h - internal to receipts/: the strict checks the trace reader
 * makes on each line around cJSON's parse (trace_reader.c).  Not part of
 * the contract; trace_reader.h is and says what a line must be. */
#ifndef LS_RECEIPTS_TRACE_LEX_H
#define LS_RECEIPTS_TRACE_LEX_H

#include <stddef.h>

#include <cjson/cJSON.h>

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
