/* replay_selftest.c - proves that a crash during corpus replay fails the
 * test: a target that traps on any input starting with "CRASH" and accepts
 * everything else, replayed by replay_main.c over
 * tests/fuzz/selftest/{ok,crash}/ (ctests fuzz_replay_selftest_ok, which
 * must pass, and fuzz_replay_selftest_crash, which must fail). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= 5 && memcmp(data, "CRASH", 5) == 0) __builtin_trap();
    return 0;
}
