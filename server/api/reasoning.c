/*
 * reasoning.c — counting a reply's reasoning tokens (see reasoning.h).
 *
 * The tokens' bytes are joined once, the reasoning blocks are found in the joined text as byte
 * ranges, and each token is tested against them by its own range. Done once per choice, when
 * the reply is whole: the cost is linear in its length.
 */
#include "reasoning.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>", ANALYSIS[] = "<|channel|>analysis",
                  CALL_OPEN[] = "<tool_call>";
static const char *const HARMONY_ENDS[] = {"<|end|>", "<|call|>", "<|return|>"};

/* The first occurrence of m in s[from, n), or n. */
static size_t find(const char *s, size_t n, size_t from, const char *m) {
    size_t lm = strlen(m);
    for (size_t i = from; i + lm <= n; i++)
        if (!memcmp(s + i, m, lm)) return i;
    return n;
}

/* The end of a think block whose text starts at s[from]: past its </think>, or (to_call) at a
 * <tool_call> that comes first (the call is not reasoning), or n. */
static size_t think_end(const char *s, size_t n, size_t from, bool to_call) {
    size_t c = find(s, n, from, THINK_CLOSE), t = to_call ? find(s, n, from, CALL_OPEN) : n;
    if (t < c) return t;
    return c < n ? c + strlen(THINK_CLOSE) : n;
}

/* The end of the block that opens at s[at] (its close marker included), or n. */
static size_t block_end(const char *s, size_t n, size_t at, bool harmony, bool to_call) {
    if (!harmony) return think_end(s, n, at + strlen(THINK_OPEN), to_call);
    size_t best = n, end = n;
    for (size_t k = 0; k < sizeof(HARMONY_ENDS) / sizeof(*HARMONY_ENDS); k++) {
        size_t c = find(s, n, at + strlen(ANALYSIS), HARMONY_ENDS[k]);
        if (c < best) best = c, end = c + strlen(HARMONY_ENDS[k]);
    }
    return end;
}

/* The next block at or after from: [*lo, *hi); false when there is none. */
static bool next_block(const char *s, size_t n, size_t from, bool to_call, size_t *lo, size_t *hi) {
    size_t t = find(s, n, from, THINK_OPEN), h = find(s, n, from, ANALYSIS);
    if (t == n && h == n) return false;
    *lo = t < h ? t : h;
    *hi = block_end(s, n, *lo, h < t, to_call);
    return true;
}

int reasoning_count_tokens(const int32_t *ids, int n, bool in_reasoning, bool to_call, reasoning_bytes_fn bytes,
                           void *user) {
    if (n <= 0) return 0;
    buf text = {0};
    size_t *off = malloc(((size_t)n + 1) * sizeof(*off)); /* token i is text[off[i], off[i + 1]) */
    if (!off) return 0;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        const char *p;
        size_t len;
        off[i] = text.len;
        if (bytes(user, ids[i], &p, &len) && len) ok = buf_append(&text, p, len);
    }
    off[n] = text.len;
    const char *s = text.p ? text.p : "";
    size_t lo = 0, hi = 0;
    bool have = ok && in_reasoning;
    if (have) hi = think_end(s, text.len, 0, to_call); /* the block the prompt opened */
    else if (ok) have = next_block(s, text.len, 0, to_call, &lo, &hi);
    int count = 0;
    for (int i = 0; i < n && have; i++) {
        size_t a = off[i], b = off[i + 1];
        while (have && a >= hi) have = next_block(s, text.len, hi, to_call, &lo, &hi); /* this block is behind */
        if (have) count += b > a ? (a < hi && b > lo) : (a > lo && a < hi);
    }
    free(off);
    buf_free(&text);
    return count;
}
