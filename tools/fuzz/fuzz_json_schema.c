/*
 * fuzz_json_schema.c — (fuzzing only) JSON Schema to GBNF on arbitrary bytes.
 *
 * A body that parses as JSON is converted; a conversion that succeeds must give a grammar that
 * compiles (or fails only on a size limit, or for a pattern), and whose matcher then runs over the JSON text of the
 * input itself (which may or may not be a sentence).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/grammar.h"
#include "fuzz_util.h"
#include "json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!schema) return 0;
    buf out = {0};
    attnd_err err;
    attnd_status st = json_schema_to_gbnf(schema, &out, &err);
    if (st == ATTND_OK) {
        grammar *g = NULL;
        st = grammar_compile(&g, out.p, out.len, &err);
        /* a pattern can still make what the grammar refuses (an empty group repeated is left
         * recursion): the server answers that with a 400 too */
        FUZZ_CHECK(st == ATTND_OK || strstr(err.msg, "more than") || strstr(err.msg, "at most") ||
                       memmem(data, size, "pattern", 7),
                   "the generated grammar does not compile: %s\n%s", err.msg, out.p);
        grammar_state *s;
        if (g && grammar_state_create(&s, g, NULL) == ATTND_OK) {
            size_t n = size < 256 ? size : 256;
            for (size_t i = 0; i < n && grammar_state_accept(s, (const char *)data + i, 1); i++) {}
            grammar_state_destroy(s);
        }
        grammar_unref(g);
    } else {
        FUZZ_CHECK(err.msg[0], "an error without a message");
    }
    buf_free(&out);
    json_decref(schema);
    return 0;
}
