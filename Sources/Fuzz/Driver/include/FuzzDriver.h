// libFuzzer's driver entry (compiler-rt, LLVM 11 and later). SwiftPM links an executable with its own
// `<Module>_main` as `main`, so the fuzz targets cannot use libFuzzer's `main`; under -D FUZZING they
// define `<Module>_main` and call this. Only referenced in fuzzer builds, where -sanitize=fuzzer links it.
#pragma once
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
