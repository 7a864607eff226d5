/*
 * fuzz_json_schema.c — (fuzzing only) JSON Schema to GBNF on arbitrary bytes.
 *
 * A body that parses as JSON is converted; a conversion that succeeds must give a grammar that
 * compiles (or fails only on a size limit, or for a pattern), and whose matcher then runs over the JSON text of the
 * input itself (which may or may not be a sentence). The same schema in Gemma 4's call syntax
 * (json_schema_rules_gemma4) must compile as well when its conversion succeeds.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/grammar.h"
#include "fuzz_util.h"
#include "json_schema.h"

/* Whether the grammar text out[n] compiles, or fails only as json_schema's output may (a size
 * limit, a pattern). */
static void check_compiles(const char *out, size_t n, const uint8_t *data, size_t size, grammar **g) {
    attnd_err err;
    attnd_status st = grammar_compile(g, out, n, &err);
    /* a pattern can still make what the grammar refuses (an empty group repeated is left
     * recursion): the server answers that with a 400 too */
    FUZZ_CHECK(st == ATTND_OK || strstr(err.msg, "more than") || strstr(err.msg, "at most") ||
                   memmem(data, size, "pattern", 7),
               "the generated grammar does not compile: %s\n%s", err.msg, out);
    if (st != ATTND_OK) *g = NULL;
}

static void check_gemma4(const json_t *schema, const uint8_t *data, size_t size) {
    buf out = {0};
    attnd_err err;
    grammar *g = NULL;
    if (!buf_puts(&out, "root ::= s0\n")) return;
    if (json_schema_rules_gemma4(&schema, 1, &out, &err) == ATTND_OK) check_compiles(out.p, out.len, data, size, &g);
    else FUZZ_CHECK(err.msg[0], "an error without a message");
    grammar_unref(g);
    buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!schema) return 0;
    buf out = {0};
    attnd_err err;
    attnd_status st = json_schema_to_gbnf(schema, &out, &err);
    if (st == ATTND_OK) {
        grammar *g = NULL;
        check_compiles(out.p, out.len, data, size, &g);
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
    check_gemma4(schema, data, size);
    json_decref(schema);
    return 0;
}
