/* test_build_digest.c - the build digest identifies what ran
 * (receipts/format/build_info.h):
 * - the executable's sha256 equals an independent sha256 (coreutils
 *   sha256sum) of the running file, and a shared library of the project
 *   loaded by the process (libls_digest_probe.so) is listed with its sha256;
 * - longstraw-train and a copy of it with one byte appended write receipts
 *   with different build digests; the same binary run twice, or copied to
 *   another path, gives the same digest;
 * - every digested member is protected (a tampered object is detected) and
 *   the paths are not digested;
 * - cmake/source_state.cmake, run on a temporary git repository, tells a
 *   clean tree from a modified, staged, deleted or untracked file, ignores
 *   ignored files, rewrites its header only when the content changes and
 *   writes nothing into the repository. */
#define _XOPEN_SOURCE 700 /* realpath, utimes */
/* paths here are short temporary names: truncation cannot happen */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "receipts/format/build_info.h"
#include "tests/support/test_receipts_support.h"

#define TRAIN LS_BINARY_DIR "/trainer/longstraw-train"
#define CFG LS_SOURCE_DIR "/configs/hybrid-tiny.json"
#define SCRIPT LS_SOURCE_DIR "/cmake/source_state.cmake"

int ls_digest_probe_value(void); /* tests/receipts/build_digest_probe.c, a shared library */

LS_TEST_SCRATCH

static int sh(const char *cmd) {
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

/* sha256 of a file by coreutils, independently of OpenSSL and digest.c */
static void sha256sum(const char *path, char hex[LS_DIGEST_HEX_SIZE]) {
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[256] = "";
    cr_assert_not_null(fgets(line, sizeof line, p), "%s printed nothing", cmd);
    cr_assert_eq(pclose(p), 0, "%s failed", cmd);
    cr_assert(strlen(line) > 64 && line[64] == ' ', "%s: unexpected output %s", cmd, line);
    memcpy(hex, line, 64);
    hex[64] = '\0';
}

static const char *str_at(const cJSON *o, const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b != NULL) x = cJSON_GetObjectItemCaseSensitive(x, b);
    cr_assert(cJSON_IsString(x), "member %s%s%s is not a string", a, b ? "." : "", b ? b : "");
    return x->valuestring;
}

/* ---- this process ------------------------------------------------------ */

TestSuite(build_digest, .init = setup, .fini = teardown, .timeout = 300);

Test(build_digest, executable_and_project_library_are_hashed) {
    cr_assert_eq(ls_digest_probe_value(), 42); /* keeps the library loaded */
    cJSON *b = NULL;
    cr_assert_eq(ls_build_info_create("x", "y", &b), LS_OK);
    char self[PATH_MAX], hex[LS_DIGEST_HEX_SIZE];
    cr_assert_not_null(realpath("/proc/self/exe", self));
    cr_expect_str_eq(str_at(b, "executable", "path"), self);
    sha256sum(self, hex);
    cr_expect_str_eq(str_at(b, "executable", "sha256"), hex, "executable sha256 %s, sha256sum %s",
                     str_at(b, "executable", "sha256"), hex);

    const cJSON *libs = cJSON_GetObjectItemCaseSensitive(b, "libraries");
    cr_assert(cJSON_IsArray(libs));
    int found = 0;
    const cJSON *lib = NULL;
    cJSON_ArrayForEach(lib, libs) {
        const char *name = str_at(lib, "name", NULL), *path = str_at(lib, "path", NULL);
        cr_expect(strncmp(name, "libls_", 6) == 0 || strncmp(name, "liblongstraw", 12) == 0,
                  "library %s (%s) is not the project's", name, path);
        if (strcmp(name, "libls_digest_probe.so") != 0) continue;
        found = 1;
        sha256sum(path, hex);
        cr_expect_str_eq(str_at(lib, "sha256", NULL), hex, "library %s sha256 %s, sha256sum %s",
                         path, str_at(lib, "sha256", NULL), hex);
    }
    cr_expect(found, "libls_digest_probe.so is loaded but not listed");
    cr_expect_eq(ls_build_info_check(b, NULL, 0), LS_OK);
    cJSON_Delete(b);
}

/* Every digested member, changed, is detected; the paths are not digested. */
Test(build_digest, tampering_is_detected_and_paths_are_not_digested) {
    cr_assert_eq(ls_digest_probe_value(), 42);
    cJSON *b = NULL;
    cr_assert_eq(ls_build_info_create("x", "y", &b), LS_OK);
    char d0[LS_DIGEST_HEX_SIZE], d1[LS_DIGEST_HEX_SIZE], err[512];
    cr_assert_eq(ls_build_info_digest(b, d0, NULL, 0), LS_OK);
    cr_assert_str_eq(str_at(b, "build_digest", NULL), d0);

    /* the same binary found at another path is the same build */
    cJSON *moved = cJSON_Duplicate(b, 1);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(moved, "executable"), "path",
                              cJSON_CreateString("/elsewhere/longstraw-train"));
    cJSON *lib0 = cJSON_GetArrayItem(cJSON_GetObjectItem(moved, "libraries"), 0);
    cr_assert_not_null(lib0, "no library listed (the probe is linked)");
    cJSON_ReplaceItemInObject(lib0, "path", cJSON_CreateString("/elsewhere/libls_x.so"));
    cr_assert_eq(ls_build_info_digest(moved, d1, NULL, 0), LS_OK);
    cr_expect_str_eq(d1, d0, "a path changed the digest");
    cr_expect_eq(ls_build_info_check(moved, NULL, 0), LS_OK);
    cJSON_Delete(moved);

    const char *const members[][2] = {
        {"executable", "sha256"}, {"source", "commit"}, {"source", "changes_sha256"},
        {"git_commit", NULL},     {"compiler", NULL},   {"flags", NULL},
        {"dependencies", "zstd"},
    };
    for (size_t i = 0; i < sizeof members / sizeof *members; i++) {
        cJSON *t = cJSON_Duplicate(b, 1);
        cJSON *parent = members[i][1] ? cJSON_GetObjectItem(t, members[i][0]) : t;
        const char *key = members[i][1] ? members[i][1] : members[i][0];
        cJSON_ReplaceItemInObject(parent, key, cJSON_CreateString("0000"));
        cr_expect_eq(ls_build_info_check(t, err, sizeof err), LS_ERR_CORRUPT,
                     "changing %s.%s went undetected", members[i][0], members[i][1]);
        cJSON_Delete(t);
    }
    cJSON *t = cJSON_Duplicate(b, 1);
    cJSON *src = cJSON_GetObjectItem(t, "source");
    cJSON_ReplaceItemInObject(src, "dirty", cJSON_CreateBool(!cJSON_IsTrue(cJSON_GetObjectItem(src, "dirty"))));
    cr_expect_eq(ls_build_info_check(t, err, sizeof err), LS_ERR_CORRUPT, "flipping dirty went undetected");
    cJSON_Delete(t);
    t = cJSON_Duplicate(b, 1);
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(t, "libraries"), 0), "sha256",
                              cJSON_CreateString("0000"));
    cr_expect_eq(ls_build_info_check(t, err, sizeof err), LS_ERR_CORRUPT, "library sha256 change undetected");
    cJSON_Delete(t);
    t = cJSON_Duplicate(b, 1);
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(t, "libraries"), 0);
    cr_expect_eq(ls_build_info_check(t, err, sizeof err), LS_ERR_CORRUPT, "a dropped library went undetected");
    cr_expect(strstr(err, "build_digest") != NULL, "message does not name build_digest: %s", err);
    cJSON_Delete(t);
    cJSON_Delete(b);
}

/* ---- longstraw-train binaries -------------------------------------------- */

/* runs exe into tmp/run, returns the receipt's build object (caller deletes)
 * after checking the manifest names the same build digest */
static cJSON *run_build(const char *exe, const char *run) {
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "'%s' --config %s --prompt-len 64 --steps 1 --seed 1 --out %s/%s >%s/%s.out 2>&1", exe,
             CFG, tmp, run, tmp, run);
    cr_assert_eq(sh(cmd), 0, "%s failed (output in %s.out)", cmd, run);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s/rank-0000/receipt.json", tmp, run);
    char *text = ls_test_read_file(p, NULL);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(doc, "%s is not JSON", p);
    cJSON *build = cJSON_DetachItemFromObject(cJSON_GetObjectItem(doc, "predicate"), "build");
    cJSON_Delete(doc);
    cr_assert(cJSON_IsObject(build), "%s: no predicate.build", p);
    cr_assert_eq(ls_build_info_check(build, NULL, 0), LS_OK, "%s: build digest does not verify", p);

    snprintf(p, sizeof p, "%s/%s/manifest.json", tmp, run);
    text = ls_test_read_file(p, NULL);
    doc = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(doc, "%s is not JSON", p);
    const cJSON *mb = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "predicate"), "build");
    cr_expect_str_eq(str_at(mb, "build_digest", NULL), str_at(build, "build_digest", NULL),
                     "%s names another build than its receipt", p);
    cJSON_Delete(doc);
    return build;
}

Test(build_digest, different_binaries_never_share_a_digest) {
    char same[PATH_MAX], longer[PATH_MAX], cmd[3 * PATH_MAX], hex[LS_DIGEST_HEX_SIZE];
    snprintf(same, sizeof same, "%s/copy/longstraw-train", tmp);
    snprintf(longer, sizeof longer, "%s/longer/longstraw-train", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/copy %s/longer && cp '%s' '%s' && cp '%s' '%s' && printf x >>'%s'",
             tmp, tmp, TRAIN, same, TRAIN, longer, longer);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);

    cJSON *a1 = run_build(TRAIN, "a1"), *a2 = run_build(TRAIN, "a2");
    cJSON *c = run_build(same, "c"), *x = run_build(longer, "x");
    const char *da = str_at(a1, "build_digest", NULL);
    cr_expect_str_eq(str_at(a2, "build_digest", NULL), da, "the same binary run twice gave two digests");
    cr_expect_str_eq(str_at(c, "build_digest", NULL), da, "a byte-identical copy gave another digest");
    cr_expect_str_eq(str_at(c, "executable", "path"), same, "the copy's path is not recorded");
    cr_expect_str_neq(str_at(x, "build_digest", NULL), da,
                      "a binary with one byte appended shares the digest %s", da);

    char real[PATH_MAX];
    cr_assert_not_null(realpath(TRAIN, real));
    sha256sum(real, hex);
    cr_expect_str_eq(str_at(a1, "executable", "sha256"), hex, "recorded %s, sha256sum %s",
                     str_at(a1, "executable", "sha256"), hex);
    sha256sum(longer, hex);
    cr_expect_str_eq(str_at(x, "executable", "sha256"), hex, "recorded %s, sha256sum %s",
                     str_at(x, "executable", "sha256"), hex);
    cr_expect_str_neq(str_at(x, "executable", "sha256"), str_at(a1, "executable", "sha256"));

    /* the trainer records the source state this tree was built from */
    char head[64] = "";
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse HEAD 2>/dev/null", LS_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    if (fgets(head, sizeof head, p) != NULL) head[strcspn(head, "\n")] = '\0';
    int git_rc = pclose(p);
    if (git_rc == 0)
        cr_expect_str_eq(str_at(a1, "source", "commit"), head,
                         "receipt names commit %s, the tree is at %s (rebuild?)",
                         str_at(a1, "source", "commit"), head);
    else
        cr_expect_str_eq(str_at(a1, "source", "commit"), "unknown");
    cr_expect_str_eq(str_at(a1, "git_commit", NULL), str_at(a1, "source", "commit"));
    cJSON_Delete(a1);
    cJSON_Delete(a2);
    cJSON_Delete(c);
    cJSON_Delete(x);
}

/* ---- the source state at build time -------------------------------------- */

typedef struct {
    char commit[128];
    int dirty;
    char changes[128];
} state;

/* digest of what the script must not change: the repository's index and objects */
static void repo_fingerprint(const char *repo, char hex[LS_DIGEST_HEX_SIZE]) {
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "cd '%s/.git' && (sha256sum index; find objects refs -type f | sort) >'%s/fp.txt'", repo,
             tmp);
    cr_assert_eq(sh(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s/fp.txt", tmp);
    sha256sum(cmd, hex);
}

/* runs cmake/source_state.cmake on repo into tmp/state.h, checking that
 * the repository's index and objects are left as they were */
static state source_state(const char *repo) {
    char cmd[4 * PATH_MAX], fp0[LS_DIGEST_HEX_SIZE] = "", fp1[LS_DIGEST_HEX_SIZE] = "";
    snprintf(cmd, sizeof cmd, "%s/.git/index", repo);
    int in_git = ls_test_exists(cmd);
    if (in_git) repo_fingerprint(repo, fp0);
    snprintf(cmd, sizeof cmd,
             "'%s' -DLS_SOURCE_DIR='%s' -DLS_STATE_DIR='%s/work' -DLS_OUT='%s/state.h' -P '%s' "
             ">'%s/cmake.out' 2>&1",
             LS_CMAKE_COMMAND, repo, tmp, tmp, SCRIPT, tmp);
    cr_assert_eq(sh(cmd), 0, "%s failed", cmd);
    if (in_git) {
        repo_fingerprint(repo, fp1);
        cr_expect_str_eq(fp1, fp0, "the script wrote into the index or objects of %s", repo);
    }
    snprintf(cmd, sizeof cmd, "%s/state.h", tmp);
    char *h = ls_test_read_file(cmd, NULL);
    state s = {.dirty = -1};
    const char *c = strstr(h, "#define LS_SOURCE_COMMIT \"");
    const char *d = strstr(h, "#define LS_SOURCE_DIRTY ");
    const char *x = strstr(h, "#define LS_SOURCE_CHANGES_SHA256 \"");
    cr_assert(c && d && x, "state.h lacks a define: %s", h);
    cr_assert_eq(sscanf(c, "#define LS_SOURCE_COMMIT \"%127[^\"]\"", s.commit), 1);
    cr_assert_eq(sscanf(d, "#define LS_SOURCE_DIRTY %d", &s.dirty), 1);
    if (sscanf(x, "#define LS_SOURCE_CHANGES_SHA256 \"%127[^\"]\"", s.changes) != 1) s.changes[0] = '\0';
    free(h);
    return s;
}

static void git(const char *repo, const char *args) {
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && git -c user.name=t -c user.email=t@t -c init.defaultBranch=main %s >/dev/null 2>&1",
             repo, args);
    cr_assert_eq(sh(cmd), 0, "%s failed", cmd);
}

static void put(const char *repo, const char *name, const char *text) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", repo, name);
    ls_test_write_file(p, text, strlen(text));
}

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

Test(build_digest, source_state_follows_the_working_tree) {
    char repo[PATH_MAX], hpath[PATH_MAX];
    snprintf(repo, sizeof repo, "%s/repo", tmp);
    snprintf(hpath, sizeof hpath, "%s/state.h", tmp);
    cr_assert_eq(mkdir(repo, 0777), 0);

    /* not a git work tree */
    state nogit = source_state(repo);
    cr_expect_str_eq(nogit.commit, "unknown");
    cr_expect_eq(nogit.dirty, 1, "outside git the tree must count as dirty");
    cr_expect_str_eq(nogit.changes, "");

    git(repo, "init -q");
    put(repo, "a.c", "int a;\n");
    put(repo, "b.c", "int b;\n");
    put(repo, ".gitignore", "*.o\n");
    git(repo, "add -A");
    git(repo, "commit -q -m one");
    char head[64] = "", cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse HEAD", repo);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(fgets(head, sizeof head, p));
    pclose(p);
    head[strcspn(head, "\n")] = '\0';

    state clean = source_state(repo);
    cr_expect_str_eq(clean.commit, head);
    cr_expect_eq(clean.dirty, 0);
    cr_expect_str_eq(clean.changes, EMPTY_SHA256, "a clean tree's change list is not empty");
    char *clean_h = ls_test_read_file(hpath, NULL);

    /* unchanged state: the header is not rewritten (its old mtime stays) */
    struct timeval old[2] = {{1000000000, 0}, {1000000000, 0}};
    cr_assert_eq(utimes(hpath, old), 0);
    (void)source_state(repo);
    struct stat st;
    cr_assert_eq(stat(hpath, &st), 0);
    cr_expect_eq((long long)st.st_mtime, 1000000000LL, "an unchanged header was rewritten");

    put(repo, "a.c", "int a = 1;\n");
    state mod1 = source_state(repo);
    cr_expect_eq(mod1.dirty, 1, "a modified tracked file is not dirty");
    cr_expect_str_eq(mod1.commit, head);
    cr_expect_str_neq(mod1.changes, clean.changes);
    cr_assert_eq(stat(hpath, &st), 0);
    cr_expect_neq((long long)st.st_mtime, 1000000000LL, "a changed header was not rewritten");
    put(repo, "a.c", "int a = 2;\n");
    state mod2 = source_state(repo);
    cr_expect_eq(mod2.dirty, 1);
    cr_expect_str_neq(mod2.changes, mod1.changes, "two different edits share a changes digest");
    git(repo, "add a.c"); /* staged, no further edit: the same sources as mod2 */
    state staged = source_state(repo);
    cr_expect_eq(staged.dirty, 1, "a staged change is not dirty");
    cr_expect_str_eq(staged.changes, mod2.changes, "staging changed the digest of the same sources");

    git(repo, "reset -q --hard");
    state back = source_state(repo);
    cr_expect_eq(back.dirty, 0);
    char *back_h = ls_test_read_file(hpath, NULL);
    cr_expect_str_eq(back_h, clean_h, "the reverted tree gives another header");
    free(back_h);

    put(repo, "new.c", "int n;\n");
    state untracked = source_state(repo);
    cr_expect_eq(untracked.dirty, 1, "an untracked file is not dirty");
    cr_expect_str_neq(untracked.changes, clean.changes);
    cr_expect_str_neq(untracked.changes, mod1.changes);
    snprintf(cmd, sizeof cmd, "%s/new.c", repo);
    cr_assert_eq(unlink(cmd), 0);

    put(repo, "x.o", "ignored");
    state ignored = source_state(repo);
    cr_expect_eq(ignored.dirty, 0, "an ignored file made the tree dirty");
    cr_expect_str_eq(ignored.changes, clean.changes);

    snprintf(cmd, sizeof cmd, "%s/b.c", repo);
    cr_assert_eq(unlink(cmd), 0);
    state deleted = source_state(repo);
    cr_expect_eq(deleted.dirty, 1, "a deleted tracked file is not dirty");
    git(repo, "checkout -q -- b.c");

    cr_assert_eq(chmod(cmd, 0755), 0);
    state moded = source_state(repo);
    cr_expect_eq(moded.dirty, 1, "a mode change is not dirty");
    cr_assert_eq(chmod(cmd, 0644), 0);

    state again = source_state(repo);
    cr_expect_eq(again.dirty, 0);
    free(clean_h);
}
