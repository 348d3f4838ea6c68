/* dsse.c - DSSE envelopes with Ed25519 through OpenSSL 3 EVP
 * (contract in dsse.h). */
#include "receipts/signing/dsse.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>

#include "receipts/format/atomic_file.h"
#include "receipts/format/json_util.h"
#include "receipts/schema/schema.h"

#define PATH_CAP 4096

/* The reason of the last libcrypto error (and a clean error queue). */
static const char *crypto_reason(char *buf, size_t cap) {
    unsigned long e = ERR_get_error();
    if (e == 0) snprintf(buf, cap, "no detail from libcrypto");
    else ERR_error_string_n(e, buf, cap);
    ERR_clear_error();
    return buf;
}

/* ---- base64 (standard alphabet, padded, canonical) --------------------- */

static ls_status b64_encode(const uint8_t *in, size_t len, char **out) {
    *out = NULL;
    if (len > (size_t)INT_MAX / 4 * 3 - 3) return LS_ERR_ARG;
    char *buf = malloc(4 * ((len + 2) / 3) + 1);
    if (buf == NULL) return LS_ERR_NOMEM;
    EVP_EncodeBlock((unsigned char *)buf, in, (int)len);
    *out = buf;
    return LS_OK;
}

/* Strict decoding: length a multiple of 4, only the alphabet, '=' only as
 * one or two final pad characters, and the canonical encoding of its
 * result (no stray bits in the padding). */
static ls_status b64_decode(const char *s, uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    size_t n = strlen(s);
    if (n % 4 != 0 || n > (size_t)INT_MAX) return LS_ERR_FORMAT;
    size_t pad = 0;
    if (n > 0 && s[n - 1] == '=') pad = s[n - 2] == '=' ? 2 : 1;
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (strspn(s, alphabet) != n - pad) return LS_ERR_FORMAT;
    uint8_t *buf = malloc(n / 4 * 3 + 1);
    if (buf == NULL) return LS_ERR_NOMEM;
    int got = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n);
    if (got < 0 || (size_t)got < pad) {
        free(buf);
        return LS_ERR_FORMAT;
    }
    size_t len = (size_t)got - pad;
    char *again = NULL;
    ls_status st = b64_encode(buf, len, &again);
    if (st == LS_OK && strcmp(again, s) != 0) st = LS_ERR_FORMAT;
    free(again);
    if (st != LS_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *out_len = len;
    return LS_OK;
}

/* ---- keys ---------------------------------------------------------------- */

static int no_passphrase(char *buf, int size, int rwflag, void *u) {
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

static ls_status load_key(const char *path, int private_key, EVP_PKEY **out, char *err,
                          size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        ls_json_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return LS_ERR_IO;
    }
    BIO *bio = BIO_new_fp(f, BIO_CLOSE);
    if (bio == NULL) {
        fclose(f);
        return LS_ERR_NOMEM;
    }
    EVP_PKEY *key = private_key ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL)
                                : PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL);
    BIO_free(bio);
    if (key == NULL) {
        char why[256];
        ls_json_errf(err, errlen, "%s: not a PEM %s key (%s)", path,
                     private_key ? "private (PKCS#8)" : "public (SubjectPublicKeyInfo)",
                     crypto_reason(why, sizeof why));
        return LS_ERR_FORMAT;
    }
    if (!EVP_PKEY_is_a(key, "ED25519")) {
        ls_json_errf(err, errlen, "%s: a %s key, not Ed25519", path, EVP_PKEY_get0_type_name(key));
        EVP_PKEY_free(key);
        return LS_ERR_FORMAT;
    }
    *out = key;
    return LS_OK;
}

ls_status ls_dsse_load_private(const char *path, EVP_PKEY **out, char *err, size_t errlen) {
    return load_key(path, 1, out, err, errlen);
}

ls_status ls_dsse_load_public(const char *path, EVP_PKEY **out, char *err, size_t errlen) {
    return load_key(path, 0, out, err, errlen);
}

ls_status ls_dsse_keyid(const EVP_PKEY *key, char hex[LS_DIGEST_HEX_SIZE]) {
    uint8_t raw[64];
    size_t n = sizeof raw;
    if (!EVP_PKEY_get_raw_public_key(key, raw, &n)) {
        ERR_clear_error();
        return LS_ERR_ARG;
    }
    return ls_digest_sha256_hex(raw, n, hex);
}

/* PEM text of a key into a fresh NUL-terminated buffer. */
static ls_status pem_of(EVP_PKEY *key, int private_key, char **out, size_t *len) {
    *out = NULL;
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return LS_ERR_NOMEM;
    int ok = private_key ? PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL)
                         : PEM_write_bio_PUBKEY(bio, key);
    ls_status st = LS_ERR_INTERNAL;
    char *data = NULL;
    long n = BIO_get_mem_data(bio, &data);
    if (ok && n > 0) {
        *out = malloc((size_t)n + 1);
        if (*out == NULL) {
            st = LS_ERR_NOMEM;
        } else {
            memcpy(*out, data, (size_t)n);
            (*out)[n] = '\0';
            *len = (size_t)n;
            st = LS_OK;
        }
    }
    BIO_free(bio);
    ERR_clear_error();
    return st;
}

ls_status ls_dsse_keygen(const char *private_path, const char *public_path, char *err,
                         size_t errlen) {
    struct stat sb;
    const char *exists = stat(private_path, &sb) == 0  ? private_path
                         : stat(public_path, &sb) == 0 ? public_path
                                                       : NULL;
    if (exists != NULL) {
        ls_json_errf(err, errlen, "%s: already exists; refusing to overwrite a key", exists);
        return LS_ERR_ARG;
    }
    ls_status st = LS_OK;
    char *priv = NULL, *pub = NULL;
    size_t priv_len = 0, pub_len = 0;
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (key == NULL) {
        char why[256];
        ls_json_errf(err, errlen, "Ed25519 key generation failed: %s",
                     crypto_reason(why, sizeof why));
        return LS_ERR_INTERNAL;
    }
    st = pem_of(key, 1, &priv, &priv_len);
    if (st == LS_OK) st = pem_of(key, 0, &pub, &pub_len);
    if (st == LS_OK) st = ls_atomic_write_mode(private_path, priv, priv_len, 0600, err, errlen);
    if (st == LS_OK) {
        st = ls_atomic_write_mode(public_path, pub, pub_len, 0644, err, errlen);
        if (st != LS_OK) remove(private_path); /* no half key pair */
    }
    if (priv != NULL) OPENSSL_cleanse(priv, priv_len);
    free(priv);
    free(pub);
    EVP_PKEY_free(key);
    return st;
}

/* ---- signing and verifying ---------------------------------------------- */

ls_status ls_dsse_pae(const char *type, const void *body, size_t len, uint8_t **out,
                      size_t *out_len) {
    *out = NULL;
    size_t tlen = strlen(type);
    char head[64];
    int hn = snprintf(head, sizeof head, "DSSEv1 %zu ", tlen);
    char mid[32];
    int mn = snprintf(mid, sizeof mid, " %zu ", len);
    size_t total = (size_t)hn + tlen + (size_t)mn + len;
    uint8_t *buf = malloc(total + 1);
    if (buf == NULL) return LS_ERR_NOMEM;
    uint8_t *p = buf;
    memcpy(p, head, (size_t)hn);
    p += hn;
    memcpy(p, type, tlen);
    p += tlen;
    memcpy(p, mid, (size_t)mn);
    p += mn;
    if (len > 0) memcpy(p, body, len);
    *out = buf;
    *out_len = total;
    return LS_OK;
}

ls_status ls_dsse_sign(const void *payload, size_t len, const char *payload_type,
                       EVP_PKEY *key, char **envelope, size_t *envelope_len, char *err,
                       size_t errlen) {
    *envelope = NULL;
    if (!EVP_PKEY_is_a(key, "ED25519")) {
        ls_json_errf(err, errlen, "signing key is not Ed25519");
        return LS_ERR_ARG;
    }
    ls_status st;
    uint8_t *pae = NULL, sig[64];
    size_t pae_len = 0, sig_len = sizeof sig;
    char *payload_b64 = NULL, *sig_b64 = NULL, keyid[LS_DIGEST_HEX_SIZE];
    cJSON *doc = NULL;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL) return LS_ERR_NOMEM;
    st = ls_dsse_keyid(key, keyid);
    if (st == LS_OK) st = ls_dsse_pae(payload_type, payload, len, &pae, &pae_len);
    if (st != LS_OK) goto cleanup;
    if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) != 1 ||
        EVP_DigestSign(ctx, sig, &sig_len, pae, pae_len) != 1) {
        char why[256];
        ls_json_errf(err, errlen, "Ed25519 signing failed: %s", crypto_reason(why, sizeof why));
        st = LS_ERR_INTERNAL;
        goto cleanup;
    }
    st = b64_encode(payload, len, &payload_b64);
    if (st == LS_OK) st = b64_encode(sig, sig_len, &sig_b64);
    if (st != LS_OK) goto cleanup;
    st = LS_ERR_NOMEM;
    doc = cJSON_CreateObject();
    if (!cJSON_AddStringToObject(doc, "payload", payload_b64) ||
        !cJSON_AddStringToObject(doc, "payloadType", payload_type))
        goto cleanup;
    cJSON *sigs = cJSON_AddArrayToObject(doc, "signatures");
    cJSON *s = cJSON_CreateObject();
    if (sigs == NULL || !cJSON_AddItemToArray(sigs, s)) {
        cJSON_Delete(s);
        goto cleanup;
    }
    if (!cJSON_AddStringToObject(s, "keyid", keyid) || !cJSON_AddStringToObject(s, "sig", sig_b64))
        goto cleanup;
    st = ls_json_print(doc, envelope, envelope_len, err, errlen);
cleanup:
    cJSON_Delete(doc);
    free(sig_b64);
    free(payload_b64);
    free(pae);
    EVP_MD_CTX_free(ctx);
    return st;
}

/* 1 when sig is pub's Ed25519 signature of msg. */
static int ed25519_ok(EVP_PKEY *pub, const uint8_t *sig, size_t sig_len, const uint8_t *msg,
                      size_t msg_len) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx != NULL && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pub) == 1 &&
             EVP_DigestVerify(ctx, sig, sig_len, msg, msg_len) == 1;
    EVP_MD_CTX_free(ctx);
    ERR_clear_error();
    return ok;
}

ls_status ls_dsse_verify(const char *envelope, size_t len, const char *expected_type,
                         EVP_PKEY *pub, uint8_t **payload, size_t *payload_len, char *err,
                         size_t errlen) {
    if (payload != NULL) *payload = NULL;
    if (payload_len != NULL) *payload_len = 0;
    cJSON *doc = NULL;
    uint8_t *body = NULL, *pae = NULL;
    size_t body_len = 0, pae_len = 0;
    ls_schema_errors errs = {0};
    char keyid[LS_DIGEST_HEX_SIZE];
    ls_status st = ls_dsse_keyid(pub, keyid);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "verification key has no Ed25519 public key");
        return st;
    }
    st = ls_json_parse(envelope, len, "envelope", &doc, err, errlen);
    if (st != LS_OK) return st;
    const ls_schema *schema = NULL;
    st = ls_schema_get("dsse", &schema, err, errlen);
    if (st != LS_OK) goto cleanup;
    st = ls_schema_validate(schema, doc, &errs);
    if (st != LS_OK) {
        char first[600];
        ls_schema_errors_first(&errs, first, sizeof first);
        ls_json_errf(err, errlen, "envelope: not a valid DSSE envelope: %s", first);
        goto cleanup;
    }
    const char *type = cJSON_GetObjectItemCaseSensitive(doc, "payloadType")->valuestring;
    if (expected_type != NULL && strcmp(type, expected_type) != 0) {
        ls_json_errf(err, errlen, "envelope: payloadType \"%s\" is not \"%s\"", type,
                     expected_type);
        st = LS_ERR_UNSUPPORTED;
        goto cleanup;
    }
    st = b64_decode(cJSON_GetObjectItemCaseSensitive(doc, "payload")->valuestring, &body,
                    &body_len);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "envelope: /payload is not canonical base64");
        goto cleanup;
    }
    st = ls_dsse_pae(type, body, body_len, &pae, &pae_len);
    if (st != LS_OK) goto cleanup;
    int by_key = 0, valid = 0;
    size_t i = 0;
    const cJSON *sigs = cJSON_GetObjectItemCaseSensitive(doc, "signatures");
    for (const cJSON *s = sigs->child; s != NULL && !valid; s = s->next, i++) {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(s, "keyid")->valuestring, keyid) != 0)
            continue;
        by_key++;
        uint8_t *sig = NULL;
        size_t sig_len = 0;
        st = b64_decode(cJSON_GetObjectItemCaseSensitive(s, "sig")->valuestring, &sig, &sig_len);
        if (st != LS_OK) {
            ls_json_errf(err, errlen, "envelope: /signatures/%zu/sig is not canonical base64", i);
            goto cleanup;
        }
        valid = ed25519_ok(pub, sig, sig_len, pae, pae_len);
        free(sig);
    }
    if (!valid) {
        if (by_key == 0)
            ls_json_errf(err, errlen, "envelope: no signature by key %s", keyid);
        else
            ls_json_errf(err, errlen, "envelope: the signature by key %s does not verify: the "
                         "payload or payloadType changed, or the signature is forged", keyid);
        st = LS_ERR_SIGNATURE;
        goto cleanup;
    }
    st = LS_OK;
    if (payload != NULL) {
        *payload = body;
        body = NULL;
        if (payload_len != NULL) *payload_len = body_len;
    }
cleanup:
    ls_schema_errors_free(&errs);
    free(pae);
    free(body);
    cJSON_Delete(doc);
    return st;
}

/* ---- runs ----------------------------------------------------------------- */

static ls_status run_path(const char *run_dir, const char *name, char *buf, char *err,
                          size_t errlen) {
    if (snprintf(buf, PATH_CAP, "%s/%s", run_dir, name) >= PATH_CAP) {
        ls_json_errf(err, errlen, "%s: path too long", run_dir);
        return LS_ERR_ARG;
    }
    return LS_OK;
}

ls_status ls_dsse_sign_run(const char *run_dir, EVP_PKEY *key, char *err, size_t errlen) {
    char mpath[PATH_CAP], epath[PATH_CAP];
    ls_status st = run_path(run_dir, LS_MANIFEST_FILE, mpath, err, errlen);
    if (st == LS_OK) st = run_path(run_dir, LS_MANIFEST_DSSE_FILE, epath, err, errlen);
    if (st != LS_OK) return st;
    char *raw = NULL, *env = NULL;
    size_t raw_len = 0, env_len = 0;
    ls_manifest *m = NULL;
    ls_verify_report rep = {0};
    st = ls_json_read_bytes(mpath, &raw, &raw_len, err, errlen);
    if (st == LS_OK) st = ls_manifest_parse(raw, raw_len, mpath, &m, err, errlen);
    if (st == LS_OK) {
        st = ls_manifest_verify_parsed(run_dir, m, &rep, err, errlen);
        if (st == LS_ERR_CORRUPT)
            ls_json_errf(err, errlen, "%s: not signed: the run directory does not match it "
                         "(%s %s: %s)", mpath, ls_verify_kind_name(rep.items[0].kind),
                         rep.items[0].name, rep.items[0].detail);
    }
    if (st == LS_OK)
        st = ls_dsse_sign(raw, raw_len, LS_DSSE_PAYLOAD_TYPE, key, &env, &env_len, err, errlen);
    if (st == LS_OK) st = ls_atomic_write(epath, env, env_len, err, errlen);
    ls_verify_report_free(&rep);
    ls_manifest_free(m);
    free(env);
    free(raw);
    return st;
}

ls_status ls_dsse_verify_run(const char *run_dir, EVP_PKEY *pub, ls_verify_report *report,
                             char *err, size_t errlen) {
    char mpath[PATH_CAP], epath[PATH_CAP];
    ls_status st = run_path(run_dir, LS_MANIFEST_FILE, mpath, err, errlen);
    if (st == LS_OK) st = run_path(run_dir, LS_MANIFEST_DSSE_FILE, epath, err, errlen);
    if (st != LS_OK) return st;
    char *env = NULL, *raw = NULL;
    size_t env_len = 0, raw_len = 0, body_len = 0;
    uint8_t *body = NULL;
    ls_manifest *m = NULL;
    ls_verify_report local = {0};
    char why[600];
    st = ls_json_read_bytes(epath, &env, &env_len, err, errlen);
    if (st == LS_OK) st = ls_json_read_bytes(mpath, &raw, &raw_len, err, errlen);
    if (st != LS_OK) goto cleanup;
    st = ls_dsse_verify(env, env_len, LS_DSSE_PAYLOAD_TYPE, pub, &body, &body_len, why,
                        sizeof why);
    if (st != LS_OK) {
        ls_json_errf(err, errlen, "%s: %s", epath, why);
        goto cleanup;
    }
    if (body_len != raw_len || memcmp(body, raw, raw_len) != 0) {
        ls_json_errf(err, errlen, "%s: differs from the payload signed in %s", mpath, epath);
        st = LS_ERR_SIGNATURE;
        goto cleanup;
    }
    st = ls_manifest_parse(raw, raw_len, mpath, &m, err, errlen);
    if (st == LS_OK)
        st = ls_manifest_verify_parsed(run_dir, m, report != NULL ? report : &local, err, errlen);
cleanup:
    ls_verify_report_free(&local);
    ls_manifest_free(m);
    free(body);
    free(raw);
    free(env);
    return st;
}

/* ---- parity reports -------------------------------------------------------- */

ls_status ls_dsse_parity_envelope_path(const char *report_path, char *out, size_t cap, char *err, size_t errlen) {
    size_t n = strlen(report_path);
    int w;
    if (n >= 5 && strcmp(report_path + n - 5, ".json") == 0)
        w = snprintf(out, cap, "%.*s.dsse.json", (int)(n - 5), report_path);
    else
        w = snprintf(out, cap, "%s.dsse.json", report_path);
    if (w < 0 || (size_t)w >= cap) {
        ls_json_errf(err, errlen, "%s: path too long", report_path);
        return LS_ERR_ARG;
    }
    return LS_OK;
}

ls_status ls_dsse_sign_parity(const char *report_path, EVP_PKEY *key, char *err, size_t errlen) {
    char epath[PATH_CAP];
    ls_status st = ls_dsse_parity_envelope_path(report_path, epath, sizeof epath, err, errlen);
    if (st != LS_OK) return st;
    char *raw = NULL, *env = NULL;
    size_t raw_len = 0, env_len = 0;
    st = ls_json_read_bytes(report_path, &raw, &raw_len, err, errlen);
    if (st == LS_OK)
        st = ls_dsse_sign(raw, raw_len, LS_DSSE_PARITY_PAYLOAD_TYPE, key, &env, &env_len, err, errlen);
    if (st == LS_OK) st = ls_atomic_write(epath, env, env_len, err, errlen);
    free(env);
    free(raw);
    return st;
}
