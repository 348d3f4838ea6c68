/* fuzz_rollouts.c - libFuzzer target for the rollouts JSONL readers, vocab
 * 256, a 3000-byte line limit so that the limit is reached within -max_len.
 *
 * 1. The one-line parser (ls_batch_parse_rollouts) on the input: an
 *    accepted batch must hold the documented invariants (ids < vocab,
 *    lengths >= 1, finite numbers, log-probs <= 0, zero advantages, zero
 *    old / reference log-probs unless supplied) and must survive a batch
 *    dump: formatted with a fixed config and parsed back by
 *    ls_batch_parse_dump it is equal field by field.
 * 2. The streaming reader (ls_rollouts_open_fd on a pipe holding the whole
 *    input, so that the end is a real end of input) against the target's
 *    own split of the input at '\n': every line that is not blank gives,
 *    in order, what the one-line parser gives for that line alone (equal
 *    batch and flags, or the same status with the error naming "fuzz: line
 *    N" for the line's 1-based number), a line over the limit is refused
 *    as such (even a blank one), the reader stops at the first refusal, and it never holds
 *    more than limit + 1 bytes past what it returned.  The read(2) size and
 *    the limit vary with the input's length (1, 2, 7, 64 bytes or 64 KiB a
 *    read; limit 3000 or 97) so that lines are split across reads.
 * Traps otherwise. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receipts/format/json_util.h"
#include "tests/fuzz/fuzz_util.h"

#define VOCAB 256
#define MAX_LINE 3000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ls_model_config *tiny_config(void) {
    static ls_model_config c;
    static int done;
    static const char text[] =
        "{\"family\":\"hybrid\",\"vocab\":256,\"d_model\":64,\"n_layers\":8,\"ffn_dim\":128,"
        "\"rms_eps\":1e-6,\"rope_theta\":10000,\"gdn_hk\":2,\"gdn_hv\":4,\"gdn_dk\":16,\"gdn_dv\":16,"
        "\"conv_kernel\":4,\"attn_heads\":4,\"attn_kv_heads\":2,\"head_dim\":32,\"rope_dim\":8}";
    if (!done) {
        char err[512];
        cJSON *doc = NULL;
        CHECK(ls_json_parse(text, sizeof text - 1, "tiny", &doc, err, sizeof err) == LS_OK);
        CHECK(ls_config_from_json(&c, doc, "tiny", err, sizeof err) == LS_OK);
        cJSON_Delete(doc);
        done = 1;
    }
    return &c;
}

static void check_accepted(const ls_batch *b) {
    fuzz_check_batch(b, VOCAB);
    for (size_t i = 0; i < b->G; i++) {
        CHECK(b->adv[i] == 0);
        for (size_t t = 0; t < b->R[i]; t++) {
            CHECK(b->ref_supplied || b->ref_lp[i][t] == 0);
            CHECK(b->old_supplied || b->old_lp[i][t] == 0);
        }
    }
}

static void single_line(const uint8_t *data, size_t size) {
    const ls_model_config *cfg = tiny_config();
    char err[512];
    ls_batch *b = NULL, *b2 = NULL;
    err[0] = '\0';
    ls_status st = ls_batch_parse_rollouts(&b, (const char *)data, size, "fuzz", VOCAB, MAX_LINE, err, sizeof err);
    if (st != LS_OK) {
        CHECK(b == NULL);
        fuzz_check_refusal(st, err);
        return;
    }
    check_accepted(b);
    ls_objective obj, obj2;
    ls_model_config cfg2;
    ls_objective_defaults(&obj);
    char *text = NULL;
    size_t len = 0;
    CHECK(ls_batch_format_dump(b, cfg, &obj, &text, &len, err, sizeof err) == LS_OK);
    CHECK(ls_batch_parse_dump(&b2, &cfg2, &obj2, text, len, "dump", err, sizeof err) == LS_OK);
    CHECK(fuzz_batch_equal(b, b2) && fuzz_cfg_equal(cfg, &cfg2) && fuzz_obj_equal(&obj, &obj2));
    free(text);
    ls_batch_free(b2);
    ls_batch_free(b);
}

static int blank(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* "fuzz: line N: " starts err. */
static int names_line(const char *err, size_t line) {
    char want[64];
    int n = snprintf(want, sizeof want, "fuzz: line %zu: ", line);
    return strncmp(err, want, (size_t)n) == 0;
}

static void stream(const uint8_t *data, size_t size) {
    static const size_t reads[] = {1, 2, 7, 64, 0};
    int fds[2];
    if (size > 32768 || pipe(fds) != 0) return;
    /* the whole input goes into the pipe first (it fits: at least 64 KiB on
     * Linux); non-blocking so that a smaller pipe skips instead of hanging */
    int fl = fcntl(fds[1], F_GETFL);
    int whole = fl != -1 && fcntl(fds[1], F_SETFL, fl | O_NONBLOCK) == 0 &&
                (size == 0 || write(fds[1], data, size) == (ssize_t)size);
    close(fds[1]);
    if (!whole) {
        close(fds[0]);
        return;
    }
    size_t cap = size % 3 == 2 ? 97 : MAX_LINE, rs = reads[size % 5];
    ls_rollouts_reader *r = NULL;
    char err[512], err1[512];
    CHECK(ls_rollouts_open_fd(&r, fds[0], "fuzz", VOCAB, cap, err, sizeof err) == LS_OK);
    if (rs) ls_rollouts_set_read_size(r, rs);
    size_t off = 0, line = 0;
    ls_status stopped = LS_OK;
    while (off < size) {
        const uint8_t *nl = memchr(data + off, '\n', size - off);
        size_t len = nl ? (size_t)(nl - (data + off)) : size - off, next = off + len + (nl != NULL);
        line++;
        if (len <= cap && blank(data + off, len)) { /* an over-long line is refused, blank or not */
            off = next;
            continue;
        }
        ls_batch *want = NULL, *got = NULL;
        ls_status ws = LS_ERR_FORMAT;
        if (len <= cap) ws = ls_batch_parse_rollouts(&want, (const char *)data + off, len, "fuzz", VOCAB, cap,
                                                     err1, sizeof err1);
        err[0] = '\0';
        ls_status gs = ls_rollouts_next(r, &got, err, sizeof err);
        CHECK(gs == ws);
        if (gs != LS_OK) {
            CHECK(got == NULL && names_line(err, line) && ls_rollouts_line(r) == line);
            if (len > cap) {
                CHECK(strstr(err, "longer than") != NULL);
                CHECK(ls_rollouts_bytes_read(r) <= (uint64_t)off + cap + 1);
            }
            stopped = gs;
            break;
        }
        CHECK(got != NULL && fuzz_batch_equal(want, got) && ls_rollouts_line(r) == line);
        CHECK(want->old_supplied == got->old_supplied && want->ref_supplied == got->ref_supplied);
        CHECK(ls_rollouts_bytes_read(r) <= (uint64_t)next + cap + 1);
        check_accepted(got);
        ls_batch_free(want);
        ls_batch_free(got);
        off = next;
    }
    ls_batch *b = (ls_batch *)1;
    ls_status st = ls_rollouts_next(r, &b, err, sizeof err);
    CHECK(b == NULL && st == stopped); /* the clean end, or the same refusal again */
    if (stopped == LS_OK) CHECK(ls_rollouts_bytes_read(r) == size);
    ls_rollouts_close(r);
    close(fds[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    single_line(data, size);
    stream(data, size);
    return 0;
}
