/*
 * test_grammar.c — GBNF grammars (engine/grammar.c, grammar_match.c): every syntax element
 * accepting and rejecting text, completeness, partial UTF-8, the errors that name what is wrong,
 * the vocabulary mask against a token-by-token check, and the generation pipeline (gen.c) under
 * a grammar on a small vocabulary: random logits at temperature 1 always give a sentence.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gen.h"
#include "attnd/gguf.h"
#include "attnd/grammar.h"
#include "gguf_builder.h"

static grammar *compile(const char *src) {
    grammar *g;
    attnd_err err;
    cr_assert_eq(grammar_compile(&g, src, strlen(src), &err), ATTND_OK, "%s: %s", src, err.msg);
    return g;
}

/* 2: text is a whole sentence; 1: a prefix of one; 0: rejected. Fed in chunks of `chunk`
 * bytes (any chunking must give the same answer). */
static int judge_chunked(const char *src, const char *text, size_t chunk) {
    grammar *g = compile(src);
    grammar_state *s;
    cr_assert_eq(grammar_state_create(&s, g, NULL), ATTND_OK);
    size_t n = strlen(text);
    int r = 1;
    for (size_t i = 0; i < n && r; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        bool would = grammar_state_try(s, text + i, m);
        bool did = grammar_state_accept(s, text + i, m);
        cr_assert_eq(would, did, "try and accept agree");
        if (!did) r = 0;
    }
    if (r && grammar_state_complete(s)) r = 2;
    grammar_state_destroy(s);
    grammar_unref(g);
    return r;
}

static int judge(const char *src, const char *text) {
    int r = judge_chunked(src, text, 1 << 20);
    for (size_t c = 1; c <= 3; c++) cr_assert_eq(judge_chunked(src, text, c), r, "chunks of %zu: %s", c, text);
    return r;
}

#define ACCEPTS(src, text) cr_assert_eq(judge(src, text), 2, "%s should accept '%s'", src, text)
#define PREFIX(src, text) cr_assert_eq(judge(src, text), 1, "'%s' should be only a prefix for %s", text, src)
#define REJECTS(src, text) cr_assert_eq(judge(src, text), 0, "%s should reject '%s'", src, text)

static void refused(const char *src, const char *needle) {
    grammar *g = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(grammar_compile(&g, src, strlen(src), &err), ATTND_ERR_INVALID, "%s should not compile", src);
    cr_assert_null(g);
    cr_assert(strstr(err.msg, needle), "message '%s' should mention '%s'", err.msg, needle);
}

Test(grammar, a_literal_matches_exactly_and_completes_at_its_end) {
    ACCEPTS("root ::= \"yes\"", "yes");
    PREFIX("root ::= \"yes\"", "ye");
    REJECTS("root ::= \"yes\"", "yo");
    REJECTS("root ::= \"yes\"", "yess");
}

Test(grammar, alternation_sequences_and_groups) {
    const char *g = "root ::= (\"a\" | \"bc\") \"-\" ( \"x\" \"y\" | \"z\" )";
    ACCEPTS(g, "a-xy");
    ACCEPTS(g, "bc-z");
    PREFIX(g, "bc-x");
    REJECTS(g, "b-z");
    REJECTS(g, "a-xz");
}

Test(grammar, rules_reference_each_other_in_any_order) {
    const char *g = "root ::= greeting \" \" name\nname ::= \"Ann\" | \"Bo\"\ngreeting ::= \"hi\"";
    ACCEPTS(g, "hi Bo");
    REJECTS(g, "hi Al");
}

Test(grammar, star_plus_and_optional) {
    ACCEPTS("root ::= \"a\"*", "");
    ACCEPTS("root ::= \"a\"*", "aaaa");
    REJECTS("root ::= \"a\"* \"b\"", "aac");
    PREFIX("root ::= \"a\"+", "");
    ACCEPTS("root ::= \"a\"+", "aaa");
    ACCEPTS("root ::= \"x\" \"a\"? \"y\"", "xy");
    ACCEPTS("root ::= \"x\" \"a\"? \"y\"", "xay");
    REJECTS("root ::= \"x\" \"a\"? \"y\"", "xaay");
    ACCEPTS("root ::= (\"ab\")* \"c\"", "ababc"); /* a quantifier applies to the whole literal */
    REJECTS("root ::= (\"ab\")* \"c\"", "abac");
}

Test(grammar, bounded_repetition) {
    const char *g = "root ::= [0-9]{2,4}";
    PREFIX(g, "1");
    ACCEPTS(g, "12");
    ACCEPTS(g, "1234");
    REJECTS(g, "12345");
    ACCEPTS("root ::= \"a\"{3}", "aaa");
    PREFIX("root ::= \"a\"{3}", "aa");
    REJECTS("root ::= \"a\"{3}", "aaaa");
    ACCEPTS("root ::= \"a\"{2,}", "aaaaaaa");
    PREFIX("root ::= \"a\"{2,}", "a");
    ACCEPTS("root ::= \"a\"{,2} \"b\"", "b");
    ACCEPTS("root ::= \"a\"{,2} \"b\"", "aab");
    REJECTS("root ::= \"a\"{,2} \"b\"", "aaab");
    ACCEPTS("root ::= \"x\" \"a\"{0} \"y\"", "xy");
}

Test(grammar, character_classes_ranges_and_negation) {
    const char *g = "root ::= [a-cX_] [^0-9\\n]";
    ACCEPTS(g, "bZ");
    ACCEPTS(g, "_-");
    REJECTS(g, "dZ");
    REJECTS(g, "b5");
    REJECTS(g, "b\n");
    ACCEPTS(g, "X\xc3\xa9"); /* é is outside [0-9\n] */
    ACCEPTS("root ::= [-a]", "-");
    ACCEPTS("root ::= [a-]", "-");
    ACCEPTS("root ::= .", "\xe2\x82\xac");
    REJECTS("root ::= .", "ab");
}

Test(grammar, escapes_in_literals_and_classes) {
    ACCEPTS("root ::= \"\\\"q\\\"\\\\\\n\\t\"", "\"q\"\\\n\t");
    ACCEPTS("root ::= \"\\x41\\u00e9\\U0001F600\"", "A\xc3\xa9\xf0\x9f\x98\x80");
    ACCEPTS("root ::= [\\]\\[\\-]+", "][-");
    ACCEPTS("root ::= [\\x00-\\x1f]", "\x01");
}

Test(grammar, comments_and_line_continuation) {
    const char *g = "# a comment\n"
                    "root ::= # after the name\n"
                    "    \"a\" |   # first\n"
                    "    \"b\"\n"
                    "  | \"c\"\n"
                    "\n"
                    "# trailing\n";
    ACCEPTS(g, "a");
    ACCEPTS(g, "b");
    ACCEPTS(g, "c");
    REJECTS(g, "d");
    ACCEPTS("root ::= (\n  \"x\"\n  \"y\"\n)", "xy");
}

Test(grammar, non_ascii_characters_match_whole_and_split) {
    const char *g = "root ::= \"\xc3\xa9\" [\xe2\x82\xac-\xe2\x82\xaf]";
    ACCEPTS(g, "\xc3\xa9\xe2\x82\xac");
    PREFIX(g, "\xc3"); /* half a character that could still be é */
    REJECTS(g, "\xc3\xa8");
    REJECTS(g, "\xc4"); /* no allowed character starts with this byte */
    REJECTS(g, "\xff");
    REJECTS("root ::= [^a]", "\x80"); /* a continuation byte alone is not UTF-8 */
    REJECTS("root ::= \"}\"", "\xe0\x81\xbd"); /* an overlong '}' is not '}' */
    REJECTS("root ::= .", "\xc1\xbd");
    REJECTS("root ::= .", "\xed\xa0\x80"); /* a surrogate */
    REJECTS("root ::= [\\x00-\\x7f]", "\xe0"); /* only overlong 3-byte forms could be below 0x80 */
    REJECTS("root ::= .", "\xf4\x90"); /* beyond U+10FFFF */
}

Test(grammar, a_json_like_grammar) {
    const char *g = "root ::= object\n"
                    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
                    "object ::= \"{\" ws ( string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)* )? \"}\"\n"
                    "array ::= \"[\" ws ( value ws (\",\" ws value ws)* )? \"]\"\n"
                    "string ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
                    "number ::= \"-\"? [0-9]+ (\".\" [0-9]+)?\n"
                    "ws ::= [ \\t\\n]*\n";
    ACCEPTS(g, "{}");
    ACCEPTS(g, "{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"x\\\"y\"}");
    PREFIX(g, "{\"a\": [1, ");
    REJECTS(g, "{\"a\" 1}");
    REJECTS(g, "{\"a\": [1,]}");
}

Test(grammar, completeness_and_continuation) {
    grammar *g = compile("root ::= \"a\" \"b\"*");
    grammar_state *s;
    cr_assert_eq(grammar_state_create(&s, g, NULL), ATTND_OK);
    cr_assert(!grammar_state_complete(s));
    cr_assert(grammar_state_can_continue(s));
    cr_assert(grammar_state_accept(s, "a", 1));
    cr_assert(grammar_state_complete(s));
    cr_assert(grammar_state_can_continue(s), "more b's may follow");
    cr_assert(!grammar_state_accept(s, "c", 1));
    cr_assert(grammar_state_complete(s), "a rejected step leaves the state as it was");
    grammar_state_reset(s);
    cr_assert(!grammar_state_complete(s));
    grammar_state_destroy(s);
    grammar_unref(g);

    g = compile("root ::= \"ok\"");
    cr_assert_eq(grammar_state_create(&s, g, NULL), ATTND_OK);
    cr_assert(grammar_state_accept(s, "ok", 2));
    cr_assert(grammar_state_complete(s));
    cr_assert(!grammar_state_can_continue(s));
    grammar_state_destroy(s);
    grammar_unref(g);
}

Test(grammar, a_long_output_keeps_the_state_small) {
    grammar *g = compile("root ::= (\"[\" root \"]\" | \"x\")*");
    grammar_state *s;
    cr_assert_eq(grammar_state_create(&s, g, NULL), ATTND_OK);
    for (int i = 0; i < 30000; i++) cr_assert(grammar_state_accept(s, i % 3 == 2 ? "]" : i % 3 ? "x" : "[", 1));
    cr_assert(grammar_state_complete(s));
    cr_assert(grammar_state_accept(s, "[[", 2));
    cr_assert(!grammar_state_complete(s));
    grammar_state_destroy(s);
    grammar_unref(g);
}

Test(grammar, errors_name_the_problem_and_where) {
    refused("", "no 'root'");
    refused("rot ::= \"a\"", "no 'root'");
    refused("root ::= foo", "'foo' is used but never defined");
    refused("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    refused("root ::= \"abc", "not closed");
    refused("root ::= [abc", "not closed");
    refused("root ::= []", "empty character class");
    refused("root ::= [z-a]", "backwards");
    refused("root ::= (\"a\"", "')'");
    refused("root ::= \"a\" )", "unexpected ')'");
    refused("root ::= * \"a\"", "follows nothing");
    refused("root ::= \"a\"{3,2}", "maximum below its minimum");
    refused("root ::= \"a\"{99999}", "at most");
    refused("root ::= \"\\q\"", "unknown escape");
    refused("root ::= \"\\x4\"", "hex digits");
    refused("root ::= root \"a\"", "left-recursive");
    refused("root ::= x\nx ::= \"\"? root", "left-recursive");
    refused("root \"a\"", "'::='");
    refused("root ::= \"a\"\n  \"b\" ::=", "line 2");
    refused("root ::= \"\xff\"", "UTF-8");
}

Test(grammar, expansion_limits_are_errors_not_hangs) {
    /* a literal is copied for each repetition */
    char src[200] = "root ::= \"";
    for (int i = 0; i < 100; i++) strcat(src, "x");
    strcat(src, "\"{4000}");
    refused(src, "more than");
}

// ---- the vocabulary mask --------------------------------------------------------------------

static const char *const VOCAB[] = {"", "{", "}", "\"", "a", "ab", "abc", "b", ":", ",", " ", "\":", "{\"",
                                    "1", "12", "true", "tr", "\xc3", "\xa9", "\xc3\xa9", "x\xc3", "\"}", "}}", "\n"};
enum { N_VOCAB_STR = sizeof(VOCAB) / sizeof(VOCAB[0]) };

static grammar_vocab *make_vocab(void) {
    size_t lens[N_VOCAB_STR];
    for (int i = 0; i < N_VOCAB_STR; i++) lens[i] = strlen(VOCAB[i]);
    grammar_vocab *v;
    attnd_err err;
    cr_assert_eq(grammar_vocab_create(&v, N_VOCAB_STR, VOCAB, lens, &err), ATTND_OK, "%s", err.msg);
    return v;
}

/* The mask equals a token-by-token check, along a path of accepted tokens. */
static void mask_matches_checks(const char *src, const char *const *path, int n_path) {
    grammar *g = compile(src);
    grammar_vocab *v = make_vocab();
    grammar_state *s;
    cr_assert_eq(grammar_state_create(&s, g, NULL), ATTND_OK);
    unsigned char allowed[N_VOCAB_STR];
    for (int step = 0; step <= n_path; step++) {
        int count = grammar_state_mask(s, v, allowed), expect = 0;
        for (int i = 0; i < N_VOCAB_STR; i++) {
            bool ok = VOCAB[i][0] && grammar_state_try(s, VOCAB[i], strlen(VOCAB[i]));
            expect += ok;
            cr_assert_eq(allowed[i], ok, "step %d, token '%s': mask %d, check %d", step, VOCAB[i], allowed[i], ok);
        }
        cr_assert_eq(count, expect);
        if (step < n_path) cr_assert(grammar_state_accept(s, path[step], strlen(path[step])), "path %s", path[step]);
    }
    grammar_state_destroy(s);
    grammar_vocab_destroy(v);
    grammar_unref(g);
}

Test(grammar, the_mask_equals_checking_every_token) {
    const char *obj = "root ::= \"{\" ( \"\\\"\" [a-c]+ \"\\\"\" \":\" \" \"? (\"true\" | [0-9]+) )? \"}\"";
    const char *const path[] = {"{\"", "ab", "\":", " ", "12", "}"};
    mask_matches_checks(obj, path, 6);
    const char *const upath[] = {"x\xc3", "\xa9"};
    mask_matches_checks("root ::= \"x\" [\xc3\xa0-\xc3\xbf]+", upath, 2);
    mask_matches_checks("root ::= [^\"]*", NULL, 0);
}

/* A vocabulary of n pseudo-random lowercase words of 1-8 letters: a trie as large as a real
 * vocabulary's. The words live in one malloc'd block (*store). */
static grammar_vocab *word_vocab(int n, char **store) {
    const char **words = malloc(sizeof(*words) * (size_t)n);
    size_t *lens = malloc(sizeof(*lens) * (size_t)n);
    char *p = *store = malloc((size_t)n * 9);
    cr_assert(words && lens && p);
    uint32_t r = 12345;
    for (int i = 0; i < n; i++) {
        r = r * 1103515245u + 12345u;
        size_t len = 1 + (r >> 16) % 8;
        words[i] = p, lens[i] = len;
        for (size_t k = 0; k < len; k++) r = r * 1103515245u + 12345u, *p++ = (char)('a' + (r >> 16) % 26);
        *p++ = '\0';
    }
    grammar_vocab *v;
    cr_assert_eq(grammar_vocab_create(&v, n, words, lens, NULL), ATTND_OK);
    free(words), free(lens);
    return v;
}

/* The mask of s over v allows only tokens a check allows, and all of them unless it was cut;
 * returns the number allowed. */
static int mask_within_checks(grammar_state *s, const grammar_vocab *v, int n, unsigned char *allowed) {
    int count = grammar_state_mask(s, v, allowed), got = 0;
    bool cut = grammar_state_mask_was_cut(s);
    for (int i = 0; i < n; i++) {
        if (cut && !allowed[i]) continue; /* a cut mask promises only what it allows */
        bool ok = grammar_state_try_token(s, v, i);
        cr_assert_eq(allowed[i], ok, "token %d: mask %d, check %d", i, allowed[i], ok);
        got += allowed[i];
    }
    cr_assert_eq(count, got);
    return count;
}

/* A mask's work is bounded: under an ambiguous right-recursive grammar every trie node costs a
 * step's whole budget, and on a 40,000-word vocabulary the walk is cut, allowing a subset of what
 * the grammar allows (a sampled token stays valid). An ordinary grammar's mask is never cut. */
Test(grammar, a_pathological_grammar_s_mask_is_cut_to_what_it_reached) {
    enum { NW = 40000 };
    char *store;
    grammar_vocab *v = word_vocab(NW, &store);
    unsigned char *allowed = malloc(NW);
    grammar *amb = compile("root ::= [a-c]{0,4} (\"x\" | \"y\")? .+ root \"]\"");
    grammar_state *s;
    cr_assert_eq(grammar_state_create(&s, amb, NULL), ATTND_OK);
    cr_assert(grammar_state_accept(s, "abcabxyzab", 10));
    int count = mask_within_checks(s, v, NW, allowed);
    cr_assert(grammar_state_mask_was_cut(s), "the ambiguous grammar's mask was not cut");
    cr_assert_gt(count, 0, "a cut mask still allows what it reached");
    grammar_state_destroy(s);
    grammar *plain = compile("root ::= [a-z]+ ( \" \" [a-z]+ )*");
    cr_assert_eq(grammar_state_create(&s, plain, NULL), ATTND_OK);
    cr_assert(grammar_state_accept(s, "abc", 3));
    cr_assert_eq(mask_within_checks(s, v, NW, allowed), NW, "every word may follow");
    cr_assert(!grammar_state_mask_was_cut(s));
    grammar_state_destroy(s);
    grammar_unref(amb), grammar_unref(plain);
    grammar_vocab_destroy(v);
    free(allowed), free(store);
}

Test(grammar, the_mask_after_a_completed_sentence_is_empty) {
    grammar *g = compile("root ::= \"a\"");
    grammar_vocab *v = make_vocab();
    grammar_state *s;
    cr_assert_eq(grammar_state_create(&s, g, NULL), ATTND_OK);
    cr_assert(grammar_state_accept(s, "a", 1));
    unsigned char allowed[N_VOCAB_STR];
    cr_assert_eq(grammar_state_mask(s, v, allowed), 0);
    grammar_state_destroy(s);
    grammar_vocab_destroy(v);
    grammar_unref(g);
}

// ---- generation under a grammar -------------------------------------------------------------

/* A byte-level-free SentencePiece vocabulary: control tokens, then the pieces below. */
static const char *const PIECES[] = {"<unk>", "<s>", "</s>", "{", "}", "\"", "a", "b", "ab", ":", ",",
                                     "\xe2\x96\x81", "1", "2", "true", "false", "x", "\":", "\",", "}\n"};
enum { G_N = sizeof(PIECES) / sizeof(PIECES[0]), G_EOS = 2 };

static gbuf image;
static gguf_file *file;
static tokenizer *tok;
static grammar_vocab *gvocab;

/* The tokenizer and vocabulary index of pieces[n] (0: unk, 1-2: control, the rest normal, but
 * the n_ctl ids in ctl: control). */
static void setup_vocab_ctl(const char *const *pieces, int n, const int *ctl, int n_ctl) {
    int32_t types[64];
    float scores[64];
    cr_assert_leq(n, 64);
    for (int i = 0; i < n; i++) types[i] = i == 0 ? 2 : i < 3 ? 3 : 1, scores[i] = -(float)i;
    for (int k = 0; k < n_ctl; k++) types[ctl[k]] = 3;
    gb_spm_vocab(&image, pieces, types, scores, (uint64_t)n);
    attnd_err err;
    cr_assert_eq(gguf_open_memory(&file, image.p, image.n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&tok, file, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(grammar_vocab_from_tokenizer(&gvocab, tok, &err), ATTND_OK, "%s", err.msg);
}

static void setup_vocab(const char *const *pieces, int n) { setup_vocab_ctl(pieces, n, NULL, 0); }

static void setup(void) { setup_vocab(PIECES, G_N); }

static void teardown(void) {
    grammar_vocab_destroy(gvocab);
    tok_destroy(tok);
    gguf_close(file);
    free(image.p);
}

static const char *OBJ_GRAMMAR = "root ::= \"{\" ( pair (\",\" \" \"? pair)* )? \"}\"\n"
                                 "pair ::= \"\\\"\" [ab]+ \"\\\"\" \":\" \" \"? (\"true\" | \"false\" | [12]+)\n";

/* Generates up to max tokens under g from random logits (seeded, uniform in [0, 1000 / scale)),
 * logits[boost] raised by 2 and logits[ban] at -inf (-1: none); the text in out. */
static stop_reason generate_random(const grammar *g, int n_vocab, uint64_t seed, float temperature, float scale,
                                   int boost, int ban, int max, char *out, size_t cap) {
    gen_params p = {.top_logprobs = -1, .grammar = g, .gvocab = gvocab};
    sampler_params_default(&p.sp);
    p.sp.temperature = temperature;
    p.sp.top_k = 0, p.sp.top_p = 1, p.sp.min_p = 0;
    p.sp.seed = seed;
    gen *ge;
    attnd_err err;
    const int32_t prompt[1] = {1};
    cr_assert_eq(gen_create(&ge, &p, n_vocab, tok, prompt, 1, &err), ATTND_OK, "%s", err.msg);
    uint64_t x = seed * 2654435761u + 1;
    size_t len = 0;
    stop_reason why = STOP_NONE;
    for (int n = 0; n < max && why == STOP_NONE; n++) {
        float logits[64];
        for (int i = 0; i < n_vocab; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            logits[i] = (float)((x >> 40) % 1000) / scale;
        }
        if (boost >= 0) logits[boost] += 2;
        if (ban >= 0) logits[ban] = -INFINITY;
        gen_token t;
        why = gen_next(ge, logits, NULL, &t);
        cr_assert_lt(len + t.n_text, cap);
        memcpy(out + len, t.text, t.n_text);
        len += t.n_text;
    }
    const char *tail;
    size_t n_tail;
    gen_finish(ge, &tail, &n_tail);
    memcpy(out + len, tail, n_tail);
    out[len + n_tail] = '\0';
    gen_destroy(ge);
    return why;
}

/* The model would like to stop early: end-of-generation gets a boost. */
static stop_reason generate(const grammar *g, uint64_t seed, float temperature, int max, char *out, size_t cap) {
    return generate_random(g, G_N, seed, temperature, 100.0f, G_EOS, -1, max, out, cap);
}

TestSuite(grammar_gen, .init = setup, .fini = teardown);

Test(grammar_gen, random_logits_at_temperature_one_always_give_a_sentence) {
    grammar *g = compile(OBJ_GRAMMAR);
    int ended = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        char out[4096];
        stop_reason why = generate(g, seed, 1.0f, 300, out, sizeof(out));
        int verdict = judge(OBJ_GRAMMAR, out);
        if (why == STOP_EOG || why == STOP_GRAMMAR) {
            cr_assert_eq(verdict, 2, "seed %llu ended with '%s', which is not a sentence", (unsigned long long)seed, out);
            ended++;
        } else {
            cr_assert_geq(verdict, 1, "seed %llu: '%s' is not even a prefix", (unsigned long long)seed, out);
        }
    }
    cr_assert_gt(ended, 100, "most runs end within 300 tokens (%d did)", ended);
    grammar_unref(g);
}

Test(grammar_gen, greedy_follows_the_grammar_and_stops_when_it_is_complete) {
    grammar *g = compile("root ::= \"{\" \"\\\"ab\\\":\" \" \"? \"true\" \"}\"");
    char out[256];
    stop_reason why = generate(g, 7, 0.0f, 50, out, sizeof(out));
    cr_assert_eq(why, STOP_GRAMMAR);
    cr_assert(judge("root ::= \"{\" \"\\\"ab\\\":\" \" \"? \"true\" \"}\"", out) == 2, "'%s'", out);
    cr_assert_str_eq(stop_reason_finish(why), "stop");
    grammar_unref(g);
}

Test(grammar_gen, a_grammar_needs_its_vocabulary_index) {
    grammar *g = compile("root ::= \"a\"");
    gen_params p = {.top_logprobs = -1, .grammar = g};
    sampler_params_default(&p.sp);
    gen *ge;
    attnd_err err;
    cr_assert_eq(gen_create(&ge, &p, G_N, tok, NULL, 0, &err), ATTND_ERR_INVALID);
    p.gvocab = gvocab;
    cr_assert_eq(gen_create(&ge, &p, G_N, NULL, NULL, 0, &err), ATTND_ERR_UNSUPPORTED);
    grammar_unref(g);
}

Test(grammar_gen, a_grammar_the_vocabulary_cannot_spell_ends_generation) {
    grammar *g = compile("root ::= \"z\"");
    char out[64];
    cr_assert_eq(generate(g, 3, 1.0f, 10, out, sizeof(out)), STOP_EOG);
    cr_assert_str_eq(out, "");
    grammar_unref(g);
}

// ---- the lazy start: free reasoning, free text until the trigger ------------------------------

/* Pieces that spell the markers whole and in parts, and ">{" that ends a trigger and goes on. */
static const char *const L_PIECES[] = {"<unk>", "<s>", "</s>", "<", ">", "/", "think", "thi", "nk", "<think>",
                                       "</think>", "</", "<tool_call>", "tool_call", "tool", "_call", "{", "}",
                                       "a", "b", "hi", "x", ">{", "<t"};
enum { L_N = sizeof(L_PIECES) / sizeof(L_PIECES[0]), L_GT_BRACE = 22 };

static void lazy_setup(void) { setup_vocab(L_PIECES, L_N); }
TestSuite(grammar_lazy, .init = lazy_setup, .fini = teardown);

static stop_reason generate_lazy(const grammar *g, uint64_t seed, int ban, int max, char *out, size_t cap) {
    return generate_random(g, L_N, seed, 1.0f, 250.0f, -1, ban, max, out, cap);
}

static grammar *lazy_grammar(const char *src, const char *trigger, bool skip) {
    grammar *g = compile(src);
    grammar_lazy lz = {trigger, skip ? "<think>" : NULL, skip ? "</think>" : NULL, false, NULL};
    attnd_err err;
    cr_assert_eq(grammar_set_lazy(g, &lz, &err), ATTND_OK, "%s", err.msg);
    return g;
}

/* Where the constrained part of out starts: after a leading <think>…</think> block. NULL: out is
 * still inside the block. */
static const char *after_reasoning(const char *out) {
    if (strncmp(out, "<think>", 7)) return out;
    const char *c = strstr(out + 7, "</think>");
    return c ? c + 8 : NULL;
}

/* Checks the constrained part of run `out` (from part on) against grammar src: whole when the
 * grammar or an end-of-generation token stopped the run, else a prefix. True when it was whole. */
static bool constrained_part_holds(const char *src, const char *part, stop_reason why, uint64_t seed, const char *out) {
    int verdict = judge(src, part);
    if (why == STOP_EOG || why == STOP_GRAMMAR) {
        cr_assert_eq(verdict, 2, "seed %d: '%s' is not whole", (int)seed, out);
        return true;
    }
    cr_assert_geq(verdict, 1, "seed %d: '%s' is not a prefix", (int)seed, out);
    return false;
}

static const char *JSONISH = "root ::= \"{\" [ab]* \"}\"";

Test(grammar_lazy, reasoning_runs_free_and_the_answer_follows_the_grammar) {
    grammar *g = lazy_grammar(JSONISH, NULL, true);
    int reasoned = 0, answered = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        char out[8192];
        stop_reason why = generate_lazy(g, seed, L_GT_BRACE, 400, out, sizeof(out));
        const char *rest = after_reasoning(out);
        reasoned += rest != out;
        if (!rest) continue; /* ran out inside the reasoning: nothing was constrained yet */
        answered += constrained_part_holds(JSONISH, rest, why, seed, out);
    }
    cr_log_info("%d of 300 reasoned, %d answered", reasoned, answered);
    cr_expect_gt(reasoned, 5, "some runs reason first (%d)", reasoned);
    cr_expect_gt(answered, 50, "most runs answer (%d)", answered);
    grammar_unref(g);
}

Test(grammar_lazy, text_is_free_until_the_trigger_then_the_grammar_rules) {
    static const char *CALL = "root ::= \"<tool_call>\" \"{\" [ab]+ \"}\"";
    grammar *g = lazy_grammar(CALL, "<tool_call>", true);
    int called = 0, free_ends = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        char out[8192];
        stop_reason why = generate_lazy(g, seed, -1, 400, out, sizeof(out));
        const char *rest = after_reasoning(out);
        const char *call = rest ? strstr(rest, "<tool_call>") : NULL;
        if (!call) {
            cr_assert_neq(why, STOP_GRAMMAR, "seed %d: no call, yet the grammar ended it: '%s'", (int)seed, out);
            free_ends += why == STOP_EOG;
            continue;
        }
        called += constrained_part_holds(CALL, call, why, seed, out);
    }
    cr_log_info("%d of 300 called, %d ended without a call", called, free_ends);
    cr_expect_gt(called, 20, "calls were made and completed (%d)", called);
    cr_expect_gt(free_ends, 5, "some answers end without a call (%d)", free_ends);
    grammar_unref(g);
}

/* A scripted model over n_vocab tokens: the best token at step i is script[i]. The tokens drawn
 * go to ids[*n_ids] unless ids is NULL, their text to out (cap bytes) unless out is NULL. */
static stop_reason run_script(const grammar *g, int n_vocab, const int *script, int n, int32_t *ids, int *n_ids,
                              char *out, size_t cap) {
    gen_params p = {.top_logprobs = -1, .grammar = g, .gvocab = gvocab};
    sampler_params_default(&p.sp);
    p.sp.temperature = 0;
    gen *ge;
    attnd_err err;
    cr_assert_eq(gen_create(&ge, &p, n_vocab, tok, NULL, 0, &err), ATTND_OK, "%s", err.msg);
    float *logits = malloc((size_t)n_vocab * sizeof(*logits));
    cr_assert_not_null(logits);
    size_t len = 0;
    if (ids) *n_ids = 0;
    stop_reason why = STOP_NONE;
    for (int i = 0; i < n && why == STOP_NONE; i++) {
        for (int k = 0; k < n_vocab; k++) logits[k] = (float)(k % 5) * 0.1f;
        logits[script[i]] = 10;
        gen_token t;
        why = gen_next(ge, logits, NULL, &t);
        if (ids) ids[(*n_ids)++] = t.id;
        if (!out) continue;
        cr_assert_lt(len + t.n_text, cap);
        memcpy(out + len, t.text, t.n_text), len += t.n_text;
    }
    if (out) out[len] = '\0';
    free(logits);
    gen_destroy(ge);
    return why;
}

/* The scripted model over L_PIECES: the text drawn, and why it stopped. */
static void scripted(const grammar *g, const int *script, int n, char *out, size_t cap, stop_reason *why) {
    *why = run_script(g, L_N, script, n, NULL, NULL, out, cap);
}

Test(grammar_lazy, a_trigger_split_over_tokens_and_one_that_goes_on_inside_a_token) {
    grammar *g = lazy_grammar("root ::= \"<tool_call>\" \"{\" [ab]+ \"}\"", "<tool_call>", false);
    char out[512];
    stop_reason why;
    /* "hi" "<t" "ool" … is free; "<" "tool_call" ">{" completes the trigger inside ">{" */
    const int s1[] = {20, 3, 13, 22, 18, 17, 2};
    scripted(g, s1, 7, out, sizeof(out), &why);
    cr_expect_str_eq(out, "hi<tool_call>{a}");
    cr_expect_eq(why, STOP_GRAMMAR);
    /* the model wants "x" after the trigger: the grammar draws "{" instead, then its best
     * allowed token, "b" (19, above "a") */
    const int s2[] = {21, 12, 21, 21, 17, 2};
    scripted(g, s2, 6, out, sizeof(out), &why);
    cr_expect_str_eq(out, "x<tool_call>{b}", "got %s", out);
    grammar_unref(g);
}

Test(grammar_lazy, a_think_prefix_the_grammar_accepts_leaves_the_probe) {
    /* "<" could open <think> or the answer "<b>": the next token decides, and the grammar,
     * which accepts "<", takes the "b" */
    grammar *g = lazy_grammar("root ::= \"<\" [ab]+ \">\"", NULL, true);
    char out[512];
    stop_reason why;
    const int s1[] = {3, 19, 4, 2};
    scripted(g, s1, 4, out, sizeof(out), &why);
    cr_expect_str_eq(out, "<b>");
    cr_expect_eq(why, STOP_GRAMMAR);
    grammar_unref(g);
    /* a grammar that refuses "<": having written "<", the output must go on into <think> */
    g = lazy_grammar(JSONISH, NULL, true);
    const int s2[] = {3, 21, 4, 10, 21, 16, 17, 2};
    scripted(g, s2, 8, out, sizeof(out), &why);
    cr_expect(!strncmp(out, "<thi", 4) || !strncmp(out, "<think", 6), "got %s", out);
    /* a control token that writes nothing ("<s>") leaves the probe as it was */
    const int s3[] = {1, 9, 21, 10, 16, 17, 2};
    scripted(g, s3, 7, out, sizeof(out), &why);
    cr_expect_str_eq(out, "<think>x</think>{}");
    cr_expect_eq(why, STOP_GRAMMAR);
    grammar_unref(g);
}

/* The prompt opened the block (skip_inside): the output starts free, and the grammar rules only
 * after "</think>", even where the model's first tokens are ones the grammar refuses. */
Test(grammar_lazy, a_block_the_prompt_opened_runs_free_until_it_closes) {
    grammar *g = compile(JSONISH);
    grammar_lazy lz = {NULL, "<think>", "</think>", true, NULL};
    attnd_err err;
    cr_assert_eq(grammar_set_lazy(g, &lz, &err), ATTND_OK, "%s", err.msg);
    cr_assert(grammar_get_lazy(g).skip_inside);
    char out[8192];
    stop_reason why;
    const int s1[] = {21, 17, 18, 11, 6, 4, 16, 18, 17, 2}; /* "x}a" "</" "think" ">" "{a}" */
    scripted(g, s1, 10, out, sizeof(out), &why);
    cr_expect_str_eq(out, "x}a</think>{a}");
    cr_expect_eq(why, STOP_GRAMMAR);
    const int s2[] = {10, 21, 17, 2}; /* the model wants "x" after the close: the grammar says "{" */
    scripted(g, s2, 4, out, sizeof(out), &why);
    cr_expect(!strncmp(out, "</think>{", 9), "got %s", out);
    int closed = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        stop_reason w = generate_lazy(g, seed, L_GT_BRACE, 400, out, sizeof(out));
        const char *c = strstr(out, "</think>");
        if (!c) continue; /* still reasoning: nothing was constrained */
        closed++;
        int want = w == STOP_EOG || w == STOP_GRAMMAR ? 2 : 1; /* a whole answer, or a prefix of one */
        cr_assert_geq(judge(JSONISH, c + 8), want, "seed %d: '%s'", (int)seed, out);
    }
    cr_log_info("%d of 200 closed the block", closed);
    cr_expect_gt(closed, 20, "runs close the block and answer (%d)", closed);
    grammar_unref(g);
    /* without skip_inside the same first token is refused: the grammar rules from the start */
    g = lazy_grammar(JSONISH, NULL, true);
    scripted(g, s1, 3, out, sizeof(out), &why);
    cr_expect_eq(out[0], '{', "got %s", out);
    grammar_unref(g);
}

/* skip_break (Qwen3.5 opens a call inside its unclosed <think>): the block runs free until
 * "</think>" or the break, and at the break the grammar begins with the break's own bytes, also
 * when they come in pieces; without skip_break the same call stays free reasoning. */
Test(grammar_lazy, a_break_inside_the_block_starts_the_grammar_at_its_first_byte) {
    static const char *CALL = "root ::= \"<tool_call>\" \"{\" [ab]+ \"}\"";
    grammar *g = compile(CALL);
    grammar_lazy lz = {NULL, "<think>", "</think>", true, "<tool_call>"};
    attnd_err err;
    cr_assert_eq(grammar_set_lazy(g, &lz, &err), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(grammar_get_lazy(g).skip_break, "<tool_call>");
    char out[512];
    stop_reason why;
    /* "hi" "<tool_call>" then the model wants "x" "x" "}": the grammar draws "{" and its best
     * allowed token "b" (19, above "a") instead */
    const int s1[] = {20, 12, 21, 21, 17, 2};
    scripted(g, s1, 6, out, sizeof(out), &why);
    cr_expect_str_eq(out, "hi<tool_call>{b}");
    cr_expect_eq(why, STOP_GRAMMAR);
    /* the break in pieces, "<" "tool_call" ">{": the grammar takes the bytes written before it */
    const int s2[] = {20, 3, 13, 22, 18, 17, 2};
    scripted(g, s2, 7, out, sizeof(out), &why);
    cr_expect_str_eq(out, "hi<tool_call>{a}");
    cr_expect_eq(why, STOP_GRAMMAR);
    /* "</think>" first: as before, the grammar from the next token */
    const int s3[] = {20, 10, 12, 16, 18, 17, 2};
    scripted(g, s3, 7, out, sizeof(out), &why);
    cr_expect_str_eq(out, "hi</think><tool_call>{a}");
    cr_expect_eq(why, STOP_GRAMMAR);
    grammar_unref(g);
    g = compile(CALL); /* no skip_break: the call is reasoning text, free */
    lz.skip_break = NULL;
    cr_assert_eq(grammar_set_lazy(g, &lz, &err), ATTND_OK, "%s", err.msg);
    scripted(g, s1, 5, out, sizeof(out), &why);
    cr_expect_str_eq(out, "hi<tool_call>xx}");
    cr_expect_eq(why, STOP_NONE);
    grammar_unref(g);
}

Test(grammar_lazy, markers_are_checked) {
    grammar *g = compile("root ::= \"a\"");
    attnd_err err;
    grammar_lazy half = {NULL, "<think>", NULL, false, NULL}, empty = {"", NULL, NULL, false, NULL};
    cr_expect_eq(grammar_set_lazy(g, &half, &err), ATTND_ERR_INVALID);
    cr_expect_eq(grammar_set_lazy(g, &empty, &err), ATTND_ERR_INVALID);
    grammar_lazy inside = {NULL, NULL, NULL, true, NULL}, lone_break = {NULL, NULL, NULL, false, "<tool_call>"};
    cr_expect_eq(grammar_set_lazy(g, &inside, &err), ATTND_ERR_INVALID, "inside a block needs its close");
    cr_expect_eq(grammar_set_lazy(g, &lone_break, &err), ATTND_ERR_INVALID, "a break needs its block");
    cr_expect_null(grammar_get_lazy(g).trigger);
    grammar_unref(g);
}

// ---- token terminals: <[id]> and <text> ---------------------------------------------------------

/* Special tokens <|call|> and <|start|> (control: no bytes), and the pieces that spell them. */
static const char *const T_PIECES[] = {"<unk>", "<s>", "</s>", "<|call|>", "<|start|>", "<", "|", "call", ">",
                                       "{", "}", "a", "<|", "|>", "start", "x"};
enum { T_N = sizeof(T_PIECES) / sizeof(T_PIECES[0]), T_CALL = 3, T_START = 4, T_LT = 5, T_BAR = 6, T_WORD = 7,
       T_GT = 8, T_OPEN = 9, T_CLOSE = 10, T_A = 11, T_LTBAR = 12 };
static const int T_CTL[] = {T_CALL, T_START};

static void token_setup(void) { setup_vocab_ctl(T_PIECES, T_N, T_CTL, 2); }
TestSuite(grammar_tokens, .init = token_setup, .fini = teardown);

/* Whether each of the ids in order is accepted, one after another, and the end is complete. */
static bool run_ids(const grammar *g, const int *ids, int n) {
    grammar_state *st;
    cr_assert_eq(grammar_state_create(&st, g, NULL), ATTND_OK);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = grammar_state_accept_token(st, gvocab, ids[i]);
    ok = ok && grammar_state_complete(st);
    grammar_state_destroy(st);
    return ok;
}

Test(grammar_tokens, a_token_is_accepted_where_allowed_and_nowhere_else) {
    static const char *const SRC[] = {"root ::= \"{\" \"a\"* \"}\" <|call|>", "root ::= \"{\" \"a\"* \"}\" <[3]>"};
    for (int k = 0; k < 2; k++) {
        grammar *g = compile(SRC[k]);
        cr_assert_eq(grammar_vocab_check(g, gvocab, NULL), ATTND_OK);
        cr_assert_eq(grammar_check_tokenizer(g, tok, NULL), ATTND_OK);
        const int good[] = {T_OPEN, T_A, T_CLOSE, T_CALL};
        cr_assert(run_ids(g, good, 4), "%s", SRC[k]);
        const int early[] = {T_OPEN, T_CALL};
        cr_assert(!run_ids(g, early, 2), "not before its place");
        const int spelled[] = {T_OPEN, T_CLOSE, T_LT, T_BAR, T_WORD, T_BAR, T_GT};
        cr_assert(!run_ids(g, spelled, 7), "its text spelled out in other tokens is refused");
        const int other[] = {T_OPEN, T_CLOSE, T_START};
        cr_assert(!run_ids(g, other, 3), "another special token is refused");
        /* the mask: one walk gives exactly the named token at its place, never before */
        grammar_state *st;
        cr_assert_eq(grammar_state_create(&st, g, NULL), ATTND_OK);
        unsigned char allowed[T_N];
        cr_assert_eq(grammar_state_mask(st, gvocab, allowed), 1);
        cr_assert(allowed[T_OPEN] && !allowed[T_CALL]);
        cr_assert(grammar_state_accept_token(st, gvocab, T_OPEN) && grammar_state_accept_token(st, gvocab, T_CLOSE));
        cr_assert_eq(grammar_state_mask(st, gvocab, allowed), 1);
        cr_assert(allowed[T_CALL], "only <|call|> may follow");
        for (int id = 0; id < T_N; id++)
            cr_assert_eq(allowed[id], grammar_state_try_token(st, gvocab, id), "mask and check agree on %d", id);
        cr_assert(!grammar_state_complete(st));
        grammar_state_destroy(st);
        grammar_unref(g);
    }
}

/* A grammar without token terminals refuses special tokens as before; the byte forms of the
 * state see a token terminal as nothing they can match. */
Test(grammar_tokens, special_tokens_stay_refused_without_a_terminal) {
    grammar *g = compile("root ::= \"<|call|>\"");
    const int spelled[] = {T_LTBAR, T_WORD, T_BAR, T_GT};
    cr_assert(run_ids(g, spelled, 4), "the text in bytes is just text");
    const int tok1[] = {T_CALL};
    cr_assert(!run_ids(g, tok1, 1), "the special token is no byte of it");
    grammar_unref(g);
    g = compile("root ::= <|call|>");
    grammar_state *st;
    cr_assert_eq(grammar_state_create(&st, g, NULL), ATTND_OK);
    cr_assert(!grammar_state_try(st, "<|call|>", 8), "bytes never match a token terminal");
    grammar_state_destroy(st);
    grammar_unref(g);
}

Test(grammar_tokens, names_are_checked_against_the_vocabulary_and_syntax_errors_named) {
    grammar *g = compile("root ::= <|nope|> | <[99]>");
    attnd_err err;
    cr_assert_eq(grammar_vocab_check(g, gvocab, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "<|nope|>"), "%s", err.msg);
    cr_assert_eq(grammar_check_tokenizer(g, tok, &err), ATTND_ERR_INVALID, "the tokenizer says the same");
    cr_assert(strstr(err.msg, "<|nope|>"), "%s", err.msg);
    gen_params p = {.top_logprobs = -1, .grammar = g, .gvocab = gvocab};
    sampler_params_default(&p.sp);
    gen *ge;
    cr_assert_eq(gen_create(&ge, &p, T_N, tok, NULL, 0, &err), ATTND_ERR_INVALID, "generation refuses it");
    grammar_unref(g);
    g = compile("root ::= <[99]>");
    cr_assert_eq(grammar_vocab_check(g, gvocab, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "<[99]>"), "%s", err.msg);
    grammar_unref(g);
    refused("root ::= <|call|", "closed by '>'");
    refused("root ::= <>", "closed by '>'");
    refused("root ::= <[x]>", "<[N]>");
    refused("root ::= <[12a]>", "<[N]>");
    refused("root ::= <[99999999999]>", "<[N]>");
}

/* The scripted model over T_PIECES: the tokens drawn. */
static stop_reason scripted_t(const grammar *g, const int *script, int n, int32_t *ids, int *n_ids) {
    return run_script(g, T_N, script, n, ids, n_ids, NULL, 0);
}

/* In generation: a model that would spell the token out, or write text, gets the token; the
 * lazy start (a byte trigger) hands over to a grammar with terminals; two sequences of one
 * grammar (n > 1, a batch) keep their own states. */
Test(grammar_tokens, generation_draws_the_named_token_where_the_grammar_needs_it) {
    grammar *g = compile("root ::= \"{\" \"a\"* \"}\" <|start|> \"x\" <|call|>");
    int32_t ids[32];
    int n;
    const int script[] = {T_OPEN, T_CLOSE, T_LT, T_BAR, T_CALL, T_CALL, T_CALL};
    stop_reason why = scripted_t(g, script, 7, ids, &n);
    const int32_t want[] = {T_OPEN, T_CLOSE, T_START, 15, T_CALL};
    cr_assert_eq(n, 5, "%d tokens", n);
    for (int i = 0; i < 5; i++) cr_assert_eq(ids[i], want[i], "token %d is %d, want %d", i, ids[i], want[i]);
    /* <|call|> ends generation as an end token (llama.cpp counts it one), else the grammar does */
    cr_assert_eq(why, tok_is_eog(tok, T_CALL) ? STOP_EOG : STOP_GRAMMAR);
    grammar_unref(g);

    g = lazy_grammar("root ::= \"{\" <|start|> \"a\" \"}\"", "{", false);
    const int lazy[] = {15, T_A, T_OPEN, T_A, T_A, T_CLOSE};
    why = scripted_t(g, lazy, 6, ids, &n);
    const int32_t want_lazy[] = {15, T_A, T_OPEN, T_START, T_A, T_CLOSE};
    cr_assert_eq(n, 6);
    for (int i = 0; i < 6; i++) cr_assert_eq(ids[i], want_lazy[i], "lazy token %d is %d", i, ids[i]);
    cr_assert_eq(why, STOP_GRAMMAR);
    grammar_unref(g);

    /* two sequences stepped in turn, one at the terminal while the other is not */
    g = compile("root ::= \"a\"* <|call|>");
    grammar_state *s1, *s2;
    cr_assert_eq(grammar_state_create(&s1, g, NULL), ATTND_OK);
    cr_assert_eq(grammar_state_create(&s2, g, NULL), ATTND_OK);
    cr_assert(grammar_state_accept_token(s1, gvocab, T_A));
    cr_assert(grammar_state_accept_token(s2, gvocab, T_CALL));
    cr_assert(grammar_state_complete(s2) && !grammar_state_complete(s1));
    cr_assert(grammar_state_accept_token(s1, gvocab, T_CALL) && grammar_state_complete(s1));
    grammar_state_destroy(s1), grammar_state_destroy(s2);
    grammar_unref(g);
}

// ---- masks in parts: a server bounds each step's mask work (grammar_state_mask_more) ---------

/* A mask walked in parts, each stopped at a deadline already past (so each walks the least it
 * may), allows exactly what the mask at once allows, with the same count and cut: for an ordinary
 * grammar and for a pathological one that reaches the work bound. */
Test(grammar, a_mask_in_parts_equals_the_mask_at_once) {
    enum { NW = 40000 };
    char *store;
    grammar_vocab *v = word_vocab(NW, &store);
    unsigned char *whole = malloc(NW), *parts = malloc(NW);
    const char *srcs[] = {"root ::= [a-m]+ ( \" \" [a-z]+ )*", "root ::= [a-c]{0,4} (\"x\" | \"y\")? .+ root \"]\""};
    for (int k = 0; k < 2; k++) {
        grammar *g = compile(srcs[k]);
        grammar_state *s;
        cr_assert_eq(grammar_state_create(&s, g, NULL), ATTND_OK);
        cr_assert(grammar_state_accept(s, "abcab", 5));
        int count = grammar_state_mask(s, v, whole), got = -1, calls = 0;
        bool cut = grammar_state_mask_was_cut(s);
        grammar_state_mask_begin(s, v, parts);
        do calls++;
        while (!grammar_state_mask_more(s, v, parts, attnd_now_s() - 1, &got));
        cr_assert_gt(calls, 10, "grammar %d: the mask was not cut into parts (%d)", k, calls);
        cr_assert_eq(got, count, "grammar %d", k);
        cr_assert_eq(grammar_state_mask_was_cut(s), cut, "grammar %d", k);
        cr_assert(!memcmp(whole, parts, NW), "grammar %d: the parts allow other tokens", k);
        cr_assert(grammar_state_accept(s, "a", 1), "the state is whole after the parts");
        grammar_state_destroy(s);
        grammar_unref(g);
    }
    grammar_vocab_destroy(v);
    free(whole), free(parts), free(store);
}

/* A generation step whose mask is cut at every deadline (gen_next_until, then gen_resume until it
 * ends) gives the token gen_next gives for the same seed and logits, step after step. */
Test(grammar, a_step_cut_by_its_deadlines_resumes_to_the_same_token) {
    enum { NP = 3000 };
    char **pieces = malloc(sizeof(char *) * NP), *store = malloc((size_t)NP * 8);
    int32_t *types = malloc(sizeof(int32_t) * NP);
    float *scores = malloc(sizeof(float) * NP);
    uint32_t r = 99;
    for (int i = 0; i < NP; i++) {
        char *p = store + (size_t)i * 8;
        if (i < 3) snprintf(p, 8, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else {
            int len = 1 + i % 5; /* 1..5 letters; the index keeps each piece unique */
            for (int k = 0; k < len; k++) r = r * 1103515245u + 12345u, p[k] = (char)('a' + (r >> 16) % 26);
            p[len] = '\0';
            if (len >= 4) p[0] = (char)('a' + i % 26), p[1] = (char)('a' + i / 26 % 26), p[2] = (char)('a' + i / 676 % 26);
        }
        pieces[i] = p, types[i] = i == 0 ? 2 : i < 3 ? 3 : 1, scores[i] = -(float)i;
    }
    gbuf img;
    gb_spm_vocab(&img, (const char *const *)pieces, types, scores, NP);
    gguf_file *f;
    tokenizer *t;
    grammar_vocab *v;
    attnd_err err;
    cr_assert_eq(gguf_open_memory(&f, img.p, img.n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&t, f, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(grammar_vocab_from_tokenizer(&v, t, &err), ATTND_OK, "%s", err.msg);
    grammar *g = compile("root ::= [a-f]+ ( \" \" [a-f]+ )*");
    gen *a, *b;
    gen_params p = {.top_logprobs = 2, .grammar = g, .gvocab = v};
    sampler_params_default(&p.sp);
    p.sp.temperature = 1, p.sp.top_k = 0, p.sp.top_p = 1, p.sp.min_p = 0, p.sp.seed = 5;
    cr_assert_eq(gen_create(&a, &p, NP, t, NULL, 0, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(gen_create(&b, &p, NP, t, NULL, 0, &err), ATTND_OK, "%s", err.msg);
    float *logits = malloc(sizeof(float) * NP);
    uint64_t x = 7;
    int pended = 0;
    for (int step = 0; step < 40; step++) {
        for (int i = 0; i < NP; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL, logits[i] = (float)((x >> 40) % 1000) / 100;
        gen_token ta, tb;
        token_logprob topa[2], topb[2];
        stop_reason wa = gen_next(a, logits, topa, &ta), wb;
        bool done = gen_next_until(b, logits, topb, &tb, attnd_now_s() - 1, &wb);
        logits[0] = 1e9f; /* the caller's buffer is its own again while b is pending */
        pended += !done;
        while (!done) done = gen_resume(b, topb, &tb, attnd_now_s() - 1, &wb);
        cr_assert_eq(tb.id, ta.id, "step %d: %d vs %d", step, tb.id, ta.id);
        cr_assert_eq(wb, wa);
        cr_assert_eq(tb.logprob, ta.logprob);
        cr_assert_eq(topb[0].id, topa[0].id);
        if (wa != STOP_NONE) break;
    }
    cr_assert_gt(pended, 0, "no step's mask was cut");
    gen_destroy(a), gen_destroy(b);
    grammar_unref(g);
    grammar_vocab_destroy(v);
    tok_destroy(t);
    gguf_close(f);
    free(img.p), free(pieces), free(store), free(types), free(scores), free(logits);
}

// ---- the shortest completion ---------------------------------------------------------------------

/* The distance after feeding text (which the grammar must accept). */
static uint32_t distance_after(const char *src, const char *text) {
    grammar *g = compile(src);
    grammar_state *st;
    attnd_err err;
    cr_assert_eq(grammar_state_create(&st, g, &err), ATTND_OK);
    cr_assert(grammar_state_accept(st, text, strlen(text)), "%s accepts %s", src, text);
    uint32_t d = grammar_state_distance(st);
    grammar_state_destroy(st);
    grammar_unref(g);
    return d;
}

Test(grammar, the_distance_is_the_shortest_completion) {
    cr_expect_eq(distance_after("root ::= \"ab\" | \"abcd\"", ""), 2);
    cr_expect_eq(distance_after("root ::= \"ab\" | \"abcd\"", "a"), 1);
    cr_expect_eq(distance_after("root ::= \"ab\" | \"abcd\"", "ab"), 0, "complete");
    cr_expect_eq(distance_after("root ::= \"ab\" | \"abcd\"", "abc"), 1);
    cr_expect_eq(distance_after("root ::= \"x\" [0-9]+ \"y\"", ""), 3);
    cr_expect_eq(distance_after("root ::= \"x\" [0-9]+ \"y\"", "x12"), 1, "the digits may stop");
    /* recursion: the shortest sentence of a rule comes through the rules it names */
    cr_expect_eq(distance_after("root ::= \"(\" root \")\" | \"z\"", ""), 1);
    cr_expect_eq(distance_after("root ::= \"(\" root \")\" | \"z\"", "(("), 3, "z))");
    cr_expect_eq(distance_after("root ::= obj\nobj ::= \"{\" ( kv ( \",\" kv )* )? \"}\"\nkv ::= \"\\\"k\\\":\" [0-9]", "{\"k\":1,"),
                 6, "\"k\":0}");
    /* a character spelled over bytes: the rest counts the character once */
    cr_expect_eq(distance_after("root ::= \"\xe2\x82\xac\" \"!\"", "\xe2\x82"), 2);
    grammar *g = compile("root ::= \"ab\"");
    grammar_state *st;
    attnd_err err;
    cr_assert_eq(grammar_state_create(&st, g, &err), ATTND_OK);
    uint32_t d;
    cr_expect(grammar_state_try_distance(st, "a", 1, &d) && d == 1, "a trial measures without moving the state");
    cr_expect(!grammar_state_try_distance(st, "b", 1, &d), "bytes the grammar rejects");
    cr_expect_eq(grammar_state_distance(st), 2);
    grammar_state_destroy(st);
    grammar_unref(g);
}
