/* replay_main.c - runs a libFuzzer target without libFuzzer: main() hands
 * every file named on the command line, and every regular file inside each
 * directory named there, to LLVMFuzzerTestOneInput, one at a time, in a
 * buffer of exactly the file's size (so the sanitizers see any overread).
 * Built with each tests/fuzz/fuzz_*.c when LS_FUZZ is off; ctest
 * fuzz_replay_<target> replays the committed corpus.  A crash (a trap, an
 * abort, a sanitizer report) ends the process and fails the test; so does an
 * unreadable path or a directory with no inputs.  Prints the count. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        return -1;
    }
    /* an exact-size copy: one byte past the input is outside the block */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

/* Replays the regular files of dir in name order; their count, -1 on error. */
static long replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: cannot open directory: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    long count = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) {
                count = -1;
                break;
            }
            names = nn;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            count = -1;
            break;
        }
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (count == 0) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n && count >= 0; i++) {
        struct stat sb;
        if (stat(names[i], &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (replay_file(names[i]) != 0) count = -1;
        else count++;
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return count;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        long n = S_ISDIR(sb.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]) == 0 ? 1 : -1;
        if (n < 0) return 1;
        if (n == 0) {
            fprintf(stderr, "%s: no inputs to replay\n", argv[i]);
            return 1;
        }
        total += n;
    }
    printf("replayed %ld inputs without a crash\n", total);
    return 0;
}
