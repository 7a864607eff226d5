/*
 * test_scale.h — case sizes for the sanitizer pass. scripts/dev.sh runs the whole suite a second
 * time under AddressSanitizer + UBSan with ATTND_SANITIZED=1, where the engine and the float64
 * references run several times slower; the heaviest tests take a smaller case there (fewer
 * tokens, fewer generated steps), with every assertion still made on it. The Release pass runs
 * the full sizes.
 */
#ifndef ATTND_TEST_SCALE_H
#define ATTND_TEST_SCALE_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static inline bool test_sanitized(void) {
    const char *s = getenv("ATTND_SANITIZED");
    return s && *s && strcmp(s, "0") != 0;
}

/* full in the Release pass, sanitized (smaller) under the sanitizers. */
static inline int test_size(int full, int sanitized) { return test_sanitized() ? sanitized : full; }

#endif
