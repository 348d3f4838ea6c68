/* test_provenance.c - what a run read, recorded (the config's "inputs" in
 * every receipt and the manifest), and checkpoints that carry digests, from
 * the command line as a user runs longstraw-train.
 *
 * Independent reference: every recorded digest is compared with what
 * `sha256sum` prints for the file (the --config copy, the --rollouts file
 * or the prefix of it that was read, the --load and --resume checkpoints,
 * the --save-init file for the initial weights), and every byte count with
 * the file's size.  The faults injected: a byte of one tensor flipped in a
 * checkpoint (refused by --resume and by --load, naming the tensor, exit 2,
 * no run directory), a config file changed by one byte (another digest), a
 * v1 checkpoint (loads, with a warning).  Under mpirun -np 2 both ranks
 * record the same inputs as the manifest. */

#include "trainer/base/safetensors.h"

#include "tests/support/test_cli_util.h"

LS_TEST_CLI_TMPDIR("prov")

TestSuite(provenance, .init = setup, .fini = teardown, .timeout = 600);

#define COMMON "--prompt-len 64 --response-len 4 --group 2 --page-size 16 --quiet"

/* Two groups, each its own prompt and lengths. */
static const char *LINES[2] = {
    "{\"prompt\":[10,20,30,40,50,60,70,80,90,100,110,120],\"responses\":[[1,2,3],[4,5]],\"rewards\":[1,0]}\n",
    "{\"prompt\":[11,21,31,41,51,61,71,81,91,101],\"responses\":[[9,9],[8,8,8]],\"rewards\":[0,1]}\n"};

/* tmpdir/name (a static buffer per call site is not needed: the caller copies). */
static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static void write_rollouts(const char *path) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s", LINES[0], LINES[1]);
    write_text(path, text);
}

/* A copy of the tiny config at path; `extra` is appended (whitespace: the
 * same model in other bytes). */
static void copy_config(const char *path, const char *extra) {
    FILE *in = fopen(CFG, "rb");
    cr_assert_not_null(in);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    buf[n] = 0;
    char text[4200];
    snprintf(text, sizeof text, "%s%s", buf, extra ? extra : "");
    write_text(path, text);
}

/* What sha256sum prints for a file (the independent digest). */
static void sha256sum(const char *path, char hex[65]) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    cr_assert_eq(fscanf(p, "%64s", hex), 1, "sha256sum %s", path);
    cr_assert_eq(pclose(p), 0, "sha256sum %s failed", path);
}

static long long file_size(const char *path) {
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "%s", path);
    return (long long)sb.st_size;
}

/* A copy of config's "inputs" of RUN/rank-NNNN/receipt.json (rank >= 0) or
 * RUN/manifest.json (rank -1); the caller deletes it. */
static cJSON *inputs_of(const char *dir, int rank) {
    char p[600], err[512];
    cJSON *doc = NULL;
    if (rank >= 0) snprintf(p, sizeof p, "%s/rank-%04d/receipt.json", dir, rank);
    else snprintf(p, sizeof p, "%s/manifest.json", dir);
    cr_assert_eq(ls_json_read_file(p, &doc, err, sizeof err), LS_OK, "%s", err);
    const cJSON *pred = cJSON_GetObjectItemCaseSensitive(doc, "predicate");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(pred, "config");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(cfg, "inputs");
    cr_assert(cJSON_IsObject(in), "%s: no config.inputs", p);
    cJSON *copy = cJSON_Duplicate(in, 1);
    cJSON_Delete(doc);
    return copy;
}

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void expect_digest(const cJSON *in, const char *key, const char *file, const char *where) {
    char want[65];
    sha256sum(file, want);
    const char *got = str_of(in, key);
    cr_expect(got && !strcmp(got, want), "%s: inputs.%s is %s, sha256sum %s gives %s", where, key, got ? got : "(absent)",
              file, want);
}

static void expect_rollouts(const cJSON *in, const char *file, const char *where) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(in, "rollouts");
    cr_assert(cJSON_IsObject(r), "%s: no inputs.rollouts", where);
    expect_digest(r, "sha256", file, where);
    uint64_t bytes = 0;
    cr_expect_eq(ls_json_get_u64(r, "bytes", &bytes), 0);
    cr_expect_eq((long long)bytes, file_size(file), "%s: inputs.rollouts.bytes %llu, the file %lld", where,
                 (unsigned long long)bytes, file_size(file));
}

static void expect_keys(const cJSON *in, const char *const *keys, size_t n, const char *where) {
    cr_expect_eq((size_t)cJSON_GetArraySize(in), n, "%s: %d inputs recorded, want %zu", where, cJSON_GetArraySize(in), n);
    for (size_t i = 0; i < n; i++)
        cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(in, keys[i]), "%s: inputs.%s absent", where, keys[i]);
}

/* The receipt's and the manifest's inputs equal the digests of the files,
 * and nothing else is recorded: no path, no unused input. */
Test(provenance, receipt_and_manifest_record_the_inputs_digests) {
    char cfg[300], ro[300], init[300], rd[300], a[2048];
    path_of(cfg, sizeof cfg, "model.json");
    path_of(ro, sizeof ro, "groups.jsonl");
    path_of(init, sizeof init, "init.safetensors");
    path_of(rd, sizeof rd, "run");
    copy_config(cfg, NULL);
    write_rollouts(ro);
    snprintf(a, sizeof a, "--config %s --rollouts %s --save-init %s --out %s --quiet", cfg, ro, init, rd);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    static const char *const keys[] = {"config", "rollouts", "initial_weights"};
    for (int k = -1; k <= 0; k++) {
        const char *where = k < 0 ? "manifest" : "receipt";
        cJSON *in = inputs_of(rd, k);
        expect_keys(in, keys, 3, where);
        expect_digest(in, "config", cfg, where);
        expect_rollouts(in, ro, where);
        expect_digest(in, "initial_weights", init, where);
        char *text = cJSON_PrintUnformatted(in);
        cr_expect(!strstr(text, tmpdir), "%s: a path in the inputs: %s", where, text);
        free(text);
        cJSON_Delete(in);
    }
    /* the digests are of the bytes, not of the model: the receipt still validates (its schema) */
    ls_receipt *r = read_receipt(rd);
    ls_receipt_free(r);
}

/* The same inputs from two other directories record equal inputs; one byte
 * more in the config file records another config digest (and nothing else
 * changes: the model is the same). */
Test(provenance, same_inputs_equal_a_changed_config_differs) {
    char a[2048], d[2][300], cfg[3][300], ro[2][300], rd[3][300];
    for (int i = 0; i < 2; i++) {
        snprintf(d[i], sizeof d[i], "%s/dir%d", tmpdir, i);
        cr_assert_eq(mkdir(d[i], 0755), 0);
        snprintf(cfg[i], sizeof cfg[i], "%s/c%d.json", d[i], i);
        snprintf(ro[i], sizeof ro[i], "%s/r%d.jsonl", d[i], i);
        snprintf(rd[i], sizeof rd[i], "%s/run", d[i]);
        copy_config(cfg[i], NULL);
        write_rollouts(ro[i]);
        snprintf(a, sizeof a, "--config %s --rollouts %s --out %s --seed 5 --quiet", cfg[i], ro[i], rd[i]);
        cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    }
    cJSON *i0 = inputs_of(rd[0], 0), *i1 = inputs_of(rd[1], 0), *m1 = inputs_of(rd[1], -1);
    char *t0 = cJSON_PrintUnformatted(i0), *t1 = cJSON_PrintUnformatted(i1);
    cr_expect(cJSON_Compare(i0, i1, 1), "same inputs, other directories:\n%s\n%s", t0, t1);
    cr_expect(cJSON_Compare(i1, m1, 1), "receipt and manifest agree");
    path_of(cfg[2], sizeof cfg[2], "changed.json");
    path_of(rd[2], sizeof rd[2], "run-changed");
    copy_config(cfg[2], "\n");
    snprintf(a, sizeof a, "--config %s --rollouts %s --out %s --seed 5 --quiet", cfg[2], ro[0], rd[2]);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    cJSON *i2 = inputs_of(rd[2], 0);
    cr_expect_str_neq(str_of(i2, "config"), str_of(i0, "config"), "a changed config file records another digest");
    expect_digest(i2, "config", cfg[2], "changed config");
    cr_expect_str_eq(str_of(i2, "initial_weights"), str_of(i0, "initial_weights"), "the same model, the same weights");
    cr_expect(cJSON_Compare(cJSON_GetObjectItem(i2, "rollouts"), cJSON_GetObjectItem(i0, "rollouts"), 1));
    free(t0);
    free(t1);
    cJSON_Delete(i0);
    cJSON_Delete(i1);
    cJSON_Delete(m1);
    cJSON_Delete(i2);
}

/* --rollouts - : the digest of what was read from standard input; with
 * --steps 1 of a two-line stream, the first line (and its newline) only,
 * whatever else the pipe had delivered. */
Test(provenance, rollouts_from_stdin_digest_what_was_read) {
    char ro[300], first[300], rd[300], a[2048];
    path_of(ro, sizeof ro, "groups.jsonl");
    path_of(first, sizeof first, "first.jsonl");
    write_rollouts(ro);
    write_text(first, LINES[0]);
    path_of(rd, sizeof rd, "all");
    snprintf(a, sizeof a, "--config %s --rollouts - --out %s --quiet < %s", CFG, rd, ro);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    cJSON *in = inputs_of(rd, 0);
    expect_rollouts(in, ro, "stdin, to its end");
    cJSON_Delete(in);
    path_of(rd, sizeof rd, "one");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cat %s | " TRAIN " --config %s --rollouts - --steps 1 --out %s --quiet", ro, CFG, rd);
    snprintf(a, sizeof a, "sh -c '%s' >%s/out.txt 2>%s/err.txt", cmd, tmpdir, tmpdir);
    cr_assert_eq(system(a), 0, "%s", slurp("err.txt"));
    in = inputs_of(rd, 0);
    expect_rollouts(in, first, "stdin, one step of two lines");
    cJSON_Delete(in);
}

/* src copied to dst with one bit flipped in `tensor`'s data: the lowest byte
 * of its element 1 (F32), so that the value stays finite, of the same sign. */
static void flip_tensor_byte(const char *src, const char *dst, const char *tensor) {
    FILE *f = fopen(src, "rb");
    cr_assert_not_null(f);
    long long n = file_size(src);
    unsigned char *b = malloc((size_t)n);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    ls_safetensors *sf = NULL;
    char err[512];
    cr_assert_eq(ls_safetensors_parse(&sf, b, (size_t)n, err, sizeof err), LS_OK, "%s", err);
    const ls_safetensors_tensor *t = ls_safetensors_find(sf, tensor);
    cr_assert(t && t->nbytes >= 8, "%s: no tensor %s", src, tensor);
    size_t off = (size_t)(t->data - b) + 4; /* element 1 (F32), lowest byte */
    ls_safetensors_free(sf);
    b[off] ^= 0x01;
    f = fopen(dst, "wb");
    cr_assert_eq(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    free(b);
}

/* ck rewritten as a longstraw.checkpoint.v1 file: the same tensors, no digests. */
static void write_v1(const char *src, const char *dst) {
    ls_safetensors *sf = NULL;
    ls_safetensors_writer *w = NULL;
    char err[512];
    cr_assert_eq(ls_safetensors_open(&sf, src, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_safetensors_writer_init(&w), LS_OK);
    float **keep = calloc(ls_safetensors_count(sf), sizeof *keep);
    for (size_t i = 0; i < ls_safetensors_count(sf); i++) {
        const ls_safetensors_tensor *t = ls_safetensors_at(sf, i);
        keep[i] = malloc((size_t)t->numel * sizeof(float) + 1);
        cr_assert_eq(ls_safetensors_read_f32(t, keep[i], (size_t)t->numel), LS_OK);
        cr_assert_eq(ls_safetensors_writer_add_f32(w, t->name, t->dtype, t->shape, t->ndim, keep[i]), LS_OK);
    }
    for (size_t i = 0; i < ls_safetensors_metadata_count(sf); i++) {
        const char *k, *v;
        cr_assert_eq(ls_safetensors_metadata_at(sf, i, &k, &v), LS_OK);
        if (!strcmp(k, LS_SAFETENSORS_TENSOR_DIGESTS) || !strcmp(k, LS_SAFETENSORS_CONTENT_DIGEST)) continue;
        cr_assert_eq(ls_safetensors_writer_set_metadata(w, k, !strcmp(k, "format") ? "longstraw.checkpoint.v1" : v),
                     LS_OK);
    }
    cr_assert_eq(ls_safetensors_writer_write(w, dst, err, sizeof err), LS_OK, "%s", err);
    for (size_t i = 0; i < ls_safetensors_count(sf); i++) free(keep[i]);
    free(keep);
    ls_safetensors_writer_free(w);
    ls_safetensors_free(sf);
}

/* --resume and --load record the checkpoint's digest and start from its
 * weights (initial_weights = the --save-init file of the resumed run); a
 * byte flipped in one tensor is refused by both, naming the file and the
 * tensor, before anything is trained; a v1 checkpoint resumes with a
 * warning. */
Test(provenance, checkpoints_recorded_and_corrupt_ones_refused) {
    char a[2048], ck[300], bad[300], v1[300], init[300], rd[300];
    path_of(ck, sizeof ck, "ck.safetensors");
    path_of(bad, sizeof bad, "bad.safetensors");
    path_of(v1, sizeof v1, "v1.safetensors");
    path_of(init, sizeof init, "init.safetensors");
    snprintf(a, sizeof a, "--config %s " COMMON " --steps 1 --out %s/r0 --save %s", CFG, tmpdir, ck);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    struct {
        const char *opt, *key;
    } how[2] = {{"--resume", "resume"}, {"--load", "load"}};
    for (int h = 0; h < 2; h++) {
        snprintf(rd, sizeof rd, "%s/%s", tmpdir, how[h].key);
        snprintf(a, sizeof a, "--config %s " COMMON " --steps 1 --out %s %s %s --save-init %s", CFG, rd, how[h].opt, ck,
                 init);
        cr_assert_eq(run(a), 0, "%s: %s", how[h].opt, slurp("err.txt"));
        char *e = slurp("err.txt");
        cr_expect(!strstr(e, "warning"), "%s of a v2 checkpoint warns: %s", how[h].opt, e);
        free(e);
        cJSON *in = inputs_of(rd, 0);
        static const char *keys[2][3] = {{"config", "resume", "initial_weights"}, {"config", "load", "initial_weights"}};
        expect_keys(in, keys[h], 3, how[h].opt);
        expect_digest(in, how[h].key, ck, how[h].opt);
        expect_digest(in, "initial_weights", init, how[h].opt);
        cJSON_Delete(in);
        /* one byte of one tensor: refused, named, nothing trained */
        flip_tensor_byte(ck, bad, "layers.0.mlp.down.lora_A");
        snprintf(rd, sizeof rd, "%s/%s-bad", tmpdir, how[h].key);
        snprintf(a, sizeof a, "--config %s " COMMON " --steps 1 --out %s %s %s", CFG, rd, how[h].opt, bad);
        cr_expect_eq(run(a), 2, "%s of a corrupt checkpoint", how[h].opt);
        e = slurp("err.txt");
        cr_expect(strstr(e, how[h].opt) && strstr(e, bad) && strstr(e, "tensor 'layers.0.mlp.down.lora_A'") &&
                      strstr(e, "does not match its sha256"),
                  "%s names the file and the tensor: %s", how[h].opt, e);
        free(e);
        struct stat sb;
        cr_expect_neq(stat(rd, &sb), 0, "%s: a run directory was made for a refused checkpoint", how[h].opt);
        /* a v1 checkpoint (no digests): loads, with a warning; its digest is still recorded */
        write_v1(ck, v1);
        snprintf(rd, sizeof rd, "%s/%s-v1", tmpdir, how[h].key);
        snprintf(a, sizeof a, "--config %s " COMMON " --steps 1 --out %s %s %s", CFG, rd, how[h].opt, v1);
        cr_assert_eq(run(a), 0, "%s of a v1 checkpoint: %s", how[h].opt, slurp("err.txt"));
        e = slurp("err.txt");
        cr_expect(strstr(e, "warning") && strstr(e, v1) && strstr(e, "not verified"), "%s v1: %s", how[h].opt, e);
        free(e);
        in = inputs_of(rd, 0);
        expect_digest(in, how[h].key, v1, "v1");
        cJSON_Delete(in);
    }
}

#ifdef LS_MPIEXEC
/* Under mpirun -np 2 every rank reads every input itself: both receipts and
 * the manifest record the same inputs, equal to the files' digests. */
Test(provenance, both_ranks_record_the_same_inputs) {
    char a[2048], cmd[4096], ck[300], rd[300], cfg[300], ro[300];
    path_of(ck, sizeof ck, "ck.safetensors");
    path_of(cfg, sizeof cfg, "model.json");
    copy_config(cfg, " ");
    snprintf(a, sizeof a, "--config %s --prompt-len 67 --response-len 5 --group 2 --steps 1 --page-size 8 --quiet "
             "--out %s/r0 --save %s", cfg, tmpdir, ck);
    cr_assert_eq(run(a), 0, "%s", slurp("err.txt"));
    path_of(rd, sizeof rd, "cp2");
    path_of(ro, sizeof ro, "groups.jsonl");
    write_rollouts(ro);
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=" LS_LSAN_SUPP
             ":print_suppressions=0 timeout 120 " LS_MPIEXEC " " LS_MPIRUN_FLAGS " -np 2 " TRAIN
             " --config %s --rollouts %s --page-size 8 --quiet --load %s --out %s >%s/out.txt 2>%s/err.txt",
             cfg, ro, ck, rd, tmpdir, tmpdir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mpirun -np 2: %s", slurp("err.txt"));
    cJSON *m = inputs_of(rd, -1), *r0 = inputs_of(rd, 0), *r1 = inputs_of(rd, 1);
    char *t0 = cJSON_PrintUnformatted(r0), *t1 = cJSON_PrintUnformatted(r1);
    cr_expect(cJSON_Compare(r0, r1, 1), "rank 0 and rank 1 record other inputs:\n%s\n%s", t0, t1);
    cr_expect(cJSON_Compare(r0, m, 1), "the receipts and the manifest record other inputs");
    expect_digest(r1, "config", cfg, "rank 1");
    expect_digest(r1, "load", ck, "rank 1");
    expect_rollouts(r1, ro, "rank 1");
    cr_expect_not_null(str_of(r1, "initial_weights"));
    free(t0);
    free(t1);
    cJSON_Delete(m);
    cJSON_Delete(r0);
    cJSON_Delete(r1);
}
#endif
