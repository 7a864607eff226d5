/*
 * grammar_sentence.h — (tests only) whether a compiled grammar accepts a text whole, for the
 * tests of the code that writes grammars (JSON Schema, tool calls). Header-only, static inline.
 */
#ifndef ATTND_TEST_GRAMMAR_SENTENCE_H
#define ATTND_TEST_GRAMMAR_SENTENCE_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>

#include "attnd/grammar.h"

/* True when g accepts every byte of text and ends complete (a whole sentence, not a prefix). */
static inline bool grammar_sentence(const grammar *g, const char *text) {
    grammar_state *s;
    cr_assert_eq(grammar_state_create(&s, g, NULL), ATTND_OK);
    bool ok = grammar_state_accept(s, text, strlen(text)) && grammar_state_complete(s);
    grammar_state_destroy(s);
    return ok;
}

#endif
