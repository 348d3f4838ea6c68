/* test_safetensors.c - round trips, BF16 rounding, every malformed case the
 * reader claims to reject, truncation/corruption, atomic writes, determinism.
 *
 * Independent references: hand-computed BF16 bit patterns, a fixture written
 * by a Python script that shares no code with the library
 * (tests/fixtures/safetensors/make_fixture.py), and hand-written expected
 * bytes for a tiny file. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "receipts/format/digest.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/base/safetensors.h"

#define FIXTURE LS_SOURCE_DIR "/tests/fixtures/safetensors/mixed.safetensors"

/* ---- helpers -------------------------------------------------------------- */

static char tmpdir[4096];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/st_test_XXXXXX", LS_BINARY_DIR);
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}

static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (d == NULL)
        return;
    struct dirent *de;
    char p[8192];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
        if (remove(p) != 0)
            rmdir(p);
    }
    closedir(d);
    rmdir(tmpdir);
}

/* Number of entries in tmpdir whose name contains `part`. */
static int count_entries(const char *part)
{
    DIR *d = opendir(tmpdir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, part) != NULL)
            n++;
    closedir(d);
    return n;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void tmp_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", tmpdir, name);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static void expect_tracker_empty(void)
{
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_expect_eq(s.live_total, 0, "tracker still holds %zu bytes (leak)", s.live_total);
}

/* ---- BF16 ------------------------------------------------------------------ */

Test(safetensors, bf16_rounding_hand_computed)
{
    /* 1.0 = 0x3F80; one BF16 ulp at 1.0 is 2^-7 */
    cr_expect_eq(ls_safetensors_bf16_from_f32(1.0f), 0x3F80);
    cr_expect_eq(ls_safetensors_bf16_from_f32(-2.0f), 0xC000);
    /* exact midpoints: ties to even */
    cr_expect_eq(ls_safetensors_bf16_from_f32(1.0f + 0x1p-8f), 0x3F80);      /* down to even */
    cr_expect_eq(ls_safetensors_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3F82);  /* up to even */
    cr_expect_eq(ls_safetensors_bf16_from_f32(-(1.0f + 0x1p-8f)), 0xBF80);
    /* just above / below a midpoint */
    cr_expect_eq(ls_safetensors_bf16_from_f32(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    cr_expect_eq(ls_safetensors_bf16_from_f32(1.0f + 0x1p-8f - 0x1p-20f), 0x3F80);
    /* specials */
    cr_expect_eq(ls_safetensors_bf16_from_f32(INFINITY), 0x7F80);
    cr_expect_eq(ls_safetensors_bf16_from_f32(-INFINITY), 0xFF80);
    cr_expect_eq(ls_safetensors_bf16_from_f32(-0.0f), 0x8000);
    uint16_t qn = ls_safetensors_bf16_from_f32(NAN);
    cr_expect((qn & 0x7F80) == 0x7F80 && (qn & 0x7F) != 0, "NaN -> 0x%04x", qn);
    /* a NaN whose payload sits only in the low 16 bits must stay NaN */
    uint32_t snan_bits = 0x7F800001u;
    float snan;
    memcpy(&snan, &snan_bits, 4);
    uint16_t b = ls_safetensors_bf16_from_f32(snan);
    cr_expect((b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0, "low-payload NaN -> 0x%04x", b);
    /* overflow: BF16 max is 0x7F7F = (2 - 2^-7) * 2^127; FLT_MAX rounds to Inf */
    cr_expect_eq(ls_safetensors_bf16_from_f32(FLT_MAX), 0x7F80);
    cr_expect_eq(ls_safetensors_bf16_from_f32(0x1.fep127f), 0x7F7F);
    /* smallest subnormal BF16 is 2^-133 = 0x0001; half of it ties to 0 */
    cr_expect_eq(ls_safetensors_bf16_from_f32(0x1p-133f), 0x0001);
    cr_expect_eq(ls_safetensors_bf16_from_f32(0x1p-134f), 0x0000);
    cr_expect_eq(ls_safetensors_bf16_from_f32(0x1.8p-133f), 0x0002); /* 1.5 ulp -> even */

    cr_expect_eq(ls_safetensors_bf16_to_f32(0x3F81), 1.0f + 0x1p-7f);
    cr_expect_eq(ls_safetensors_bf16_to_f32(0x0001), 0x1p-133f);
}

Test(safetensors, bf16_from_double_rounds_once)
{
    /* 1 + 2^-8 + 2^-30: rounding to float first gives the midpoint 1 + 2^-8,
     * which would then tie down to 1.0; the correct BF16 is 1 + 2^-7. */
    double x = 1.0 + 0x1p-8 + 0x1p-30;
    cr_expect_eq(ls_safetensors_bf16_from_f64(x), 0x3F81);
    cr_expect_eq(ls_safetensors_bf16_from_f64(-x), 0xBF81);
    cr_expect_eq(ls_safetensors_bf16_from_f64(1.0 + 0x1p-8 - 0x1p-30), 0x3F80);
    cr_expect_eq(ls_safetensors_bf16_from_f64(1.0 + 0x1p-8), 0x3F80); /* exact tie */
    cr_expect_eq(ls_safetensors_bf16_from_f64(1.0 + 3 * 0x1p-8), 0x3F82);
    /* beyond float range */
    cr_expect_eq(ls_safetensors_bf16_from_f64(1e300), 0x7F80);
    cr_expect_eq(ls_safetensors_bf16_from_f64(-1e300), 0xFF80);
    cr_expect_eq(ls_safetensors_bf16_from_f64((double)FLT_MAX), 0x7F80);
    cr_expect_eq(ls_safetensors_bf16_from_f64(0x1.fep127), 0x7F7F);
    /* below float's subnormal range: tiny values go to signed zero ... */
    cr_expect_eq(ls_safetensors_bf16_from_f64(1e-300), 0x0000);
    cr_expect_eq(ls_safetensors_bf16_from_f64(-1e-300), 0x8000);
    /* ... and just above half the smallest BF16 subnormal rounds up */
    cr_expect_eq(ls_safetensors_bf16_from_f64(0x1p-134 + 0x1p-160), 0x0001);
    cr_expect_eq(ls_safetensors_bf16_from_f64(0x1p-134), 0x0000);
    uint16_t qn = ls_safetensors_bf16_from_f64(-NAN);
    cr_expect((qn & 0x7F80) == 0x7F80 && (qn & 0x7F) != 0 && (qn & 0x8000), "-NaN -> 0x%04x", qn);
    cr_expect_eq(ls_safetensors_bf16_from_f64(INFINITY), 0x7F80);

    /* agreement with the float path wherever the double is a float */
    for (uint32_t u = 0; u < 0xFFFFFFFFu - 0x10001u; u += 0x10001u) {
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f))
            continue;
        cr_assert_eq(ls_safetensors_bf16_from_f64((double)f), ls_safetensors_bf16_from_f32(f),
                     "bits 0x%08x", u);
    }
}

/* ---- round trips ----------------------------------------------------------- */

static const double vals[] = {0.0, -0.0, 1.0, -1.5, 0.1, 3.14159265358979, 1e-3,
                              -7e5, 65504.0, 1e-40, 2.5e38, 0.333};
#define NVALS (sizeof vals / sizeof vals[0])

Test(safetensors, round_trip_all_dtypes, .init = make_tmpdir, .fini = remove_tmpdir)
{
    static const ls_safetensors_dtype dt[3] = {LS_SAFETENSORS_F64, LS_SAFETENSORS_F32,
                                               LS_SAFETENSORS_BF16};
    static const char *dname[3] = {"f64", "f32", "bf16"};
    float fvals[NVALS];
    for (size_t i = 0; i < NVALS; i++)
        fvals[i] = (float)vals[i];
    uint64_t shape34[2] = {3, 4};
    uint64_t shape0[1] = {0};
    uint64_t shape203[3] = {2, 0, 3};
    double scalar = -42.75;
    float fscalar = 6.5f;

    ls_safetensors_writer *w = NULL;
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    char name[64];
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "d.%s.mat", dname[k]);
        cr_assert_eq(ls_safetensors_writer_add_f64(w, name, dt[k], shape34, 2, vals), LS_OK);
        snprintf(name, sizeof name, "f.%s.mat", dname[k]);
        cr_assert_eq(ls_safetensors_writer_add_f32(w, name, dt[k], shape34, 2, fvals), LS_OK);
        snprintf(name, sizeof name, "d.%s.scalar", dname[k]);
        cr_assert_eq(ls_safetensors_writer_add_f64(w, name, dt[k], NULL, 0, &scalar), LS_OK);
        snprintf(name, sizeof name, "f.%s.scalar", dname[k]);
        cr_assert_eq(ls_safetensors_writer_add_f32(w, name, dt[k], NULL, 0, &fscalar), LS_OK);
        snprintf(name, sizeof name, "z.%s.empty", dname[k]);
        cr_assert_eq(ls_safetensors_writer_add_f64(w, name, dt[k], shape0, 1, NULL), LS_OK);
        snprintf(name, sizeof name, "z.%s.empty3", dname[k]);
        cr_assert_eq(ls_safetensors_writer_add_f32(w, name, dt[k], shape203, 3, NULL), LS_OK);
    }
    char path[8192], err[256];
    tmp_path(path, sizeof path, "rt.safetensors");
    cr_assert_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors_writer_free(w);

    ls_safetensors *st = NULL;
    cr_assert_eq(ls_safetensors_open(&st, path, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_eq(err, "");
    cr_assert_eq(ls_safetensors_count(st), 18);
    for (size_t i = 1; i < 18; i++)
        cr_expect_lt(strcmp(ls_safetensors_at(st, i - 1)->name, ls_safetensors_at(st, i)->name),
                     0, "not in name order at %zu", i);
    cr_expect_null(ls_safetensors_at(st, 18));

    for (int k = 0; k < 3; k++) {
        for (int src = 0; src < 2; src++) {
            snprintf(name, sizeof name, "%s.%s.mat", src ? "f" : "d", dname[k]);
            const ls_safetensors_tensor *t = ls_safetensors_find(st, name);
            cr_assert_not_null(t, "%s missing", name);
            cr_expect_eq(t->dtype, dt[k]);
            cr_expect_eq(t->ndim, 2);
            cr_expect(t->shape[0] == 3 && t->shape[1] == 4);
            cr_expect_eq(t->numel, 12);
            cr_expect_eq(t->nbytes, 12 * ls_safetensors_dtype_size(dt[k]));
            double got[NVALS];
            float gotf[NVALS];
            cr_assert_eq(ls_safetensors_read_f64(t, got, NVALS), LS_OK);
            cr_assert_eq(ls_safetensors_read_f32(t, gotf, NVALS), LS_OK);
            for (size_t i = 0; i < NVALS; i++) {
                double want;
                if (dt[k] == LS_SAFETENSORS_F64)
                    want = src ? (double)fvals[i] : vals[i];
                else if (dt[k] == LS_SAFETENSORS_F32)
                    want = (double)fvals[i];
                else
                    want = (double)ls_safetensors_bf16_to_f32(
                        src ? ls_safetensors_bf16_from_f32(fvals[i])
                            : ls_safetensors_bf16_from_f64(vals[i]));
                cr_expect_eq(f64_bits(got[i]), f64_bits(want), "%s[%zu]: %.17g vs %.17g", name,
                             i, got[i], want);
                cr_expect_eq(f32_bits(gotf[i]), f32_bits((float)want), "%s[%zu] as float", name,
                             i);
                if (dt[k] == LS_SAFETENSORS_BF16 && fabs(vals[i]) > 1e-37) /* half an ulp */
                    cr_expect_leq(fabs(got[i] - vals[i]), fabs(vals[i]) * 0x1p-8 + 1e-300,
                                  "%s[%zu]", name, i);
            }
            cr_expect_eq(ls_safetensors_read_f64(t, got, NVALS - 1), LS_ERR_ARG);
        }
        snprintf(name, sizeof name, "d.%s.scalar", dname[k]);
        const ls_safetensors_tensor *t = ls_safetensors_find(st, name);
        cr_assert_not_null(t);
        cr_expect_eq(t->ndim, 0);
        cr_expect_null(t->shape);
        cr_expect_eq(t->numel, 1);
        double d = 0;
        cr_assert_eq(ls_safetensors_read_f64(t, &d, 1), LS_OK);
        cr_expect_eq(d, -42.75); /* exact in all three dtypes */
        snprintf(name, sizeof name, "f.%s.scalar", dname[k]);
        float f = 0;
        cr_assert_eq(ls_safetensors_read_f32(ls_safetensors_find(st, name), &f, 1), LS_OK);
        cr_expect_eq(f, 6.5f);

        snprintf(name, sizeof name, "z.%s.empty", dname[k]);
        t = ls_safetensors_find(st, name);
        cr_assert_not_null(t);
        cr_expect(t->ndim == 1 && t->shape[0] == 0 && t->numel == 0 && t->nbytes == 0);
        cr_expect_eq(ls_safetensors_read_f64(t, NULL, 0), LS_OK);
        snprintf(name, sizeof name, "z.%s.empty3", dname[k]);
        t = ls_safetensors_find(st, name);
        cr_assert_not_null(t);
        cr_expect(t->ndim == 3 && t->shape[2] == 3 && t->numel == 0);
    }
    cr_expect_null(ls_safetensors_find(st, "nope"));
    cr_expect_null(ls_safetensors_find(st, NULL));

    /* load: shape checked, converted */
    double mat[12];
    cr_expect_eq(ls_safetensors_load_f64(st, "d.f64.mat", shape34, 2, mat, err, sizeof err), LS_OK);
    cr_expect_eq(mat[5], vals[5]);
    uint64_t wrong[2] = {4, 3};
    cr_expect_eq(ls_safetensors_load_f64(st, "d.f64.mat", wrong, 2, mat, err, sizeof err),
                 LS_ERR_FORMAT);
    cr_expect(strstr(err, "tensor 'd.f64.mat': shape [3, 4], expected [4, 3]") != NULL, "%s", err);
    cr_expect_eq(ls_safetensors_load_f32(st, "layers.0.missing", NULL, 0, NULL, err, sizeof err),
                 LS_ERR_FORMAT);
    cr_expect(strstr(err, "tensor 'layers.0.missing'") != NULL, "%s", err);
    ls_safetensors_free(st);
    expect_tracker_empty();
}

Test(safetensors, metadata_round_trip, .init = make_tmpdir, .fini = remove_tmpdir)
{
    ls_safetensors_writer *w = NULL;
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    cr_assert_eq(ls_safetensors_writer_set_metadata(w, "zeta", "last"), LS_OK);
    cr_assert_eq(ls_safetensors_writer_set_metadata(w, "alpha", "first \"quoted\"\n"), LS_OK);
    cr_assert_eq(ls_safetensors_writer_set_metadata(w, "zeta", "replaced"), LS_OK);
    cr_expect_eq(ls_safetensors_writer_set_metadata(w, NULL, "x"), LS_ERR_ARG);
    char path[8192], err[256];
    tmp_path(path, sizeof path, "meta.safetensors");
    cr_assert_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors_writer_free(w);

    ls_safetensors *st = NULL;
    cr_assert_eq(ls_safetensors_open(&st, path, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(ls_safetensors_count(st), 0);
    cr_assert_eq(ls_safetensors_metadata_count(st), 2);
    const char *k = NULL, *v = NULL;
    cr_assert_eq(ls_safetensors_metadata_at(st, 0, &k, &v), LS_OK);
    cr_expect_str_eq(k, "alpha");
    cr_expect_str_eq(v, "first \"quoted\"\n");
    cr_assert_eq(ls_safetensors_metadata_at(st, 1, &k, &v), LS_OK);
    cr_expect_str_eq(k, "zeta");
    cr_expect_str_eq(v, "replaced");
    cr_expect_eq(ls_safetensors_metadata_at(st, 2, &k, &v), LS_ERR_ARG);
    cr_expect_str_eq(ls_safetensors_metadata_get(st, "zeta"), "replaced");
    cr_expect_null(ls_safetensors_metadata_get(st, "beta"));
    ls_safetensors_free(st);
    expect_tracker_empty();
}

/* A writer holding the tiny file: "w" F32 [2] {1, -2}, "b" a BF16 scalar
 * (0x3F81, from a double that rounds to it), metadata k = v (the caller
 * frees it; the data it borrows is static). */
static ls_safetensors_writer *tiny_writer(void)
{
    ls_safetensors_writer *w = NULL;
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    static const float two[2] = {1.0f, -2.0f}; /* borrowed by the writer: static */
    static const double one = 1.0 + 0x1p-8 + 0x1p-30; /* BF16 0x3F81 */
    const uint64_t s2[1] = {2};
    cr_assert_eq(ls_safetensors_writer_add_f32(w, "w", LS_SAFETENSORS_F32, s2, 1, two), LS_OK);
    cr_assert_eq(ls_safetensors_writer_add_f64(w, "b", LS_SAFETENSORS_BF16, NULL, 0, &one), LS_OK);
    cr_assert_eq(ls_safetensors_writer_set_metadata(w, "k", "v"), LS_OK);
    return w;
}

/* The writer's bytes for a tiny file, written out by hand. */
Test(safetensors, writer_exact_bytes, .init = make_tmpdir, .fini = remove_tmpdir)
{
    ls_safetensors_writer *w = tiny_writer();
    char path[8192], err[256];
    tmp_path(path, sizeof path, "tiny.safetensors");
    cr_assert_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors_writer_free(w);

    const char *json = "{\"__metadata__\":{\"k\":\"v\"},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,2]},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]}}";
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8;
    unsigned char want[512];
    memset(want, 0, sizeof want);
    for (int i = 0; i < 8; i++)
        want[i] = (unsigned char)(padded >> (8 * i));
    memcpy(want + 8, json, jl);
    memset(want + 8 + jl, ' ', padded - jl);
    unsigned char *d = want + 8 + padded;
    const unsigned char data[10] = {0x81, 0x3F, 0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0};
    memcpy(d, data, 10);
    size_t want_len = 8 + padded + 10;

    size_t len = 0;
    unsigned char *got = slurp(path, &len);
    cr_assert_eq(len, want_len, "file is %zu bytes, want %zu", len, want_len);
    cr_expect_eq(memcmp(got, want, len), 0, "bytes differ; header: %.*s", (int)(len - 8), got + 8);
    free(got);
}

/* The digests of the tiny file above, hand-computed with Python's hashlib
 * and json (sort_keys, no whitespace): tensor bytes {81 3F} and
 * {00 00 80 3F 00 00 00 C0}, and the content document. */
#define TINY_B_SHA "5ea40fd2bbee6a090bc7fb419137262d6ce7697a6011076efd19a31c8ab881a8"
#define TINY_W_SHA "ee4ac73c2bd27756ab82780f27c73a7bc4d3f0bb6acb37e008bc27eccd7e588b"
#define TINY_CONTENT_SHA "1126e13e9e228049e008d693414b5c0efbacd16ca96801ee2f0500ed41027cc3"

static void verify_bytes(const unsigned char *b, size_t len, ls_status want, int want_digested, const char *needle)
{
    ls_safetensors *st = NULL;
    char err[512];
    cr_assert_eq(ls_safetensors_parse(&st, b, len, err, sizeof err), LS_OK, "%s", err);
    int digested = -1;
    ls_status rc = ls_safetensors_verify_digests(st, &digested, err, sizeof err);
    cr_expect_eq(rc, want, "verify: %s (%s)", ls_status_str(rc), err);
    cr_expect_eq(digested, want_digested);
    if (needle)
        cr_expect(strstr(err, needle) != NULL, "'%s' not in: %s", needle, err);
    ls_safetensors_free(st);
}

Test(safetensors, digests_hand_computed, .init = make_tmpdir, .fini = remove_tmpdir)
{
    ls_safetensors_writer *w = tiny_writer();
    char path[8192], err[256], hex[65], want[65];
    tmp_path(path, sizeof path, "plain.safetensors");
    cr_assert_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_OK, "%s", err);
    size_t len = 0;
    unsigned char *b = slurp(path, &len);
    verify_bytes(b, len, LS_OK, 0, NULL); /* no digests: nothing checked */
    free(b);

    cr_assert_eq(ls_safetensors_writer_set_digests(w), LS_OK);
    cr_assert_eq(ls_safetensors_writer_set_digests(w), LS_OK); /* again: replaced, not digested */
    cr_assert_eq(ls_safetensors_writer_sha256(w, hex, err, sizeof err), LS_OK, "%s", err);
    tmp_path(path, sizeof path, "digested.safetensors");
    cr_assert_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors_writer_free(w);
    b = slurp(path, &len);
    cr_assert_eq(ls_digest_sha256_hex(b, len, want), LS_OK);
    cr_expect_str_eq(hex, want, "ls_safetensors_writer_sha256 is the written file's sha256");
    ls_safetensors *st = NULL;
    cr_assert_eq(ls_safetensors_parse(&st, b, len, err, sizeof err), LS_OK, "%s", err);
    cr_expect_str_eq(ls_safetensors_metadata_get(st, LS_SAFETENSORS_TENSOR_DIGESTS),
                     "{\"b\":\"" TINY_B_SHA "\",\"w\":\"" TINY_W_SHA "\"}");
    cr_expect_str_eq(ls_safetensors_metadata_get(st, LS_SAFETENSORS_CONTENT_DIGEST), TINY_CONTENT_SHA);
    const ls_safetensors_tensor *tw = ls_safetensors_find(st, "w");
    size_t w_off = (size_t)(tw->data - b);
    ls_safetensors_free(st);
    verify_bytes(b, len, LS_OK, 1, NULL);

    b[w_off + 5] ^= 0x40; /* a bit of w's element 1 */
    verify_bytes(b, len, LS_ERR_CORRUPT, 0, "tensor 'w': its data (8 bytes) does not match");
    b[w_off + 5] ^= 0x40;
    size_t k = 0; /* the metadata value "v", changed in place */
    while (k + 7 <= len && memcmp(b + k, "\"k\":\"v\"", 7) != 0)
        k++;
    cr_assert_lt(k + 7, len);
    b[k + 5] = 'x';
    verify_bytes(b, len, LS_ERR_CORRUPT, 0, "metadata 'content_sha256' does not match");
    free(b);
}

Test(safetensors, reads_independent_fixture)
{
    ls_safetensors *st = NULL;
    char err[256];
    cr_assert_eq(ls_safetensors_open(&st, FIXTURE, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_safetensors_count(st), 6);
    static const char *names[6] = {"a.f32", "b.f64", "c.bf16", "empty", "ints", "scalar"};
    for (size_t i = 0; i < 6; i++)
        cr_expect_str_eq(ls_safetensors_at(st, i)->name, names[i]);
    cr_expect_str_eq(ls_safetensors_metadata_get(st, "format"), "pt");
    cr_expect_str_eq(ls_safetensors_metadata_get(st, "note"), "hand-made");

    double a[4], b[3], c[4], s;
    uint64_t s22[2] = {2, 2}, s3[1] = {3}, s4[1] = {4};
    cr_assert_eq(ls_safetensors_load_f64(st, "a.f32", s22, 2, a, err, sizeof err), LS_OK, "%s", err);
    cr_expect(a[0] == 0.5 && a[1] == 0.0 && signbit(a[1]) && a[2] == 3.0 && a[3] == 0x1p-140);
    cr_assert_eq(ls_safetensors_load_f64(st, "b.f64", s3, 1, b, err, sizeof err), LS_OK, "%s", err);
    cr_expect(b[0] == 1.5 && b[1] == -2.25 && b[2] == 1e300);
    float bf[3];
    cr_assert_eq(ls_safetensors_load_f32(st, "b.f64", s3, 1, bf, err, sizeof err), LS_OK);
    cr_expect(bf[0] == 1.5f && bf[1] == -2.25f && isinf(bf[2]) && bf[2] > 0);
    cr_assert_eq(ls_safetensors_load_f64(st, "c.bf16", s4, 1, c, err, sizeof err), LS_OK, "%s", err);
    cr_expect(c[0] == 1.0 && c[1] == -2.0 && isinf(c[2]) && c[3] == 0x1p-133);
    cr_assert_eq(ls_safetensors_load_f64(st, "scalar", NULL, 0, &s, err, sizeof err), LS_OK);
    cr_expect_eq(s, 42.0);
    const ls_safetensors_tensor *e = ls_safetensors_find(st, "empty");
    cr_expect(e && e->ndim == 2 && e->numel == 0 && e->offset == 36);

    const ls_safetensors_tensor *t = ls_safetensors_find(st, "ints");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, LS_SAFETENSORS_I32);
    cr_expect_eq(t->nbytes, 8);
    cr_expect_eq(t->data[0], 7);
    cr_expect_eq(ls_safetensors_read_f64(t, b, 2), LS_ERR_UNSUPPORTED);
    uint64_t s2[1] = {2};
    cr_expect_eq(ls_safetensors_load_f64(st, "ints", s2, 1, b, err, sizeof err),
                 LS_ERR_UNSUPPORTED);
    cr_expect(strstr(err, "tensor 'ints'") != NULL, "%s", err);
    ls_safetensors_free(st);
    expect_tracker_empty();
}

/* ---- malformed input ---------------------------------------------------------- */

/* 8-byte length + header + data_len bytes of data, in a buffer of exactly
 * that size (so ASan sees any read past it). */
static unsigned char *make_file(const char *header, size_t data_len, size_t *len)
{
    size_t hl = strlen(header);
    *len = 8 + hl + data_len;
    unsigned char *b = malloc(*len ? *len : 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, 0x5A, data_len);
    return b;
}

typedef struct {
    const char *header;
    size_t data_len;
    ls_status want;
    const char *who;  /* "tensor 'w'" or "header" */
    const char *what; /* a fragment of the problem's description */
} bad_case;

#define T4 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

static const bad_case bad_cases[] = {
    {"{\"a\":", 0, LS_ERR_FORMAT, "header", "not valid JSON"},
    {"", 0, LS_ERR_FORMAT, "header", "not valid JSON"},
    {"[1,2]", 0, LS_ERR_FORMAT, "header", "not a JSON object"},
    {"{} x", 0, LS_ERR_FORMAT, "header", "after the JSON"},
    {"{\"w\":" T4 "}\x01", 4, LS_ERR_FORMAT, "header", "after the JSON"},
    {"{\"w\xff\":" T4 "}", 4, LS_ERR_FORMAT, "header", "UTF-8"},
    {"{\"w\xc0\xaf\":" T4 "}", 4, LS_ERR_FORMAT, "header", "UTF-8"},
    {"{\"w\\u0000x\":" T4 "}", 4, LS_ERR_FORMAT, "header", "\\u0000"},
    {"{\"w\":5}", 0, LS_ERR_FORMAT, "tensor 'w'", "not an object"},
    {"{\"w\":[1]}", 0, LS_ERR_FORMAT, "tensor 'w'", "not an object"},
    {"{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT, "tensor 'w'",
     "missing dtype"},
    {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT, "tensor 'w'",
     "missing shape"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, LS_ERR_FORMAT, "tensor 'w'",
     "missing data_offsets"},
    {"{\"w\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "unknown dtype 'F17'"},
    {"{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "dtype is not a string"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
     LS_ERR_FORMAT, "tensor 'w'", "unknown key 'x'"},
    {"{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     LS_ERR_FORMAT, "tensor 'w'", "duplicate key 'dtype'"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "shape is not an array"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "shape[0]"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1.5],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "shape[1]"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "shape[0]"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "shape[0]"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[9007199254740994],\"data_offsets\":[0,4]}}", 4,
     LS_ERR_FORMAT, "tensor 'w'", "shape[0]"},
    {"{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,4]}}", 4,
     LS_ERR_FORMAT, "tensor 'w'", "element count overflows"},
    {"{\"w\":{\"dtype\":\"F64\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,4]}}", 4,
     LS_ERR_FORMAT, "tensor 'w'", "byte count overflows"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "data_offsets"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, LS_ERR_FORMAT,
     "tensor 'w'", "data_offsets"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "data_offsets"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"a\":0,\"b\":4}}}", 4,
     LS_ERR_FORMAT, "tensor 'w'", "data_offsets"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "data_offsets"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "begin 4 > end 0"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, LS_ERR_TRUNCATED,
     "tensor 'w'", "past the end of the data section"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}", 4,
     LS_ERR_FORMAT, "tensor 'w'", "data_offsets"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "need 8"},
    {"{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4, LS_ERR_FORMAT,
     "tensor 'w'", "need 6"},
    {"{\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, LS_ERR_FORMAT, "tensor 'w'", "overlaps tensor 'v'"},
    {"{\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
     8, LS_ERR_FORMAT, "tensor 'w'", "overlaps tensor 'v'"},
    {"{\"v\":" T4 ",\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
     LS_ERR_FORMAT, "tensor 'w'", "hole"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, LS_ERR_FORMAT,
     "tensor 'w'", "hole"},
    {"{\"w\":" T4 "}", 8, LS_ERR_FORMAT, "header", "trailing"},
    {"{}", 3, LS_ERR_FORMAT, "header", "no tensors but 3 bytes"},
    {"{\"w\":" T4 ",\"w\":" T4 "}", 4, LS_ERR_FORMAT, "tensor 'w'", "name appears twice"},
    {"{\"__metadata__\":5}", 0, LS_ERR_FORMAT, "header", "__metadata__ is not an object"},
    {"{\"__metadata__\":{\"a\":1}}", 0, LS_ERR_FORMAT, "header", "value 'a' is not a string"},
    {"{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"}}", 0, LS_ERR_FORMAT, "header",
     "key 'a' appears twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, LS_ERR_FORMAT, "header",
     "__metadata__ appears twice"},
};

Test(safetensors, malformed_headers_rejected_with_named_errors)
{
    size_t n = sizeof bad_cases / sizeof bad_cases[0];
    for (size_t i = 0; i < n; i++) {
        const bad_case *c = &bad_cases[i];
        size_t len = 0;
        unsigned char *buf = make_file(c->header, c->data_len, &len);
        ls_safetensors *st = (ls_safetensors *)(uintptr_t)1;
        char err[256] = "unchanged";
        ls_status rc = ls_safetensors_parse(&st, buf, len, err, sizeof err);
        cr_expect_eq(rc, c->want, "case %zu (%s): status %s, want %s; err: %s", i, c->header,
                     ls_status_str(rc), ls_status_str(c->want), err);
        cr_expect_null(st, "case %zu: *out not NULL on error", i);
        cr_expect(strncmp(err, c->who, strlen(c->who)) == 0,
                  "case %zu: error '%s' does not start with \"%s\"", i, err, c->who);
        cr_expect(strstr(err, c->what) != NULL, "case %zu: error '%s' lacks \"%s\"", i, err,
                  c->what);
        ls_safetensors_free(st == (ls_safetensors *)(uintptr_t)1 ? NULL : st);
        free(buf);
    }
    expect_tracker_empty();
}

Test(safetensors, short_and_overlong_header_lengths)
{
    unsigned char b[16] = {0};
    char err[256];
    ls_safetensors *st = NULL;
    for (size_t len = 0; len < 8; len++) {
        cr_expect_eq(ls_safetensors_parse(&st, len ? b : NULL, len, err, sizeof err),
                     LS_ERR_TRUNCATED, "len %zu", len);
        cr_expect(strncmp(err, "header", 6) == 0, "%s", err);
    }
    b[0] = 9; /* header of 9 bytes but only 8 follow */
    memcpy(b + 8, "{}      ", 8);
    cr_expect_eq(ls_safetensors_parse(&st, b, 16, err, sizeof err), LS_ERR_TRUNCATED);
    cr_expect(strstr(err, "header: length 9 exceeds the 8 bytes") != NULL, "%s", err);
    memset(b, 0xFF, 8); /* 2^64 - 1: no overflow in the bound check */
    cr_expect_eq(ls_safetensors_parse(&st, b, 16, err, sizeof err), LS_ERR_TRUNCATED);
    b[0] = 8;
    memset(b + 1, 0, 7); /* exactly fits, padded: valid empty file */
    cr_expect_eq(ls_safetensors_parse(&st, b, 16, err, sizeof err), LS_OK, "%s", err);
    cr_expect_eq(ls_safetensors_count(st), 0);
    ls_safetensors_free(st);
    cr_expect_eq(ls_safetensors_parse(NULL, b, 16, err, sizeof err), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_parse(&st, NULL, 16, NULL, 0), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_open(&st, "/nonexistent/x.safetensors", err, sizeof err),
                 LS_ERR_IO);
    cr_expect(strstr(err, "/nonexistent/x.safetensors") != NULL, "%s", err);
    expect_tracker_empty();
}

Test(safetensors, truncation_at_every_byte_is_rejected)
{
    size_t len = 0;
    unsigned char *full = slurp(FIXTURE, &len);
    char err[256];
    ls_safetensors *st = NULL;
    cr_assert_eq(ls_safetensors_parse(&st, full, len, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors_free(st);
    for (size_t k = 0; k < len; k++) {
        unsigned char *cut = malloc(k ? k : 1); /* exact size: overreads trip ASan */
        memcpy(cut, full, k);
        st = NULL;
        ls_status rc = ls_safetensors_parse(&st, cut, k, err, sizeof err);
        cr_expect(rc == LS_ERR_TRUNCATED || rc == LS_ERR_FORMAT,
                  "prefix of %zu/%zu bytes: %s (%s)", k, len, ls_status_str(rc), err);
        cr_expect_null(st);
        ls_safetensors_free(st);
        free(cut);
    }
    free(full);
    expect_tracker_empty();
}

Test(safetensors, corrupted_bytes_never_crash)
{
    size_t len = 0;
    unsigned char *full = slurp(FIXTURE, &len);
    static const unsigned char flips[] = {0x01, 0x20, 0x80, 0xFF};
    size_t accepted = 0, rejected = 0;
    for (size_t i = 0; i < len; i++) {
        for (size_t f = 0; f < sizeof flips; f++) {
            unsigned char *b = malloc(len);
            memcpy(b, full, len);
            b[i] ^= flips[f];
            ls_safetensors *st = NULL;
            char err[256];
            ls_status rc = ls_safetensors_parse(&st, b, len, err, sizeof err);
            if (rc == LS_OK) {
                accepted++;
                /* whatever was accepted is internally consistent */
                for (size_t t = 0; t < ls_safetensors_count(st); t++) {
                    const ls_safetensors_tensor *x = ls_safetensors_at(st, t);
                    cr_assert(x->data >= b && x->data + x->nbytes <= b + len);
                    cr_assert_eq(x->nbytes, x->numel * ls_safetensors_dtype_size(x->dtype));
                    if (x->dtype <= LS_SAFETENSORS_BF16 && x->numel < 1024) {
                        double tmp[1024];
                        cr_assert_eq(ls_safetensors_read_f64(x, tmp, (size_t)x->numel), LS_OK);
                    }
                }
            } else {
                rejected++;
                cr_expect(rc == LS_ERR_FORMAT || rc == LS_ERR_TRUNCATED, "byte %zu ^%02x: %s", i,
                          flips[f], ls_status_str(rc));
            }
            ls_safetensors_free(st);
            free(b);
        }
    }
    /* data-section flips stay valid; most header flips must not */
    cr_expect_gt(accepted, 0);
    cr_expect_gt(rejected, 300);
    free(full);
    expect_tracker_empty();
}

/* ---- writing: failures, atomicity, determinism, arguments ---------------------- */

Test(safetensors, failed_write_into_missing_dir, .init = make_tmpdir, .fini = remove_tmpdir)
{
    ls_safetensors_writer *w = NULL;
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    double x[3] = {1, 2, 3};
    uint64_t s3[1] = {3};
    cr_assert_eq(ls_safetensors_writer_add_f64(w, "x", LS_SAFETENSORS_F64, s3, 1, x), LS_OK);
    char path[8192], err[512];
    tmp_path(path, sizeof path, "no_such_dir/out.safetensors");
    cr_expect_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_ERR_IO);
    cr_expect(strstr(err, path) != NULL, "%s", err);
    cr_expect_eq(count_entries(""), 2, "tmpdir should hold only . and .."); /* nothing created */

    /* rename fails (target is a non-empty directory): temp file removed */
    tmp_path(path, sizeof path, "dir.safetensors");
    cr_assert_eq(mkdir(path, 0755), 0);
    char inner[8300];
    snprintf(inner, sizeof inner, "%s/keep", path);
    FILE *f = fopen(inner, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_expect_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_ERR_IO);
    cr_expect(strstr(err, "rename") != NULL, "%s", err);
    cr_expect_eq(count_entries(".tmp."), 0, "temporary file left behind");
    remove(inner);
    ls_safetensors_writer_free(w);
    expect_tracker_empty();
}

Test(safetensors, failed_write_keeps_old_file, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[8192], err[512];
    tmp_path(path, sizeof path, "ckpt.safetensors");
    ls_safetensors_writer *w = NULL;
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    float small[4] = {1, 2, 3, 4};
    uint64_t s4[1] = {4};
    cr_assert_eq(ls_safetensors_writer_add_f32(w, "v1", LS_SAFETENSORS_F32, s4, 1, small), LS_OK);
    cr_assert_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors_writer_free(w);
    size_t old_len = 0;
    unsigned char *old = slurp(path, &old_len);

    /* the next version is 1 MB; a 64 KB file-size limit makes its write fail
     * part-way (EFBIG), after the temporary file exists */
    size_t n = 1 << 17;
    double *big = calloc(n, sizeof *big);
    uint64_t sn[1] = {n};
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    cr_assert_eq(ls_safetensors_writer_add_f64(w, "v2", LS_SAFETENSORS_F64, sn, 1, big), LS_OK);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit saved, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
    lim = saved;
    lim.rlim_cur = 64 * 1024;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    ls_status rc = ls_safetensors_writer_write(w, path, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &saved);
    cr_expect_eq(rc, LS_ERR_IO, "got %s", ls_status_str(rc));
    cr_expect(strstr(err, path) != NULL, "%s", err);
    cr_expect_eq(count_entries(".tmp."), 0, "temporary file left behind");
    size_t now_len = 0;
    unsigned char *now = slurp(path, &now_len);
    cr_expect(now_len == old_len && memcmp(now, old, old_len) == 0, "old file changed");

    /* without the limit the same writer succeeds and replaces it */
    cr_expect_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors *st = NULL;
    cr_assert_eq(ls_safetensors_open(&st, path, err, sizeof err), LS_OK, "%s", err);
    cr_expect_not_null(ls_safetensors_find(st, "v2"));
    cr_expect_null(ls_safetensors_find(st, "v1"));
    ls_safetensors_free(st);
    ls_safetensors_writer_free(w);
    free(big);
    free(old);
    free(now);
    expect_tracker_empty();
}

static void write_set(const char *path, int reverse)
{
    static double a[6] = {1, 2, 3, 4, 5, 6};
    static float b[2] = {0.25f, -8.0f};
    static double c = 0.1;
    uint64_t s23[2] = {2, 3}, s2[1] = {2};
    ls_safetensors_writer *w = NULL;
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    for (int k = 0; k < 3; k++) {
        int which = reverse ? 2 - k : k;
        if (which == 0)
            cr_assert_eq(ls_safetensors_writer_add_f64(w, "layers.0.attn.q.weight",
                                                       LS_SAFETENSORS_F32, s23, 2, a), LS_OK);
        if (which == 1)
            cr_assert_eq(ls_safetensors_writer_add_f32(w, "embed.weight", LS_SAFETENSORS_BF16,
                                                       s2, 1, b), LS_OK);
        if (which == 2)
            cr_assert_eq(ls_safetensors_writer_add_f64(w, "norm.weight", LS_SAFETENSORS_F64,
                                                       NULL, 0, &c), LS_OK);
    }
    cr_assert_eq(ls_safetensors_writer_set_metadata(w, reverse ? "b" : "a", reverse ? "2" : "1"),
                 LS_OK);
    cr_assert_eq(ls_safetensors_writer_set_metadata(w, reverse ? "a" : "b", reverse ? "1" : "2"),
                 LS_OK);
    char err[256];
    cr_assert_eq(ls_safetensors_writer_write(w, path, err, sizeof err), LS_OK, "%s", err);
    ls_safetensors_writer_free(w);
}

Test(safetensors, deterministic_output, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char p1[8192], p2[8192], p3[8192];
    tmp_path(p1, sizeof p1, "one.safetensors");
    tmp_path(p2, sizeof p2, "two.safetensors");
    tmp_path(p3, sizeof p3, "three.safetensors");
    write_set(p1, 0);
    write_set(p2, 0);
    write_set(p3, 1); /* same tensors and metadata, added in reverse order */
    size_t l1, l2, l3;
    unsigned char *b1 = slurp(p1, &l1), *b2 = slurp(p2, &l2), *b3 = slurp(p3, &l3);
    cr_expect(l1 == l2 && memcmp(b1, b2, l1) == 0, "two writes differ");
    cr_expect(l1 == l3 && memcmp(b1, b3, l1) == 0, "insertion order changed the bytes");
    /* header length is a multiple of 8, so the data starts 8-byte aligned */
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | b1[i];
    cr_expect_eq(hl % 8, 0);
    cr_expect(strstr((char *)b1 + 8, "\"embed.weight\"") < strstr((char *)b1 + 8, "\"layers.0"));
    free(b1);
    free(b2);
    free(b3);
    expect_tracker_empty();
}

Test(safetensors, writer_argument_errors)
{
    ls_safetensors_writer *w = NULL;
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    double x[2] = {1, 2};
    uint64_t s2[1] = {2};
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "x", LS_SAFETENSORS_F64, s2, 1, x), LS_OK);
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "x", LS_SAFETENSORS_F32, s2, 1, x), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "__metadata__", LS_SAFETENSORS_F64, s2, 1, x),
                 LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "", LS_SAFETENSORS_F64, s2, 1, x), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_add_f64(w, NULL, LS_SAFETENSORS_F64, s2, 1, x), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "y", LS_SAFETENSORS_F64, s2, 1, NULL),
                 LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "y", LS_SAFETENSORS_F64, NULL, 1, x), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "y", LS_SAFETENSORS_I32, s2, 1, x),
                 LS_ERR_UNSUPPORTED);
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "y", (ls_safetensors_dtype)99, s2, 1, x),
                 LS_ERR_UNSUPPORTED);
    uint64_t huge[2] = {UINT64_C(1) << 40, UINT64_C(1) << 40};
    cr_expect_eq(ls_safetensors_writer_add_f64(w, "y", LS_SAFETENSORS_F64, huge, 2, x), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_add_f64(NULL, "y", LS_SAFETENSORS_F64, s2, 1, x), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_write(w, NULL, NULL, 0), LS_ERR_ARG);
    cr_expect_eq(ls_safetensors_writer_init(NULL), LS_ERR_ARG);
    ls_safetensors_writer_free(w);
    ls_safetensors_writer_free(NULL);
    ls_safetensors_free(NULL);
    cr_expect_str_eq(ls_safetensors_dtype_name(LS_SAFETENSORS_BF16), "BF16");
    cr_expect_str_eq(ls_safetensors_dtype_name((ls_safetensors_dtype)99), "unknown");
    cr_expect_eq(ls_safetensors_dtype_size(LS_SAFETENSORS_F8_E4M3), 1);
    expect_tracker_empty();
}

Test(safetensors, allocations_are_tracked_as_scratch, .init = make_tmpdir, .fini = remove_tmpdir)
{
    ls_safetensors *st = NULL;
    char err[256];
    cr_assert_eq(ls_safetensors_open(&st, FIXTURE, err, sizeof err), LS_OK, "%s", err);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    size_t file_len = 0;
    unsigned char *b = slurp(FIXTURE, &file_len);
    free(b);
    cr_expect_geq(s.live_bytes[LS_MEM_SCRATCH], file_len, "file buffer not accounted");
    cr_expect_eq(s.live_total, s.live_bytes[LS_MEM_SCRATCH]);
    ls_safetensors_free(st);
    expect_tracker_empty();
    /* a budget too small for the file refuses cleanly */
    ls_mem_set_budget(64);
    cr_expect_eq(ls_safetensors_open(&st, FIXTURE, err, sizeof err), LS_ERR_NOMEM);
    cr_expect_null(st);
    ls_mem_set_budget(0);
    expect_tracker_empty();
}
