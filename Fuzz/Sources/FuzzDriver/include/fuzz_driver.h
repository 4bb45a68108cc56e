#ifndef PORTER_FUZZ_DRIVER_H
#define PORTER_FUZZ_DRIVER_H
#include <stddef.h>
#include <stdint.h>

/* libFuzzer's own driver (compiler-rt, -sanitize=fuzzer). SwiftPM links an executable
 * target with its `main` renamed to `<Target>_main`, so each harness defines that
 * function and hands over to libFuzzer here. */
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
