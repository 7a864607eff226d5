#define FUZZ_SPM 0
#include "fuzz_tok.inc"
