/* Only the header matters: LLVMFuzzerRunDriver comes from libFuzzer. */
#include "fuzz_driver.h"
