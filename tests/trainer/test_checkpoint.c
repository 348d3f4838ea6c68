/* test_checkpoint.c - training checkpoints (trainer/io/checkpoint.h), compiled
 * once per dtype (test_checkpoint_f32, test_checkpoint_f64).
 *
 * Independent references: a save/load round trip is checked byte for byte
 * and by the sha256 of every buffer (weights, both moments, the reference
 * copy), and the file is read back through the plain safetensors reader; a
 * resumed run is compared with the same run done without interruption, and
 * two sabotaged resumes (reference re-snapshotted as --load does, moments
 * zeroed) must differ from it, so the comparison can fail.  Every refusal
 * is made by rewriting a real checkpoint with the safetensors writer (a
 * tensor dropped, added or reshaped, a metadata value changed: digested
 * again, so that the check behind the digests is the one seen), or by a
 * real file of another config, objective or dtype.  The digests are
 * recomputed here from the file's bytes (the tensors' with ls_digest, the
 * content document built with cJSON), and a byte flipped in the data of one
 * tensor of each kind must be refused by --resume's and --load's loaders
 * naming that tensor, before anything is loaded.  LS_SHOW=1 prints every
 * refusal message. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"
#include "tests/trainer/test_hybrid_util.h"
#include "tests/support/test_tmpdir.h"
#include "trainer/io/checkpoint.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/io/params_io.h"
#include "trainer/base/safetensors.h"
#include "trainer/families/families.h"
#include "tests/fuzz/checkpoint_micro.h"

/* the other dtype's build, for a real checkpoint of the other dtype */
#if LS_REAL_IS_F64
#define OTHER(x) LS_CAT2(x, f32)
#define OTHER_NAME "f32"
#define OTHER_ST LS_SAFETENSORS_F32
#define OTHER_ST_NAME "F32"
#else
#define OTHER(x) LS_CAT2(x, f64)
#define OTHER_NAME "f64"
#define OTHER_ST LS_SAFETENSORS_F64
#define OTHER_ST_NAME "F64"
#endif
ls_status OTHER(ls_params_init)(ls_params **out, const ls_model_config *cfg, const ls_objective *obj, uint64_t seed,
                                char *err, size_t err_len);
void OTHER(ls_params_free)(ls_params *p);
ls_status OTHER(ls_checkpoint_save)(const ls_params *p, const ls_checkpoint_info *info, const char *path, char *err,
                                    size_t err_len);

static char dir[256];
static char tmp_paths[32][512]; /* one per distinct name, for the whole test */
static int n_tmp;
static void setup(void) {
    ls_test_tmpdir_make(dir, "ckpt");
    n_tmp = 0;
}
static void teardown(void) { ls_test_tmpdir_remove(dir); }
TestSuite(checkpoint, .init = setup, .fini = teardown, .timeout = 300);

/* dir/name; the same name gives the same (stable) pointer within a test */
static const char *tmp(const char *name) {
    char want[512];
    snprintf(want, sizeof want, "%s/%s", dir, name);
    for (int i = 0; i < n_tmp; i++)
        if (!strcmp(tmp_paths[i], want)) return tmp_paths[i];
    cr_assert_lt(n_tmp, 32, "too many scratch names");
    snprintf(tmp_paths[n_tmp], sizeof tmp_paths[n_tmp], "%s", want);
    return tmp_paths[n_tmp++];
}

static ls_checkpoint_info test_info(int64_t step) {
    ls_checkpoint_info in = {.step = step, .seed = 12345678901234567890ull, .lr = 0.1 + 0.2, .beta1 = 0.9,
                             .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    snprintf(in.rng_scheme, sizeof in.rng_scheme, "%s", LS_CHECKPOINT_RNG_SCHEME);
    return in;
}

static void save_ok(const ls_params *p, int64_t step, const char *path) {
    char err[1024] = "";
    ls_checkpoint_info in = test_info(step);
    cr_assert_eq(K(ls_checkpoint_save)(p, &in, path, err, sizeof err), LS_OK, "%s", err);
}

static ls_params *params_of(const ls_model_config *c, ls_train_mode mode, int lora_r, uint64_t seed) {
    ls_objective o;
    ls_objective_defaults(&o);
    o.train_mode = mode;
    o.lora_r = lora_r;
    o.lora_init_random = 1;
    ls_params *p = NULL;
    char err[512];
    cr_assert_eq(K(ls_params_init)(&p, c, &o, seed, err, sizeof err), LS_OK, "%s", err);
    return p;
}

/* n AdamW steps from step `first` with random gradients (moments nonzero). */
static void optimizer_steps(ls_params *p, int64_t first, int n) {
    ls_step_options o;
    ls_step_options_defaults(&o);
    for (int64_t s = first; s < first + n; s++) {
        ls_rng r;
        ls_rng_seed(&r, 77 + (uint64_t)s);
        for (size_t i = 0; i < p->n; i++)
            if (p->t[i].trainable)
                for (size_t j = 0; j < p->t[i].numel; j++) p->t[i].g[j] = (ls_real)(2 * ls_rng_uniform(&r) - 1);
        K(ls_step_optimizer)(p, &o, s + 1);
    }
}

/* n real GRPO steps (capture, score, replay, AdamW) from step `first`; the
 * batch of each step depends on the step only, its gradient on the weights
 * and (beta > 0) on the reference policy. */
static void grpo_steps(ls_params *p, int64_t first, int n) {
    ls_step_options o;
    ls_step_options_defaults(&o);
    o.page_size = 16;
    o.lr = 1e-2;
    for (int64_t s = first; s < first + n; s++) {
        size_t R[2] = {3, 4};
        ls_batch *b = make_batch(10, 2, R, 500 + (uint64_t)s);
        ls_step_result res;
        char err[512] = "";
        cr_assert_eq(K(ls_step_grads)(p, b, NULL, &o, NULL, &res, err, sizeof err), LS_OK, "%s", err);
        K(ls_step_optimizer)(p, &o, s + 1);
        ls_batch_free(b);
    }
}

/* Every buffer a checkpoint holds, in a fixed order: name, pointer, bytes. */
typedef struct {
    char name[128];
    const ls_real *data;
    size_t bytes;
} buffer;

static size_t buffers_of(const ls_params *p, buffer **out) {
    ls_params *ref = NULL;
    cr_assert_eq(K(ls_params_ref_view)(&ref, p), LS_OK);
    buffer *b = calloc(4 * p->n, sizeof *b);
    cr_assert_not_null(b);
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        size_t bytes = t->numel * sizeof(ls_real);
        b[n++] = (buffer){.data = t->w, .bytes = bytes};
        snprintf(b[n - 1].name, 128, "%s", t->name);
        if (t->trainable) {
            b[n++] = (buffer){.data = t->m, .bytes = bytes};
            snprintf(b[n - 1].name, 128, "optimizer.m.%s", t->name);
            b[n++] = (buffer){.data = t->v, .bytes = bytes};
            snprintf(b[n - 1].name, 128, "optimizer.v.%s", t->name);
        }
        if (ref->t[i].w != t->w) {
            b[n++] = (buffer){.data = ref->t[i].w, .bytes = bytes};
            snprintf(b[n - 1].name, 128, "reference.%s", t->name);
        }
    }
    K(ls_params_free)(ref);
    *out = b;
    return n;
}

/* sha256 of every buffer, [n][32]. */
static uint8_t (*digests_of(const ls_params *p, size_t *n))[LS_DIGEST_SIZE] {
    buffer *b;
    *n = buffers_of(p, &b);
    uint8_t (*d)[LS_DIGEST_SIZE] = malloc(*n * sizeof *d);
    cr_assert_not_null(d);
    for (size_t i = 0; i < *n; i++) cr_assert_eq(ls_digest_sha256(b[i].data, b[i].bytes, d[i]), LS_OK);
    free(b);
    return d;
}

/* The name of the first buffer that differs between a and b (same model), or NULL. */
static const char *first_difference(const ls_params *a, const ls_params *b, char name[128]) {
    buffer *ba, *bb;
    size_t na = buffers_of(a, &ba), nb = buffers_of(b, &bb);
    cr_assert_eq(na, nb);
    const char *r = NULL;
    for (size_t i = 0; i < na && !r; i++) {
        cr_assert_str_eq(ba[i].name, bb[i].name);
        if (memcmp(ba[i].data, bb[i].data, ba[i].bytes) != 0) r = strcpy(name, ba[i].name);
    }
    free(ba);
    free(bb);
    return r;
}

static size_t file_size(const char *path) {
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "%s", path);
    return (size_t)sb.st_size;
}

/* ---- the digests, recomputed here --------------------------------------------------- */

static int is_digest_key(const char *k) {
    return !strcmp(k, LS_SAFETENSORS_TENSOR_DIGESTS) || !strcmp(k, LS_SAFETENSORS_CONTENT_DIGEST);
}

/* The file's tensor_sha256 holds the sha256 of each of the nb buffers' bytes
 * (a little-endian host: the stored bytes), nothing else, and its
 * content_sha256 is the sha256 of the content document built here. */
static void expect_digests_of_file(const ls_safetensors *sf, const buffer *b, size_t nb) {
    const char *tm = ls_safetensors_metadata_get(sf, LS_SAFETENSORS_TENSOR_DIGESTS);
    const char *cm = ls_safetensors_metadata_get(sf, LS_SAFETENSORS_CONTENT_DIGEST);
    cr_assert(tm && cm, "both digests in the metadata");
    cJSON *map = cJSON_Parse(tm);
    cr_assert(cJSON_IsObject(map), "tensor_sha256 is a JSON object: %.80s", tm);
    cr_assert_eq((size_t)cJSON_GetArraySize(map), nb, "one digest per tensor");
    cJSON *doc = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(doc, "metadata");
    cJSON *tens = cJSON_AddObjectToObject(doc, "tensors");
    for (size_t i = 0; i < nb; i++) {
        char hex[LS_DIGEST_HEX_SIZE];
        cr_assert_eq(ls_digest_sha256_hex(b[i].data, b[i].bytes, hex), LS_OK);
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(map, b[i].name);
        cr_assert(cJSON_IsString(got) && !strcmp(got->valuestring, hex), "%s: digest %s, its bytes' %s", b[i].name,
                  cJSON_IsString(got) ? got->valuestring : "(none)", hex);
        const ls_safetensors_tensor *t = ls_safetensors_find(sf, b[i].name);
        cJSON *e = cJSON_AddObjectToObject(tens, b[i].name), *sh = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddStringToObject(e, "dtype", LS_REAL_IS_F64 ? "F64" : "F32");
        cJSON_AddStringToObject(e, "sha256", hex);
        for (size_t d = 0; d < t->ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
    }
    for (size_t i = 0; i < ls_safetensors_metadata_count(sf); i++) {
        const char *k, *v;
        cr_assert_eq(ls_safetensors_metadata_at(sf, i, &k, &v), LS_OK);
        if (!is_digest_key(k)) cJSON_AddStringToObject(meta, k, v);
    }
    char *text = NULL, hex[LS_DIGEST_HEX_SIZE], err[256];
    size_t len = 0;
    cr_assert_eq(ls_json_print_canonical(doc, &text, &len, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_digest_sha256_hex(text, len, hex), LS_OK);
    cr_assert_str_eq(cm, hex, "content_sha256 over %.200s...", text);
    free(text);
    cJSON_Delete(doc);
    cJSON_Delete(map);
}

/* ---- round trip ---------------------------------------------------------------- */

static void round_trip(ls_train_mode mode) {
    ls_params *p = make_params(mode, LS_GRAD_DETACHED, 1);
    optimizer_steps(p, 0, 3);
    /* the moments are nonzero and, in full mode, the reference differs from the weights */
    double mmax = 0;
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; p->t[i].trainable && j < p->t[i].numel; j++) mmax = fmax(mmax, fabs((double)p->t[i].m[j]));
    cr_assert_gt(mmax, 0.1, "moments after 3 steps: largest |m| %g", mmax);
    const char *path = tmp("rt.safetensors");
    save_ok(p, 3, path);
    size_t nd;
    uint8_t (*before)[LS_DIGEST_SIZE] = digests_of(p, &nd);

    ls_params *q = make_params(mode, LS_GRAD_DETACHED, 2); /* other weights, zero moments */
    char name[128], err[1024] = "";
    cr_assert_not_null(first_difference(p, q, name));
    ls_checkpoint_info info;
    cr_assert_eq(K(ls_checkpoint_load)(q, path, &info, err, sizeof err), LS_OK, "%s", err);
    size_t nq;
    uint8_t (*after)[LS_DIGEST_SIZE] = digests_of(q, &nq);
    cr_assert_eq(nd, nq);
    for (size_t i = 0; i < nd; i++) cr_assert_eq(memcmp(before[i], after[i], LS_DIGEST_SIZE), 0, "buffer %zu", i);
    cr_assert_null(first_difference(p, q, name), "%s differs after the round trip", name);
    cr_assert_eq(K(ls_params_grad_sumsq)(q), 0.0, "load zeroes the gradients");
    ls_checkpoint_info want = test_info(3);
    cr_assert_eq(info.step, want.step);
    cr_assert_eq(info.seed, want.seed);
    cr_assert_str_eq(info.rng_scheme, want.rng_scheme);
    cr_assert(info.lr == want.lr && info.beta1 == want.beta1 && info.beta2 == want.beta2 && info.eps == want.eps &&
                  info.weight_decay == want.weight_decay,
              "hyper-parameters: lr %.17g", info.lr);

    /* the file through the plain reader: exactly the expected tensors, each equal to its buffer */
    ls_safetensors *sf = NULL;
    cr_assert_eq(ls_safetensors_open(&sf, path, err, sizeof err), LS_OK, "%s", err);
    buffer *b;
    size_t nb = buffers_of(p, &b), n_ref = 0;
    cr_assert_eq(ls_safetensors_count(sf), nb);
    for (size_t i = 0; i < nb; i++) {
        const ls_safetensors_tensor *t = ls_safetensors_find(sf, b[i].name);
        cr_assert_not_null(t, "%s", b[i].name);
        cr_assert_eq(t->nbytes, b[i].bytes);
        cr_assert_eq(memcmp(t->data, b[i].data, t->nbytes), 0, "%s", b[i].name); /* little-endian host */
        n_ref += strncmp(b[i].name, "reference.", 10) == 0;
    }
    cr_assert_eq(n_ref, mode == LS_TRAIN_FULL ? p->n : 0, "reference tensors: %zu", n_ref);
    cr_assert_eq(info.digested, 1, "a v2 checkpoint's digests are checked");
    char file_hex[LS_DIGEST_HEX_SIZE];
    cr_assert_eq(ls_digest_sha256_file_hex(path, file_hex, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(info.sha256, file_hex, "info.sha256 is the file's");
    expect_digests_of_file(sf, b, nb);
    cr_assert_str_eq(ls_safetensors_metadata_get(sf, "format"), LS_CHECKPOINT_FORMAT);
    cr_assert_str_eq(ls_safetensors_metadata_get(sf, "step"), "3");
    cr_assert_str_eq(ls_safetensors_metadata_get(sf, "seed"), "12345678901234567890");
    cr_assert_str_eq(ls_safetensors_metadata_get(sf, "dtype"), LS_REAL_NAME);
    cr_assert_str_eq(ls_safetensors_metadata_get(sf, "lr"), "0.30000000000000004");
    /* the metadata satisfies its schema */
    cJSON *meta = cJSON_CreateObject();
    for (size_t i = 0; i < ls_safetensors_metadata_count(sf); i++) {
        const char *k, *v;
        cr_assert_eq(ls_safetensors_metadata_at(sf, i, &k, &v), LS_OK);
        cJSON_AddStringToObject(meta, k, v);
    }
    const ls_schema *schema = NULL;
    cr_assert_eq(ls_schema_get("checkpoint-metadata", &schema, err, sizeof err), LS_OK, "%s", err);
    ls_schema_errors se = {0};
    char first[512];
    ls_status vs = ls_schema_validate(schema, meta, &se);
    ls_schema_errors_first(&se, first, sizeof first);
    cr_assert_eq(vs, LS_OK, "checkpoint metadata against schemas/checkpoint-metadata.schema.json: %s", first);
    ls_schema_errors_free(&se);
    cJSON_Delete(meta);
    fprintf(stderr, "test_checkpoint (%s): hybrid-tiny %s-mode checkpoint: %zu bytes, %zu tensors\n", LS_REAL_NAME,
            mode == LS_TRAIN_FULL ? "full" : "lora", file_size(path), nb);
    ls_safetensors_free(sf);
    free(b);
    free(before);
    free(after);
    K(ls_params_free)(p);
    K(ls_params_free)(q);
}

Test(checkpoint, round_trip_lora_bit_exact) { round_trip(LS_TRAIN_LORA); }
Test(checkpoint, round_trip_full_bit_exact) { round_trip(LS_TRAIN_FULL); }

/* ---- resume equals the uninterrupted run ------------------------------------------ */

typedef enum { RESUME_OK, RESUME_RESNAPSHOT_REF, RESUME_ZERO_MOMENTS } resume_kind;

/* 2N GRPO steps straight, against N, save, load into fresh parameters
 * (another init seed), N more; returns the first buffer that differs. */
static const char *resume_vs_straight(ls_train_mode mode, resume_kind how, char name[128]) {
    const int N = 2;
    ls_params *a = make_params(mode, LS_GRAD_DETACHED, 3);
    grpo_steps(a, 0, 2 * N);
    ls_params *b = make_params(mode, LS_GRAD_DETACHED, 3);
    grpo_steps(b, 0, N);
    const char *path = tmp("resume.safetensors");
    save_ok(b, N, path);
    ls_params *c = make_params(mode, LS_GRAD_DETACHED, 99);
    ls_checkpoint_info info;
    char err[1024] = "";
    cr_assert_eq(K(ls_checkpoint_load)(c, path, &info, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(info.step, N);
    if (how == RESUME_RESNAPSHOT_REF) K(ls_params_snapshot_ref)(c); /* what a weights-only --load does */
    if (how == RESUME_ZERO_MOMENTS)
        for (size_t i = 0; i < c->n; i++)
            if (c->t[i].trainable) memset(c->t[i].m, 0, c->t[i].numel * sizeof(ls_real));
    grpo_steps(c, info.step, N);
    const char *d = first_difference(a, c, name);
    K(ls_params_free)(a);
    K(ls_params_free)(b);
    K(ls_params_free)(c);
    return d;
}

Test(checkpoint, resume_equals_uninterrupted_lora) {
    char name[128];
    const char *d = resume_vs_straight(LS_TRAIN_LORA, RESUME_OK, name);
    cr_assert_null(d, "lora: %s differs between 4 straight steps and 2 + resume + 2", name);
    cr_assert_not_null(resume_vs_straight(LS_TRAIN_LORA, RESUME_ZERO_MOMENTS, name),
                       "a resume with the moments lost must differ");
}

Test(checkpoint, resume_equals_uninterrupted_full) {
    char name[128];
    const char *d = resume_vs_straight(LS_TRAIN_FULL, RESUME_OK, name);
    cr_assert_null(d, "full: %s differs between 4 straight steps and 2 + resume + 2", name);
    cr_assert_not_null(resume_vs_straight(LS_TRAIN_FULL, RESUME_ZERO_MOMENTS, name),
                       "a resume with the moments lost must differ");
    /* beta > 0: a resume whose reference is the resumed weights (not the saved copy) differs */
    d = resume_vs_straight(LS_TRAIN_FULL, RESUME_RESNAPSHOT_REF, name);
    cr_assert_not_null(d, "a resume with the reference re-snapshotted must differ");
    fprintf(stderr, "test_checkpoint (%s): re-snapshotted reference: first difference in %s\n", LS_REAL_NAME, name);
}

/* ---- refusals ----------------------------------------------------------------------- */

/* Load must fail with `want`, the message naming the path and every needle,
 * info untouched. */
static void expect_refused(ls_params *p, const char *path, ls_status want, const char *n1, const char *n2) {
    ls_checkpoint_info info, sentinel;
    memset(&sentinel, 0xA5, sizeof sentinel);
    info = sentinel;
    char err[1024] = "";
    ls_status st = K(ls_checkpoint_load)(p, path, &info, err, sizeof err);
    cr_assert_eq(st, want, "%s: status %s, want %s (%s)", path, ls_status_str(st), ls_status_str(want), err);
    cr_assert(strstr(err, path), "message names the file: %s", err);
    cr_assert(!n1 || strstr(err, n1), "message names '%s': %s", n1, err);
    cr_assert(!n2 || strstr(err, n2), "message names '%s': %s", n2, err);
    cr_assert_eq(memcmp(&info, &sentinel, sizeof info), 0, "info untouched on error");
    if (getenv("LS_SHOW")) fprintf(stderr, "REFUSED: %s\n", err);
}

typedef struct {
    const char *drop, *extra, *reshape; /* tensor names */
    const char *meta_key, *meta_value;  /* set key (value NULL: remove it) */
    const char *retype;                 /* tensor stored in the other float dtype */
    const char *poison;                 /* tensor whose element 1 becomes poison_value */
    double poison_value;
    int stale_digests;                  /* keep the source's digests as they were (no longer the content's) */
    int no_digests;                     /* write none (a v1 file, with meta_key "format") */
} mods;

/* Rewrite checkpoint src into dst with the safetensors writer, changed by m. */
static void rewrite(const char *src, const char *dst, const mods *m) {
    ls_safetensors *sf = NULL;
    ls_safetensors_writer *w = NULL;
    char err[512];
    cr_assert_eq(ls_safetensors_open(&sf, src, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    size_t n = ls_safetensors_count(sf);
    double **keep = calloc(n + 1, sizeof *keep);
    cr_assert_not_null(keep);
    for (size_t i = 0; i < n; i++) {
        const ls_safetensors_tensor *t = ls_safetensors_at(sf, i);
        if (m->drop && !strcmp(t->name, m->drop)) continue;
        keep[i] = malloc((size_t)t->numel * sizeof **keep + 1);
        cr_assert_eq(ls_safetensors_read_f64(t, keep[i], (size_t)t->numel), LS_OK);
        if (m->poison && !strcmp(t->name, m->poison)) keep[i][1] = m->poison_value;
        uint64_t flat[1] = {t->numel};
        int re = m->reshape && !strcmp(t->name, m->reshape);
        int rt = m->retype && !strcmp(t->name, m->retype);
        cr_assert_eq(ls_safetensors_writer_add_f64(w, t->name, rt ? OTHER_ST : t->dtype, re ? flat : t->shape,
                                                   re ? 1 : t->ndim, keep[i]),
                     LS_OK);
    }
    static const double one[1] = {1.0};
    uint64_t s1[1] = {1};
    if (m->extra) cr_assert_eq(ls_safetensors_writer_add_f64(w, m->extra, LS_SAFETENSORS_F32, s1, 1, one), LS_OK);
    /* the digests of the result, unless the change is to a digest or they are to stay stale or go */
    int digested = ls_safetensors_metadata_get(sf, LS_SAFETENSORS_CONTENT_DIGEST) != NULL;
    int redigest = digested && !m->stale_digests && !m->no_digests && !(m->meta_key && is_digest_key(m->meta_key));
    for (size_t i = 0; i < ls_safetensors_metadata_count(sf); i++) {
        const char *k, *v;
        cr_assert_eq(ls_safetensors_metadata_at(sf, i, &k, &v), LS_OK);
        if (m->meta_key && !strcmp(k, m->meta_key)) continue;
        if (is_digest_key(k) && (redigest || m->no_digests)) continue;
        cr_assert_eq(ls_safetensors_writer_set_metadata(w, k, v), LS_OK);
    }
    if (m->meta_key && m->meta_value) cr_assert_eq(ls_safetensors_writer_set_metadata(w, m->meta_key, m->meta_value), LS_OK);
    if (redigest) cr_assert_eq(ls_safetensors_writer_set_digests(w), LS_OK);
    cr_assert_eq(ls_safetensors_writer_write(w, dst, err, sizeof err), LS_OK, "%s", err);
    for (size_t i = 0; i < n; i++) free(keep[i]);
    free(keep);
    ls_safetensors_writer_free(w);
    ls_safetensors_free(sf);
}

/* A checkpoint of p (lora or full, 1 optimizer step) at tmp(name). */
static const char *valid_checkpoint(ls_params *p, const char *name) {
    optimizer_steps(p, 0, 1);
    const char *path = tmp(name);
    save_ok(p, 1, path);
    return path;
}

static void refuse_meta(ls_params *p, const char *good, const char *key, const char *value, const char *n1,
                        const char *n2) {
    const char *bad = tmp("bad-meta.safetensors");
    mods m = {.meta_key = key, .meta_value = value};
    rewrite(good, bad, &m);
    expect_refused(p, bad, LS_ERR_FORMAT, n1, n2);
}

Test(checkpoint, refuses_another_config_naming_the_key) {
    ls_model_config c = tiny_cfg();
    ls_params *p = params_of(&c, LS_TRAIN_LORA, 4, 1);
    ls_model_config small = c, big = c;
    small.d_model = 32;
    big.d_model = 128;
    ls_params *ps = params_of(&small, LS_TRAIN_LORA, 4, 1), *pb = params_of(&big, LS_TRAIN_LORA, 4, 1);
    save_ok(ps, 1, tmp("small.safetensors"));
    save_ok(pb, 1, tmp("big.safetensors"));
    expect_refused(p, tmp("small.safetensors"), LS_ERR_FORMAT, "config key 'd_model' is 32 in the checkpoint, 64 in this run",
                   "--config");
    /* larger than any checkpoint of p: refused from its header, before it is read */
    cr_assert_gt(file_size(tmp("big.safetensors")), K(ls_checkpoint_max_bytes)(p));
    expect_refused(p, tmp("big.safetensors"), LS_ERR_FORMAT, "config key 'd_model' is 128 in the checkpoint, 64 in this run",
                   NULL);
    K(ls_params_free)(ps);
    K(ls_params_free)(pb);
    K(ls_params_free)(p);
}

Test(checkpoint, refuses_another_objective_naming_the_key) {
    ls_model_config c = tiny_cfg();
    ls_params *p = params_of(&c, LS_TRAIN_LORA, 4, 1), *r8 = params_of(&c, LS_TRAIN_LORA, 8, 1);
    ls_params *full = params_of(&c, LS_TRAIN_FULL, 4, 1);
    save_ok(r8, 1, tmp("r8.safetensors"));
    save_ok(full, 1, tmp("full.safetensors"));
    expect_refused(p, tmp("r8.safetensors"), LS_ERR_FORMAT, "config key 'lora_r' is 8 in the checkpoint, 4 in this run",
                   "--lora-r");
    expect_refused(p, tmp("full.safetensors"), LS_ERR_FORMAT,
                   "config key 'train_mode' is 'full' in the checkpoint, 'lora' in this run", "--train-mode");
    expect_refused(full, tmp("r8.safetensors"), LS_ERR_FORMAT, "'train_mode' is 'lora' in the checkpoint", NULL);
    p->obj.beta = 0; /* the objective is part of the config: a run with another beta does not resume it */
    save_ok(r8, 1, tmp("r8.safetensors"));
    expect_refused(p, tmp("r8.safetensors"), LS_ERR_FORMAT, "'lora_r'", NULL); /* first mismatch in key order */
    K(ls_params_free)(r8);
    r8 = params_of(&c, LS_TRAIN_LORA, 4, 1);
    save_ok(r8, 1, tmp("b.safetensors"));
    expect_refused(p, tmp("b.safetensors"), LS_ERR_FORMAT, "config key 'beta' is 0.04 in the checkpoint, 0 in this run",
                   "--beta");
    K(ls_params_free)(r8);
    K(ls_params_free)(full);
    K(ls_params_free)(p);
}

Test(checkpoint, refuses_another_family_and_bad_config_json) {
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 1);
    const char *good = valid_checkpoint(p, "good.safetensors");
    char mla[2048], err[512];
    ls_model_config mc;
    cr_assert_eq(ls_config_load(&mc, LS_SOURCE_DIR "/configs/mla-tiny.json", err, sizeof err), LS_OK, "%s", err);
    cJSON *j = ls_config_to_json(&mc, &p->obj);
    cr_assert(cJSON_PrintPreallocated(j, mla, sizeof mla, 0));
    cJSON_Delete(j);
    refuse_meta(p, good, "config", mla, "config key 'family' is 'mla' in the checkpoint, 'hybrid' in this run", NULL);
    refuse_meta(p, good, "config", "{", "metadata 'config'", NULL);
    refuse_meta(p, good, "config", "[1]", "metadata 'config'", "not a JSON object");
    /* a valid JSON object that is not a valid config: the config reader names the key */
    j = ls_config_to_json(&p->cfg, &p->obj);
    cJSON_AddNumberToObject(j, "bogus_key", 1);
    cr_assert(cJSON_PrintPreallocated(j, mla, sizeof mla, 0));
    refuse_meta(p, good, "config", mla, "bogus_key", NULL);
    cJSON_DeleteItemFromObject(j, "bogus_key");
    cJSON_DeleteItemFromObject(j, "rope_dim");
    cr_assert(cJSON_PrintPreallocated(j, mla, sizeof mla, 0));
    refuse_meta(p, good, "config", mla, "rope_dim", NULL);
    cJSON_Delete(j);
    K(ls_params_free)(p);
}

Test(checkpoint, refuses_another_dtype) {
    ls_model_config c = tiny_cfg();
    ls_objective o;
    ls_objective_defaults(&o);
    ls_params *other = NULL, *p = params_of(&c, LS_TRAIN_LORA, 4, 1);
    char err[512];
    cr_assert_eq(OTHER(ls_params_init)(&other, &c, &o, 1, err, sizeof err), LS_OK, "%s", err);
    ls_checkpoint_info in = test_info(1);
    cr_assert_eq(OTHER(ls_checkpoint_save)(other, &in, tmp("other.safetensors"), err, sizeof err), LS_OK, "%s", err);
    OTHER(ls_params_free)(other);
    expect_refused(p, tmp("other.safetensors"), LS_ERR_FORMAT, "metadata 'dtype' is '" OTHER_NAME "'",
                   "--dtype " OTHER_NAME);
    /* metadata right, tensors in the other dtype */
    const char *good = valid_checkpoint(p, "good.safetensors");
    mods m = {.retype = "norm.weight"};
    rewrite(good, tmp("retyped.safetensors"), &m);
    expect_refused(p, tmp("retyped.safetensors"), LS_ERR_FORMAT, "tensor 'norm.weight' is " OTHER_ST_NAME ", a checkpoint", NULL);
    K(ls_params_free)(p);
}

Test(checkpoint, refuses_missing_extra_and_reshaped_tensors) {
    ls_params *lo = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 1), *fu = make_params(LS_TRAIN_FULL, LS_GRAD_DETACHED, 1);
    const char *gl = valid_checkpoint(lo, "lora.safetensors"), *gf = valid_checkpoint(fu, "full.safetensors");
    const char *bad = tmp("bad.safetensors");
    struct {
        const char *good;
        ls_params *p;
        mods m;
        const char *n1, *n2;
    } cases[] = {
        {gl, lo, {.drop = "optimizer.m.layers.0.mlp.gate.lora_A"}, "tensor 'optimizer.m.layers.0.mlp.gate.lora_A' (AdamW first moment", "missing"},
        {gl, lo, {.drop = "optimizer.v.lm_head.weight"}, NULL, NULL}, /* frozen in lora: never there; see below */
        {gf, fu, {.drop = "optimizer.v.embed.weight"}, "tensor 'optimizer.v.embed.weight' (AdamW second moment", "missing"},
        {gf, fu, {.drop = "reference.norm.weight"}, "tensor 'reference.norm.weight' (reference-policy copy", "missing"},
        {gl, lo, {.drop = "layers.3.attn.q_norm.weight"}, "tensor 'layers.3.attn.q_norm.weight' (weights) is missing", "missing"},
        {gl, lo, {.extra = "optimizer.m.embed.weight"}, "tensor 'optimizer.m.embed.weight' is not part of a checkpoint", NULL},
        {gl, lo, {.extra = "bogus"}, "tensor 'bogus' is not part", NULL},
        {gf, fu, {.extra = "reference.layers.0.mlp.gate.lora_A"}, "'reference.layers.0.mlp.gate.lora_A' is not part", NULL},
        {gl, lo, {.reshape = "embed.weight"}, "embed.weight", "shape"},
        {gf, fu, {.reshape = "optimizer.m.lm_head.weight"}, "optimizer.m.lm_head.weight", "shape"},
        {gl, lo, {.poison = "optimizer.v.layers.0.mlp.down.lora_B", .poison_value = -1e-3},
         "tensor 'optimizer.v.layers.0.mlp.down.lora_B' element 1 is -0.001", "never negative"},
        {gf, fu, {.poison = "optimizer.v.embed.weight", .poison_value = -0.0}, NULL, NULL}, /* -0 is fine */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (!cases[i].n1) { /* dropping a name the checkpoint does not have leaves it valid */
            rewrite(cases[i].good, bad, &cases[i].m);
            char err[512];
            cr_assert_eq(K(ls_checkpoint_load)(cases[i].p, bad, NULL, err, sizeof err), LS_OK, "%s", err);
            continue;
        }
        rewrite(cases[i].good, bad, &cases[i].m);
        expect_refused(cases[i].p, bad, LS_ERR_FORMAT, cases[i].n1, cases[i].n2);
    }
    /* non-finite values, in weights, moments and the reference copy */
    const char *nf[] = {"embed.weight", "optimizer.m.norm.weight", "reference.lm_head.weight"};
    for (size_t i = 0; i < 3; i++)
        for (int inf = 0; inf < 2; inf++) {
            mods m = {.poison = nf[i], .poison_value = inf ? -INFINITY : NAN};
            rewrite(gf, bad, &m);
            char want[160];
            snprintf(want, sizeof want, "tensor '%s' element 1 is %s", nf[i], inf ? "infinite" : "NaN");
            expect_refused(fu, bad, LS_ERR_NONFINITE, want, "finite values only");
        }
    K(ls_params_free)(lo);
    K(ls_params_free)(fu);
}

Test(checkpoint, refuses_malformed_metadata) {
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 1);
    const char *good = valid_checkpoint(p, "good.safetensors");
    const char *bad_steps[] = {"12x", "-1", "99999999999999999999", "9223372036854775808", "", "007", " 1", "1e3", "+1"};
    for (size_t i = 0; i < sizeof bad_steps / sizeof *bad_steps; i++)
        refuse_meta(p, good, "step", bad_steps[i], "metadata 'step'", "not a decimal integer");
    refuse_meta(p, good, "seed", "18446744073709551616", "metadata 'seed'", NULL);
    refuse_meta(p, good, "seed", "0x10", "metadata 'seed'", NULL);
    const char *bad_nums[] = {"nan", "inf", "0x1p3", "1e999", "", "1.0.0", "1e"};
    for (size_t i = 0; i < sizeof bad_nums / sizeof *bad_nums; i++)
        refuse_meta(p, good, "lr", bad_nums[i], "metadata 'lr'", "not a finite decimal number");
    refuse_meta(p, good, "weight_decay", "-", "metadata 'weight_decay'", NULL);
    refuse_meta(p, good, "rng_scheme", "", "metadata 'rng_scheme'", NULL);
    refuse_meta(p, good, "rng_scheme", "a\nb", "metadata 'rng_scheme'", NULL);
    char longs[200];
    memset(longs, 'x', sizeof longs - 1);
    longs[sizeof longs - 1] = 0;
    refuse_meta(p, good, "rng_scheme", longs, "metadata 'rng_scheme'", NULL);
    refuse_meta(p, good, "format", "longstraw.checkpoint.v3", "metadata 'format' is 'longstraw.checkpoint.v3'", NULL);
    refuse_meta(p, good, "dtype", "bf16", "metadata 'dtype' is 'bf16'", NULL);
    refuse_meta(p, good, "seed", NULL, "metadata key 'seed' is missing", NULL);
    refuse_meta(p, good, "config", NULL, "metadata key 'config' is missing", NULL);
    refuse_meta(p, good, "extra_key", "1", "metadata key 'extra_key' is not part of", NULL);
    /* the valid boundaries are accepted */
    const char *ok_steps[] = {"0", "9223372036854775807"};
    for (size_t i = 0; i < 2; i++) {
        mods m = {.meta_key = "step", .meta_value = ok_steps[i]};
        rewrite(good, tmp("ok.safetensors"), &m);
        ls_checkpoint_info info;
        char err[512];
        cr_assert_eq(K(ls_checkpoint_load)(p, tmp("ok.safetensors"), &info, err, sizeof err), LS_OK, "%s", err);
        cr_assert_eq(info.step, i ? INT64_MAX : 0);
    }
    K(ls_params_free)(p);
}

Test(checkpoint, refuses_weights_only_files) {
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 1);
    char err[512];
    cr_assert_eq(K(ls_params_save)(p, LS_PARAMS_WEIGHTS, tmp("init.safetensors"), err, sizeof err), LS_OK, "%s", err);
    expect_refused(p, tmp("init.safetensors"), LS_ERR_FORMAT, "not a checkpoint", "--load");
    cr_assert_eq(K(ls_params_save)(p, LS_PARAMS_TRAINABLE_GRADS, tmp("g.safetensors"), err, sizeof err), LS_OK, "%s", err);
    expect_refused(p, tmp("g.safetensors"), LS_ERR_FORMAT, "content gradients", NULL);
    const char *good = valid_checkpoint(p, "good.safetensors");
    refuse_meta(p, good, "format", NULL, "no 'format' key", "--load");
    K(ls_params_free)(p);
}

Test(checkpoint, refuses_truncated_files) {
    ls_params *p = make_params(LS_TRAIN_FULL, LS_GRAD_DETACHED, 1);
    const char *good = valid_checkpoint(p, "good.safetensors");
    size_t len = file_size(good);
    FILE *f = fopen(good, "rb");
    cr_assert_not_null(f);
    unsigned char *bytes = malloc(len);
    cr_assert_eq(fread(bytes, 1, len, f), len);
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
    size_t cuts[] = {0, 4, 8, 9, (size_t)(8 + hlen / 2), (size_t)(8 + hlen - 1), (size_t)(8 + hlen), (size_t)(8 + hlen + 3),
                     len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        const char *cut = tmp("cut.safetensors");
        f = fopen(cut, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(bytes, 1, cuts[i], f), cuts[i]);
        fclose(f);
        char err[1024] = "";
        ls_status st = K(ls_checkpoint_load)(p, cut, NULL, err, sizeof err);
        cr_assert(st == LS_ERR_TRUNCATED || st == LS_ERR_FORMAT, "cut at %zu of %zu: %s (%s)", cuts[i], len,
                  ls_status_str(st), err);
        cr_assert(strstr(err, cut), "cut at %zu: %s", cuts[i], err);
    }
    /* the bytes API agrees and never reads past len */
    char err[1024];
    cr_assert_eq(K(ls_checkpoint_load_bytes)(p, bytes, len, "mem", NULL, err, sizeof err), LS_OK, "%s", err);
    cr_assert_neq(K(ls_checkpoint_load_bytes)(p, bytes, len - 1, "mem", NULL, err, sizeof err), LS_OK);
    cr_assert(strstr(err, "checkpoint mem:"), "%s", err);
    free(bytes);
    K(ls_params_free)(p);
}

Test(checkpoint, refuses_oversized_and_non_files_before_reading) {
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 1);
    size_t cap = K(ls_checkpoint_max_bytes)(p);
    const char *huge = tmp("huge.safetensors");
    int fd = open(huge, O_CREAT | O_WRONLY, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)cap + 1), 0); /* sparse: no disk used */
    close(fd);
    ls_mem_reset_peaks();
    expect_refused(p, huge, LS_ERR_FORMAT, "more than a checkpoint of this run's config can hold", NULL);
    ls_mem_stats s;
    ls_mem_snapshot(&s);
    cr_assert_lt(s.peak_bytes[LS_MEM_SCRATCH], (size_t)1 << 16, "scratch peak %zu while refusing a %zu-byte file",
                 s.peak_bytes[LS_MEM_SCRATCH], cap + 1);
    expect_refused(p, dir, LS_ERR_IO, "not a regular file", NULL);
    expect_refused(p, tmp("absent.safetensors"), LS_ERR_IO, "cannot open", NULL);
    K(ls_params_free)(p);
}

Test(checkpoint, save_refuses_bad_info_and_unwritable_paths) {
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 1);
    char err[512];
    ls_checkpoint_info in = test_info(-1);
    cr_assert_eq(K(ls_checkpoint_save)(p, &in, tmp("x"), err, sizeof err), LS_ERR_ARG);
    cr_assert(strstr(err, "step"), "%s", err);
    in = test_info(1);
    in.rng_scheme[0] = 0;
    cr_assert_eq(K(ls_checkpoint_save)(p, &in, tmp("x"), err, sizeof err), LS_ERR_ARG);
    cr_assert(strstr(err, "rng_scheme"), "%s", err);
    in = test_info(1);
    in.beta2 = NAN;
    cr_assert_eq(K(ls_checkpoint_save)(p, &in, tmp("x"), err, sizeof err), LS_ERR_ARG);
    cr_assert(strstr(err, "beta2"), "%s", err);
    in = test_info(1);
    cr_assert_eq(K(ls_checkpoint_save)(p, &in, tmp("no/such/dir/x"), err, sizeof err), LS_ERR_IO);
    cr_assert(strstr(err, "no/such/dir/x"), "%s", err);
    size_t ti = 0;
    while (!p->t[ti].trainable) ti++;
    p->t[ti].m[3] = NAN; /* a checkpoint that could not be loaded is not written */
    cr_assert_eq(K(ls_checkpoint_save)(p, &in, tmp("x"), err, sizeof err), LS_ERR_NONFINITE);
    cr_assert(strstr(err, "optimizer.m.") && strstr(err, "element 3 is NaN"), "%s", err);
    cr_assert_neq(access(tmp("x"), F_OK), 0, "nothing written on refusal");
    K(ls_params_free)(p);
}

/* ---- digests: a corrupt file is refused, naming the tensor ----------------------- */

static unsigned char *read_all(const char *path, size_t *len) {
    *len = file_size(path);
    unsigned char *b = malloc(*len + 1);
    FILE *f = fopen(path, "rb");
    cr_assert(b && f, "%s", path);
    cr_assert_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static void write_all(const char *path, const unsigned char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(b, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/* src copied to dst with one bit flipped in tensor `name`'s data: the lowest
 * byte of its element 1, so that the value stays finite and of the same
 * sign (only the digest can tell). */
static void flip_byte(const char *src, const char *dst, const char *name) {
    size_t len;
    unsigned char *b = read_all(src, &len);
    ls_safetensors *sf = NULL;
    char err[512];
    cr_assert_eq(ls_safetensors_parse(&sf, b, len, err, sizeof err), LS_OK, "%s", err);
    const ls_safetensors_tensor *t = ls_safetensors_find(sf, name);
    cr_assert(t && t->numel >= 2, "%s: no tensor '%s' of 2 elements or more", src, name);
    size_t off = (size_t)(t->data - b) + ls_safetensors_dtype_size(t->dtype); /* element 1, lowest byte */
    ls_safetensors_free(sf);
    b[off] ^= 0x01;
    write_all(dst, b, len);
    free(b);
}

/* The digests of every buffer of p equal before[] (nothing was loaded). */
static void expect_unchanged(const ls_params *p, uint8_t (*before)[LS_DIGEST_SIZE], size_t n, const char *what) {
    size_t m;
    uint8_t (*now)[LS_DIGEST_SIZE] = digests_of(p, &m);
    cr_assert_eq(m, n);
    for (size_t i = 0; i < n; i++) cr_assert_eq(memcmp(now[i], before[i], LS_DIGEST_SIZE), 0, "%s: buffer %zu loaded", what, i);
    free(now);
}

Test(checkpoint, refuses_a_flipped_byte_naming_the_tensor) {
    struct {
        ls_train_mode mode;
        const char *names[4];
    } cases[] = {
        {LS_TRAIN_LORA, {"layers.0.mlp.down.lora_A", "optimizer.m.layers.3.attn.q.lora_B",
                         "optimizer.v.layers.0.gdn.in_z.lora_A", "norm.weight"}},
        {LS_TRAIN_FULL, {"embed.weight", "optimizer.m.lm_head.weight", "optimizer.v.norm.weight",
                         "reference.layers.0.mlp.down.weight"}},
    };
    for (size_t c = 0; c < 2; c++) {
        ls_params *p = make_params(cases[c].mode, LS_GRAD_DETACHED, 1);
        const char *good = valid_checkpoint(p, "good.safetensors"), *bad = tmp("flipped.safetensors");
        ls_params *q = make_params(cases[c].mode, LS_GRAD_DETACHED, 7);
        size_t n;
        uint8_t (*before)[LS_DIGEST_SIZE] = digests_of(q, &n);
        for (int k = 0; k < 4; k++) {
            const char *name = cases[c].names[k];
            flip_byte(good, bad, name);
            char want[200];
            snprintf(want, sizeof want, "tensor '%s': its data", name);
            /* --resume's loader */
            expect_refused(q, bad, LS_ERR_CORRUPT, want, "does not match its sha256");
            expect_unchanged(q, before, n, "--resume refused");
            /* --load's loader: the whole file is checked, moments and reference copy included */
            char err[1024] = "";
            ls_params_source src, sentinel;
            memset(&sentinel, 0x5A, sizeof sentinel);
            src = sentinel;
            ls_status st = K(ls_params_load_source)(q, bad, &src, err, sizeof err);
            cr_assert_eq(st, LS_ERR_CORRUPT, "--load of %s flipped: %s (%s)", name, ls_status_str(st), err);
            cr_assert(strstr(err, bad) && strstr(err, want), "--load names the file and the tensor: %s", err);
            cr_assert_eq(memcmp(&src, &sentinel, sizeof src), 0, "src untouched on error");
            expect_unchanged(q, before, n, "--load refused");
            if (getenv("LS_SHOW")) fprintf(stderr, "REFUSED (--load): %s\n", err);
        }
        /* the same file unflipped loads through both */
        ls_checkpoint_info info;
        ls_params_source src;
        char err[1024] = "", hex[LS_DIGEST_HEX_SIZE];
        cr_assert_eq(K(ls_checkpoint_load)(q, good, &info, err, sizeof err), LS_OK, "%s", err);
        cr_assert_eq(K(ls_params_load_source)(q, good, &src, err, sizeof err), LS_OK, "%s", err);
        cr_assert_eq(ls_digest_sha256_file_hex(good, hex, err, sizeof err), LS_OK, "%s", err);
        cr_assert(info.digested && src.digested, "digests checked: %d %d", info.digested, src.digested);
        cr_assert_str_eq(info.sha256, hex);
        cr_assert_str_eq(src.sha256, hex);
        free(before);
        K(ls_params_free)(p);
        K(ls_params_free)(q);
    }
}

/* The digests themselves: stale ones (a metadata value, a shape, a tensor
 * changed after digesting) and malformed ones. */
Test(checkpoint, refuses_stale_and_malformed_digests) {
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 1);
    const char *good = valid_checkpoint(p, "good.safetensors"), *bad = tmp("bad.safetensors");
    mods stale[] = {{.meta_key = "step", .meta_value = "5", .stale_digests = 1},
                    {.meta_key = "lr", .meta_value = "0.5", .stale_digests = 1},
                    {.reshape = "embed.weight", .stale_digests = 1}};
    for (size_t i = 0; i < 3; i++) {
        rewrite(good, bad, &stale[i]);
        expect_refused(p, bad, LS_ERR_CORRUPT, "metadata 'content_sha256' does not match", "every tensor matches");
    }
    mods poison = {.poison = "layers.0.mlp.up.lora_B", .poison_value = 0.25, .stale_digests = 1};
    rewrite(good, bad, &poison);
    expect_refused(p, bad, LS_ERR_CORRUPT, "tensor 'layers.0.mlp.up.lora_B': its data", NULL);
    mods dropped = {.drop = "layers.0.mlp.up.lora_B", .stale_digests = 1};
    rewrite(good, bad, &dropped);
    expect_refused(p, bad, LS_ERR_FORMAT, "names tensor 'layers.0.mlp.up.lora_B', which the file does not hold", NULL);
    /* the entries' own form */
    refuse_meta(p, good, LS_SAFETENSORS_TENSOR_DIGESTS, NULL, "metadata key 'tensor_sha256' is missing", "digests");
    refuse_meta(p, good, LS_SAFETENSORS_CONTENT_DIGEST, NULL, "metadata key 'content_sha256' is missing", NULL);
    refuse_meta(p, good, LS_SAFETENSORS_CONTENT_DIGEST, "ABC", "'content_sha256' is not 64 lowercase hex", NULL);
    refuse_meta(p, good, LS_SAFETENSORS_TENSOR_DIGESTS, "[]", "not a JSON object", NULL);
    refuse_meta(p, good, LS_SAFETENSORS_TENSOR_DIGESTS, "{", "metadata 'tensor_sha256'", NULL);
    ls_safetensors *sf = NULL;
    char err[512];
    cr_assert_eq(ls_safetensors_open(&sf, good, err, sizeof err), LS_OK, "%s", err);
    cJSON *map = cJSON_Parse(ls_safetensors_metadata_get(sf, LS_SAFETENSORS_TENSOR_DIGESTS));
    ls_safetensors_free(sf);
    cr_assert_not_null(map);
    char *text;
    cJSON *m1 = cJSON_Duplicate(map, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(m1, "norm.weight");
    text = cJSON_PrintUnformatted(m1);
    refuse_meta(p, good, LS_SAFETENSORS_TENSOR_DIGESTS, text, "tensor 'norm.weight' has no digest", NULL);
    free(text);
    cJSON_AddStringToObject(m1, "norm.weight", "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef");
    text = cJSON_PrintUnformatted(m1);
    refuse_meta(p, good, LS_SAFETENSORS_TENSOR_DIGESTS, text, "tensor 'norm.weight' is not 64 lowercase hex", NULL);
    free(text);
    cJSON_Delete(m1);
    cJSON_AddStringToObject(map, "bogus", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    text = cJSON_PrintUnformatted(map);
    refuse_meta(p, good, LS_SAFETENSORS_TENSOR_DIGESTS, text, "names tensor 'bogus'", NULL);
    free(text);
    cJSON_Delete(map);
    K(ls_params_free)(p);
}

/* A v1 checkpoint (written before digests) still loads, unverified, and says
 * so; a v1 file with digests, or a v2 file without, is refused. */
Test(checkpoint, loads_v1_checkpoints_unverified) {
    ls_params *p = make_params(LS_TRAIN_FULL, LS_GRAD_DETACHED, 1);
    const char *good = valid_checkpoint(p, "good.safetensors"), *v1 = tmp("v1.safetensors");
    rewrite(good, v1, &(mods){.meta_key = "format", .meta_value = LS_CHECKPOINT_FORMAT_V1, .no_digests = 1});
    ls_params *q = make_params(LS_TRAIN_FULL, LS_GRAD_DETACHED, 7);
    ls_checkpoint_info info;
    ls_params_source src;
    char err[1024] = "", hex[LS_DIGEST_HEX_SIZE], name[128];
    cr_assert_eq(K(ls_checkpoint_load)(q, v1, &info, err, sizeof err), LS_OK, "%s", err);
    cr_assert_null(first_difference(p, q, name), "%s differs after a v1 resume", name);
    cr_assert_eq(info.digested, 0, "a v1 file has no digest to check");
    cr_assert_eq(ls_digest_sha256_file_hex(v1, hex, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(info.sha256, hex);
    cr_assert_eq(K(ls_params_load_source)(q, v1, &src, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(src.digested, 0);
    cr_assert_str_eq(src.sha256, hex);
    /* a byte flipped in a v1 file: nothing can tell (the reason v2 exists) */
    flip_byte(v1, tmp("v1-flipped.safetensors"), "embed.weight");
    cr_assert_eq(K(ls_checkpoint_load)(q, tmp("v1-flipped.safetensors"), &info, err, sizeof err), LS_OK, "%s", err);
    cr_assert_not_null(first_difference(p, q, name), "the flipped byte was loaded");
    /* the formats' key sets */
    rewrite(good, tmp("v1d.safetensors"), &(mods){.meta_key = "format", .meta_value = LS_CHECKPOINT_FORMAT_V1});
    expect_refused(q, tmp("v1d.safetensors"), LS_ERR_FORMAT, "is not part of longstraw.checkpoint.v1", NULL);
    rewrite(good, tmp("v2n.safetensors"), &(mods){.no_digests = 1});
    expect_refused(q, tmp("v2n.safetensors"), LS_ERR_FORMAT, "metadata key 'tensor_sha256' is missing", NULL);
    ls_status st = K(ls_params_load_source)(q, tmp("v2n.safetensors"), &src, err, sizeof err);
    cr_assert_eq(st, LS_ERR_FORMAT, "--load of a v2 file without digests: %s", err);
    cr_assert(strstr(err, "without its digests"), "%s", err);
    K(ls_params_free)(p);
    K(ls_params_free)(q);
}

/* Weights files (--save-init, --dump-grads) carry the digests too; --load
 * checks them; ls_params_sha256 is the sha256 of the file ls_params_save
 * writes (the receipts' initial_weights). */
Test(checkpoint, weights_files_are_digested) {
    ls_params *p = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 1);
    char err[1024] = "", hex[LS_DIGEST_HEX_SIZE], want[LS_DIGEST_HEX_SIZE];
    const char *w = tmp("init.safetensors");
    cr_assert_eq(K(ls_params_save)(p, LS_PARAMS_WEIGHTS, w, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(K(ls_params_sha256)(p, LS_PARAMS_WEIGHTS, hex, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_digest_sha256_file_hex(w, want, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(hex, want, "ls_params_sha256 is the written file's sha256");
    ls_params *q = make_params(LS_TRAIN_LORA, LS_GRAD_DETACHED, 7);
    ls_params_source src;
    cr_assert_eq(K(ls_params_load_source)(q, w, &src, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(src.digested, 1);
    cr_assert_str_eq(src.sha256, want);
    cr_assert_eq(K(ls_params_sha256)(q, LS_PARAMS_WEIGHTS, hex, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_eq(hex, want, "the loaded weights digest as the saved ones");
    /* another model state gives another digest */
    optimizer_steps(q, 0, 1);
    cr_assert_eq(K(ls_params_sha256)(q, LS_PARAMS_WEIGHTS, hex, err, sizeof err), LS_OK, "%s", err);
    cr_assert_str_neq(hex, want);
    flip_byte(w, tmp("init-flipped.safetensors"), "layers.3.attn.o.lora_A");
    ls_status st = K(ls_params_load_source)(q, tmp("init-flipped.safetensors"), &src, err, sizeof err);
    cr_assert_eq(st, LS_ERR_CORRUPT, "%s", err);
    cr_assert(strstr(err, "tensor 'layers.3.attn.o.lora_A': its data"), "%s", err);
    K(ls_params_free)(p);
    K(ls_params_free)(q);
}

/* ---- the fuzz target's seed corpus (float32 only) -------------------------------- */

#define SEED_DIR LS_SOURCE_DIR "/tests/fuzz/corpus/fuzz_checkpoint"

#if !LS_REAL_IS_F64
/* LS_WRITE_CHECKPOINT_SEEDS=1 rewrites the valid seeds and their mutations;
 * otherwise every committed seed-valid-* must still load with its digests
 * checked (a format change that forgets the corpus fails here), and every
 * seed-v1-valid-* (written before digests) must load unverified. */
Test(checkpoint, fuzz_seed_corpus) {
    const char *regen = getenv("LS_WRITE_CHECKPOINT_SEEDS");
    if (regen && !strcmp(regen, "1")) {
        for (int full = 0; full < 2; full++) {
            ls_params *p = NULL;
            cr_assert_eq(ls_micro_params(&p, full ? LS_TRAIN_FULL : LS_TRAIN_LORA, 5), LS_OK);
            optimizer_steps(p, 0, 2);
            char path[600], bad[600];
            snprintf(path, sizeof path, "%s/seed-valid-%s", SEED_DIR, full ? "full" : "lora");
            save_ok(p, 2, path);
            snprintf(bad, sizeof bad, "%s/seed-%s-step-12x", SEED_DIR, full ? "full" : "lora");
            rewrite(path, bad, &(mods){.meta_key = "step", .meta_value = "12x"});
            snprintf(bad, sizeof bad, "%s/seed-%s-no-moment", SEED_DIR, full ? "full" : "lora");
            rewrite(path, bad, &(mods){.drop = full ? "optimizer.m.embed.weight" : "optimizer.m.layers.0.mlp.up.lora_B"});
            snprintf(bad, sizeof bad, "%s/seed-%s-flipped-byte", SEED_DIR, full ? "full" : "lora");
            flip_byte(path, bad, full ? "optimizer.v.embed.weight" : "layers.0.mlp.up.lora_A");
            snprintf(bad, sizeof bad, "%s/seed-%s-no-digests", SEED_DIR, full ? "full" : "lora");
            rewrite(path, bad, &(mods){.no_digests = 1});
            snprintf(bad, sizeof bad, "%s/seed-%s-weights-only", SEED_DIR, full ? "full" : "lora");
            char err[512];
            cr_assert_eq(K(ls_params_save)(p, LS_PARAMS_WEIGHTS, bad, err, sizeof err), LS_OK, "%s", err);
            K(ls_params_free)(p);
        }
    }
    DIR *d = opendir(SEED_DIR);
    cr_assert_not_null(d, "%s", SEED_DIR);
    struct dirent *e;
    int valid = 0;
    size_t total = 0;
    while ((e = readdir(d))) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", SEED_DIR, e->d_name);
        if (e->d_name[0] != '.') total += file_size(path);
        int v1 = !strncmp(e->d_name, "seed-v1-valid-", 14);
        if (strncmp(e->d_name, "seed-valid-", 11) != 0 && !v1) continue;
        ls_params *p = NULL;
        cr_assert_eq(ls_micro_params(&p, strstr(e->d_name, "full") ? LS_TRAIN_FULL : LS_TRAIN_LORA, 5), LS_OK);
        char err[1024];
        ls_checkpoint_info info;
        cr_assert_eq(K(ls_checkpoint_load)(p, path, &info, err, sizeof err), LS_OK, "%s", err);
        cr_assert_eq(info.digested, !v1, "%s: digests checked %d", e->d_name, info.digested);
        K(ls_params_free)(p);
        valid += !v1;
    }
    closedir(d);
    cr_assert_geq(valid, 2, "valid seeds in %s", SEED_DIR);
    /* v2 files carry ~100 bytes of digest per tensor: a micro checkpoint is 12-16 KiB */
    cr_assert_lt(total, (size_t)384 << 10, "the corpus is %zu bytes", total);
}
#endif
