/* build_diff.c - the differences of two build objects, in words (contract in
 * build_diff.h). */
/* Lines and paths are bounded: truncation is intended (and made at a
 * character boundary where it shows). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "receipts/format/build_diff.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ls_build_diff *d;
    const char *la, *lb;
    size_t steps;
    bool v1; /* neither side is a v2 identity: the members the v1 digest leaves out are not compared */
} ctx;

/* Where a value lies: its full path, and the words of a line. */
typedef struct {
    char key[LS_BUILD_DIFF_KEY];   /* the full path */
    char where[LS_BUILD_DIFF_KEY]; /* "artifact ROLE NAME" inside an artifact, else "" */
    char rel[LS_BUILD_DIFF_KEY];   /* the path below where */
    int depth;
    bool undigested; /* v1: this object's "path" member is not digested */
} loc;

/* ---- text: bounded, printable, valid UTF-8 ---------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0))) return 0; /* overlong, surrogate */
    if (len == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0; /* overlong, > U+10FFFF */
    return len;
}

/* src into dst (cap bytes): at most max bytes of it, each control character
 * and invalid byte as '?', "..." after a cut. */
static void clean(char *dst, size_t cap, const char *src, size_t max) {
    if (cap == 0) return;
    size_t o = 0, n = strlen(src);
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0;
    bool cut = false;
    while (i < n) {
        size_t len = utf8_len(s + i, n - i);
        if (len == 0 || s[i] < 0x20 || s[i] == 0x7F) {
            if (o + 1 > max || o + 1 >= cap) {
                cut = true;
                break;
            }
            dst[o++] = '?';
            i++;
            continue;
        }
        if (o + len > max || o + len >= cap) {
            cut = true;
            break;
        }
        memcpy(dst + o, s + i, len);
        o += len;
        i += len;
    }
    dst[o] = 0;
    if (cut && o + 4 <= cap) memcpy(dst + o, "...", 4);
}

/* The end of a NUL-terminated buffer cut by snprintf: no partial character last. */
static void trim_partial(char *buf) {
    size_t n = strlen(buf), k = n;
    while (k > 0 && ((unsigned char)buf[k - 1] & 0xC0) == 0x80) k--; /* the continuation bytes at the end */
    if (k > 0 && (unsigned char)buf[k - 1] >= 0xC0 && utf8_len((const unsigned char *)buf + k - 1, n - k + 1) == 0)
        buf[k - 1] = 0; /* a lead byte whose sequence was cut */
}

static bool is_digest(const char *s) {
    size_t n = strlen(s);
    if (n < 32) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* A value as shown in a line (buf of LS_BUILD_DIFF_VALUE bytes). */
static void shown(const cJSON *v, char *buf) {
    const size_t cap = LS_BUILD_DIFF_VALUE;
    if (v == NULL) {
        snprintf(buf, cap, "absent");
    } else if (cJSON_IsString(v) && v->valuestring != NULL) {
        if (is_digest(v->valuestring)) snprintf(buf, cap, "%.12s..", v->valuestring);
        else if (v->valuestring[0] == 0) snprintf(buf, cap, "\"\"");
        else clean(buf, cap, v->valuestring, LS_BUILD_DIFF_SHOWN);
    } else if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if (isfinite(x) && x == floor(x) && fabs(x) < 9007199254740992.0) snprintf(buf, cap, "%.0f", x);
        else snprintf(buf, cap, "%.17g", x);
    } else if (cJSON_IsTrue(v)) {
        snprintf(buf, cap, "true");
    } else if (cJSON_IsFalse(v)) {
        snprintf(buf, cap, "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, cap, "null");
    } else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        size_t k = 0;
        for (const cJSON *c = v->child; c != NULL && k < 1000000; c = c->next) k++;
        snprintf(buf, cap, "%s of %s%zu %s", cJSON_IsObject(v) ? "an object" : "an array", k >= 1000000 ? "at least " : "",
                 k, cJSON_IsObject(v) ? (k == 1 ? "key" : "keys") : (k == 1 ? "item" : "items"));
    } else {
        snprintf(buf, cap, "an invalid value");
    }
}

/* ---- the walk --------------------------------------------------------------- */

/* Spends n steps; false once the cap is passed (d->stopped). */
static bool spend(ctx *c, size_t n) {
    if (c->d->stopped) return false;
    c->steps += n;
    if (c->steps > LS_BUILD_DIFF_MAX_STEPS) {
        c->d->stopped = true;
        return false;
    }
    return true;
}

/* The words before a line's tail: "artifact R N: rel ", "rel: ", or nothing. */
static void lead(const loc *l, char *buf, size_t cap) {
    if (l->where[0] && l->rel[0]) snprintf(buf, cap, "%s: %s ", l->where, l->rel);
    else if (l->where[0]) snprintf(buf, cap, "%s: ", l->where);
    else if (l->rel[0]) snprintf(buf, cap, "%s: ", l->rel);
    else buf[0] = 0;
}

/* One difference at l: the line is lead(l) + the tail fmt makes. */
static void add(ctx *c, const loc *l, const cJSON *va, const cJSON *vb, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add(ctx *c, const loc *l, const cJSON *va, const cJSON *vb, const char *fmt, ...) {
    ls_build_diff *d = c->d;
    d->total++;
    if (d->n >= LS_BUILD_DIFF_MAX_ITEMS) return;
    ls_build_diff_item *it = &d->item[d->n++];
    snprintf(it->key, sizeof it->key, "%s", l->key[0] ? l->key : "(root)");
    trim_partial(it->key);
    shown(va, it->a);
    shown(vb, it->b);
    char head[LS_BUILD_DIFF_LINE], tail[LS_BUILD_DIFF_LINE];
    lead(l, head, sizeof head);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    snprintf(it->line, sizeof it->line, "%s%s", head, tail);
    trim_partial(it->line);
}

/* A child of l named by key k (an object member) or by "[text]" (bracket). */
static void child(const loc *l, const char *k, bool bracket, loc *o) {
    *o = *l;
    o->depth = l->depth + 1;
    o->undigested = false;
    char name[LS_BUILD_DIFF_SHOWN + 4];
    clean(name, sizeof name, k, LS_BUILD_DIFF_SHOWN);
    const char *dot_k = l->key[0] && !bracket ? "." : "", *dot_r = l->rel[0] && !bracket ? "." : "";
    snprintf(o->key, sizeof o->key, "%s%s%s%s%s", l->key, dot_k, bracket ? "[" : "", name, bracket ? "]" : "");
    snprintf(o->rel, sizeof o->rel, "%s%s%s%s%s", l->rel, dot_r, bracket ? "[" : "", name, bracket ? "]" : "");
    trim_partial(o->key);
    trim_partial(o->rel);
}

/* The member k of object o, spending a step per member looked at; NULL when
 * absent or stopped.  The search starts after *hint (the last member found:
 * two objects written in one order cost a step per member) and wraps. */
static const cJSON *find(ctx *c, const cJSON *o, const char *k, const cJSON **hint) {
    const cJSON *start = hint != NULL && *hint != NULL && (*hint)->next != NULL ? (*hint)->next : o->child;
    for (int round = 0; round < 2; round++) {
        const cJSON *from = round == 0 ? start : o->child, *to = round == 0 ? NULL : start;
        for (const cJSON *x = from; x != to; x = x->next) {
            if (!spend(c, 1)) return NULL;
            if (x->string != NULL && strcmp(x->string, k) == 0) {
                if (hint != NULL) *hint = x;
                return x;
            }
        }
        if (start == o->child) break;
    }
    return NULL;
}

static bool scalar_equal(const cJSON *a, const cJSON *b) {
    if ((a->type & 0xFF) != (b->type & 0xFF)) return false;
    if (cJSON_IsNumber(a)) return a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a)) return a->valuestring && b->valuestring && strcmp(a->valuestring, b->valuestring) == 0;
    return true; /* true, false, null */
}

static bool is_container(const cJSON *v) { return cJSON_IsObject(v) || cJSON_IsArray(v); }

static void cmp(ctx *c, const cJSON *a, const cJSON *b, const loc *l);

/* A "files" object (path -> SHA-256) at parent l: file by file. */
static void cmp_files(ctx *c, const cJSON *a, const cJSON *b, const loc *l) {
    loc fl, at;
    child(l, "files", false, &fl);
    loc words = l->where[0] ? *l : fl; /* lines read "artifact R N: file F ..." (or "x.files: file F ...") */
    const cJSON *hint = NULL;
    for (const cJSON *x = a->child; x != NULL && !c->d->stopped; x = x->next) {
        if (x->string == NULL) continue;
        const cJSON *y = find(c, b, x->string, &hint);
        if (c->d->stopped) return;
        child(&fl, x->string, true, &at);
        char name[LS_BUILD_DIFF_SHOWN + 4], sa[LS_BUILD_DIFF_VALUE], sb[LS_BUILD_DIFF_VALUE];
        clean(name, sizeof name, x->string, LS_BUILD_DIFF_SHOWN);
        snprintf(words.key, sizeof words.key, "%s", at.key);
        shown(x, sa);
        if (y == NULL) {
            add(c, &words, x, NULL, "file %s only in %s (%s)", name, c->la, sa);
        } else if (is_container(x) || is_container(y)) {
            cmp(c, x, y, &at);
        } else if (!scalar_equal(x, y)) {
            shown(y, sb);
            add(c, &words, x, y, "file %s differs (%s vs %s)", name, sa, sb);
        }
    }
    hint = NULL;
    for (const cJSON *y = b->child; y != NULL && !c->d->stopped; y = y->next) {
        if (y->string == NULL) continue;
        const cJSON *x = find(c, a, y->string, &hint);
        if (c->d->stopped) return;
        if (x != NULL) continue;
        child(&fl, y->string, true, &at);
        char name[LS_BUILD_DIFF_SHOWN + 4], sb[LS_BUILD_DIFF_VALUE];
        clean(name, sizeof name, y->string, LS_BUILD_DIFF_SHOWN);
        snprintf(words.key, sizeof words.key, "%s", at.key);
        shown(y, sb);
        add(c, &words, NULL, y, "file %s only in %s (%s)", name, c->lb, sb);
    }
}

/* Members not compared: the top-level build_digest (the caller names the
 * digests); v1: the "path" the digest leaves out. */
static bool skipped(const ctx *c, const loc *l, const char *k) {
    (void)c;
    return (l->depth == 0 && strcmp(k, "build_digest") == 0) || (l->undigested && strcmp(k, "path") == 0);
}

static void cmp_object(ctx *c, const cJSON *a, const cJSON *b, const loc *l) {
    loc cl;
    const cJSON *hint = NULL;
    /* pass 0: "files" (path -> digest), the most specific difference; pass 1: the others */
    for (int pass = 0; pass < 2; pass++) {
        for (const cJSON *x = a->child; x != NULL && !c->d->stopped; x = x->next) {
            if (x->string == NULL || skipped(c, l, x->string)) continue;
            bool files = strcmp(x->string, "files") == 0;
            if (files != (pass == 0)) continue;
            const cJSON *y = find(c, b, x->string, &hint);
            if (c->d->stopped) return;
            child(l, x->string, false, &cl);
            cl.undigested = c->v1 && l->depth == 0 && strcmp(x->string, "executable") == 0;
            if (y == NULL) {
                char sa[LS_BUILD_DIFF_VALUE];
                shown(x, sa);
                add(c, &cl, x, NULL, "only in %s (%s)", c->la, sa);
            } else if (files && cJSON_IsObject(x) && cJSON_IsObject(y)) {
                cmp_files(c, x, y, l);
            } else {
                cmp(c, x, y, &cl);
            }
        }
    }
    hint = NULL;
    for (const cJSON *y = b->child; y != NULL && !c->d->stopped; y = y->next) {
        if (y->string == NULL || skipped(c, l, y->string)) continue;
        const cJSON *x = find(c, a, y->string, &hint);
        if (c->d->stopped) return;
        if (x != NULL) continue;
        child(l, y->string, false, &cl);
        char sb[LS_BUILD_DIFF_VALUE];
        shown(y, sb);
        add(c, &cl, NULL, y, "only in %s (%s)", c->lb, sb);
    }
}

/* An item's role and name in a keyed array (role NULL when it has none);
 * false when the item is not an object with a string name, or stopped. */
static bool item_id(ctx *c, const cJSON *v, const char **role, const char **name) {
    *role = *name = NULL;
    if (!cJSON_IsObject(v)) return false;
    const cJSON *n = find(c, v, "name", NULL), *r = c->d->stopped ? NULL : find(c, v, "role", NULL);
    if (c->d->stopped || !cJSON_IsString(n) || n->valuestring == NULL) return false;
    *name = n->valuestring;
    *role = cJSON_IsString(r) ? r->valuestring : NULL;
    return true;
}

/* The words naming an item: "ROLE NAME" or "NAME". */
static const char *item_words(const char *role, const char *name, char *buf, size_t cap) {
    char r[LS_BUILD_DIFF_SHOWN + 4], n[LS_BUILD_DIFF_SHOWN + 4];
    clean(n, sizeof n, name, LS_BUILD_DIFF_SHOWN);
    if (role != NULL) {
        clean(r, sizeof r, role, LS_BUILD_DIFF_SHOWN);
        snprintf(buf, cap, "%s %s", r, n);
    } else {
        snprintf(buf, cap, "%s", n);
    }
    return buf;
}

/* Every item an object with a string name (an empty array too). */
static bool keyed(ctx *c, const cJSON *arr) {
    const char *r, *n;
    for (const cJSON *x = arr->child; x != NULL; x = x->next)
        if (!item_id(c, x, &r, &n)) return false;
    return true;
}

static bool same_str(const char *a, const char *b) { return (a == NULL) == (b == NULL) && (a == NULL || strcmp(a, b) == 0); }

/* The location of a keyed item: "artifact ROLE NAME" (an artifacts array) or rel[ROLE NAME]. */
static void keyed_child(const loc *l, bool artifacts, const char *words, loc *o) {
    child(l, words, true, o);
    if (artifacts) {
        snprintf(o->where, sizeof o->where, "artifact %s", words);
        trim_partial(o->where);
        o->rel[0] = 0;
    }
}

/* Items matched by (role, name), the k-th of a pair with the k-th; false (nothing done) out of memory. */
static bool cmp_keyed(ctx *c, const cJSON *a, const cJSON *b, const loc *l) {
    size_t nb = 0;
    for (const cJSON *y = b->child; y != NULL; y = y->next) nb++;
    const cJSON **items = malloc((nb ? nb : 1) * sizeof *items);
    const char **roles = malloc((nb ? nb : 1) * sizeof *roles), **names = malloc((nb ? nb : 1) * sizeof *names);
    unsigned char *used = calloc(nb ? nb : 1, 1);
    if (items == NULL || roles == NULL || names == NULL || used == NULL) {
        free(items);
        free(roles);
        free(names);
        free(used);
        return false;
    }
    size_t j = 0;
    for (const cJSON *y = b->child; y != NULL; y = y->next, j++) {
        items[j] = y;
        item_id(c, y, &roles[j], &names[j]);
    }
    bool artifacts = l->where[0] == 0 && strcmp(l->rel, "artifacts") == 0;
    bool reordered = false, any = false;
    size_t last = 0;
    char words[2 * LS_BUILD_DIFF_SHOWN + 16];
    loc cl;
    for (const cJSON *x = a->child; x != NULL && !c->d->stopped; x = x->next) {
        const char *role, *name;
        if (!item_id(c, x, &role, &name)) break; /* stopped: keyed() saw every item named */
        /* from the item after the last match, wrapping: two arrays in one order cost a step per item */
        size_t hit = nb;
        for (size_t t = 0; t < nb; t++) {
            size_t q = any ? (last + 1 + t) % nb : t;
            if (!spend(c, 1)) break;
            if (!used[q] && names[q] != NULL && same_str(names[q], name) && same_str(roles[q], role)) {
                hit = q;
                break;
            }
        }
        if (c->d->stopped) break;
        keyed_child(l, artifacts, item_words(role, name, words, sizeof words), &cl);
        cl.undigested = c->v1 && l->depth == 1 && strcmp(l->rel, "libraries") == 0;
        if (hit == nb) {
            char sa[LS_BUILD_DIFF_VALUE];
            shown(x, sa);
            if (artifacts) add(c, &cl, x, NULL, "only in %s", c->la);
            else add(c, &cl, x, NULL, "only in %s (%s)", c->la, sa);
            continue;
        }
        used[hit] = 1;
        if (any && hit < last) reordered = true;
        last = hit;
        any = true;
        cmp(c, x, items[hit], &cl);
    }
    for (j = 0; j < nb && !c->d->stopped; j++) {
        if (used[j] || names[j] == NULL) continue;
        keyed_child(l, artifacts, item_words(roles[j], names[j], words, sizeof words), &cl);
        char sb[LS_BUILD_DIFF_VALUE];
        shown(items[j], sb);
        if (artifacts) add(c, &cl, NULL, items[j], "only in %s", c->lb);
        else add(c, &cl, NULL, items[j], "only in %s (%s)", c->lb, sb);
    }
    if (reordered && !c->d->stopped) add(c, l, NULL, NULL, "the items both have are in another order");
    free(items);
    free(roles);
    free(names);
    free(used);
    return true;
}

static void cmp_array(ctx *c, const cJSON *a, const cJSON *b, const loc *l) {
    if (keyed(c, a) && keyed(c, b) && cmp_keyed(c, a, b, l)) return;
    if (c->d->stopped) return;
    const cJSON *x = a->child, *y = b->child;
    loc cl;
    for (size_t i = 0; (x != NULL || y != NULL) && !c->d->stopped; i++) {
        char idx[32];
        snprintf(idx, sizeof idx, "%zu", i);
        child(l, idx, true, &cl);
        char s[LS_BUILD_DIFF_VALUE];
        if (x != NULL && y != NULL) {
            cmp(c, x, y, &cl);
        } else if (x != NULL) {
            shown(x, s);
            add(c, &cl, x, NULL, "only in %s (%s)", c->la, s);
        } else {
            shown(y, s);
            add(c, &cl, NULL, y, "only in %s (%s)", c->lb, s);
        }
        x = x ? x->next : NULL;
        y = y ? y->next : NULL;
    }
}

static void cmp(ctx *c, const cJSON *a, const cJSON *b, const loc *l) {
    if (a == b || !spend(c, 1)) return; /* one node: nothing to compare */
    bool oa = cJSON_IsObject(a), ob = cJSON_IsObject(b), aa = cJSON_IsArray(a), ab = cJSON_IsArray(b);
    if ((oa && ob) || (aa && ab)) {
        if (l->depth >= LS_BUILD_DIFF_MAX_DEPTH) {
            add(c, l, a, b, "nested deeper than %d levels: not compared", LS_BUILD_DIFF_MAX_DEPTH);
            return;
        }
        if (oa) cmp_object(c, a, b, l);
        else cmp_array(c, a, b, l);
        return;
    }
    if (!is_container(a) && !is_container(b) && scalar_equal(a, b)) return;
    char sa[LS_BUILD_DIFF_VALUE], sb[LS_BUILD_DIFF_VALUE];
    shown(a, sa);
    shown(b, sb);
    add(c, l, a, b, "%s vs %s", sa, sb);
}

size_t ls_build_diff_compare(const cJSON *a, const cJSON *b, const char *la, const char *lb, ls_build_diff *d) {
    memset(d, 0, sizeof *d);
    ctx c = {.d = d, .la = la ? la : "A", .lb = lb ? lb : "B"};
    loc root;
    memset(&root, 0, sizeof root);
    if (a == NULL || b == NULL) {
        if (a != b) add(&c, &root, a, b, "a build object only in %s", a ? c.la : c.lb);
        return d->total;
    }
    c.v1 = !(cJSON_IsObject(a) && cJSON_GetObjectItemCaseSensitive(a, "artifacts") != NULL) &&
           !(cJSON_IsObject(b) && cJSON_GetObjectItemCaseSensitive(b, "artifacts") != NULL);
    cmp(&c, a, b, &root);
    return d->total;
}

size_t ls_build_diff_join(const ls_build_diff *d, size_t first, size_t max, bool rest, char *buf, size_t cap) {
    if (cap == 0) return 0;
    buf[0] = 0;
    size_t o = 0, k = 0;
    for (size_t i = first; i < d->n && k < max && o + 1 < cap; i++, k++) {
        int w = snprintf(buf + o, cap - o, "%s%s", k ? "; " : "", d->item[i].line);
        o = w < 0 ? o : o + (size_t)w >= cap ? cap - 1 : o + (size_t)w;
    }
    size_t more = rest && d->total > first + k ? d->total - first - k : 0;
    if (more && o + 1 < cap) {
        int w = snprintf(buf + o, cap - o, "%sand %zu more", k ? "; " : "", more);
        o = w < 0 ? o : o + (size_t)w >= cap ? cap - 1 : o + (size_t)w;
    }
    if (rest && d->stopped && o + 1 < cap) snprintf(buf + o, cap - o, "%sthe comparison stopped at its step cap", o ? "; " : "");
    trim_partial(buf);
    return k;
}
