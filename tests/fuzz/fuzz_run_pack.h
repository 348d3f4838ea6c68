/* fuzz_run_pack.h - a run directory packed as one fuzz input, unpacked into
 * a fresh scratch directory for the audit to read (fuzz_audit.c; the seeds
 * are real trainer runs packed by make_seeds.py).  Header-only.
 *
 * The input is a sequence of entries:
 *   u8  kind      0 regular file, 1 directory, 2 symbolic link (target = data)
 *   u8  name      < 16: one of the run's usual names (RUN_NAMES below); else
 *                 name_len = name - 16 followed by that many name bytes,
 *                 each mapped into [a-z0-9._-] or '/'
 *   u16 data_len  little-endian, then the data (file contents, link target)
 * A truncated entry ends the input.  Names never leave the scratch
 * directory (no component is "." or "..", none is empty or absolute);
 * link targets are anything (a link to /etc/passwd, to "..", to itself),
 * which is exactly what the audit must refuse to follow. */
#ifndef LS_TESTS_FUZZ_RUN_PACK_H
#define LS_TESTS_FUZZ_RUN_PACK_H
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const RUN_NAMES[16] = {
    "manifest.json", "manifest.dsse.json", "parity.json", "rank-0000/receipt.json",
    "rank-0000/events.jsonl.zst", "rank-0001/receipt.json", "rank-0001/events.jsonl.zst", "rank-0000",
    "rank-0001", "rank-0002/receipt.json", "rank-0002/events.jsonl.zst", "rank-0002",
    "rank-0000/extra", "rank-0003/receipt.json", "rank-0003/events.jsonl.zst", "notes.txt"};

/* rm -rf of the scratch directory's contents (no links followed). */
static void run_pack_clear(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode) && depth < 16) {
            run_pack_clear(p, depth + 1);
            rmdir(p);
        } else {
            unlink(p);
        }
    }
    closedir(d);
}

/* mkdir -p of rel's parent directories under dir; 0 when one of them is
 * not a real directory (a link made by an earlier entry: never written
 * through, so nothing outside the scratch directory is ever touched). */
static int run_pack_parents(const char *dir, const char *rel) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    for (char *s = p + strlen(dir) + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0777);
            struct stat st;
            int ok = lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
            *s = '/';
            if (!ok) return 0;
        }
    return 1;
}

/* A safe relative name from raw bytes (empty components and dots-only
 * components are rewritten); 0 when nothing is left. */
static int run_pack_name(const uint8_t *b, size_t n, char *out, size_t cap) {
    static const char ALPHA[] = "abcdefghijklmnopqrstuvwxyz0123456789._-/";
    size_t k = 0;
    for (size_t i = 0; i < n && k + 2 < cap; i++) {
        char c = ALPHA[b[i] % (sizeof ALPHA - 1)];
        if (c == '/' && (k == 0 || out[k - 1] == '/')) continue; /* no empty component, not absolute */
        out[k++] = c;
    }
    while (k && out[k - 1] == '/') k--;
    out[k] = 0;
    /* a component of dots only becomes "d" */
    for (char *s = out; *s;) {
        char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int dots = len > 0;
        for (size_t i = 0; i < len; i++) dots &= s[i] == '.';
        if (dots) s[0] = 'd';
        if (!e) break;
        s = e + 1;
    }
    return k > 0;
}

/* Unpack data into dir (emptied first).  Returns the number of entries. */
static int run_pack_unpack(const char *dir, const uint8_t *data, size_t size) {
    run_pack_clear(dir, 0);
    size_t i = 0;
    int n = 0;
    while (i + 2 <= size && n < 64) {
        uint8_t kind = data[i++] % 3, nm = data[i++];
        char name[256];
        if (nm < 16) {
            snprintf(name, sizeof name, "%s", RUN_NAMES[nm]);
        } else {
            size_t len = (size_t)(nm - 16);
            if (i + len > size) break;
            if (!run_pack_name(data + i, len, name, sizeof name)) {
                i += len;
                continue;
            }
            i += len;
        }
        if (i + 2 > size) break;
        size_t dl = (size_t)data[i] | ((size_t)data[i + 1] << 8);
        i += 2;
        if (dl > size - i) dl = size - i;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (!run_pack_parents(dir, name)) {
            i += dl;
            continue;
        }
        if (kind == 1) {
            mkdir(path, 0777);
        } else if (kind == 2) {
            char target[512];
            size_t tl = dl < sizeof target - 1 ? dl : sizeof target - 1;
            memcpy(target, data + i, tl);
            target[tl] = 0;
            if (tl && !memchr(target, 0, tl)) (void)symlink(target, path);
        } else {
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0666);
            if (fd >= 0) {
                if (dl) (void)!write(fd, data + i, dl);
                close(fd);
            }
        }
        i += dl;
        n++;
    }
    return n;
}
#endif
