/* fuzz_cli_opts.c - libFuzzer target for the option-table parser
 * (common/cli_opts.h) over longstraw-train's table: the input is a command
 * line, its words separated by NUL bytes.  Every command line is either
 * read (0) or refused (2) with a message that names one of its words (or
 * says what is missing); never anything else, never a crash.  Traps
 * otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/cli_opts.h"
#include "trainer/run/train_args.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char buf[4097];
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[64] = {"longstraw-train"};
    int argc = 1;
    for (size_t at = 0; at < size && argc < 64; at += strlen(buf + at) + 1) argv[argc++] = buf + at;
    static ls_train_args a;
    memset(&a, 0, sizeof a);
    unsigned char given[256] = {0};
    const ls_cli_table t = ls_train_options();
    CHECK(t.n <= sizeof given);
    const ls_cli_parser p = {.table = t, .given = given, .once = 1};
    char err[512];
    err[0] = 1;
    int rc = ls_cli_parse(&p, &a, argc, argv, 1, err, sizeof err);
    CHECK(rc == 0 || rc == 2);
    if (rc == 2) {
        CHECK(memchr(err, 0, sizeof err) != NULL && err[0] != 0);
        int named = 0; /* the message names a word of the command line */
        for (int i = 1; i < argc && !named; i++) named = strstr(err, argv[i][0] ? argv[i] : "''") != NULL;
        CHECK(named || strstr(err, "needs a value") || strstr(err, "--fault kill-rank"));
    }
    return 0;
}
