/*
 * bench_grammar.c — what a JSON-schema grammar adds to a generation step (engine/gen.c), on a
 * real vocabulary: microseconds per token for the pipeline unconstrained, with the grammar
 * while the "model" already writes valid JSON (the sampled token is checked and accepted: the
 * common case), with the grammar against random logits (nearly every token is rejected, so a
 * full vocabulary mask is walked each step: the worst case), and one mask on its own.
 * A benchmark, not a test: it prints numbers, asserts nothing. The engine's forward pass is not
 * included (the decode-speed target compares whole steps; add the model's per-token time to
 * both columns to get that ratio).
 *
 * Build and run (from the repository root, after the CMake build; not part of it):
 *   cc -O2 -Iinclude -Iserver/api tools/bench/bench_grammar.c server/api/json_schema.c \
 *      build/libattnd_engine.a -ljansson -lutf8proc -lm -lpthread -fopenmp -o /tmp/bench_grammar
 *   /tmp/bench_grammar /work/shared/tokenizers/llama-spm.gguf [tokens]    # 32,000 tokens
 *   /tmp/bench_grammar /work/shared/tokenizers/qwen2-bpe.gguf [tokens]    # 151,936 tokens
 *   /tmp/bench_grammar --gbnf                 # prints the schema's grammar (for llama.cpp, and
 *                                             # tools/bench/grammar_vs_llamacpp.sh)
 *   /tmp/bench_grammar --schema               # prints the schema
 * Times are thread CPU time (upper bounds on a busy machine).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/gen.h"
#include "attnd/gguf.h"
#include "attnd/grammar.h"
#include "json_schema.h"

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"street\",\"city\",\"zip\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},\"active\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"age\",\"email\",\"address\",\"tags\",\"active\"],\"additionalProperties\":false}";

static const char *TEXT =
    " {\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@example.org\", \"address\": {\"street\": "
    "\"12 St James's Square\", \"city\": \"London\", \"zip\": \"12345\"}, \"tags\": [\"mathematics\", \"engines\", "
    "\"poetry\"], \"active\": true}";

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static uint64_t rs = 88172645463325252ULL;
static float noise(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * 0x1.0p-53) * 6.0f;
}

/* Runs up to n_tok steps (restarting the text when it ends); forced ids get +20 on noise, or
 * pure noise when ids is NULL. Returns µs per token. */
static double run(const tokenizer *tok, int n_vocab, const grammar *g, const grammar_vocab *gv, const int32_t *ids,
                  size_t n_ids, int n_tok, float *logits) {
    double total = 0;
    int done = 0;
    while (done < n_tok) {
        gen_params p = {.top_logprobs = -1, .grammar = g, .gvocab = gv};
        sampler_params_default(&p.sp);
        gen *ge;
        if (gen_create(&ge, &p, n_vocab, tok, NULL, 0, NULL) != ATTND_OK) return NAN;
        for (size_t i = 0; done < n_tok && (ids ? i < n_ids : i < 200); i++, done++) {
            for (int v = 0; v < n_vocab; v++) logits[v] = noise();
            if (ids) logits[ids[i]] += 20;
            gen_token t;
            double t0 = now_us();
            stop_reason why = gen_next(ge, logits, NULL, &t);
            total += now_us() - t0;
            if (why != STOP_NONE) break;
        }
        gen_destroy(ge);
    }
    return total / done;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar TOKENIZER.gguf [tokens]\n");
        return 2;
    }
    attnd_err err;
    if (!strcmp(argv[1], "--gbnf") || !strcmp(argv[1], "--schema")) {
        json_t *sc = json_loads(SCHEMA, 0, NULL);
        buf out = {0};
        if (argv[1][2] == 's') puts(SCHEMA);
        else if (json_schema_to_gbnf(sc, &out, &err) == ATTND_OK) fwrite(out.p, 1, out.len, stdout);
        else fprintf(stderr, "bench_grammar: %s\n", err.msg);
        buf_free(&out);
        json_decref(sc);
        return 0;
    }
    int n_tok = argc > 2 ? atoi(argv[2]) : 2000;
    gguf_file *f;
    tokenizer *tok;
    if (gguf_open(&f, argv[1], &err) != ATTND_OK || tok_load(&tok, f, &err) != ATTND_OK) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    int n_vocab = tok_n_vocab(tok);
    json_t *schema = json_loads(SCHEMA, 0, NULL);
    buf gb = {0};
    grammar *g;
    grammar_vocab *gv;
    double t0 = now_us();
    if (json_schema_to_gbnf(schema, &gb, &err) != ATTND_OK || grammar_compile(&g, gb.p, gb.len, &err) != ATTND_OK) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    double t_compile = now_us() - t0;
    t0 = now_us();
    if (grammar_vocab_from_tokenizer(&gv, tok, &err) != ATTND_OK) return 1;
    double t_index = now_us() - t0;
    int32_t *ids;
    size_t n_ids;
    if (tok_encode(tok, TEXT, strlen(TEXT), false, false, &ids, &n_ids, &err) != ATTND_OK) return 1;
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    unsigned char *allowed = malloc((size_t)n_vocab);

    printf("vocabulary %d tokens, grammar %d rules: compile %.0f us, vocabulary index %.1f ms (once per model)\n",
           n_vocab, grammar_n_rules(g), t_compile, t_index / 1e3);
    double free_us = run(tok, n_vocab, NULL, NULL, ids, n_ids, n_tok, logits);
    double follow_us = run(tok, n_vocab, g, gv, ids, n_ids, n_tok, logits);
    double worst_us = run(tok, n_vocab, g, gv, NULL, 0, n_tok / 10 + 1, logits);
    grammar_state *st;
    grammar_state_create(&st, g, NULL);
    grammar_state_accept(st, " {\"name\": \"Ada", 14); /* inside a string: the most tokens pass */
    t0 = now_us();
    int reps = 20, count = 0;
    for (int i = 0; i < reps; i++) count = grammar_state_mask(st, gv, allowed);
    double mask_us = (now_us() - t0) / reps;
    printf("%-52s %10.1f us/token\n", "unconstrained (the same forced logits)", free_us);
    printf("%-52s %10.1f us/token  (%+.1f)\n", "grammar, model writes valid JSON", follow_us, follow_us - free_us);
    printf("%-52s %10.1f us/token\n", "grammar, random logits (a mask almost every step)", worst_us);
    printf("%-52s %10.1f us      (%d tokens allowed)\n", "one full mask inside a string", mask_us, count);
    grammar_state_destroy(st);
    free(ids), free(logits), free(allowed);
    grammar_vocab_destroy(gv);
    grammar_unref(g);
    buf_free(&gb);
    json_decref(schema);
    tok_destroy(tok);
    gguf_close(f);
    return 0;
}
