/* params_io.c - safetensors checkpoints of the parameter table. */
#include "trainer/params_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "common/checked.h"
#include "trainer/safetensors.h"

ls_status LS_K(ls_params_save)(const ls_params *p, ls_params_what what, const char *path, char *err,
                               size_t err_len) {
    ls_safetensors_writer *w = NULL;
    ls_status st = ls_safetensors_writer_init(&w);
    for (size_t i = 0; st == LS_OK && i < p->n; i++) {
        const ls_tensor *t = &p->t[i];
        if (what == LS_PARAMS_TRAINABLE_GRADS && !t->trainable) continue;
        const ls_real *data = what == LS_PARAMS_TRAINABLE_GRADS ? t->g : t->w;
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
    if (st == LS_OK) st = ls_safetensors_writer_write(w, path, err, err_len);
    else snprintf(err, err_len, "%s: cannot build the tensor list: %s", path, ls_status_str(st));
    ls_safetensors_writer_free(w);
    return st;
}

ls_status LS_K(ls_params_load)(ls_params *p, const char *path, char *err, size_t err_len) {
    /* hostile files: a regular file no larger than a float64 training checkpoint
     * of this model in any train mode (weights, two moments, reference copy) */
    struct stat sb;
    size_t numel = 0;
    for (size_t i = 0; i < p->n; i++) numel = ls_sat_add(numel, p->t[i].numel);
    size_t cap = ls_sat_add(ls_sat_mul3(numel, 4, sizeof(double)), ls_sat_add((size_t)16 << 20, ls_sat_mul(p->n, 2048)));
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, err_len, "%s: not a readable regular file", path);
        return LS_ERR_IO;
    }
    if ((uint64_t)sb.st_size > (uint64_t)cap) {
        snprintf(err, err_len, "%s: %lld bytes, more than any checkpoint of this model can hold (%zu): another config?",
                 path, (long long)sb.st_size, cap);
        return LS_ERR_FORMAT;
    }
    ls_safetensors *sf = NULL;
    ls_status st = ls_safetensors_open(&sf, path, err, err_len);
    if (st != LS_OK) return st;
    /* a training checkpoint (checkpoint.h) gives its weights; its moments and
     * reference copy are for --resume */
    const char *fmt = ls_safetensors_metadata_get(sf, "format");
    int ckpt = fmt && !strcmp(fmt, "longstraw.checkpoint.v1");
    for (size_t i = 0; st == LS_OK && i < ls_safetensors_count(sf); i++) {
        const ls_safetensors_tensor *t = ls_safetensors_at(sf, i);
        if (ckpt && (!strncmp(t->name, "optimizer.", 10) || !strncmp(t->name, "reference.", 10))) continue;
        if (!LS_K(ls_params_find)(p, t->name)) {
            snprintf(err, err_len, "%s: tensor '%s' is not a parameter of this model (another config?)", path,
                     t->name);
            st = LS_ERR_FORMAT;
        }
    }
    char e2[512];
    for (size_t i = 0; st == LS_OK && i < p->n; i++) {
        ls_tensor *t = &p->t[i];
        uint64_t shape[2] = {t->shape[0], t->shape[1]};
#if LS_REAL_IS_F64
        st = ls_safetensors_load_f64(sf, t->name, shape, (size_t)t->ndim, t->w, e2, sizeof e2);
#else
        st = ls_safetensors_load_f32(sf, t->name, shape, (size_t)t->ndim, t->w, e2, sizeof e2);
#endif
        if (st != LS_OK) snprintf(err, err_len, "%s: %s", path, e2);
    }
    ls_safetensors_free(sf);
    if (st == LS_OK) LS_K(ls_params_snapshot_ref)(p);
    return st;
}
