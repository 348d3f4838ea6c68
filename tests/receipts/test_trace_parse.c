/* test_trace_parse.c - the reader's own strict parser (ls_trace_lex_parse,
 * receipts/reading/trace_lex.h) against the independent reference it replaced on
 * the hot path: ls_trace_lex_json (tokens), cJSON's parser (grammar and
 * values), whitespace-only tail, ls_trace_lex_repeated_key.  Every input
 * must get the same verdict; when both accept, the same tree (types, keys
 * and their order, strings, doubles bit for bit).  Hand-picked edge cases,
 * then 300,000 deterministic mutations of real event lines; the first
 * disagreement is reported with its input. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receipts/reading/trace_lex.h"

/* The reference: NULL when it refuses p[0..n), else a cJSON tree. */
static cJSON *ref_parse(const char *p, size_t n) {
    size_t col = 0;
    if (ls_trace_lex_json((const unsigned char *)p, n, &col) != NULL) return NULL;
    const char *endp = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(p, n, &endp, 0);
    if (j == NULL) return NULL;
    while (endp < p + n && (*endp == ' ' || *endp == '\t' || *endp == '\r')) endp++;
    if (endp != p + n || ls_trace_lex_repeated_key(j) != NULL) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* NULL when a and b are the same tree, else where they differ. */
static const char *tree_diff(const cJSON *a, const cJSON *b) {
    if ((a->type & 0xFF) != (b->type & 0xFF)) return "type";
    if ((a->string == NULL) != (b->string == NULL) || (a->string && strcmp(a->string, b->string) != 0))
        return "key";
    if (cJSON_IsString(a) && strcmp(a->valuestring, b->valuestring) != 0) return "string value";
    if (cJSON_IsNumber(a)) {
        if (memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) != 0) return "number value";
        if (a->valueint != b->valueint) return "valueint";
    }
    if (cJSON_IsTrue(a) != cJSON_IsTrue(b)) return "bool";
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next) {
        const char *d = tree_diff(x, y);
        if (d) return d;
    }
    if (x || y) return "member count";
    if (a->child && a->child->prev != NULL && b->child->prev != NULL &&
        (a->child->prev->next != NULL || b->child->prev->next != NULL))
        return "first child's prev is not the last child";
    return NULL;
}

static ls_trace_pool pool;
static long n_accepted, n_refused;

/* Compares one input; returns NULL or a description of the disagreement. */
static const char *compare(const char *in, size_t n) {
    cJSON *ref = ref_parse(in, n);
    char *buf = malloc(n + 1);
    cr_assert_not_null(buf);
    memcpy(buf, in, n);
    buf[n] = 0;
    ls_trace_pool_reset(&pool);
    size_t at = 0;
    cJSON *mine = NULL;
    const char *dup = NULL;
    const char *why = ls_trace_lex_parse(&pool, buf, n, &at, &mine, &dup);
    const char *d = NULL;
    if (ref == NULL && why == NULL) d = "accepted, the reference refuses";
    else if (ref != NULL && why != NULL) d = "refused, the reference accepts";
    else if (ref != NULL && (d = tree_diff(ref, mine)) != NULL) {
    }
    if (why != NULL && at > n) d = "error column past the end";
    if (why != NULL && strcmp(why, "a key repeats") == 0 && dup == NULL) d = "repeated key not named";
    if (ref) n_accepted++;
    else n_refused++;
    cJSON_Delete(ref);
    free(buf);
    return d;
}

#define EXPECT_SAME(s)                                                                             \
    do {                                                                                           \
        const char *d_ = compare((s), strlen(s));                                                  \
        cr_expect(d_ == NULL, "input '%s': %s", (s), d_ ? d_ : "");                                \
    } while (0)

Test(trace_parse, edge_cases) {
    static const char *const CASES[] = {
        "{}", "[]", "{ }", " {\"a\":1} ", "\t{\"a\":1}\r", "{\"a\":1}x", "{\"a\":1}}", "", " ", "{",
        "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[,1]", "{,}", "{\"a\" : 1 , \"b\" : [ ] }",
        "{\"a\":1,\"a\":2}", "{\"a\":{\"b\":1,\"b\":2}}", "[{\"x\":1},{\"x\":1}]", "{\"a\":1,\"A\":2}",
        "1", "-0", "0", "00", "01", "-", "1.", ".5", "1e", "1e+", "1E-7", "1.5e300", "1e999", "-1e999",
        "123456789012345", "1234567890123456", "9007199254740993", "-9007199254740993", "2147483647",
        "2147483648", "-2147483649", "0.1", "1.0000000000000002", "3.14159265358979323846",
        "1234567890123456789012345678901234567890123456789012345678901234567890",
        "[123456789012345678901234567890123456789012345678901234567890123]",
        "[1234567890123456789012345678901234567890123456789012345678901234]",
        "true", "false", "null", "tru", "truex", "[true,false,null]", "nul", "True",
        "\"\"", "\"a\\\"b\"", "\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\x\"", "\"\\u00e9\"", "\"\\u00E9\"",
        "\"\\u0000x\"", "\"\\u12\"", "\"\\u12g4\"", "\"\\ud83d\\ude00\"", "\"\\ud83d\"", "\"\\ude00\"",
        "\"\\ud83dx\"", "\"\\ud83d\\u0041\"", "\"\xc3\xa9\"", "\"\xc3\"", "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"", "\"\xe0\x80\x80\"", "\"\x01\"", "\"abc", "\"\\", "\xef\xbb\xbf{}",
        "{\"k\xc3\xa9y\":\"v\\u20ac\"}", "{\"\":1}", "{\"a\":1}\n", "[1 2]", "{\"a\" 1}", "{1:2}",
        "[\"a\",{\"b\":[1,{\"c\":null}]},-1.5e-3]",
        ("{\"v\":1,\"rank\":0,\"seq\":7,\"ts_ns\":123,\"ev\":\"layer_end\",\"phase\":\"capture\","
         "\"out_norm\":31.79800233791704}"),
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) EXPECT_SAME(CASES[i]);
    ls_trace_pool_free(&pool);
}

/* Nesting up to cJSON's limit (1000) is accepted, one more level refused. */
Test(trace_parse, nesting_limit) {
    for (int depth = 998; depth <= 1002; depth++) {
        char *s = malloc(2 * (size_t)depth + 1);
        cr_assert_not_null(s);
        memset(s, '[', (size_t)depth);
        memset(s + depth, ']', (size_t)depth);
        s[2 * depth] = 0;
        const char *d = compare(s, 2 * (size_t)depth);
        cr_expect(d == NULL, "depth %d: %s", depth, d ? d : "");
        free(s);
    }
    ls_trace_pool_free(&pool);
}

/* An object with many members (the sort path of the repeated-key search),
 * with and without a repeat, and long strings (several pool blocks). */
Test(trace_parse, large_objects) {
    for (int members = 10; members <= 3000; members *= 3) {
        for (int rep = 0; rep < 2; rep++) {
            size_t cap = (size_t)members * 40 + 16, len = 0;
            char *s = malloc(cap);
            cr_assert_not_null(s);
            len += (size_t)snprintf(s + len, cap - len, "{");
            for (int m = 0; m < members; m++)
                len += (size_t)snprintf(s + len, cap - len, "%s\"key_%d\":[%d,\"x\"]", m ? "," : "",
                                        rep && m == members - 1 ? members / 2 : m, m);
            len += (size_t)snprintf(s + len, cap - len, "}");
            const char *d = compare(s, len);
            cr_expect(d == NULL, "%d members, repeat %d: %s", members, rep, d ? d : "");
            free(s);
        }
    }
    ls_trace_pool_free(&pool);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* Real trace lines (as the writer writes them), mutated: bytes replaced by
 * JSON-significant ones, deleted, inserted or duplicated spans. */
Test(trace_parse, mutations_agree_with_the_reference, .timeout = 120) {
    static const char *const SEEDS[] = {
        "{\"v\":1,\"rank\":1,\"seq\":2,\"ts_ns\":582358,\"ev\":\"layer_end\",\"phase\":\"capture\",\"step\":0,"
        "\"member\":-1,\"layer\":-1,\"kind\":\"embed\",\"dir\":\"fwd\",\"tokens\":16,\"live_bytes\":3355112,"
        "\"peak_bytes\":3355112,\"wall_ns\":4247,\"out_norm\":31.79800233791704}",
        "{\"v\":1,\"rank\":1,\"seq\":36,\"ts_ns\":127896717,\"ev\":\"memory\",\"step\":0,\"phase\":\"capture\","
        "\"categories\":{\"fixed_weights\":{\"live\":1672128,\"peak\":1672128},\"adapters\":{\"live\":141312,"
        "\"peak\":141312}},\"total_live\":1813440,\"total_peak\":1813440,\"rss_peak\":15000000}",
        "{\"v\":1,\"rank\":0,\"seq\":0,\"ts_ns\":58316,\"ev\":\"collective\",\"group\":\"cp\",\"gseq\":4,"
        "\"op\":\"allreduce\",\"red\":\"max\",\"count\":1,\"dtype\":\"i64\",\"bytes\":8,\"purpose\":\"open\"}",
        "{\"v\":1,\"rank\":0,\"seq\":9,\"ts_ns\":9,\"ev\":\"error\",\"code\":-3,\"status\":\"x\","
        "\"message\":\"caf\xc3\xa9 \\u00e9\\ud83d\\ude00 \\\"q\\\" \\\\ \\n\",\"lr\":1e-3,\"ok\":true,"
        "\"no\":false,\"nil\":null,\"arr\":[1,-2.5E+3,[],{}]}",
    };
    static const char ALPHABET[] = "{}[]\",:\\u0123456789.eE+-tfnrl \t\rabx\x01\x7f\x80\xc3\xa9\xed\xf4";
    const size_t NA = sizeof ALPHABET - 1, NS = sizeof SEEDS / sizeof SEEDS[0];
    char buf[4096];
    long disagreements = 0;
    for (long it = 0; it < 300000; it++) {
        const char *seed = SEEDS[(size_t)it % NS];
        size_t n = strlen(seed);
        memcpy(buf, seed, n);
        int edits = 1 + (int)(next_rand() % 4);
        for (int e = 0; e < edits && n > 0; e++) {
            size_t pos = next_rand() % n;
            switch (next_rand() % 4) {
            case 0: buf[pos] = ALPHABET[next_rand() % NA]; break;
            case 1: memmove(buf + pos, buf + pos + 1, n - pos - 1); n--; break;
            case 2:
                if (n + 1 < sizeof buf) {
                    memmove(buf + pos + 1, buf + pos, n - pos);
                    buf[pos] = ALPHABET[next_rand() % NA];
                    n++;
                }
                break;
            default: {
                size_t len = 1 + next_rand() % 24;
                if (pos + len > n) len = n - pos;
                if (n + len < sizeof buf) {
                    memmove(buf + pos + len, buf + pos, n - pos);
                    n += len;
                }
            }
            }
        }
        const char *d = compare(buf, n);
        if (d != NULL && disagreements++ == 0)
            cr_expect(d == NULL, "mutation %ld: '%.*s': %s", it, (int)n, buf, d);
    }
    cr_expect(disagreements == 0, "%ld of 300000 mutations disagree with the reference", disagreements);
    cr_expect(n_accepted > 1000 && n_refused > 1000, "both verdicts exercised (%ld accepted, %ld refused)",
              n_accepted, n_refused);
    ls_trace_pool_free(&pool);
}

/* Numbers with many significant digits (as %.17g writes doubles) take the
 * parser's exact integer paths instead of strtod: random decimals of 1 to
 * 20 digits with the point anywhere and exponents, and every double's
 * %.17g / %.16g / %.15g text, against strtod, bit for bit. */
Test(trace_parse, long_decimals_as_strtod) {
    uint64_t x = 88172645463325252u;
    char in[64], *end;
    long checked = 0, worst = 0;
    for (long t = 0; t < 2000000; t++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int kind = (int)(x % 4);
        if (kind == 0) { /* a random double's shortest-ish text */
            uint64_t bits = x * 2862933555777941757u + 3037000493u;
            double d;
            memcpy(&d, &bits, sizeof d);
            if (!isfinite(d)) continue;
            snprintf(in, sizeof in, "%.*g", 15 + (int)(x >> 60) % 3, d);
        } else { /* digits, a point, maybe an exponent */
            int nd = 1 + (int)((x >> 8) % 20), point = (int)((x >> 16) % (unsigned)(nd + 1));
            size_t k = 0;
            if ((x >> 24) & 1) in[k++] = '-';
            uint64_t y = x;
            for (int i = 0; i < nd; i++) {
                y = y * 6364136223846793005u + 1442695040888963407u;
                char dg = (char)('0' + (y >> 60) % 10);
                if (i == 0 && dg == '0' && point != 1) dg = '1'; /* no leading zero before more digits */
                if (i == point && i > 0) in[k++] = '.';
                in[k++] = dg;
            }
            if (kind == 3) k += (size_t)snprintf(in + k, sizeof in - k, "e%d", (int)((x >> 32) % 50) - 25);
            in[k] = 0;
        }
        size_t n = strlen(in);
        char buf[64];
        memcpy(buf, in, n + 1);
        ls_trace_pool_reset(&pool);
        size_t at = 0;
        cJSON *mine = NULL;
        const char *dup = NULL;
        const char *why = ls_trace_lex_parse(&pool, buf, n, &at, &mine, &dup);
        if (why != NULL) continue; /* a form JSON refuses (e.g. "1." ): the mutation test covers those */
        double want = strtod(in, &end);
        cr_assert(cJSON_IsNumber(mine), "%s", in);
        cr_assert(memcmp(&want, &mine->valuedouble, sizeof want) == 0, "%s: parsed %.17g, strtod %.17g", in,
                  mine->valuedouble, want);
        checked++;
        if ((long)n > worst) worst = (long)n;
    }
    ls_trace_pool_free(&pool);
    cr_log_info("long decimals: %ld numbers (up to %ld characters) equal to strtod's", checked, worst);
    cr_assert_gt(checked, 1000000);
}
