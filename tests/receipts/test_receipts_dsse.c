/* test_receipts_dsse.c - DSSE envelopes: PAE and key id against
 * independent values, sign/verify round trips on a run, every rejection
 * the verifier claims (wrong key, changed payload byte, changed or unknown
 * payloadType, bad base64, malformed JSON, missing signatures, manifest
 * changed after signing), the signature checked by the openssl CLI, and
 * the exit codes of longstraw-sign and longstraw-validate. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <openssl/evp.h>

#include "receipts/format/build_info.h"
#include "receipts/format/digest.h"
#include "receipts/signing/dsse.h"
#include "receipts/format/json_util.h"
#include "receipts/signing/manifest.h"
#include "tests/support/test_receipts_support.h"

LS_TEST_SCRATCH

/* RFC 8032 section 7.1, TEST 1. */
static const uint8_t RFC_SEED[32] = {
    0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4,
    0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60};
static const char RFC_PUB_HEX[] =
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

static EVP_PKEY *rfc_key(void) {
    EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, RFC_SEED, 32);
    cr_assert_not_null(k);
    return k;
}

static EVP_PKEY *fresh_key(void) {
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    cr_assert_not_null(k);
    return k;
}

Test(receipts_dsse, pae_and_keyid_known_values) {
    uint8_t *pae = NULL;
    size_t n = 0;
    /* the example from the DSSE specification (protocol.md) */
    cr_assert_eq(ls_dsse_pae("http://example.com/HelloWorld", "hello world", 11, &pae, &n), LS_OK);
    const char want[] = "DSSEv1 29 http://example.com/HelloWorld 11 hello world";
    cr_assert_eq(n, strlen(want));
    cr_assert_eq(memcmp(pae, want, n), 0);
    free(pae);
    cr_assert_eq(ls_dsse_pae("t", NULL, 0, &pae, &n), LS_OK);
    cr_assert_eq(n, strlen("DSSEv1 1 t 0 "));
    cr_assert_eq(memcmp(pae, "DSSEv1 1 t 0 ", n), 0);
    free(pae);

    /* keyid = sha256 of the raw public key, derived from the RFC seed */
    EVP_PKEY *k = rfc_key();
    uint8_t raw[32];
    size_t rl = sizeof raw;
    cr_assert(EVP_PKEY_get_raw_public_key(k, raw, &rl));
    char hex[65], want_id[LS_DIGEST_HEX_SIZE], id[LS_DIGEST_HEX_SIZE];
    ls_digest_hex(raw, rl, hex);
    cr_assert_str_eq(hex, RFC_PUB_HEX);
    ls_digest_sha256_hex(raw, rl, want_id);
    cr_assert_eq(ls_dsse_keyid(k, id), LS_OK);
    cr_assert_str_eq(id, want_id);
    EVP_PKEY_free(k);
}

/* Signs payload with key and returns the envelope as cJSON. */
static cJSON *signed_envelope(EVP_PKEY *key, const char *payload, const char *type) {
    char *env = NULL, err[512];
    size_t len = 0;
    cr_assert_eq(ls_dsse_sign(payload, strlen(payload), type, key, &env, &len, err, sizeof err),
                 LS_OK, "%s", err);
    cJSON *doc = cJSON_Parse(env);
    free(env);
    cr_assert_not_null(doc);
    return doc;
}

static ls_status verify_doc(const cJSON *doc, const char *expected, EVP_PKEY *pub, char *err,
                            size_t errlen) {
    char *text = cJSON_PrintUnformatted(doc);
    cr_assert_not_null(text);
    ls_status st = ls_dsse_verify(text, strlen(text), expected, pub, NULL, NULL, err, errlen);
    free(text);
    return st;
}

static void set_string(cJSON *obj, const char *key, const char *value) {
    cr_assert(cJSON_ReplaceItemInObject(obj, key, cJSON_CreateString(value)));
}

Test(receipts_dsse, sign_verify_and_rejections) {
    EVP_PKEY *key = rfc_key(), *other = fresh_key();
    const char *payload = "{\"_type\":\"https://in-toto.io/Statement/v1\",\"n\":1}";
    char err[1024];
    cJSON *good = signed_envelope(key, payload, LS_DSSE_PAYLOAD_TYPE);

    char *text = cJSON_PrintUnformatted(good);
    uint8_t *body = NULL;
    size_t body_len = 0;
    cr_assert_eq(ls_dsse_verify(text, strlen(text), LS_DSSE_PAYLOAD_TYPE, key, &body, &body_len,
                                err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(body_len, strlen(payload));
    cr_assert_eq(memcmp(body, payload, body_len), 0);
    free(body);
    free(text);

    /* an empty payload round-trips too */
    cJSON *empty = signed_envelope(key, "", LS_DSSE_PAYLOAD_TYPE);
    cr_assert_str_eq(cJSON_GetObjectItem(empty, "payload")->valuestring, "");
    cr_assert_eq(verify_doc(empty, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err), LS_OK, "%s", err);
    cJSON_Delete(empty);

    /* wrong key */
    cr_assert_eq(verify_doc(good, LS_DSSE_PAYLOAD_TYPE, other, err, sizeof err), LS_ERR_SIGNATURE);
    cr_assert_not_null(strstr(err, "no signature by key"), "%s", err);

    /* one payload byte changed, re-encoded canonically */
    cJSON *bad = cJSON_Duplicate(good, 1);
    char *changed = strdup(payload);
    changed[strlen(changed) - 2] = '2';
    char b64[256];
    EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)changed, (int)strlen(changed));
    set_string(bad, "payload", b64);
    cr_assert_eq(verify_doc(bad, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err), LS_ERR_SIGNATURE,
                 "%s", err);
    cJSON_Delete(bad);
    free(changed);

    /* payloadType changed: PAE binds it even when any type is accepted */
    bad = cJSON_Duplicate(good, 1);
    set_string(bad, "payloadType", "application/vnd.in-toto+jsoN");
    cr_assert_eq(verify_doc(bad, NULL, key, err, sizeof err), LS_ERR_SIGNATURE, "%s", err);
    cr_assert_eq(verify_doc(bad, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err), LS_ERR_UNSUPPORTED);
    cJSON_Delete(bad);

    /* an unknown payloadType, validly signed, is still refused */
    cJSON *other_type = signed_envelope(key, payload, "application/json");
    cr_assert_eq(verify_doc(other_type, NULL, key, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(verify_doc(other_type, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err),
                 LS_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(err, "application/json"), "%s", err);
    cJSON_Delete(other_type);

    /* malformed base64: bad length, bad character, non-canonical padding bits */
    const char *bad_payloads[] = {"eyJ", "eyJ!", "QR==", "eyJ=eyJ="};
    for (size_t i = 0; i < sizeof bad_payloads / sizeof *bad_payloads; i++) {
        bad = cJSON_Duplicate(good, 1);
        set_string(bad, "payload", bad_payloads[i]);
        ls_status st = verify_doc(bad, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err);
        cr_expect(st == LS_ERR_FORMAT || st == LS_ERR_SCHEMA, "payload \"%s\": %s",
                  bad_payloads[i], ls_status_str(st));
        cJSON_Delete(bad);
    }
    bad = cJSON_Duplicate(good, 1);
    cJSON *sig0 = cJSON_GetArrayItem(cJSON_GetObjectItem(bad, "signatures"), 0);
    char sig[128], flipped[128];
    snprintf(sig, sizeof sig, "%s", cJSON_GetObjectItem(sig0, "sig")->valuestring);
    cr_assert_eq(strlen(sig), 88u);
    snprintf(flipped, sizeof flipped, "%s", sig);
    flipped[10] = flipped[10] == 'A' ? 'B' : 'A'; /* signature bits */
    set_string(sig0, "sig", flipped);
    cr_assert_eq(verify_doc(bad, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err), LS_ERR_SIGNATURE);
    snprintf(flipped, sizeof flipped, "%s", sig);
    /* char 85 carries 2 signature bits and 4 padding bits: set a padding bit */
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    flipped[85] = alphabet[(strchr(alphabet, flipped[85]) - alphabet) ^ 1];
    set_string(sig0, "sig", flipped);
    cr_assert_eq(verify_doc(bad, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err), LS_ERR_FORMAT);
    set_string(sig0, "sig", "not base64 at all");
    cr_assert_neq(verify_doc(bad, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err), LS_OK);
    cJSON_Delete(bad);

    /* missing or empty signatures, malformed JSON */
    bad = cJSON_Duplicate(good, 1);
    cJSON_DeleteItemFromObject(bad, "signatures");
    cr_assert_eq(verify_doc(bad, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err), LS_ERR_SCHEMA);
    cJSON_AddArrayToObject(bad, "signatures");
    cr_assert_eq(verify_doc(bad, LS_DSSE_PAYLOAD_TYPE, key, err, sizeof err), LS_ERR_SCHEMA);
    cJSON_Delete(bad);
    const char *broken = "{\"payload\": \"eyJ9\", \"payloadType\": ";
    cr_assert_eq(ls_dsse_verify(broken, strlen(broken), NULL, key, NULL, NULL, err, sizeof err),
                 LS_ERR_FORMAT);

    cJSON_Delete(good);
    EVP_PKEY_free(key);
    EVP_PKEY_free(other);
}

static void keygen(const char *priv, const char *pub) {
    char err[1024];
    cr_assert_eq(ls_dsse_keygen(priv, pub, err, sizeof err), LS_OK, "%s", err);
}

Test(receipts_dsse, run_sign_verify_and_tampering, .init = setup, .fini = teardown) {
    char run[1024], priv[4096], pub[4096], pub2[4096], priv2[4096], err[1024];
    snprintf(run, sizeof run, "%s/run", tmp);
    cr_assert_eq(mkdir(run, 0777), 0);
    ls_test_make_run(run, 2);
    snprintf(priv, sizeof priv, "%s/k.pem", tmp);
    snprintf(pub, sizeof pub, "%s/p.pem", tmp);
    snprintf(priv2, sizeof priv2, "%s/k2.pem", tmp);
    snprintf(pub2, sizeof pub2, "%s/p2.pem", tmp);
    keygen(priv, pub);
    keygen(priv2, pub2);
    struct stat sb;
    cr_assert_eq(stat(priv, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0600, "private key mode %o", (unsigned)(sb.st_mode & 0777));
    cr_assert_eq(ls_dsse_keygen(priv, pub2, err, sizeof err), LS_ERR_ARG, "overwrote a key");
    cr_assert_not_null(strstr(err, priv), "%s", err);

    EVP_PKEY *k = NULL, *p = NULL, *p2 = NULL;
    cr_assert_eq(ls_dsse_load_private(priv, &k, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_dsse_load_public(pub, &p, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_dsse_load_public(pub2, &p2, err, sizeof err), LS_OK, "%s", err);
    EVP_PKEY *wrong = NULL;
    cr_assert_eq(ls_dsse_load_public(priv, &wrong, err, sizeof err), LS_ERR_FORMAT,
                 "a private key file loaded as a public key");
    cr_assert_null(wrong);

    cr_assert_eq(ls_dsse_sign_run(run, k, err, sizeof err), LS_OK, "%s", err);
    ls_verify_report rep = {0};
    cr_assert_eq(ls_dsse_verify_run(run, p, &rep, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_dsse_verify_run(run, p2, &rep, err, sizeof err), LS_ERR_SIGNATURE);

    /* envelope produced by the writer validates under both validators */
    char schema[4096], env[4096 + 64], why[1024] = "";
    snprintf(schema, sizeof schema, "%s/schemas/dsse.schema.json", LS_SOURCE_DIR);
    snprintf(env, sizeof env, "%s/%s", run, LS_MANIFEST_DSSE_FILE);
    const char *paths[] = {env};
    int py = -1, c = -1;
    cr_assert_eq(ls_test_python_validate(schema, paths, 1, &py, 1, why, sizeof why), 1, "%s", why);
    cr_assert_eq(ls_test_c_validate(schema, paths, 1, &c, NULL, 1, why, sizeof why), 1, "%s", why);
    cr_assert(py == 1 && c == 1, "envelope: python %d, C %d", py, c);

    /* a file changed after signing: the signature holds, the run does not */
    char f[4096];
    snprintf(f, sizeof f, "%s/rank-0000/events.jsonl.zst", run);
    ls_test_write_file(f, "changed", 7);
    cr_assert_eq(ls_dsse_verify_run(run, p, &rep, err, sizeof err), LS_ERR_CORRUPT);
    cr_assert_eq(rep.count, 1u);
    cr_assert_str_eq(rep.items[0].name, "rank-0000/events.jsonl.zst");
    ls_verify_report_free(&rep);
    /* and signing such a run is refused */
    cr_assert_eq(ls_dsse_sign_run(run, k, err, sizeof err), LS_ERR_CORRUPT);
    cr_assert_not_null(strstr(err, "rank-0000/events.jsonl.zst"), "%s", err);

    /* the manifest itself rewritten after signing */
    cJSON *build = NULL, *config = ls_test_config();
    cr_assert_eq(ls_build_info_create("0.3.21", "Open MPI 4.1.4", &build), LS_OK);
    ls_manifest m = {.run_id = "run-test-0001", .world = 2, .build = build, .config = config};
    cr_assert_eq(ls_manifest_write(run, &m, err, sizeof err), LS_OK, "%s", err);
    cr_assert_eq(ls_dsse_verify_run(run, p, &rep, err, sizeof err), LS_ERR_SIGNATURE);
    cr_assert_not_null(strstr(err, "manifest.json"), "%s", err);
    ls_verify_report_free(&rep);
    cJSON_Delete(build);
    cJSON_Delete(config);
    EVP_PKEY_free(k);
    EVP_PKEY_free(p);
    EVP_PKEY_free(p2);
}

/* The openssl command-line tool verifies our signature over PAE. */
Test(receipts_dsse, openssl_cli_agrees, .init = setup, .fini = teardown) {
    if (access("/usr/bin/openssl", X_OK) != 0) cr_skip_test("no /usr/bin/openssl");
    char priv[4096], pub[4096], err[1024];
    snprintf(priv, sizeof priv, "%s/k.pem", tmp);
    snprintf(pub, sizeof pub, "%s/p.pem", tmp);
    keygen(priv, pub);
    EVP_PKEY *k = NULL;
    cr_assert_eq(ls_dsse_load_private(priv, &k, err, sizeof err), LS_OK, "%s", err);
    const char *payload = "{\"hello\":\"world\"}\n";
    char *env = NULL;
    size_t env_len = 0;
    cr_assert_eq(ls_dsse_sign(payload, strlen(payload), LS_DSSE_PAYLOAD_TYPE, k, &env, &env_len,
                              err, sizeof err), LS_OK);
    EVP_PKEY_free(k);
    cJSON *doc = cJSON_Parse(env);
    free(env);
    const char *sig = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "signatures"), 0),
                                          "sig")->valuestring;
    uint8_t raw[96];
    int n = EVP_DecodeBlock(raw, (const unsigned char *)sig, (int)strlen(sig));
    cr_assert_eq(n, 66); /* 64 bytes + 2 padding */
    char sigf[4096], paef[4096];
    snprintf(sigf, sizeof sigf, "%s/sig.bin", tmp);
    snprintf(paef, sizeof paef, "%s/pae.bin", tmp);
    ls_test_write_file(sigf, raw, 64);
    uint8_t *pae = NULL;
    size_t pl = 0;
    ls_dsse_pae(LS_DSSE_PAYLOAD_TYPE, payload, strlen(payload), &pae, &pl);
    ls_test_write_file(paef, pae, pl);
    free(pae);
    cJSON_Delete(doc);
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/openssl pkeyutl -verify -pubin -inkey '%s' -rawin -in '%s' -sigfile '%s' "
             ">/dev/null 2>&1", pub, paef, sigf);
    cr_assert_eq(system(cmd), 0, "openssl rejects the signature");
    ls_test_write_file(paef, "DSSEv1 0  0 ", 12);
    cr_assert_neq(system(cmd), 0, "openssl accepts the signature over other bytes");
}

/* ---- the tools ------------------------------------------------------------ */

static int run_tool(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run_tool(const char *fmt, ...) {
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc), "%s did not exit normally", cmd);
    return WEXITSTATUS(rc);
}

#define SIGN LS_BINARY_DIR "/receipts/longstraw-sign"
#define VALIDATE LS_BINARY_DIR "/receipts/longstraw-validate"
#define QUIET ">/dev/null 2>&1"

Test(receipts_tools, longstraw_sign_exit_codes, .init = setup, .fini = teardown) {
    char run[1024];
    snprintf(run, sizeof run, "%s/run", tmp);
    cr_assert_eq(mkdir(run, 0777), 0);
    ls_test_make_run(run, 2);
    cr_assert_eq(run_tool(SIGN " --help" QUIET), 0);
    cr_assert_eq(run_tool(SIGN QUIET), 2);
    cr_assert_eq(run_tool(SIGN " frobnicate" QUIET), 2);
    cr_assert_eq(run_tool(SIGN " keygen --private '%s/k.pem'" QUIET, tmp), 2);
    cr_assert_eq(run_tool(SIGN " keygen --private '%s/k.pem' --public '%s/p.pem'" QUIET, tmp, tmp), 0);
    cr_assert_eq(run_tool(SIGN " keygen --private '%s/k2.pem' --public '%s/p2.pem'" QUIET, tmp, tmp), 0);
    cr_assert_eq(run_tool(SIGN " keygen --private '%s/k.pem' --public '%s/p3.pem'" QUIET, tmp, tmp), 2);
    cr_assert_eq(run_tool(SIGN " verify '%s' --public '%s/p.pem'" QUIET, run, tmp), 2,
                 "verify without an envelope must say unreadable");
    cr_assert_eq(run_tool(SIGN " sign '%s' --key '%s/absent.pem'" QUIET, run, tmp), 2);
    cr_assert_eq(run_tool(SIGN " sign '%s' --key '%s/p.pem'" QUIET, run, tmp), 2);
    cr_assert_eq(run_tool(SIGN " sign '%s' --key '%s/k.pem'" QUIET, run, tmp), 0);
    cr_assert_eq(run_tool(SIGN " verify '%s' --public '%s/p.pem'" QUIET, run, tmp), 0);
    cr_assert_eq(run_tool(SIGN " verify '%s' --public '%s/p2.pem'" QUIET, run, tmp), 1);
    cr_assert_eq(run_tool(SIGN " verify '%s' --public '%s/absent.pem'" QUIET, run, tmp), 2);
    char f[4096];
    snprintf(f, sizeof f, "%s/parity.json", run);
    ls_test_write_file(f, "{}", 2);
    cr_assert_eq(run_tool(SIGN " verify '%s' --public '%s/p.pem'" QUIET, run, tmp), 1);
    /* the reason names the file */
    cr_assert_eq(run_tool(SIGN " verify '%s' --public '%s/p.pem' 2>&1 | grep -q parity.json", run,
                          tmp), 0);
}

Test(receipts_tools, longstraw_validate_exit_codes, .init = setup, .fini = teardown) {
    char run[1024];
    snprintf(run, sizeof run, "%s/run", tmp);
    cr_assert_eq(mkdir(run, 0777), 0);
    ls_test_make_run(run, 1);
    cr_assert_eq(run_tool(VALIDATE " --help" QUIET), 0);
    cr_assert_eq(run_tool(VALIDATE " receipt" QUIET), 2);
    cr_assert_eq(run_tool(VALIDATE " receipt '%s/rank-0000/receipt.json'" QUIET, run), 0);
    cr_assert_eq(run_tool(VALIDATE " '%s/schemas/manifest.schema.json' '%s/manifest.json'" QUIET,
                          LS_SOURCE_DIR, run), 0);
    cr_assert_eq(run_tool(VALIDATE " manifest '%s/rank-0000/receipt.json'" QUIET, run), 1);
    cr_assert_eq(run_tool(VALIDATE " receipt '%s/absent.json'" QUIET, run), 2);
    cr_assert_eq(run_tool(VALIDATE " no-such-schema '%s/manifest.json'" QUIET, run), 2);
    char f[4096];
    snprintf(f, sizeof f, "%s/lines.jsonl", tmp);
    const char *lines = "{\"schema\":\"urn:longstraw:schema:audit-report:v1\"}\n\n[]\n";
    ls_test_write_file(f, lines, strlen(lines));
    cr_assert_eq(run_tool(VALIDATE " --jsonl audit-report '%s'" QUIET, f), 1);
    cr_assert_eq(run_tool(VALIDATE " --jsonl audit-report '%s' | grep -c invalid | grep -q 2", f), 0);
}
