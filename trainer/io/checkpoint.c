/* checkpoint.c - training checkpoints (weights, AdamW moments, the reference
 * copy, step and seed) through the safetensors writer and reader. */
#include "trainer/io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/checked.h"
#include "receipts/format/digest.h"
#include "receipts/format/json_util.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/base/safetensors.h"

#if LS_REAL_IS_F64
#define ST_DTYPE LS_SAFETENSORS_F64
#else
#define ST_DTYPE LS_SAFETENSORS_F32
#endif

/* What a checkpoint tensor holds of parameter tensor i. */
typedef enum { SLOT_W = 0, SLOT_M, SLOT_V, SLOT_REF } slot_kind;
static const char *const SLOT_PREFIX[4] = {"", "optimizer.m.", "optimizer.v.", "reference."};
static const char *const SLOT_WHAT[4] = {"weights", "AdamW first moment", "AdamW second moment",
                                         "reference-policy copy"};

/* Metadata keys of longstraw.checkpoint.v2, in the order they are checked;
 * v1 has the first N_META_V1 (no digests). */
static const char *const META_KEYS[] = {"format", "dtype", "step", "seed", "rng_scheme", "config",
                                        "lr", "beta1", "beta2", "eps", "weight_decay",
                                        LS_SAFETENSORS_TENSOR_DIGESTS, LS_SAFETENSORS_CONTENT_DIGEST};
#define N_META (sizeof META_KEYS / sizeof *META_KEYS)
#define N_META_V1 (N_META - 2)

/* The storage of slot k of tensor i (NULL when the checkpoint has no such
 * tensor): moments of trainable tensors, reference weights where the view's
 * differ from the policy's (full train mode). */
static const ls_param_slot PARAM_SLOT[4] = {LS_SLOT_W, LS_SLOT_M, LS_SLOT_V, LS_SLOT_REF};
static ls_real *slot_data(const ls_params *p, const ls_params *ref, size_t i, slot_kind k) {
    const ls_tensor *t = &p->t[i];
    if (t->ep_remote) return LS_K(ls_params_slot)(p, i, PARAM_SLOT[k]); /* assembled from its owner, or NULL */
    switch (k) {
    case SLOT_W: return t->w;
    case SLOT_M: return t->trainable ? t->m : NULL;
    case SLOT_V: return t->trainable ? t->v : NULL;
    default: return ref->t[i].w != t->w ? ref->t[i].w : NULL;
    }
}

/* Whether the checkpoint holds slot k of tensor i: what slot_data gives,
 * and for another EP rank's expert (trainer/dist/ep.h) what its owner's
 * table gives: weights, moments when trainable, the reference copy of a base
 * tensor in full mode. */
static int slot_has(const ls_params *p, const ls_params *ref, size_t i, slot_kind k) {
    const ls_tensor *t = &p->t[i];
    if (!t->ep_remote) return slot_data(p, ref, i, k) != NULL;
    switch (k) {
    case SLOT_W: return 1;
    case SLOT_REF: return p->obj.train_mode == LS_TRAIN_FULL && !t->is_adapter;
    default: return t->trainable;
    }
}

static void slot_name(const ls_params *p, size_t i, slot_kind k, char name[128]) {
    snprintf(name, 128, "%s%s", SLOT_PREFIX[k], p->t[i].name);
}

/* Number of tensors a checkpoint of p holds, and their bytes (saturating). */
static void expected_size(const ls_params *p, const ls_params *ref, size_t *count, size_t *bytes) {
    *count = 0;
    *bytes = 0;
    for (size_t i = 0; i < p->n; i++)
        for (int k = 0; k < 4; k++)
            if (slot_has(p, ref, i, (slot_kind)k)) {
                (*count)++;
                *bytes = ls_sat_add(*bytes, ls_sat_mul(p->t[i].numel, sizeof(ls_real)));
            }
}

size_t LS_K(ls_checkpoint_max_bytes)(const ls_params *p) {
    ls_params *ref = NULL;
    if (LS_K(ls_params_ref_view)(&ref, p) != LS_OK) return SIZE_MAX;
    size_t count, bytes;
    expected_size(p, ref, &count, &bytes);
    LS_K(ls_params_free)(ref);
    /* header: at most ~250 bytes a tensor entry (names < 128) and ~200 of its digest in the
       metadata, the rest of the metadata < 4 KiB */
    return ls_sat_add(bytes, ls_sat_add((size_t)8 + 65536, ls_sat_mul(count, 768)));
}

/* ---- metadata values ------------------------------------------------------- */

/* A canonical decimal integer (no sign, no leading zero) <= max. */
static int parse_dec(const char *s, uint64_t max, uint64_t *out) {
    if (!s[0] || (s[0] == '0' && s[1])) return -1;
    uint64_t v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9') return -1;
        unsigned d = (unsigned)(*c - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* A finite decimal number (no hex, inf or nan: only digits, sign, point, exponent). */
static int parse_num(const char *s, double *out) {
    if (!s[0] || strspn(s, "0123456789+-.eE") != strlen(s)) return -1;
    char *end = NULL;
    errno = 0;
    double d = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(d)) return -1;
    *out = d;
    return 0;
}

static int scheme_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= LS_CHECKPOINT_SCHEME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return 0;
    return 1;
}

/* The text of a config value for messages ('hybrid', 64, true). */
static void value_text(const cJSON *v, char *buf, size_t cap) {
    if (cJSON_IsString(v)) snprintf(buf, cap, "'%.100s'", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v)) {
        char n[LS_JSON_NUMBER_MAX];
        if (!ls_json_format_number(v->valuedouble, n)) snprintf(n, sizeof n, "(non-finite)");
        snprintf(buf, cap, "%s", n);
    } else snprintf(buf, cap, "(missing)");
}

static int values_equal(const cJSON *a, const cJSON *b) {
    if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsBool(a) && cJSON_IsBool(b)) return cJSON_IsTrue(a) == cJSON_IsTrue(b);
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
    return 0;
}

/* Where a run sets config key `key`: its objective option, or --config. */
static const char *key_source(const char *key) {
    static const char *const OBJ[][2] = {{"train_mode", "--train-mode"}, {"lora_r", "--lora-r"},
                                         {"lora_alpha", "--lora-alpha"}, {"lora_experts", "the objective"},
                                         {"grad_mode", "--grad-mode"},   {"epsilon", "--epsilon"},
                                         {"beta", "--beta"},             {"temperature", "--temperature"}};
    for (size_t i = 0; i < sizeof OBJ / sizeof *OBJ; i++)
        if (!strcmp(key, OBJ[i][0])) return OBJ[i][1];
    return "--config";
}

/* The stored config (validated like an embedded config) against p's, key by
 * key in ls_config_to_json order (family first), then keys p does not have. */
static ls_status check_config(const ls_params *p, const char *text, const char *where, char *err,
                              size_t err_len) {
    cJSON *theirs = NULL, *mine = NULL;
    char e2[512], what[300];
    snprintf(what, sizeof what, "checkpoint %.200s: metadata 'config'", where);
    ls_status st = ls_json_parse(text, strlen(text), what, &theirs, e2, sizeof e2);
    if (st != LS_OK) {
        snprintf(err, err_len, "%s", e2);
        st = LS_ERR_FORMAT;
        goto cleanup;
    }
    mine = ls_config_to_json(&p->cfg, &p->obj);
    if (!mine) {
        snprintf(err, err_len, "checkpoint %s: out of memory describing this run's config", where);
        st = LS_ERR_NOMEM;
        goto cleanup;
    }
    st = LS_ERR_FORMAT;
    if (!cJSON_IsObject(theirs)) {
        snprintf(err, err_len, "%s: not a JSON object", what);
        goto cleanup;
    }
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(theirs, "family");
    const cJSON *myfam = cJSON_GetObjectItemCaseSensitive(mine, "family");
    char a[160], b[160];
    if (cJSON_IsString(fam) && !values_equal(fam, myfam)) { /* before the other family's keys */
        value_text(fam, a, sizeof a);
        value_text(myfam, b, sizeof b);
        snprintf(err, err_len, "checkpoint %s: config key 'family' is %s in the checkpoint, %s in this run (--config)",
                 where, a, b);
        goto cleanup;
    }
    ls_model_config c;
    ls_objective o;
    if (ls_config_from_json_with_objective(&c, &o, theirs, what, e2, sizeof e2) != LS_OK) {
        snprintf(err, err_len, "%s", e2);
        goto cleanup;
    }
    for (const cJSON *m = mine->child; m; m = m->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(theirs, m->string);
        if (values_equal(t, m)) continue;
        value_text(t, a, sizeof a);
        value_text(m, b, sizeof b);
        snprintf(err, err_len, "checkpoint %s: config key '%s' is %s in the checkpoint, %s in this run (%s)", where,
                 m->string, a, b, key_source(m->string));
        goto cleanup;
    }
    for (const cJSON *t = theirs->child; t; t = t->next)
        if (!cJSON_GetObjectItemCaseSensitive(mine, t->string)) {
            snprintf(err, err_len, "checkpoint %s: config key '%.100s' of the checkpoint is not a key of this run's config",
                     where, t->string);
            goto cleanup;
        }
    st = LS_OK;
cleanup:
    cJSON_Delete(theirs);
    cJSON_Delete(mine);
    return st;
}

#define META_BAD(...)                                                   \
    do {                                                                \
        int n_ = snprintf(err, err_len, "checkpoint %s: ", where);      \
        if (n_ >= 0 && (size_t)n_ < err_len)                            \
            snprintf(err + n_, err_len - (size_t)n_, __VA_ARGS__);      \
        return LS_ERR_FORMAT;                                           \
    } while (0)

/* What identifies a checkpoint's kind and model: format, dtype, config (any
 * may be NULL when absent).  Also used on the header alone of a file too
 * large to read (content: the "content" key of a weights-only file). */
static ls_status check_head(const ls_params *p, const char *fmt, const char *content, const char *dtype,
                            const char *config, const char *where, char *err, size_t err_len) {
    if (!fmt || !strcmp(fmt, "longstraw"))
        META_BAD("not a checkpoint: it has no '%s' metadata (%s%s%.40s); a weights-only file such as --save-init "
                 "writes is loaded with --load, not resumed",
                 LS_CHECKPOINT_FORMAT, fmt ? "format 'longstraw'" : "no 'format' key", content ? ", content " : "",
                 content ? content : "");
    if (strcmp(fmt, LS_CHECKPOINT_FORMAT) != 0 && strcmp(fmt, LS_CHECKPOINT_FORMAT_V1) != 0)
        META_BAD("metadata 'format' is '%.100s', not '%s' (or '%s'): another program's or version's file", fmt,
                 LS_CHECKPOINT_FORMAT, LS_CHECKPOINT_FORMAT_V1);
    if (!dtype) META_BAD("metadata key 'dtype' is missing");
    if (strcmp(dtype, LS_REAL_NAME) != 0)
        META_BAD("metadata 'dtype' is '%.20s', this run computes in %s; resume with --dtype %.20s (a checkpoint "
                 "resumes bit for bit only in the dtype it was written in)",
                 dtype, LS_REAL_NAME, (!strcmp(dtype, "f32") || !strcmp(dtype, "f64")) ? dtype : "f32|f64");
    if (!config) META_BAD("metadata key 'config' is missing");
    return check_config(p, config, where, err, err_len);
}

/* Every metadata key, in META_KEYS order, into *info. */
static ls_status check_metadata(const ls_params *p, const ls_safetensors *sf, const char *where,
                                ls_checkpoint_info *info, char *err, size_t err_len) {
    ls_status st = check_head(p, ls_safetensors_metadata_get(sf, "format"), ls_safetensors_metadata_get(sf, "content"),
                              ls_safetensors_metadata_get(sf, "dtype"), ls_safetensors_metadata_get(sf, "config"),
                              where, err, err_len);
    if (st != LS_OK) return st;
    const char *fmt = ls_safetensors_metadata_get(sf, "format"); /* v1 or v2: check_head */
    size_t n_meta = strcmp(fmt, LS_CHECKPOINT_FORMAT_V1) ? N_META : N_META_V1;
    for (size_t i = 0; i < ls_safetensors_metadata_count(sf); i++) {
        const char *k = NULL, *v = NULL;
        ls_safetensors_metadata_at(sf, i, &k, &v);
        size_t j = 0;
        while (j < n_meta && strcmp(k, META_KEYS[j]) != 0) j++;
        if (j == n_meta) META_BAD("metadata key '%.100s' is not part of %s", k, fmt);
    }
    const char *v[N_META];
    for (size_t j = 0; j < n_meta; j++)
        if (!(v[j] = ls_safetensors_metadata_get(sf, META_KEYS[j])))
            META_BAD("metadata key '%s' is missing%s", META_KEYS[j],
                     j >= N_META_V1 ? " (a " LS_CHECKPOINT_FORMAT " file carries its digests)" : "");
    uint64_t step = 0;
    if (parse_dec(v[2], (uint64_t)INT64_MAX, &step) != 0)
        META_BAD("metadata 'step' is '%.40s', not a decimal integer in [0, 2^63)", v[2]);
    if (parse_dec(v[3], UINT64_MAX, &info->seed) != 0)
        META_BAD("metadata 'seed' is '%.40s', not a decimal integer in [0, 2^64)", v[3]);
    info->step = (int64_t)step;
    if (!scheme_ok(v[4])) META_BAD("metadata 'rng_scheme' is not 1 to %d printable ASCII characters", LS_CHECKPOINT_SCHEME_MAX - 1);
    snprintf(info->rng_scheme, sizeof info->rng_scheme, "%s", v[4]);
    double *num[5] = {&info->lr, &info->beta1, &info->beta2, &info->eps, &info->weight_decay};
    for (int j = 0; j < 5; j++)
        if (parse_num(v[6 + j], num[j]) != 0) META_BAD("metadata '%s' is '%.40s', not a finite decimal number", META_KEYS[6 + j], v[6 + j]);
    return LS_OK;
}

/* ---- load -------------------------------------------------------------------- */

/* Every value finite, and second moments >= 0 (AdamW divides by their
 * square root): a healthy run never holds anything else (a non-finite
 * gradient stops it before the optimizer), and a NaN would also not keep its
 * bits through the reader's conversion. */
static ls_status check_values(const ls_real *x, size_t n, slot_kind k, const char *name, const char *where, char *err,
                              size_t err_len) {
    for (size_t j = 0; j < n; j++) {
        if (!isfinite(x[j])) {
            snprintf(err, err_len, "checkpoint %s: tensor '%s' element %zu is %s: a checkpoint holds finite values only",
                     where, name, j, isnan(x[j]) ? "NaN" : "infinite");
            return LS_ERR_NONFINITE;
        }
        if (k == SLOT_V && x[j] < 0) {
            snprintf(err, err_len, "checkpoint %s: tensor '%s' element %zu is %.9g: an AdamW second moment is never negative",
                     where, name, j, (double)x[j]);
            return LS_ERR_FORMAT;
        }
    }
    return LS_OK;
}

static ls_status load_tensors(ls_params *p, const ls_params *ref, const ls_safetensors *sf, const char *where,
                              char *err, size_t err_len) {
    char name[128], e2[512];
    size_t expected = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        for (int k = 0; k < 4; k++) {
            if (!slot_has(p, ref, i, (slot_kind)k)) continue;
            ls_real *dst = t->ep_remote ? NULL : slot_data(p, ref, i, (slot_kind)k);
            expected++;
            slot_name(p, i, (slot_kind)k, name);
            const ls_safetensors_tensor *ft = ls_safetensors_find(sf, name);
            if (!ft) {
                if (k == SLOT_W) snprintf(err, err_len, "checkpoint %s: tensor '%s' (weights) is missing", where, name);
                else snprintf(err, err_len, "checkpoint %s: tensor '%s' (%s of '%s') is missing", where, name,
                              SLOT_WHAT[k], t->name);
                return LS_ERR_FORMAT;
            }
            if (ft->dtype != ST_DTYPE) {
                snprintf(err, err_len, "checkpoint %s: tensor '%s' is %s, a checkpoint of an %s run holds %s", where,
                         name, ls_safetensors_dtype_name(ft->dtype), LS_REAL_NAME, ls_safetensors_dtype_name(ST_DTYPE));
                return LS_ERR_FORMAT;
            }
            if (!dst) continue; /* another EP rank's expert: its owner loads it */
            uint64_t shape[2] = {t->shape[0], t->shape[1]};
#if LS_REAL_IS_F64
            ls_status st = ls_safetensors_load_f64(sf, name, shape, (size_t)t->ndim, dst, e2, sizeof e2);
#else
            ls_status st = ls_safetensors_load_f32(sf, name, shape, (size_t)t->ndim, dst, e2, sizeof e2);
#endif
            if (st != LS_OK) {
                snprintf(err, err_len, "checkpoint %s: %s", where, e2);
                return LS_ERR_FORMAT;
            }
            if ((st = check_values(dst, t->numel, (slot_kind)k, name, where, err, err_len)) != LS_OK) return st;
        }
    }
    if (ls_safetensors_count(sf) == expected) return LS_OK;
    /* every expected name was found and names are unique: some file tensor is extra */
    for (size_t j = 0; j < ls_safetensors_count(sf); j++) {
        const char *fn = ls_safetensors_at(sf, j)->name;
        int found = 0;
        for (size_t i = 0; i < p->n && !found; i++)
            for (int k = 0; k < 4 && !found; k++) {
                if (!slot_has(p, ref, i, (slot_kind)k)) continue;
                slot_name(p, i, (slot_kind)k, name);
                found = !strcmp(name, fn);
            }
        if (!found) {
            snprintf(err, err_len, "checkpoint %s: tensor '%.120s' is not part of a checkpoint of this model "
                     "(another config or train mode?)", where, fn);
            return LS_ERR_FORMAT;
        }
    }
    snprintf(err, err_len, "checkpoint %s: internal: tensor count mismatch", where);
    return LS_ERR_INTERNAL;
}

static ls_status load_parsed(ls_params *p, const ls_safetensors *sf, const char *where, ls_checkpoint_info *info,
                             char *err, size_t err_len) {
    ls_checkpoint_info got = {0};
    ls_params *ref = NULL;
    char e2[768];
    ls_status st = check_metadata(p, sf, where, &got, err, err_len);
    if (st != LS_OK) return st;
    /* v2: every tensor's bytes and the content against their digests, before anything is loaded */
    if ((st = ls_safetensors_verify_digests(sf, &got.digested, e2, sizeof e2)) != LS_OK) {
        snprintf(err, err_len, "checkpoint %s: %s", where, e2);
        return st;
    }
    if ((st = LS_K(ls_params_ref_view)(&ref, p)) != LS_OK) {
        snprintf(err, err_len, "checkpoint %s: out of memory for the reference view", where);
        return st;
    }
    st = load_tensors(p, ref, sf, where, err, err_len);
    LS_K(ls_params_free)(ref);
    if (st != LS_OK) return st;
    LS_K(ls_params_zero_grads)(p);
    if (info) *info = got;
    return LS_OK;
}

ls_status LS_K(ls_checkpoint_load_bytes)(ls_params *p, const void *buf, size_t len, const char *where,
                                         ls_checkpoint_info *info, char *err, size_t err_len) {
    char e2[512];
    if (!where) where = "checkpoint";
    if (!p || p->is_view || (!buf && len)) {
        snprintf(err, err_len, "ls_checkpoint_load: %s", !p ? "NULL parameters" : p->is_view ? "p is a reference view" : "NULL buffer");
        return LS_ERR_ARG;
    }
    ls_safetensors *sf = NULL;
    ls_status st = ls_safetensors_parse(&sf, buf, len, e2, sizeof e2);
    if (st != LS_OK) {
        snprintf(err, err_len, "checkpoint %s: %s", where, e2);
        return st;
    }
    ls_checkpoint_info got;
    st = load_parsed(p, sf, where, &got, err, err_len);
    ls_safetensors_free(sf);
    if (st == LS_OK && (st = ls_digest_sha256_hex(buf, len, got.sha256)) != LS_OK)
        snprintf(err, err_len, "checkpoint %s: cannot digest the file: %s", where, ls_status_str(st));
    if (st == LS_OK && info) *info = got;
    return st;
}

static int read_full(int fd, void *buf, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = 0; /* end of file: the file shrank */
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* A file too large for p may be a checkpoint of a larger config: read only
 * its header (at most 1 MiB) and, when its metadata holds a config, name the
 * first key that differs.  1 with err written, 0 when nothing better than the
 * size can be said. */
static int oversize_config_mismatch(const ls_params *p, int fd, const char *path, char *err, size_t err_len) {
    unsigned char len8[8];
    uint64_t n = 0;
    if (read_full(fd, len8, 8) != 0) return 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    if (n == 0 || n > ((uint64_t)1 << 20)) return 0;
    char *hdr = ls_mem_alloc(LS_MEM_SCRATCH, (size_t)n);
    cJSON *doc = NULL;
    int said = 0;
    if (hdr && read_full(fd, hdr, (size_t)n) == 0 && ls_json_parse(hdr, (size_t)n, path, &doc, NULL, 0) == LS_OK) {
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(doc, "__metadata__");
        const char *v[4] = {NULL, NULL, NULL, NULL};
        static const char *const keys[4] = {"format", "content", "dtype", "config"};
        for (int i = 0; i < 4; i++) {
            const cJSON *it = cJSON_GetObjectItemCaseSensitive(meta, keys[i]);
            v[i] = cJSON_IsString(it) ? it->valuestring : NULL;
        }
        if (cJSON_IsObject(meta)) said = check_head(p, v[0], v[1], v[2], v[3], path, err, err_len) != LS_OK;
    }
    cJSON_Delete(doc);
    ls_mem_free(hdr);
    return said;
}

ls_status LS_K(ls_checkpoint_load)(ls_params *p, const char *path, ls_checkpoint_info *info, char *err,
                                   size_t err_len) {
    if (!p || !path) {
        snprintf(err, err_len, "ls_checkpoint_load: NULL %s", !p ? "parameters" : "path");
        return LS_ERR_ARG;
    }
    unsigned char *buf = NULL;
    ls_status st = LS_OK;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, err_len, "checkpoint %s: cannot open: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    struct stat sb;
    size_t size = 0, cap = LS_K(ls_checkpoint_max_bytes)(p);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, err_len, "checkpoint %s: not a regular file", path);
        st = LS_ERR_IO;
        goto cleanup;
    }
    if ((uint64_t)sb.st_size > (uint64_t)cap) { /* refused before the file is read */
        if (oversize_config_mismatch(p, fd, path, err, err_len)) {
            st = LS_ERR_FORMAT;
            goto cleanup;
        }
        snprintf(err, err_len, "checkpoint %s: %lld bytes, more than a checkpoint of this run's config can hold "
                 "(%zu bytes): a checkpoint of another (larger) config?", path, (long long)sb.st_size, cap);
        st = LS_ERR_FORMAT;
        goto cleanup;
    }
    size = (size_t)sb.st_size;
    if (size && !(buf = ls_mem_alloc(LS_MEM_SCRATCH, size))) {
        snprintf(err, err_len, "checkpoint %s: cannot allocate %zu bytes to read it", path, size);
        st = LS_ERR_NOMEM;
        goto cleanup;
    }
    if (read_full(fd, buf, size) != 0) {
        snprintf(err, err_len, "checkpoint %s: read: %s", path, errno ? strerror(errno) : "the file shrank");
        st = LS_ERR_IO;
        goto cleanup;
    }
    st = LS_K(ls_checkpoint_load_bytes)(p, buf, size, path, info, err, err_len);
cleanup:
    ls_mem_free(buf);
    close(fd);
    return st;
}

/* ---- save -------------------------------------------------------------------- */

static ls_status check_info(const ls_checkpoint_info *info, char *err, size_t err_len) {
    const double num[5] = {info->lr, info->beta1, info->beta2, info->eps, info->weight_decay};
    if (info->step < 0) {
        snprintf(err, err_len, "checkpoint info: step %lld is negative", (long long)info->step);
        return LS_ERR_ARG;
    }
    if (!scheme_ok(info->rng_scheme)) {
        snprintf(err, err_len, "checkpoint info: rng_scheme is not 1 to %d printable ASCII characters",
                 LS_CHECKPOINT_SCHEME_MAX - 1);
        return LS_ERR_ARG;
    }
    for (int j = 0; j < 5; j++)
        if (!isfinite(num[j])) {
            snprintf(err, err_len, "checkpoint info: %s is not finite", META_KEYS[6 + j]);
            return LS_ERR_ARG;
        }
    return LS_OK;
}

ls_status LS_K(ls_checkpoint_save)(const ls_params *p, const ls_checkpoint_info *info, const char *path,
                                   char *err, size_t err_len) {
    if (!p || !info || !path || p->is_view) {
        snprintf(err, err_len, "ls_checkpoint_save: %s", !p || !info || !path ? "NULL argument" : "p is a reference view");
        return LS_ERR_ARG;
    }
    ls_status st = check_info(info, err, err_len);
    if (st != LS_OK) return st;
    ls_safetensors_writer *w = NULL;
    ls_params *ref = NULL;
    cJSON *cfg = NULL;
    char *cfg_text = NULL;
    size_t cfg_len = 0;
    char name[128], e2[512];
    if ((st = ls_safetensors_writer_init(&w)) != LS_OK || (st = LS_K(ls_params_ref_view)(&ref, p)) != LS_OK) {
        snprintf(err, err_len, "%s: out of memory preparing the checkpoint", path);
        goto cleanup;
    }
    for (size_t i = 0; st == LS_OK && i < p->n; i++) {
        uint64_t shape[2] = {p->t[i].shape[0], p->t[i].shape[1]};
        for (int k = 0; st == LS_OK && k < 4; k++) {
            if (!slot_has(p, ref, i, (slot_kind)k)) continue;
            const ls_real *data = slot_data(p, ref, i, (slot_kind)k);
            slot_name(p, i, (slot_kind)k, name);
            if (!data) { /* another EP rank's expert, not assembled (trainer/dist/ep.h ls_ep_assemble) */
                snprintf(err, err_len, "%s: internal: tensor '%s' is another EP rank's and was not assembled", path,
                         name);
                st = LS_ERR_INTERNAL;
                break;
            }
            if ((st = check_values(data, p->t[i].numel, (slot_kind)k, name, path, err, err_len)) != LS_OK) break;
#if LS_REAL_IS_F64
            st = ls_safetensors_writer_add_f64(w, name, ST_DTYPE, shape, (size_t)p->t[i].ndim, data);
#else
            st = ls_safetensors_writer_add_f32(w, name, ST_DTYPE, shape, (size_t)p->t[i].ndim, data);
#endif
            if (st != LS_OK) snprintf(err, err_len, "%s: cannot add tensor '%s': %s", path, name, ls_status_str(st));
        }
    }
    if (st != LS_OK) goto cleanup;
    if (!(cfg = ls_config_to_json(&p->cfg, &p->obj)) ||
        (st = ls_json_print_canonical(cfg, &cfg_text, &cfg_len, e2, sizeof e2)) != LS_OK) {
        snprintf(err, err_len, "%s: cannot print the config: %s", path, cfg ? e2 : "out of memory");
        if (st == LS_OK) st = LS_ERR_NOMEM;
        goto cleanup;
    }
    char num[5][LS_JSON_NUMBER_MAX], step[24], seed[24];
    const double nv[5] = {info->lr, info->beta1, info->beta2, info->eps, info->weight_decay};
    for (int j = 0; j < 5; j++) ls_json_format_number(nv[j], num[j]); /* finite: checked */
    snprintf(step, sizeof step, "%lld", (long long)info->step);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)info->seed);
    const char *vals[N_META_V1] = {LS_CHECKPOINT_FORMAT, LS_REAL_NAME, step, seed, info->rng_scheme, cfg_text,
                                num[0], num[1], num[2], num[3], num[4]};
    for (size_t j = 0; st == LS_OK && j < N_META_V1; j++) st = ls_safetensors_writer_set_metadata(w, META_KEYS[j], vals[j]);
    if (st == LS_OK) st = ls_safetensors_writer_set_digests(w); /* last: they cover the rest */
    if (st != LS_OK) {
        snprintf(err, err_len, "%s: cannot set the metadata: %s", path, ls_status_str(st));
        goto cleanup;
    }
    st = ls_safetensors_writer_write(w, path, err, err_len);
cleanup:
    free(cfg_text);
    cJSON_Delete(cfg);
    LS_K(ls_params_free)(ref);
    ls_safetensors_writer_free(w);
    return st;
}
