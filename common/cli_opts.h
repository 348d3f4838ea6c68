/* cli_opts.h - one option table per executable, and the options several
 * executables share defined once.
 *
 * A table is an array of ls_cli_opt rows: each names an option, how its
 * value is read (kind, range), where it is stored (an offset into the
 * executable's argument struct) and its --help text.  ls_cli_parse reads a
 * command line with it and ls_cli_usage prints the --help text from it, so
 * that the two cannot disagree.  A row with .like names a shared row (the
 * common ones below, or another executable's table handed in as `shared`):
 * it takes that row's kind, value name, range, error text and help, and
 * keeps only its own offset and default, so that an option two executables
 * take has one definition, one range and one help text.
 *
 * Errors: ls_cli_parse returns 2 with err naming the argument
 * ("--group: 'x' is not an integer in [1, 4096]"; "unknown option '--x'
 * (see --help)"); the executable prints it, prefixed with its name, and
 * exits 2.  Numbers are plain decimal (no sign, no hex, no exponent for
 * counts; no inf/nan).  Nothing here allocates; every string is borrowed
 * from argv or the table. */
#ifndef LS_COMMON_CLI_OPTS_H
#define LS_COMMON_CLI_OPTS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    LS_CLI_LIKE,    /* a row with .like: the shared row's kind */
    LS_CLI_TEXT,    /* --help only: a paragraph (help), printed as it is */
    LS_CLI_HELP,    /* no value: the int field is set to 1, and parsing stops (--help, --list-names) */
    LS_CLI_FLAG,    /* no value: the int field is set to 1 */
    LS_CLI_UNFLAG,  /* no value: the int field is set to 0 (--no-rollout) */
    LS_CLI_STRING,  /* the const char * field points at the value (a path, "-") */
    LS_CLI_STRINGS, /* repeatable: the value appended to the const char *[max] at off, its count (size_t) at off2 */
    LS_CLI_SIZE,    /* size_t field: a count in [min, max] */
    LS_CLI_INT,     /* int field: a count in [min, max] */
    LS_CLI_U64,     /* uint64_t field: a count in [min, max] */
    LS_CLI_REAL,    /* double field: a number in [lo, hi] */
    LS_CLI_BYTES,   /* size_t field: a byte count in [min, max]: 1073741824, 48GiB, 512MiB (2^30, 2^20), 96GB (10^9) */
    LS_CLI_CHOICE,  /* int-sized field: the value's index among arg's "a|b|c" */
    LS_CLI_PICK,    /* rows sharing one name (--fault): the value picks the row whose arg it is; its int field = 1 */
    LS_CLI_CUSTOM,  /* the row's parse function reads the value (a PICK row's too when its arg ends with '=') */
} ls_cli_kind;

typedef struct ls_cli_opt ls_cli_opt;
struct ls_cli_opt {
    ls_cli_kind kind;
    const char *name;  /* "--prompt-len" (every PICK row of one option: the same); NULL for LS_CLI_TEXT */
    const char *alias; /* another spelling ("-h"), or NULL */
    const char *arg;   /* the value in --help ("P", "f32|f64"; a PICK row: the value it picks); NULL: no value */
    /* The --help text after the option, from the help column; '\n' starts a
     * continuation line there.  NULL: the option is shown on the line of the
     * row before it ("--lora-r R --lora-alpha A"). */
    const char *help;
    const char *dflt;  /* the default as --help shows it: "[dflt]" in place of help's "[]", else at its end */
    int gap;           /* spaces after a long left column (0: 1) */
    size_t off;        /* offsetof the field in the executable's argument struct */
    size_t off2;       /* LS_CLI_STRINGS: offsetof its count (size_t) */
    size_t min, max;   /* LS_CLI_SIZE, _INT, _U64, _BYTES; LS_CLI_STRINGS: max is the array's length */
    double lo, hi;     /* LS_CLI_REAL */
    const char *bad;   /* the error after "NAME: 'VALUE' " (CHOICE, PICK: generated) */
    /* The name of a shared row this one is (ls_cli_common, or a table
     * handed to ls_cli_parse as shared): kind, alias, arg, help, ranges,
     * bad and parse come from it; off, off2, dflt, gap, rec stay this row's
     * (dflt and gap: this row's when set). */
    const char *like;
    /* LS_CLI_CUSTOM: reads val into base; 0, or 2 with err naming the option. */
    int (*parse)(void *base, const ls_cli_opt *o, const char *val, char *err, size_t err_len);
    /* Not the parser's: what the executable records of the option (the
     * trainer: where its receipt holds the value). */
    const char *rec;
};

/* A table and its length. */
typedef struct {
    const ls_cli_opt *rows;
    size_t n;
} ls_cli_table;

/* The options several executables share, one row each, their offsets 0
 * (a row .like one of these gives its own):
 *   --help (-h)      LS_CLI_HELP  "this text"
 *   --list-names     LS_CLI_HELP  the executable's vocabulary as JSON (tests/tools/check_vocab.py)
 *   --quiet          LS_CLI_FLAG  errors only: no progress on stderr, no summary on stdout
 *   --key PUB        LS_CLI_STRINGS a public key trusted to sign runs (repeatable; audit, audit diff)
 *   --sign-key PRIV  LS_CLI_STRING the private key to sign with (spelled --key by longstraw-sign and
 *                    longstraw-parity: .like "--sign-key" with .name "--key")
 *   --json FILE      LS_CLI_STRING a JSON report written to FILE (atomically)
 * The table (static). */
ls_cli_table ls_cli_common(void);

/* The row i of t as it applies: a .like row merged with the shared row of
 * that name (searched in shared[0..n_shared), then ls_cli_common()).
 * Returns 0, or -1 when .like names no shared row (a programmer's error:
 * ls_cli_check_table reports it). */
int ls_cli_resolve(const ls_cli_opt *row, const ls_cli_table *shared, size_t n_shared, ls_cli_opt *out);

/* 0 when every row of t resolves and no two options share a name (PICK
 * rows excepted); else -1 with err naming the row. */
int ls_cli_check_table(ls_cli_table t, const ls_cli_table *shared, size_t n_shared, char *err, size_t err_len);

/* What ls_cli_parse reads and where it puts what it read. */
typedef struct {
    ls_cli_table table;
    const ls_cli_table *shared; /* tables .like rows may name (may be NULL) */
    size_t n_shared;
    /* Positional arguments (not starting with "--", or "-" alone): up to
     * max_pos into pos[], their number into *n_pos; max_pos 0: none allowed
     * ("unexpected argument 'x'"). */
    const char **pos;
    size_t max_pos;
    size_t *n_pos;
    /* One byte per row of table: 1 where the option was given (may be NULL). */
    unsigned char *given;
    int once; /* 1: a value option given twice is an error ("--json: given twice") */
} ls_cli_parser;

/* Reads argv[first..argc) into base by p's table.  0 (an LS_CLI_HELP row
 * seen: its field set, nothing after it read), or 2 with err naming the
 * argument ("option table: ..." when the table fails ls_cli_check_table).
 * Missing required options are the caller's to check. */
int ls_cli_parse(const ls_cli_parser *p, void *base, int argc, char **argv, int first, char *err, size_t err_len);

/* The --help lines of t's options (and its LS_CLI_TEXT paragraphs) to f,
 * the help text from column help_col (0: 26). */
void ls_cli_usage(FILE *f, ls_cli_table t, const ls_cli_table *shared, size_t n_shared, int help_col);

/* A value by kind, as ls_cli_parse reads it: 0, or -1 when s is not one.
 * parse_bytes: *unit (may be NULL) is the index of its unit among "", "B",
 * "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB" (ls_cli_unit). */
int ls_cli_parse_size(const char *s, size_t lo, size_t hi, size_t *out);
int ls_cli_parse_real(const char *s, double lo, double hi, double *out);
int ls_cli_parse_bytes(const char *s, size_t lo, size_t hi, size_t *out, int *unit);
/* The index of v among choices "a|b|c", or -1. */
int ls_cli_choice_index(const char *choices, const char *v);
/* Unit u of ls_cli_parse_bytes: its suffix, its multiplier, the index of
 * the same scale in the other system (GB for GiB; -1 for bytes), and
 * whether it is decimal.  NULL past the end. */
const char *ls_cli_unit(int u, double *mul, int *other, int *decimal);

#endif
