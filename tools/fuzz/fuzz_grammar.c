/*
 * fuzz_grammar.c — (fuzzing only) GBNF compilation and matching on arbitrary bytes.
 *
 * The input is a grammar, then optionally a NUL byte and a text. A grammar that compiles is
 * run over the text byte by byte; at every step the vocabulary mask (a small fixed vocabulary
 * with multi-byte and partial UTF-8 tokens) must agree with checking each token on its own,
 * and accept must agree with try.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/grammar.h"
#include "fuzz_util.h"

static const char *const VOCAB[] = {"", "{", "}", "\"", "a", "ab", "abc", " ", ":", ",", "0", "12", "true",
                                    "\xc3", "\xa9", "\xc3\xa9", "\n", "\\", "[", "]", "-", "x\xe2\x82"};
enum { N = sizeof(VOCAB) / sizeof(VOCAB[0]), MAX_STEPS = 64 };
static grammar_vocab *g_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    size_t lens[N];
    for (int i = 0; i < N; i++) lens[i] = strlen(VOCAB[i]);
    if (grammar_vocab_create(&g_vocab, N, VOCAB, lens, NULL) != ATTND_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const char *nul = memchr(src, 0, size);
    size_t n_src = nul ? (size_t)(nul - src) : size;
    const char *text = nul ? nul + 1 : "";
    size_t n_text = nul ? size - n_src - 1 : 0;
    grammar *g = NULL;
    attnd_err err;
    attnd_status st = grammar_compile(&g, src, n_src, &err);
    FUZZ_CHECK((st == ATTND_OK) == (g != NULL), "status %d", st);
    if (!g) return 0;
    grammar_state *s;
    if (grammar_state_create(&s, g, &err) != ATTND_OK) {
        grammar_unref(g);
        return 0;
    }
    unsigned char allowed[N];
    for (size_t i = 0; i <= n_text && i < MAX_STEPS; i++) {
        int count = grammar_state_mask(s, g_vocab, allowed), expect = 0;
        for (int k = 0; k < N; k++) {
            bool ok = VOCAB[k][0] && grammar_state_try(s, VOCAB[k], strlen(VOCAB[k]));
            FUZZ_CHECK(allowed[k] == ok, "token %d: mask %d, check %d", k, allowed[k], ok);
            expect += ok;
        }
        FUZZ_CHECK(count == expect, "count %d, expected %d", count, expect);
        if (i == n_text) break;
        bool would = grammar_state_try(s, text + i, 1), did = grammar_state_accept(s, text + i, 1);
        FUZZ_CHECK(would == did, "try %d, accept %d", would, did);
        if (!did) break;
        (void)grammar_state_complete(s);
        (void)grammar_state_can_continue(s);
    }
    grammar_state_destroy(s);
    grammar_unref(g);
    return 0;
}
