/* test_cli_opts.c - common/cli_opts.h: values read by kind and range, errors
 * naming the argument, --help from the table, a row .like a shared one
 * taking its range and help, and the faults a table can hold caught
 * (a .like naming nothing, two rows of one name, a custom row without its
 * function), as is the trainer's table and longstraw-plan's use of it. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli_opts.h"
#include "trainer/run/train_args.h"

typedef struct {
    const char *out;
    const char *keys[2];
    size_t n_keys;
    size_t count, bytes;
    int level, quiet, help, mode, fault_a, fault_b, custom;
    double x;
    uint64_t seed;
} args;

static int parse_custom(void *base, const ls_cli_opt *o, const char *v, char *err, size_t err_len) {
    (void)o;
    if (strcmp(v, "ok") != 0) {
        snprintf(err, err_len, "--custom: '%s' is not ok", v);
        return 2;
    }
    ((args *)base)->custom = 1;
    return 0;
}

#define F(field) .off = offsetof(args, field)
static const ls_cli_opt ROWS[] = {
    {.kind = LS_CLI_TEXT, .help = "usage: t [options]\n"},
    {.kind = LS_CLI_STRING, .name = "--out", .arg = "DIR", .help = "output", F(out)},
    {.like = "--key", .name = "--key", F(keys), .off2 = offsetof(args, n_keys), .max = 2},
    {.kind = LS_CLI_SIZE, .name = "--count", .arg = "N", .help = "a count", .dflt = "3", F(count), .min = 1, .max = 10,
     .bad = "is not an integer in [1, 10]"},
    {.kind = LS_CLI_BYTES, .name = "--bytes", .arg = "B", .help = "bytes", F(bytes), .min = 1024, .max = SIZE_MAX,
     .bad = "is not a byte count >= 1 KiB"},
    {.kind = LS_CLI_INT, .name = "--level", .arg = "N", .help = "a level", F(level), .min = 0, .max = 4,
     .bad = "is not a level 0..4"},
    {.kind = LS_CLI_REAL, .name = "--x", .arg = "X", .help = "a number", F(x), .lo = 0, .hi = 1, .bad = "is not in [0, 1]"},
    {.kind = LS_CLI_U64, .name = "--seed", .arg = "N", .help = "a seed", F(seed), .min = 0, .max = SIZE_MAX,
     .bad = "is not a decimal integer"},
    {.kind = LS_CLI_CHOICE, .name = "--mode", .arg = "a|b|c", .help = "a mode [] (the rest)", .dflt = "a", F(mode)},
    {.kind = LS_CLI_PICK, .name = "--fault", .arg = "fa", .help = "fault a", .bad = "is not a fault", F(fault_a)},
    {.kind = LS_CLI_PICK, .name = "--fault", .arg = "fb", .help = "fault b", F(fault_b)},
    {.kind = LS_CLI_CUSTOM, .name = "--custom", .arg = "ok", .help = "custom", .parse = parse_custom},
    {.like = "--quiet", .name = "--quiet", F(quiet)},
    {.like = "--help", .name = "--help", F(help)},
};
#undef F
#define N_ROWS (sizeof ROWS / sizeof ROWS[0])

/* Parses the words of line (space-separated) into *a: the exit code, err the message. */
static int run(const char *line, args *a, const char **pos, size_t max_pos, size_t *n_pos, char *err, size_t n) {
    static char buf[512];
    char *argv[32] = {"t"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && argc < 32; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    memset(a, 0, sizeof *a);
    unsigned char given[N_ROWS] = {0};
    ls_cli_parser p = {.table = {ROWS, N_ROWS}, .pos = pos, .max_pos = max_pos, .n_pos = n_pos, .given = given,
                       .once = 1};
    err[0] = 0;
    return ls_cli_parse(&p, a, argc, argv, 1, err, n);
}

#define BAD(line, needle)                                                                   \
    do {                                                                                    \
        args a_;                                                                            \
        char e_[256];                                                                       \
        cr_expect_eq(run(line, &a_, NULL, 0, NULL, e_, sizeof e_), 2, "%s: accepted", line); \
        cr_expect(strstr(e_, needle) != NULL, "%s: '%s' lacks '%s'", line, e_, needle);      \
    } while (0)

Test(cli_opts, values_by_kind) {
    args a;
    char err[256];
    const char *pos[2];
    size_t n_pos = 0;
    cr_assert_eq(run("--out d --key k1 --key k2 --count 10 --bytes 48GiB --level 0 --x .5 --seed 18446744073709551615 "
                     "--mode c --fault fb --custom ok --quiet R1 R2",
                     &a, pos, 2, &n_pos, err, sizeof err),
                 0, "%s", err);
    cr_expect_str_eq(a.out, "d");
    cr_expect_eq(a.n_keys, 2);
    cr_expect_str_eq(a.keys[1], "k2");
    cr_expect_eq(a.count, 10);
    cr_expect_eq(a.bytes, (size_t)48 << 30);
    cr_expect_eq(a.x, 0.5);
    cr_expect_eq(a.seed, UINT64_MAX);
    cr_expect_eq(a.mode, 2);
    cr_expect(a.fault_b && !a.fault_a);
    cr_expect(a.custom && a.quiet);
    cr_expect_eq(n_pos, 2);
    cr_expect_str_eq(pos[1], "R2");
    cr_assert_eq(run("--bytes 96GB", &a, NULL, 0, NULL, err, sizeof err), 0, "%s", err);
    cr_expect_eq(a.bytes, (size_t)96000000000ull);
    /* --help stops the reading: what follows is not looked at */
    cr_assert_eq(run("--help --count 99", &a, NULL, 0, NULL, err, sizeof err), 0, "%s", err);
    cr_expect(a.help && a.count == 0);
}

Test(cli_opts, errors_name_the_argument) {
    BAD("--count 0", "--count: '0' is not an integer in [1, 10]");
    BAD("--count 11", "--count");
    BAD("--count -1", "--count");
    BAD("--count +5", "--count");
    BAD("--count 0x5", "--count");
    BAD("--level 5", "--level: '5' is not a level 0..4");
    BAD("--x nan", "--x");
    BAD("--x 1e9", "--x");
    BAD("--x 0x1p-3", "--x");
    BAD("--bytes 1000", "--bytes: '1000' is not a byte count >= 1 KiB");
    BAD("--bytes 1e9", "--bytes");
    BAD("--bytes 12XB", "--bytes");
    BAD("--bytes 1.5B", "--bytes");
    BAD("--seed 18446744073709551616", "--seed");
    BAD("--mode d", "--mode: 'd' is not a, b or c");
    BAD("--fault fc", "--fault: 'fc' is not a fault (fa, fb)");
    BAD("--custom no", "--custom: 'no' is not ok");
    BAD("--key a --key b --key c", "--key: at most 2");
    BAD("--out a --out b", "--out: given twice");
    BAD("--count", "--count: needs a value");
    BAD("--frobnicate 1", "unknown option '--frobnicate'");
    BAD("extra", "unexpected argument 'extra'");
}

Test(cli_opts, help_from_the_table) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ls_cli_usage(f, (ls_cli_table){ROWS, N_ROWS}, NULL, 0, 20);
    fclose(f);
    cr_expect(strstr(buf, "usage: t [options]\n") == buf, "%s", buf);
    cr_expect(strstr(buf, "  --count N         a count [3]\n") != NULL, "%s", buf);
    cr_expect(strstr(buf, "  --mode a|b|c      a mode [a] (the rest)\n") != NULL, "%s", buf);
    cr_expect(strstr(buf, "  --fault fa        fault a\n") != NULL, "%s", buf);
    /* the shared rows' help, once for every executable */
    cr_expect(strstr(buf, "  --quiet           errors only: no progress on stderr, no summary on stdout\n") != NULL,
              "%s", buf);
    cr_expect(strstr(buf, "  --key PUB         a public key") != NULL, "%s", buf);
    free(buf);
}

/* The faults a table can hold, each caught by ls_cli_check_table and refused by ls_cli_parse. */
Test(cli_opts, broken_tables_are_refused) {
    char err[256];
    const ls_cli_opt unknown_like[] = {{.like = "--no-such-option", .name = "--x"}};
    cr_expect_eq(ls_cli_check_table((ls_cli_table){unknown_like, 1}, NULL, 0, err, sizeof err), -1);
    cr_expect(strstr(err, "--no-such-option") != NULL, "%s", err);
    args a;
    char *argv[] = {"t", "--x", "1"};
    ls_cli_parser p = {.table = {unknown_like, 1}};
    cr_expect_eq(ls_cli_parse(&p, &a, 3, argv, 1, err, sizeof err), 2);
    cr_expect(strstr(err, "option table:") != NULL, "%s", err);
    const ls_cli_opt twice[] = {{.kind = LS_CLI_FLAG, .name = "--q", .help = "a"},
                                {.kind = LS_CLI_FLAG, .name = "--q", .help = "b", .off = 4}};
    cr_expect_eq(ls_cli_check_table((ls_cli_table){twice, 2}, NULL, 0, err, sizeof err), -1);
    cr_expect(strstr(err, "--q: two rows") != NULL, "%s", err);
    const ls_cli_opt no_fn[] = {{.kind = LS_CLI_CUSTOM, .name = "--c", .arg = "V", .help = "c"}};
    cr_expect_eq(ls_cli_check_table((ls_cli_table){no_fn, 1}, NULL, 0, err, sizeof err), -1);
    cr_expect_eq(ls_cli_check_table((ls_cli_table){ROWS, N_ROWS}, NULL, 0, err, sizeof err), 0, "%s", err);
}

/* A row .like another executable's takes its kind, range and help, keeps its own field and default:
 * longstraw-plan's --group is longstraw-train's. */
Test(cli_opts, like_the_trainer) {
    char err[256];
    const ls_cli_table train = ls_train_options();
    cr_assert_eq(ls_cli_check_table(train, NULL, 0, err, sizeof err), 0, "the trainer's table: %s", err);
    typedef struct {
        size_t G;
        int grad;
    } plan_args;
    const ls_cli_opt rows[] = {{.like = "--group", .name = "--group", .dflt = "1", .off = offsetof(plan_args, G)},
                               {.like = "--grad-mode", .name = "--grad-mode", .off = offsetof(plan_args, grad)}};
    ls_cli_opt r;
    cr_assert_eq(ls_cli_resolve(&rows[0], &train, 1, &r), 0);
    cr_expect_eq(r.kind, LS_CLI_SIZE);
    cr_expect_eq(r.min, 1);
    cr_expect_eq(r.max, 4096);
    cr_expect_str_eq(r.help, "group size");
    cr_expect_str_eq(r.dflt, "1");
    cr_expect_eq(r.off, offsetof(plan_args, G));
    plan_args pa = {0};
    ls_cli_parser p = {.table = {rows, 2}, .shared = &train, .n_shared = 1};
    char *ok[] = {"plan", "--group", "4096", "--grad-mode", "full"};
    cr_assert_eq(ls_cli_parse(&p, &pa, 5, ok, 1, err, sizeof err), 0, "%s", err);
    cr_expect(pa.G == 4096 && pa.grad == 1);
    char *bad[] = {"plan", "--group", "4097"};
    cr_expect_eq(ls_cli_parse(&p, &pa, 3, bad, 1, err, sizeof err), 2);
    cr_expect(strstr(err, "--group: '4097' is not an integer in [1, 4096]") != NULL, "%s", err);
}
