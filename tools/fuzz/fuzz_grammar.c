/*
 * fuzz_grammar.c — (fuzzing only) GBNF compilation and matching on arbitrary bytes.
 *
 * The input is a grammar, then optionally a NUL byte and a text. A grammar that compiles is
 * run over the text byte by byte; at every step the vocabulary mask (a small fixed vocabulary
 * with multi-byte and partial UTF-8 tokens, and two special tokens without bytes, <|call|> and
 * <|x|>, for the token terminals <|call|> / <[22]>) must agree with checking each token on its
 * own, and accept must agree with try. In the text, byte 0xFF steps the token <|call|> and 0xFE
 * <|x|> (neither is UTF-8, so no byte step can take them).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/grammar.h"
#include "fuzz_util.h"

static const char *const VOCAB[] = {"", "{", "}", "\"", "a", "ab", "abc", " ", ":", ",", "0", "12", "true",
                                    "\xc3", "\xa9", "\xc3\xa9", "\n", "\\", "[", "]", "-", "x\xe2\x82"};
enum { N_BYTES = sizeof(VOCAB) / sizeof(VOCAB[0]), N = N_BYTES + 2, MAX_STEPS = 64 };
static const char *const SPECIAL[] = {"<|call|>", "<|x|>"}; /* ids N_BYTES, N_BYTES + 1 */
static grammar_vocab *g_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *bytes[N], *names[N];
    size_t lens[N], name_lens[N];
    for (int i = 0; i < N; i++) {
        bytes[i] = i < N_BYTES ? VOCAB[i] : "";
        names[i] = i < N_BYTES ? VOCAB[i] : SPECIAL[i - N_BYTES];
        lens[i] = strlen(bytes[i]), name_lens[i] = strlen(names[i]);
    }
    if (grammar_vocab_create(&g_vocab, N, bytes, lens, NULL) != ATTND_OK ||
        grammar_vocab_set_names(g_vocab, names, name_lens, NULL) != ATTND_OK)
        abort();
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
            bool ok = grammar_state_try_token(s, g_vocab, k);
            FUZZ_CHECK(allowed[k] == ok, "token %d: mask %d, check %d", k, allowed[k], ok);
            expect += ok;
        }
        FUZZ_CHECK(count == expect, "count %d, expected %d", count, expect);
        if (i == n_text) break;
        unsigned char c = (unsigned char)text[i];
        int special = c == 0xFF ? N_BYTES : c == 0xFE ? N_BYTES + 1 : -1;
        bool would, did;
        if (special >= 0) {
            FUZZ_CHECK(!grammar_state_try(s, text + i, 1), "the byte %02x is not UTF-8", c);
            would = grammar_state_try_token(s, g_vocab, special), did = grammar_state_accept_token(s, g_vocab, special);
        } else {
            would = grammar_state_try(s, text + i, 1), did = grammar_state_accept(s, text + i, 1);
        }
        FUZZ_CHECK(would == did, "try %d, accept %d", would, did);
        if (!did) break;
        (void)grammar_state_complete(s);
        (void)grammar_state_can_continue(s);
    }
    grammar_state_destroy(s);
    grammar_unref(g);
    return 0;
}
