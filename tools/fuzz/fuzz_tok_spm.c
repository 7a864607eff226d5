#define FUZZ_SPM 1
#include "fuzz_tok.inc"
