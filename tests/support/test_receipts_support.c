/* test_receipts_support.c - helpers for the receipts and schema tests
 * (contract in test_receipts_support.h). */
#define _XOPEN_SOURCE 700
#include "tests/support/test_receipts_support.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "receipts/format/build_info.h"
#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"
#include "receipts/schema/schema.h"

char *ls_test_mkdtemp(void) {
    char *dir = strdup("/tmp/ls-receipts-test-XXXXXX");
    cr_assert_not_null(dir);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    return dir;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

void ls_test_rmtree(const char *dir) {
    if (dir != NULL) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void ls_test_scratch_free(char **dir) {
    ls_test_rmtree(*dir);
    free(*dir);
    *dir = NULL;
}

void ls_test_write_file(const char *path, const void *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(bytes, 1, len, f), len, "short write to %s", path);
    cr_assert_eq(fclose(f), 0, "close %s", path);
}

char *ls_test_read_file(const char *path, size_t *len) {
    char *buf = NULL, err[512];
    size_t n = 0;
    ls_status st = ls_json_read_bytes(path, &buf, &n, err, sizeof err);
    cr_assert_eq(st, LS_OK, "%s", err);
    if (len != NULL) *len = n;
    return buf;
}

int ls_test_exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

cJSON *ls_test_config(void) {
    static const char text[] =
        "{\"family\":\"hybrid\",\"vocab\":256,\"d_model\":64,\"n_layers\":8,\"ffn_dim\":128,"
        "\"rms_eps\":1e-6,\"rope_theta\":10000,\"gdn_hk\":2,\"gdn_hv\":4,\"gdn_dk\":16,"
        "\"gdn_dv\":16,\"conv_kernel\":4,\"attn_heads\":4,\"attn_kv_heads\":2,\"head_dim\":32,"
        "\"rope_dim\":8,\"train_mode\":\"lora\",\"lora_r\":4,\"lora_alpha\":8,"
        "\"lora_experts\":false,\"grad_mode\":\"full\",\"epsilon\":0.2,\"beta\":0.04,"
        "\"temperature\":1}";
    cJSON *c = cJSON_Parse(text);
    cr_assert_not_null(c);
    return c;
}

static const ls_receipt_phase PHASES[] = {
    {"capture", 1, 1200000},  {"rollout", 1, 300000},  {"score", 1, 450000},
    {"replay", 4, 9100000},   {"prompt_bwd", 1, 2500000}, {"finalize", 1, 80000},
    {"optimizer", 1, 40000},
};
/* run peak, and the largest per-step peak (each <= its run peak) */
static const ls_receipt_memory MEMORY[] = {
    {"fixed", 1048576, 1048576}, {"prompt_state", 262144, 262144}, {"grad", 65536, 65536},
    {"branch", 131072, 120000},  {"score", 4096, 2048},
};

ls_receipt ls_test_receipt(uint32_t rank, uint32_t world, const cJSON *build,
                           const cJSON *config) {
    static char events[16][64];
    cr_assert_lt(rank, 16u);
    snprintf(events[rank], sizeof events[rank], "rank-%04u/events.jsonl.zst", (unsigned)rank);
    ls_receipt r = {0};
    r.run_id = "run-test-0001";
    r.rank = rank;
    r.world = world;
    r.host = "node-a";
    r.build = build;
    r.config = config;
    r.steps = 1;
    r.phases = PHASES;
    r.n_phases = sizeof PHASES / sizeof *PHASES;
    r.memory = MEMORY;
    r.n_memory = sizeof MEMORY / sizeof *MEMORY;
    r.run_total_peak_bytes = 1511424;
    r.rss_peak_bytes = 52428800;
    r.step_total_peak_bytes = 1500000;
    r.steps_measured = 1;
    r.step_total_peak_at = 0;
    r.events_file = events[rank];
    r.events_count = 420 + rank;
    r.events_last_seq = 419 + rank;
    r.status = LS_RECEIPT_COMPLETE;
    r.start_unix_ns = UINT64_C(1700000000123456789);
    r.end_unix_ns = UINT64_C(1700000005123456789);
    return r;
}

void ls_test_make_run(const char *dir, uint32_t world) {
    char err[1024], path[4096];
    cJSON *build = NULL;
    cr_assert_eq(ls_build_info_create("0.3.21", "Open MPI 4.1.4", &build), LS_OK);
    cJSON *config = ls_test_config();
    for (uint32_t r = 0; r < world; r++) {
        snprintf(path, sizeof path, "%s/rank-%04u", dir, (unsigned)r);
        cr_assert_eq(mkdir(path, 0777), 0, "mkdir %s", path);
        snprintf(path, sizeof path, "%s/rank-%04u/events.jsonl.zst", dir, (unsigned)r);
        char events[128];
        int n = snprintf(events, sizeof events, "{\"kind\":\"longstraw.trace.header\",\"rank\":%u}\n",
                         (unsigned)r);
        ls_test_write_file(path, events, (size_t)n);
        ls_receipt rec = ls_test_receipt(r, world, build, config);
        ls_status st = ls_receipt_write(dir, &rec, err, sizeof err);
        cr_assert_eq(st, LS_OK, "receipt %u: %s (%s)", (unsigned)r, err, ls_status_str(st));
    }
    snprintf(path, sizeof path, "%s/parity.json", dir);
    ls_test_write_file(path, "{\"placeholder\":true}\n", 21);
    ls_manifest m = {.run_id = "run-test-0001", .world = world, .build = build, .config = config};
    ls_status st = ls_manifest_write(dir, &m, err, sizeof err);
    cr_assert_eq(st, LS_OK, "manifest: %s (%s)", err, ls_status_str(st));
    cJSON_Delete(build);
    cJSON_Delete(config);
}

/* The python side: one verdict line ("1"/"0") per document.  Parsing is as
 * strict as ls_json_parse (no NaN/Infinity, no duplicate keys, no number
 * overflowing to infinity). */
static const char PY_SCRIPT[] =
    "import json, math, sys\n"
    "try:\n"
    "    import jsonschema\n"
    "except ImportError:\n"
    "    print(\"ERROR no jsonschema module in \" + sys.executable)\n"
    "    sys.exit(0)\n"
    "def pairs(kv):\n"
    "    d = {}\n"
    "    for k, v in kv:\n"
    "        if k in d:\n"
    "            raise ValueError(\"duplicate key\")\n"
    "        d[k] = v\n"
    "    return d\n"
    "def const(c):\n"
    "    raise ValueError(\"non-finite\")\n"
    "def flt(s):\n"
    "    f = float(s)\n"
    "    if math.isinf(f) or math.isnan(f):\n"
    "        raise ValueError(\"out of range\")\n"
    "    return f\n"
    "schema = json.load(open(sys.argv[1], encoding=\"utf-8\"))\n"
    "cls = jsonschema.Draft202012Validator\n"
    "cls.check_schema(schema)\n"
    "v = cls(schema)\n"
    "def verdict(b):\n"
    "    try:\n"
    "        doc = json.loads(b.decode(\"utf-8\"), object_pairs_hook=pairs,\n"
    "                         parse_constant=const, parse_float=flt)\n"
    "    except ValueError:\n"
    "        return 0\n"
    "    return 1 if v.is_valid(doc) else 0\n"
    "for path in sys.argv[2:]:\n"
    "    raw = open(path, \"rb\").read()\n"
    "    if path.endswith(\".jsonl\"):\n"
    "        for line in raw.split(b\"\\n\"):\n"
    "            if line.strip(b\" \\t\\r\"):\n"
    "                print(verdict(line))\n"
    "    else:\n"
    "        print(verdict(raw))\n";

static int append_quoted(char *cmd, size_t cap, const char *arg) {
    if (strchr(arg, '\'') != NULL) return -1;
    size_t n = strlen(cmd);
    int w = snprintf(cmd + n, cap - n, " '%s'", arg);
    return w < 0 || (size_t)w >= cap - n ? -1 : 0;
}

int ls_test_python_validate(const char *schema_path, const char *const *paths, size_t n,
                            int *verdicts, size_t cap, char *why, size_t whylen) {
    if (access(LS_TEST_PYTHON, X_OK) != 0) {
        snprintf(why, whylen, "%s not found: install python3 and python3-jsonschema",
                 LS_TEST_PYTHON);
        return -1;
    }
    size_t cmdcap = sizeof PY_SCRIPT + 4096 * (n + 2);
    char *cmd = malloc(cmdcap);
    cr_assert_not_null(cmd);
    snprintf(cmd, cmdcap, "%s -c '%s'", LS_TEST_PYTHON, PY_SCRIPT);
    int bad = append_quoted(cmd, cmdcap, schema_path);
    for (size_t i = 0; i < n && bad == 0; i++) bad = append_quoted(cmd, cmdcap, paths[i]);
    if (bad) {
        free(cmd);
        snprintf(why, whylen, "a path contains a quote or is too long");
        return -1;
    }
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (p == NULL) {
        snprintf(why, whylen, "popen %s: %s", LS_TEST_PYTHON, strerror(errno));
        return -1;
    }
    char line[512];
    int count = 0, failed = 0;
    while (fgets(line, sizeof line, p) != NULL) {
        if (strncmp(line, "ERROR", 5) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(why, whylen, "%s: install python3-jsonschema (Debian)", line);
            failed = 1;
        } else if ((size_t)count < cap && (line[0] == '0' || line[0] == '1')) {
            verdicts[count++] = line[0] == '1';
        }
    }
    int rc = pclose(p);
    if (failed) return -1;
    if (rc != 0) {
        snprintf(why, whylen, "%s exited with status %d validating with %s (see stderr)",
                 LS_TEST_PYTHON, rc, schema_path);
        return -1;
    }
    return count;
}

static int c_verdict(const ls_schema *s, const char *bytes, size_t len) {
    cJSON *doc = NULL;
    if (ls_json_parse(bytes, len, NULL, &doc, NULL, 0) != LS_OK) return 0;
    ls_status st = ls_schema_validate(s, doc, NULL);
    cJSON_Delete(doc);
    return st == LS_OK;
}

int ls_test_c_validate(const char *schema_path, const char *const *paths, size_t n,
                       int *verdicts, size_t *file_of, size_t cap, char *why, size_t whylen) {
    ls_schema *s = NULL;
    if (ls_schema_load_file(schema_path, &s, why, whylen) != LS_OK) return -1;
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        char *bytes = ls_test_read_file(paths[i], &len);
        size_t plen = strlen(paths[i]);
        if (plen > 6 && strcmp(paths[i] + plen - 6, ".jsonl") == 0) {
            for (char *q = bytes; q < bytes + len;) {
                char *nl = memchr(q, '\n', (size_t)(bytes + len - q));
                size_t l = nl != NULL ? (size_t)(nl - q) : (size_t)(bytes + len - q);
                size_t ws = 0;
                while (ws < l && (q[ws] == ' ' || q[ws] == '\t' || q[ws] == '\r')) ws++;
                if (ws < l && (size_t)count < cap) {
                    if (file_of != NULL) file_of[count] = i;
                    verdicts[count++] = c_verdict(s, q, l);
                }
                q += l + 1;
            }
        } else if ((size_t)count < cap) {
            if (file_of != NULL) file_of[count] = i;
            verdicts[count++] = c_verdict(s, bytes, len);
        }
        free(bytes);
    }
    ls_schema_free(s);
    return count;
}
