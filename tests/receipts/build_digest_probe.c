/* build_digest_probe.c - a shared library named like the project's
 * (libls_digest_probe.so) for test_build_digest: the build object of a
 * process that loaded it must list it with its sha256. */
int ls_digest_probe_value(void);

int ls_digest_probe_value(void) { return 42; }
