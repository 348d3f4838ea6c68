/* params_io.c - safetensors checkpoints of the parameter table. */
#include "trainer/io/params_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/checked.h"
#include "receipts/format/digest.h"
#include "trainer/io/checkpoint.h"
#include "trainer/base/mem_tracker.h"
#include "trainer/base/safetensors.h"

/* The writer of ls_params_save's file, digests set (*out the caller's). */
static ls_status params_writer(const ls_params *p, ls_params_what what, ls_safetensors_writer **out) {
    ls_safetensors_writer *w = NULL;
    ls_status st = ls_safetensors_writer_init(&w);
    for (size_t i = 0; st == LS_OK && i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (what == LS_PARAMS_TRAINABLE_GRADS && !t->trainable) continue;
        /* under EP another rank's expert from the assembled copy (trainer/dist/ep.h ls_ep_assemble) */
        const ls_real *data = LS_K(ls_params_slot)(p, i, what == LS_PARAMS_TRAINABLE_GRADS ? LS_SLOT_G : LS_SLOT_W);
        if (!data) { /* a remote expert not assembled: a caller's bug */
            st = LS_ERR_INTERNAL;
            break;
        }
        uint64_t shape[2] = {t->shape[0], t->shape[1]};
#if LS_REAL_IS_F64
        st = ls_safetensors_writer_add_f64(w, t->name, LS_SAFETENSORS_F64, shape, (size_t)t->ndim, data);
#else
        st = ls_safetensors_writer_add_f32(w, t->name, LS_SAFETENSORS_F32, shape, (size_t)t->ndim, data);
#endif
    }
    if (st == LS_OK) st = ls_safetensors_writer_set_metadata(w, "format", "longstraw");
    if (st == LS_OK) st = ls_safetensors_writer_set_metadata(w, "dtype", LS_REAL_NAME);
    if (st == LS_OK)
        st = ls_safetensors_writer_set_metadata(w, "content", what == LS_PARAMS_WEIGHTS ? "weights" : "gradients");
    if (st == LS_OK) st = ls_safetensors_writer_set_digests(w); /* last: they cover the rest */
    if (st != LS_OK) {
        ls_safetensors_writer_free(w);
        w = NULL;
    }
    *out = w;
    return st;
}

ls_status LS_K(ls_params_save)(const ls_params *p, ls_params_what what, const char *path, char *err,
                               size_t err_len) {
    ls_safetensors_writer *w = NULL;
    ls_status st = params_writer(p, what, &w);
    if (st == LS_OK) st = ls_safetensors_writer_write(w, path, err, err_len);
    else snprintf(err, err_len, "%s: cannot build the tensor list: %s%s", path, ls_status_str(st),
                  st == LS_ERR_INTERNAL ? " (another EP rank's experts were not assembled)" : "");
    ls_safetensors_writer_free(w);
    return st;
}

ls_status LS_K(ls_params_sha256)(const ls_params *p, ls_params_what what, char hex[65], char *err, size_t err_len) {
    ls_safetensors_writer *w = NULL;
    ls_status st = params_writer(p, what, &w);
    if (st == LS_OK) st = ls_safetensors_writer_sha256(w, hex, err, err_len);
    else snprintf(err, err_len, "cannot build the tensor list: %s", ls_status_str(st));
    ls_safetensors_writer_free(w);
    return st;
}

/* The whole regular file at path, at most cap bytes, into a tracked buffer
 * (*buf the caller's, ls_mem_free). */
static ls_status read_file(const char *path, size_t cap, unsigned char **buf, size_t *len, char *err, size_t err_len) {
    *buf = NULL;
    *len = 0;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, err_len, "%s: not a readable regular file%s%s", path, fd < 0 ? ": " : "",
                 fd < 0 ? strerror(errno) : "");
        if (fd >= 0) close(fd);
        return LS_ERR_IO;
    }
    ls_status st = LS_OK;
    size_t size = (size_t)sb.st_size, got = 0;
    if ((uint64_t)sb.st_size > (uint64_t)cap) {
        snprintf(err, err_len, "%s: %lld bytes, more than any checkpoint of this model can hold (%zu): another config?",
                 path, (long long)sb.st_size, cap);
        st = LS_ERR_FORMAT;
    } else if (size && !(*buf = ls_mem_alloc(LS_MEM_SCRATCH, size))) {
        snprintf(err, err_len, "%s: cannot allocate %zu bytes to read it", path, size);
        st = LS_ERR_NOMEM;
    }
    while (st == LS_OK && got < size) {
        ssize_t r = read(fd, *buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            snprintf(err, err_len, "%s: read: %s", path, r < 0 ? strerror(errno) : "the file shrank");
            st = LS_ERR_IO;
        } else {
            got += (size_t)r;
        }
    }
    close(fd);
    if (st != LS_OK) {
        ls_mem_free(*buf);
        *buf = NULL;
        return st;
    }
    *len = size;
    return LS_OK;
}

ls_status LS_K(ls_params_load_source)(ls_params *p, const char *path, ls_params_source *src, char *err,
                                      size_t err_len) {
    /* hostile files: a regular file no larger than a float64 training checkpoint
     * of this model in any train mode (weights, two moments, reference copy) */
    size_t numel = 0;
    for (size_t i = 0; i < p->n; i++) numel = ls_sat_add(numel, p->t[i].numel);
    size_t cap = ls_sat_add(ls_sat_mul3(numel, 4, sizeof(double)), ls_sat_add((size_t)16 << 20, ls_sat_mul(p->n, 2048)));
    unsigned char *bytes = NULL;
    size_t len = 0;
    ls_params_source got = {.digested = 0};
    ls_safetensors *sf = NULL;
    char e2[768];
    ls_status st = read_file(path, cap, &bytes, &len, err, err_len);
    if (st != LS_OK) return st;
    if ((st = ls_safetensors_parse(&sf, bytes, len, e2, sizeof e2)) != LS_OK) {
        snprintf(err, err_len, "%s: %s", path, e2);
        goto cleanup;
    }
    /* a training checkpoint (checkpoint.h) gives its weights; its moments and
     * reference copy are for --resume */
    const char *fmt = ls_safetensors_metadata_get(sf, "format");
    int v2 = fmt && !strcmp(fmt, LS_CHECKPOINT_FORMAT), ckpt = v2 || (fmt && !strcmp(fmt, LS_CHECKPOINT_FORMAT_V1));
    if ((st = ls_safetensors_verify_digests(sf, &got.digested, e2, sizeof e2)) != LS_OK) {
        snprintf(err, err_len, "%s: %s", path, e2);
        goto cleanup;
    }
    if (v2 && !got.digested) {
        snprintf(err, err_len, "%s: a %s checkpoint without its digests (metadata '%s', '%s')", path,
                 LS_CHECKPOINT_FORMAT, LS_SAFETENSORS_TENSOR_DIGESTS, LS_SAFETENSORS_CONTENT_DIGEST);
        st = LS_ERR_FORMAT;
        goto cleanup;
    }
    for (size_t i = 0; st == LS_OK && i < ls_safetensors_count(sf); i++) {
        const ls_safetensors_tensor *t = ls_safetensors_at(sf, i);
        if (ckpt && (!strncmp(t->name, "optimizer.", 10) || !strncmp(t->name, "reference.", 10))) continue;
        if (!LS_K(ls_params_find)(p, t->name)) {
            snprintf(err, err_len, "%s: tensor '%s' is not a parameter of this model (another config?)", path,
                     t->name);
            st = LS_ERR_FORMAT;
        }
    }
    for (size_t i = 0; st == LS_OK && i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        uint64_t shape[2] = {t->shape[0], t->shape[1]};
        if (t->ep_remote) { /* another EP rank's expert: present with its shape, loaded by its owner */
            const ls_safetensors_tensor *ft = ls_safetensors_find(sf, t->name);
            if (!ft) {
                snprintf(err, err_len, "%s: tensor '%s' is missing", path, t->name);
                st = LS_ERR_FORMAT;
            }
            continue;
        }
#if LS_REAL_IS_F64
        st = ls_safetensors_load_f64(sf, t->name, shape, (size_t)t->ndim, t->w, e2, sizeof e2);
#else
        st = ls_safetensors_load_f32(sf, t->name, shape, (size_t)t->ndim, t->w, e2, sizeof e2);
#endif
        if (st != LS_OK) snprintf(err, err_len, "%s: %s", path, e2);
    }
    if (st == LS_OK && (st = ls_digest_sha256_hex(bytes, len, got.sha256)) != LS_OK)
        snprintf(err, err_len, "%s: cannot digest the file: %s", path, ls_status_str(st));
    if (st == LS_OK) {
        LS_K(ls_params_snapshot_ref)(p);
        if (src) *src = got;
    }
cleanup:
    ls_safetensors_free(sf);
    ls_mem_free(bytes);
    return st;
}

ls_status LS_K(ls_params_load)(ls_params *p, const char *path, char *err, size_t err_len) {
    return LS_K(ls_params_load_source)(p, path, NULL, err, err_len);
}
