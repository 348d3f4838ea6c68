/* cli_opts.c - option tables: parsing, --help, the shared options (cli_opts.h). */
#include "common/cli_opts.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the shared options --------------------------------------------------------- */

static const ls_cli_opt COMMON[] = {
    {.kind = LS_CLI_HELP, .name = "--help", .alias = "-h", .help = "this text"},
    {.kind = LS_CLI_HELP, .name = "--list-names",
     .help = "print this tool's vocabulary as JSON and exit (the names and sizes\n"
             "tests/tools/check_vocab.py holds the schemas and docs to)"},
    {.kind = LS_CLI_FLAG, .name = "--quiet", .help = "errors only: no progress on stderr, no summary on stdout"},
    {.kind = LS_CLI_STRINGS, .name = "--key", .arg = "PUB",
     .help = "a public key (Ed25519 PEM) trusted to sign runs: RUN/manifest.dsse.json\n"
             "must verify with one of them (repeatable)"},
    {.kind = LS_CLI_STRING, .name = "--sign-key", .arg = "PRIV",
     .help = "the Ed25519 private key (PEM, as longstraw-sign keygen makes) to sign with"},
    {.kind = LS_CLI_STRING, .name = "--json", .arg = "FILE", .help = "the report as JSON, written to FILE (atomically)"},
};

ls_cli_table ls_cli_common(void) { return (ls_cli_table){COMMON, sizeof COMMON / sizeof COMMON[0]}; }

static const ls_cli_opt *find_in(ls_cli_table t, const char *name) {
    for (size_t i = 0; i < t.n; i++)
        if (t.rows[i].name && !strcmp(t.rows[i].name, name) && !t.rows[i].like) return &t.rows[i];
    return NULL;
}

int ls_cli_resolve(const ls_cli_opt *row, const ls_cli_table *shared, size_t n_shared, ls_cli_opt *out) {
    *out = *row;
    if (!row->like) return 0;
    const ls_cli_opt *s = NULL;
    for (size_t i = 0; !s && i < n_shared; i++) s = find_in(shared[i], row->like);
    if (!s) s = find_in(ls_cli_common(), row->like);
    if (!s) return -1;
    out->kind = s->kind;
    out->alias = s->alias;
    out->arg = s->arg;
    out->help = s->help;
    out->min = s->min;
    out->max = row->kind == LS_CLI_STRINGS || s->kind == LS_CLI_STRINGS ? row->max : s->max;
    out->lo = s->lo;
    out->hi = s->hi;
    out->bad = s->bad;
    out->parse = s->parse;
    if (!row->name) out->name = s->name;
    if (!row->dflt) out->dflt = s->dflt;
    if (!row->gap) out->gap = s->gap;
    out->like = NULL;
    return 0;
}

int ls_cli_check_table(ls_cli_table t, const ls_cli_table *shared, size_t n_shared, char *err, size_t err_len) {
    for (size_t i = 0; i < t.n; i++) {
        ls_cli_opt a, b;
        if (ls_cli_resolve(&t.rows[i], shared, n_shared, &a) != 0) {
            snprintf(err, err_len, "option row %zu (%s) is like '%s', which no shared table defines", i,
                     t.rows[i].name ? t.rows[i].name : "?", t.rows[i].like);
            return -1;
        }
        if (a.kind == LS_CLI_TEXT) continue;
        if (a.kind == LS_CLI_LIKE || !a.name || strncmp(a.name, "-", 1) != 0) {
            snprintf(err, err_len, "option row %zu has no name", i);
            return -1;
        }
        if ((a.kind == LS_CLI_CUSTOM) != (a.parse != NULL) && a.kind != LS_CLI_PICK) {
            snprintf(err, err_len, "%s: a custom row needs a parse function (and only it)", a.name);
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (ls_cli_resolve(&t.rows[j], shared, n_shared, &b) != 0 || b.kind == LS_CLI_TEXT) continue;
            if (!strcmp(a.name, b.name) && !(a.kind == LS_CLI_PICK || a.kind == LS_CLI_CUSTOM) &&
                !(b.kind == LS_CLI_PICK || b.kind == LS_CLI_CUSTOM)) {
                snprintf(err, err_len, "%s: two rows", a.name);
                return -1;
            }
        }
    }
    return 0;
}

/* ---- --help ----------------------------------------------------------------------- */

/* Row i of t resolved; a row that does not resolve is printed as it is
 * (ls_cli_check_table reports it). */
static ls_cli_opt row_at(ls_cli_table t, size_t i, const ls_cli_table *shared, size_t n_shared) {
    ls_cli_opt o;
    if (ls_cli_resolve(&t.rows[i], shared, n_shared, &o) != 0) o = t.rows[i];
    return o;
}

void ls_cli_usage(FILE *f, ls_cli_table t, const ls_cli_table *shared, size_t n_shared, int help_col) {
    const size_t col = help_col > 0 ? (size_t)help_col : 26;
    for (size_t i = 0; i < t.n; i++) {
        ls_cli_opt o = row_at(t, i, shared, n_shared);
        if (o.kind == LS_CLI_TEXT) {
            fputs(o.help, f);
            continue;
        }
        if (!o.help) continue; /* shown on the line of the row before it */
        /* "  NAME ARG" and those of the rows after it that have no help of their own */
        size_t w = 0;
        for (size_t j = i; j < t.n; j++) {
            ls_cli_opt r = j == i ? o : row_at(t, j, shared, n_shared);
            if (j > i && (r.kind == LS_CLI_TEXT || r.help)) break;
            fprintf(f, "%s%s%s%s", j == i ? "  " : " ", r.name, r.arg ? " " : "", r.arg ? r.arg : "");
            w += (j == i ? 2 : 1) + strlen(r.name) + (r.arg ? 1 + strlen(r.arg) : 0);
        }
        size_t gap = o.gap ? (size_t)o.gap : 1;
        fprintf(f, "%*s", (int)(w + gap > col ? gap : col - w), "");
        int dflt_shown = 0;
        for (const char *s = o.help; *s; s++) {
            if (*s == '\n') {
                fprintf(f, "\n%*s", (int)col, "");
            } else if (s[0] == '[' && s[1] == ']' && o.dflt) {
                fprintf(f, "[%s]", o.dflt);
                dflt_shown = 1;
                s++;
            } else {
                fputc(*s, f);
            }
        }
        if (o.dflt && !dflt_shown) fprintf(f, " [%s]", o.dflt);
        fputc('\n', f);
    }
}

/* ---- values ----------------------------------------------------------------------- */

/* Counts are plain decimal: digits only (no sign, no spaces, no hex, no
 * exponent); reals begin with a digit or a '.' and a digit, no hex, no
 * inf/nan, nothing after the number.  strtoull/strtod alone would skip
 * leading spaces and read " -1" as 2^64-1, "+5" as 5 and "0x1p3" as 8. */
int ls_cli_parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
    if (!s || !isdigit((unsigned char)s[0])) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi || v > SIZE_MAX) return -1;
    *out = (size_t)v;
    return 0;
}

int ls_cli_parse_real(const char *s, double lo, double hi, double *out) {
    if (!s) return -1;
    int lead = isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]));
    if (!lead || strpbrk(s, "xXpP") != NULL) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* The units of a byte count: bytes, binary (KiB = 2^10 ...) and decimal (KB = 10^3 ...); `other` is the
 * index of the same scale in the other system (GB and GiB), -1 for bytes. */
static const struct {
    const char *suf;
    double mul;
    int other;
} UNITS[] = {{"", 1, -1},         {"B", 1, -1},        {"KiB", 1024.0, 6},         {"MiB", 1048576.0, 7},
             {"GiB", 1073741824.0, 8}, {"TiB", 1099511627776.0, 9}, {"KB", 1e3, 2}, {"MB", 1e6, 3},
             {"GB", 1e9, 4},      {"TB", 1e12, 5}};
#define N_UNITS (sizeof UNITS / sizeof UNITS[0])

const char *ls_cli_unit(int u, double *mul, int *other, int *decimal) {
    if (u < 0 || (size_t)u >= N_UNITS) return NULL;
    if (mul) *mul = UNITS[u].mul;
    if (other) *other = UNITS[u].other;
    if (decimal) *decimal = u >= 6;
    return UNITS[u].suf;
}

int ls_cli_parse_bytes(const char *s, size_t lo, size_t hi, size_t *out, int *unit) {
    if (!s) return -1;
    int lead = isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]));
    if (!lead || strpbrk(s, "xXpPeE") != NULL) return -1; /* no hex, no exponent */
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v <= 0) return -1;
    for (size_t i = 0; i < N_UNITS; ++i)
        if (strcmp(end, UNITS[i].suf) == 0) {
            double b = v * UNITS[i].mul;
            if (b != floor(b) || b >= 18446744073709551615.0 || b < (double)lo || b > (double)hi) return -1;
            *out = (size_t)b;
            if (unit) *unit = (int)i;
            return 0;
        }
    return -1;
}

int ls_cli_choice_index(const char *choices, const char *v) {
    if (!choices || !v) return -1;
    size_t n = strlen(v);
    int i = 0;
    for (const char *s = choices;; i++) {
        const char *bar = strchr(s, '|');
        size_t len = bar ? (size_t)(bar - s) : strlen(s);
        if (len == n && !strncmp(s, v, n)) return i;
        if (!bar) return -1;
        s = bar + 1;
    }
}

/* ---- parsing ---------------------------------------------------------------------- */

#define BAD(...)                             \
    do {                                     \
        snprintf(err, err_len, __VA_ARGS__); \
        return 2;                            \
    } while (0)

/* "NAME: 'VALUE' is not a, b or c" of a CHOICE row. */
static int bad_choice(const ls_cli_opt *o, const char *val, char *err, size_t err_len) {
    char list[160];
    size_t k = 0;
    for (const char *s = o->arg; *s && k + 5 < sizeof list; s++) {
        if (*s != '|') {
            list[k++] = *s;
            continue;
        }
        const char *sep = strchr(s + 1, '|') ? ", " : " or ";
        memcpy(list + k, sep, strlen(sep));
        k += strlen(sep);
    }
    list[k] = 0;
    BAD("%s: '%s' is not %s", o->name, val, list);
}

/* NAME VALUE of a PICK option: the row of NAME whose arg is VALUE (or, an
 * arg ending in "=..."-style "key=SPEC", begins with its key and '='), applied. */
static int apply_pick(const ls_cli_parser *p, void *base, const char *name, const char *val, char *err,
                      size_t err_len) {
    char list[320];
    size_t k = 0;
    const char *bad = NULL; /* the first row's error text that has one */
    list[0] = 0;
    for (size_t i = 0; i < p->table.n; i++) {
        ls_cli_opt o = row_at(p->table, i, p->shared, p->n_shared);
        if (o.kind != LS_CLI_PICK || strcmp(o.name, name) != 0) continue;
        const char *eq = strchr(o.arg, '=');
        if (!eq && !strcmp(val, o.arg)) {
            if (o.parse) return o.parse(base, &p->table.rows[i], val, err, err_len);
            *(int *)(void *)((char *)base + o.off) = 1;
            if (p->given) p->given[i] = 1;
            return 0;
        }
        if (eq && !strncmp(val, o.arg, (size_t)(eq - o.arg) + 1)) {
            if (p->given) p->given[i] = 1;
            return o.parse(base, &p->table.rows[i], val + (eq - o.arg) + 1, err, err_len);
        }
        if (!bad) bad = o.bad;
        if (k < sizeof list) k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", o.arg);
    }
    BAD("%s: '%s' %s (%s)", name, val, bad ? bad : "is not one of its values", list);
}

/* The value of option o (row i) into base. */
static int apply(const ls_cli_parser *p, size_t i, const ls_cli_opt *o, void *base, const char *val, char *err,
                 size_t err_len) {
    void *f = (char *)base + o->off;
    size_t v;
    int c;
    if ((o->kind == LS_CLI_STRING || o->kind == LS_CLI_STRINGS) && !val[0]) BAD("%s: needs a value (not empty)", o->name);
    switch (o->kind) {
    case LS_CLI_STRING: *(const char **)f = val; return 0;
    case LS_CLI_STRINGS: {
        size_t *n = (size_t *)(void *)((char *)base + o->off2);
        if (*n >= o->max) BAD("%s: at most %zu", o->name, o->max);
        ((const char **)f)[(*n)++] = val;
        return 0;
    }
    case LS_CLI_SIZE:
        if (ls_cli_parse_size(val, o->min, o->max, (size_t *)f) == 0) return 0;
        break;
    case LS_CLI_INT:
        if (ls_cli_parse_size(val, o->min, o->max, &v) == 0 && v <= INT32_MAX) {
            *(int *)f = (int)v;
            return 0;
        }
        break;
    case LS_CLI_U64:
        if (ls_cli_parse_size(val, o->min, o->max, &v) == 0) {
            *(uint64_t *)f = v;
            return 0;
        }
        break;
    case LS_CLI_REAL:
        if (ls_cli_parse_real(val, o->lo, o->hi, (double *)f) == 0) return 0;
        break;
    case LS_CLI_BYTES:
        if (ls_cli_parse_bytes(val, o->min, o->max, (size_t *)f, NULL) == 0) return 0;
        break;
    case LS_CLI_CHOICE:
        if ((c = ls_cli_choice_index(o->arg, val)) < 0) return bad_choice(o, val, err, err_len);
        memcpy(f, &c, sizeof c); /* an int-sized enum */
        return 0;
    case LS_CLI_CUSTOM: return o->parse(base, &p->table.rows[i], val, err, err_len);
    case LS_CLI_PICK: return apply_pick(p, base, o->name, val, err, err_len);
    case LS_CLI_LIKE: /* resolved before: not called */
    case LS_CLI_TEXT:
    case LS_CLI_HELP:
    case LS_CLI_FLAG:
    case LS_CLI_UNFLAG: break; /* no value: not called */
    }
    BAD("%s: '%s' %s", o->name, val, o->bad ? o->bad : "is not a valid value");
}

int ls_cli_parse(const ls_cli_parser *p, void *base, int argc, char **argv, int first, char *err, size_t err_len) {
    if (p->n_pos) *p->n_pos = 0;
    /* a table that does not resolve is the program's error: refused on every command line */
    char why[256];
    if (ls_cli_check_table(p->table, p->shared, p->n_shared, why, sizeof why) != 0) BAD("option table: %s", why);
    for (int a = first; a < argc; a++) {
        const char *k = argv[a];
        size_t i = p->table.n;
        ls_cli_opt o = {0};
        for (size_t j = 0; j < p->table.n; j++) {
            o = row_at(p->table, j, p->shared, p->n_shared);
            if (o.kind != LS_CLI_TEXT && o.name && (!strcmp(k, o.name) || (o.alias && !strcmp(k, o.alias)))) {
                i = j;
                break;
            }
        }
        if (i == p->table.n) {
            if (k[0] == '-' && k[1] != 0) BAD("unknown option '%s'", k);
            if (!p->pos || !p->n_pos || *p->n_pos >= p->max_pos) BAD("unexpected argument '%s'", k);
            p->pos[(*p->n_pos)++] = k;
            continue;
        }
        if (o.kind == LS_CLI_HELP || o.kind == LS_CLI_FLAG || o.kind == LS_CLI_UNFLAG) {
            *(int *)(void *)((char *)base + o.off) = o.kind != LS_CLI_UNFLAG;
            if (p->given) p->given[i] = 1;
            if (o.kind == LS_CLI_HELP) return 0;
            continue;
        }
        if (a + 1 >= argc) BAD("%s: needs a value", k);
        const char *val = argv[++a];
        if (p->once && p->given && p->given[i] && o.kind != LS_CLI_STRINGS && o.kind != LS_CLI_PICK)
            BAD("%s: given twice", o.name);
        if (apply(p, i, &o, base, val, err, err_len) != 0) return 2;
        if (p->given && o.kind != LS_CLI_PICK) p->given[i] = 1; /* a PICK option: the picked row's (apply_pick) */
    }
    return 0;
}
