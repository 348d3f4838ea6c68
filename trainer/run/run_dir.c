/* run_dir.c - creating a run directory. */
#include "trainer/run/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int ls_run_dir_prepare(const char *out, char *err, size_t err_len) {
    if (mkdir(out, 0777) != 0) {
        if (errno != EEXIST) {
            snprintf(err, err_len, "--out: cannot create '%s': %s", out, strerror(errno));
            return -1;
        }
        DIR *d = opendir(out);
        if (!d) {
            snprintf(err, err_len, "--out: '%s' exists and is not a readable directory", out);
            return -1;
        }
        struct dirent *e;
        int empty = 1;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
        closedir(d);
        if (!empty) {
            snprintf(err, err_len, "--out: '%s' is not empty (a run directory is never overwritten)", out);
            return -1;
        }
    }
    return 0;
}

int ls_run_dir_make_rank(const char *out, unsigned rank, char *err, size_t err_len) {
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/rank-%04u", out, rank);
    if (mkdir(sub, 0777) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "--out: cannot create '%.1000s': %s", sub, strerror(errno));
        return -1;
    }
    return 0;
}
