/* longstraw-sign - Ed25519 keys, and DSSE signatures over a run manifest.
 *
 *   longstraw-sign keygen --private K.pem --public P.pem
 *   longstraw-sign sign RUN --key K.pem      writes RUN/manifest.dsse.json
 *   longstraw-sign verify RUN --public P.pem
 *   longstraw-sign sign-parity REPORT --key K.pem   writes REPORT's envelope
 *
 * Exit status: 0 success (verify: signature valid and the run matches its
 * manifest), 1 invalid (verify: bad signature, changed manifest or files;
 * sign: the run does not match its manifest), 2 bad usage or an unreadable
 * input, with the reason on stderr. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli_opts.h"
#include "receipts/signing/dsse.h"
#include "receipts/signing/manifest.h"

static const char USAGE[] =
    "usage: longstraw-sign keygen --private K.pem --public P.pem\n"
    "       longstraw-sign sign RUN --key K.pem\n"
    "       longstraw-sign verify RUN --public P.pem\n"
    "       longstraw-sign sign-parity DIR/parity.json --key K.pem\n"
    "\n"
    "keygen  create an Ed25519 key pair (PEM: PKCS#8 private, SPKI public);\n"
    "        existing files are never overwritten\n"
    "sign    sign RUN/manifest.json into RUN/manifest.dsse.json (a DSSE envelope,\n"
    "        payloadType application/vnd.in-toto+json) after checking that the\n"
    "        run directory matches the manifest\n"
    "verify  check the envelope's signature with the public key, that its payload\n"
    "        is RUN/manifest.json, and that every file of RUN matches the manifest\n"
    "sign-parity  sign the exact bytes of a parity report into DIR/parity.dsse.json\n"
    "        (payloadType application/vnd.longstraw.parity+json), for longstraw-audit\n"
    "        --parity-key; longstraw-parity --key does the same as it writes one\n"
    "\n"
    "exit status: 0 ok/valid, 1 invalid, 2 bad usage or unreadable input\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "longstraw-sign: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(try longstraw-sign --help)\n");
    return 2;
}

/* I/O and argument failures are "unusable input" (2); the rest "invalid" (1). */
static int exit_code(ls_status st) {
    if (st == LS_OK) return 0;
    return st == LS_ERR_IO || st == LS_ERR_ARG || st == LS_ERR_NOMEM ? 2 : 1;
}

typedef struct {
    const char *positional;
    const char *private_key;
    const char *public_key;
    const char *key;
    int help;
} args;

/* The options (common/cli_opts.h); --key is the private key every signing tool takes (--sign-key's row). */
#define F(field) .off = offsetof(args, field)
static const ls_cli_opt OPTS[] = {
    {.kind = LS_CLI_STRING, .name = "--private", .arg = "K.pem", .help = "keygen: the private key to write", F(private_key)},
    {.kind = LS_CLI_STRING, .name = "--public", .arg = "P.pem", .help = "keygen: the public key to write; verify: the key",
     F(public_key)},
    {.like = "--sign-key", .name = "--key", F(key)},
    {.like = "--help", .name = "--help", F(help)},
};
#undef F

static int parse_args(int argc, char **argv, args *a) {
    const char *pos[1];
    size_t n_pos = 0;
    char err[512];
    const ls_cli_parser p = {.table = {OPTS, sizeof OPTS / sizeof OPTS[0]}, .pos = pos, .max_pos = 1, .n_pos = &n_pos,
                             .once = 1};
    if (ls_cli_parse(&p, a, argc, argv, 2, err, sizeof err) != 0) return usage_error("%s", err);
    a->positional = n_pos ? pos[0] : NULL;
    return 0;
}

static int cmd_keygen(const args *a) {
    if (a->private_key == NULL || a->public_key == NULL || a->positional != NULL || a->key)
        return usage_error("%s", "keygen takes exactly --private K.pem --public P.pem");
    char err[1024];
    ls_status st = ls_dsse_keygen(a->private_key, a->public_key, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-sign: %s\n", err);
        return 2;
    }
    printf("wrote %s (private) and %s (public)\n", a->private_key, a->public_key);
    return 0;
}

static int cmd_sign(const args *a) {
    if (a->positional == NULL || a->key == NULL || a->private_key || a->public_key)
        return usage_error("%s", "sign takes RUN --key K.pem");
    char err[1024];
    EVP_PKEY *key = NULL;
    ls_status st = ls_dsse_load_private(a->key, &key, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-sign: --key %s\n", err);
        return 2;
    }
    st = ls_dsse_sign_run(a->positional, key, err, sizeof err);
    EVP_PKEY_free(key);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-sign: %s\n", err);
        return exit_code(st);
    }
    printf("wrote %s/%s\n", a->positional, LS_MANIFEST_DSSE_FILE);
    return 0;
}

static int cmd_sign_parity(const args *a) {
    if (a->positional == NULL || a->key == NULL || a->private_key || a->public_key)
        return usage_error("%s", "sign-parity takes REPORT --key K.pem");
    char err[1024], env[4096];
    EVP_PKEY *key = NULL;
    ls_status st = ls_dsse_load_private(a->key, &key, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-sign: --key %s\n", err);
        return 2;
    }
    st = ls_dsse_sign_parity(a->positional, key, err, sizeof err);
    EVP_PKEY_free(key);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-sign: %s\n", err);
        return exit_code(st);
    }
    if (ls_dsse_parity_envelope_path(a->positional, env, sizeof env, err, sizeof err) == LS_OK)
        printf("wrote %s\n", env);
    return 0;
}

static int cmd_verify(const args *a) {
    if (a->positional == NULL || a->public_key == NULL || a->private_key || a->key)
        return usage_error("%s", "verify takes RUN --public P.pem");
    char err[1024], keyid[LS_DIGEST_HEX_SIZE];
    EVP_PKEY *pub = NULL;
    ls_status st = ls_dsse_load_public(a->public_key, &pub, err, sizeof err);
    if (st != LS_OK) {
        fprintf(stderr, "longstraw-sign: --public %s\n", err);
        return 2;
    }
    ls_dsse_keyid(pub, keyid);
    ls_verify_report rep = {0};
    st = ls_dsse_verify_run(a->positional, pub, &rep, err, sizeof err);
    EVP_PKEY_free(pub);
    if (st == LS_OK) {
        printf("%s: valid: signed by key %s, every file matches %s\n", a->positional, keyid,
               LS_MANIFEST_FILE);
    } else {
        fprintf(stderr, "longstraw-sign: %s\n", err);
        for (size_t i = 0; i < rep.count; i++)
            fprintf(stderr, "  %s: %s/%s: %s\n", ls_verify_kind_name(rep.items[i].kind),
                    a->positional, rep.items[i].name, rep.items[i].detail);
    }
    ls_verify_report_free(&rep);
    return exit_code(st);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(USAGE, stdout);
            fputs("options:\n", stdout);
            ls_cli_usage(stdout, (ls_cli_table){OPTS, sizeof OPTS / sizeof OPTS[0]}, NULL, 0, 18);
            return 0;
        }
    }
    if (argc < 2) return usage_error("%s", "missing command (keygen, sign, verify or sign-parity)");
    args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc != 0) return rc;
    if (strcmp(argv[1], "keygen") == 0) return cmd_keygen(&a);
    if (strcmp(argv[1], "sign") == 0) return cmd_sign(&a);
    if (strcmp(argv[1], "verify") == 0) return cmd_verify(&a);
    if (strcmp(argv[1], "sign-parity") == 0) return cmd_sign_parity(&a);
    return usage_error("unknown command %s", argv[1]);
}
