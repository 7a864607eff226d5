/*
 * test_gen.c — the generation pipeline (engine/gen.c) on a nine-token SentencePiece vocabulary
 * built in memory: greedy picks from hand-made logits, text that continues the prompt (leading
 * space kept), end-of-generation, stop strings across tokens, UTF-8 split over byte tokens, the
 * held-back tail at the end, log-probabilities, and a model without a vocabulary.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attnd/gen.h"
#include "attnd/gguf.h"
#include "gguf_builder.h"

enum { UNK, BOS, EOS, HELLO, WORLD, BANG, B_E2, B_82, B_AC, N_VOCAB };

static gbuf image;
static gguf_file *file;
static tokenizer *tok;

static void setup(void) {
    static const char *const TOKENS[N_VOCAB] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81Hello", "\xe2\x96\x81world", "!",
                                                "<0xE2>", "<0x82>", "<0xAC>"};
    static const int32_t TYPES[N_VOCAB] = {2, 3, 3, 1, 1, 1, 6, 6, 6}; /* unknown, control, normal, byte */
    static const float SCORES[N_VOCAB] = {0, 0, 0, -1, -2, -3, 0, 0, 0};
    gb_spm_vocab(&image, TOKENS, TYPES, SCORES, N_VOCAB);
    attnd_err err;
    cr_assert_eq(gguf_open_memory(&file, image.p, image.n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&tok, file, &err), ATTND_OK, "%s", err.msg);
}

static void teardown(void) {
    tok_destroy(tok);
    gguf_close(file);
    free(image.p);
}

TestSuite(gen, .init = setup, .fini = teardown);

/* Logits that make id the greedy pick. */
static const float *peak(int32_t id) {
    static float l[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++) l[i] = i == id ? 5.0f : 0.0f;
    return l;
}

static gen *make(const char *const *stops, int n_stops, int top_logprobs, bool ignore_eog) {
    gen_params p = {.stops = stops, .n_stops = n_stops, .top_logprobs = top_logprobs, .ignore_eog = ignore_eog};
    sampler_params_default(&p.sp);
    p.sp.temperature = 0;
    gen *g;
    attnd_err err;
    const int32_t prompt[1] = {BOS};
    cr_assert_eq(gen_create(&g, &p, N_VOCAB, tok, prompt, 1, &err), ATTND_OK, "%s", err.msg);
    return g;
}

/* Runs the ids through g, collecting the released text into out; returns the last reason. */
static stop_reason run(gen *g, const int32_t *ids, int n, char *out, size_t cap) {
    size_t len = strlen(out);
    stop_reason why = STOP_NONE;
    for (int i = 0; i < n && why == STOP_NONE; i++) {
        gen_token t;
        why = gen_next(g, peak(ids[i]), NULL, &t);
        cr_assert_eq(t.id, ids[i], "greedy picks the peak");
        cr_assert_lt(len + t.n_text, cap);
        memcpy(out + len, t.text, t.n_text);
        out[len += t.n_text] = '\0';
    }
    return why;
}

static void finish(gen *g, char *out) {
    const char *tail;
    size_t n;
    gen_finish(g, &tail, &n);
    strncat(out, tail, n);
}

/* Runs ids through a fresh gen to the end (gen_finish included) and checks how it ended, what
 * text came out and which stop string matched. */
static void expect_run(const char *stop, bool ignore_eog, const int32_t *ids, int n, stop_reason want,
                       const char *want_text, const char *why) {
    const char *stops[1] = {stop};
    gen *g = make(stops, stop ? 1 : 0, -1, ignore_eog);
    char text[64] = "";
    cr_assert_eq(run(g, ids, n, text, sizeof(text)), want, "%s: stop reason", why);
    finish(g, text);
    cr_assert_str_eq(text, want_text, "%s", why);
    if (want == STOP_STRING) cr_assert_str_eq(gen_matched_stop(g), stop);
    else cr_assert_null(gen_matched_stop(g));
    gen_destroy(g);
}

static const int32_t HELLO_EOS_WORLD[] = {HELLO, EOS, WORLD}, HELLO_WORLD_BANG[] = {HELLO, WORLD, BANG};

Test(gen, the_text_continues_the_prompt_with_its_leading_space) {
    expect_run(NULL, false, HELLO_WORLD_BANG, 3, STOP_NONE, " Hello world!", "leading space kept");
}

Test(gen, an_end_of_generation_token_ends_without_text_unless_ignored) {
    expect_run(NULL, false, HELLO_EOS_WORLD, 3, STOP_EOG, " Hello", "EOS ends");
    expect_run(NULL, true, HELLO_EOS_WORLD, 3, STOP_NONE, " Hello world", "ignored, the control token adds no text");
}

Test(gen, a_stop_string_across_tokens_cuts_before_it) {
    expect_run("o wor", false, HELLO_WORLD_BANG, 3, STOP_STRING, " Hell",
               "the held-back 'o' is dropped with the stop string");
}

Test(gen, a_stop_string_in_the_held_back_tail_still_counts) {
    const char *stops[] = {"world!!"};
    gen *g = make(stops, 1, -1, false);
    char text[64] = "";
    cr_assert_eq(run(g, (const int32_t[]){HELLO, WORLD, BANG}, 3, text, sizeof(text)), STOP_NONE);
    cr_assert_str_eq(text, " Hello ", "'world!' could still become the stop string");
    const char *tail;
    size_t n;
    cr_assert_eq(gen_finish(g, &tail, &n), STOP_NONE);
    cr_assert_eq(n, 6);
    cr_assert_eq(memcmp(tail, "world!", 6), 0, "at the end the tail is released");
    cr_assert_eq(gen_finish(g, &tail, &n), STOP_NONE);
    cr_assert_eq(n, 0, "only once");
    gen_destroy(g);
}

Test(gen, a_character_split_over_byte_tokens_comes_out_whole) {
    gen *g = make(NULL, 0, -1, false);
    char text[64] = "";
    cr_assert_eq(run(g, (const int32_t[]){B_E2, B_82}, 2, text, sizeof(text)), STOP_NONE);
    cr_assert_str_eq(text, "", "half a character is held back");
    cr_assert_eq(run(g, (const int32_t[]){B_AC}, 1, text, sizeof(text)), STOP_NONE);
    cr_assert_str_eq(text, "\xe2\x82\xac");
    gen_destroy(g);
    g = make(NULL, 0, -1, false);
    text[0] = '\0';
    run(g, (const int32_t[]){B_E2}, 1, text, sizeof(text));
    finish(g, text);
    cr_assert_str_eq(text, "\xe2", "at the end even a broken character is released (callers repair it)");
    gen_destroy(g);
}

Test(gen, logprobs_come_from_the_raw_distribution) {
    gen *g = make(NULL, 0, 2, false);
    token_logprob top[2];
    gen_token t;
    gen_next(g, peak(WORLD), top, &t);
    double want = 5.0 - log(exp(5.0) + (N_VOCAB - 1));
    cr_assert_float_eq(t.logprob, want, 1e-5);
    cr_assert_eq(top[0].id, WORLD);
    cr_assert_float_eq(top[0].logprob, want, 1e-5);
    cr_assert_eq(top[1].id, UNK, "ties go to the lowest id");
    gen_destroy(g);
}

Test(gen, without_a_vocabulary_tokens_come_but_no_text_and_no_stops) {
    gen_params p = {.top_logprobs = -1};
    sampler_params_default(&p.sp);
    p.sp.temperature = 0;
    gen *g;
    cr_assert_eq(gen_create(&g, &p, N_VOCAB, NULL, NULL, 0, NULL), ATTND_OK);
    gen_token t;
    cr_assert_eq(gen_next(g, peak(EOS), NULL, &t), STOP_NONE, "no vocabulary, no end-of-generation token");
    cr_assert_eq(t.id, EOS);
    cr_assert_eq(t.n_text, 0);
    gen_destroy(g);
    const char *stops[] = {"x"};
    p.stops = stops;
    p.n_stops = 1;
    attnd_err err;
    cr_assert_eq(gen_create(&g, &p, N_VOCAB, NULL, NULL, 0, &err), ATTND_ERR_UNSUPPORTED);
    cr_assert_null(g);
}

// ---- the reasoning budget ---------------------------------------------------------------------

enum { T_UNK, T_BOS, T_EOS, T_OPEN, T_CLOSE, T_A, T_E2, T_82, T_AC, T_N };

static gbuf think_image;
static gguf_file *think_file;

static void think_setup(void) {
    static const char *const TOKENS[T_N] = {"<unk>", "<s>", "</s>", "<think>", "</think>", "\xe2\x96\x81" "a",
                                            "<0xE2>", "<0x82>", "<0xAC>"};
    static const int32_t TYPES[T_N] = {2, 3, 3, 3, 3, 1, 6, 6, 6};
    static const float SCORES[T_N] = {0};
    gb_spm_vocab(&think_image, TOKENS, TYPES, SCORES, T_N);
    attnd_err err;
    cr_assert_eq(gguf_open_memory(&think_file, think_image.p, think_image.n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&tok, think_file, &err), ATTND_OK, "%s", err.msg);
}

static void think_teardown(void) {
    tok_destroy(tok);
    gguf_close(think_file);
    free(think_image.p);
}

TestSuite(think, .init = think_setup, .fini = think_teardown);

static gen *think_gen(int budget, bool inside) {
    gen_params p = {.top_logprobs = -1, .think_budget = budget, .think_inside = inside};
    sampler_params_default(&p.sp);
    p.sp.temperature = 0;
    gen *g;
    attnd_err err;
    const int32_t prompt[1] = {T_BOS};
    cr_assert_eq(gen_create(&g, &p, T_N, tok, prompt, 1, &err), ATTND_OK, "%s", err.msg);
    return g;
}

/* Feeds logits peaked at want[i] (the model's choice) and checks the token gen writes: got[i]. */
static void expect_tokens(gen *g, const int32_t *want, const int32_t *got, int n) {
    for (int i = 0; i < n; i++) {
        float l[T_N] = {0};
        l[want[i]] = 5.0f;
        gen_token t;
        cr_assert_eq(gen_next(g, l, NULL, &t), STOP_NONE);
        cr_assert_eq(t.id, got[i], "step %d: token %d, want %d", i, t.id, got[i]);
    }
}

Test(think, a_block_is_closed_when_its_budget_is_spent) {
    gen *g = think_gen(3, false);
    const int32_t model[] = {T_A, T_OPEN, T_A, T_A, T_A, T_A, T_A, T_A};
    const int32_t wrote[] = {T_A, T_OPEN, T_A, T_A, T_A, T_CLOSE, T_A, T_A};
    expect_tokens(g, model, wrote, 8);
    gen_destroy(g);
    /* a second block gets a budget of its own */
    g = think_gen(2, false);
    const int32_t model2[] = {T_OPEN, T_A, T_A, T_A, T_OPEN, T_A, T_A, T_A};
    const int32_t wrote2[] = {T_OPEN, T_A, T_A, T_CLOSE, T_OPEN, T_A, T_A, T_CLOSE};
    expect_tokens(g, model2, wrote2, 8);
    gen_destroy(g);
}

Test(think, a_block_closed_in_time_and_no_budget_are_left_alone) {
    gen *g = think_gen(3, false);
    const int32_t model[] = {T_OPEN, T_A, T_CLOSE, T_A, T_A, T_A, T_A};
    expect_tokens(g, model, model, 7);
    gen_destroy(g);
    g = think_gen(0, false);
    const int32_t model2[] = {T_OPEN, T_A, T_A, T_A, T_A, T_A};
    expect_tokens(g, model2, model2, 6);
    gen_destroy(g);
}

Test(think, a_prompt_that_opened_the_block_counts_from_the_first_token) {
    gen *g = think_gen(2, true);
    const int32_t model[] = {T_A, T_A, T_A, T_A};
    const int32_t wrote[] = {T_A, T_A, T_CLOSE, T_A};
    expect_tokens(g, model, wrote, 4);
    gen_destroy(g);
}

Test(think, the_close_waits_for_a_character_to_end) {
    gen *g = think_gen(2, false);
    /* the budget ends on the second byte of U+20AC: its third byte comes first */
    const int32_t model[] = {T_OPEN, T_E2, T_82, T_AC, T_A};
    const int32_t wrote[] = {T_OPEN, T_E2, T_82, T_AC, T_CLOSE};
    expect_tokens(g, model, wrote, 5);
    gen_destroy(g);
}

// ---- closing a grammar's sentence within max_tokens ----------------------------------------------

enum { S_UNK, S_BOS, S_EOS, S_LB, S_A, S_RB, S_N };

static gbuf steer_image;
static gguf_file *steer_file;

static void steer_setup(void) {
    static const char *const TOKENS[S_N] = {"<unk>", "<s>", "</s>", "[", "a", "]"};
    static const int32_t TYPES[S_N] = {2, 3, 3, 1, 1, 1};
    static const float SCORES[S_N] = {0};
    gb_spm_vocab(&steer_image, TOKENS, TYPES, SCORES, S_N);
    attnd_err err;
    cr_assert_eq(gguf_open_memory(&steer_file, steer_image.p, steer_image.n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&tok, steer_file, &err), ATTND_OK, "%s", err.msg);
}

static void steer_teardown(void) {
    tok_destroy(tok);
    gguf_close(steer_file);
    free(steer_image.p);
}

TestSuite(steer, .init = steer_setup, .fini = steer_teardown);

/* The model always wants "a"; the grammar is "[" "a"* "]"; max_tokens tokens are written. */
static void steered_run(int max_tokens, bool close, char *out, bool *steered, stop_reason *last) {
    grammar *gr;
    grammar_vocab *gv;
    attnd_err err;
    const char *src = "root ::= \"[\" \"a\"* \"]\"";
    cr_assert_eq(grammar_compile(&gr, src, strlen(src), &err), ATTND_OK);
    cr_assert_eq(grammar_vocab_from_tokenizer(&gv, tok, &err), ATTND_OK);
    gen_params p = {.top_logprobs = -1, .grammar = gr, .gvocab = gv, .max_tokens = max_tokens, .grammar_close = close};
    sampler_params_default(&p.sp);
    p.sp.temperature = 0;
    gen *g;
    const int32_t prompt[1] = {S_BOS};
    cr_assert_eq(gen_create(&g, &p, S_N, tok, prompt, 1, &err), ATTND_OK, "%s", err.msg);
    out[0] = 0;
    *last = STOP_NONE;
    for (int i = 0; i < max_tokens && *last == STOP_NONE; i++) {
        float l[S_N] = {0};
        l[S_A] = 5.0f;
        gen_token t;
        *last = gen_next(g, l, NULL, &t);
        strncat(out, t.text, t.n_text);
    }
    const char *tail;
    size_t n;
    gen_finish(g, &tail, &n);
    strncat(out, tail, n);
    *steered = gen_steered(g);
    gen_destroy(g);
    grammar_vocab_destroy(gv);
    grammar_unref(gr);
}

Test(steer, the_sentence_closes_within_max_tokens) {
    char out[64];
    bool steered;
    stop_reason why;
    for (int mt = 2; mt <= 8; mt++) {
        steered_run(mt, true, out, &steered, &why);
        cr_expect_eq((int)strlen(out), mt, "%d tokens: %s", mt, out);
        cr_expect_eq(out[0], '[');
        cr_expect_eq(out[strlen(out) - 1], ']', "closed in %d tokens: %s", mt, out);
        cr_expect_eq(why, STOP_GRAMMAR);
        cr_expect(steered, "the budget closed it");
    }
    steered_run(5, false, out, &steered, &why);
    cr_expect_str_eq(out, "[aaaa", "without it, the budget cuts the sentence");
    cr_expect(!steered);
}
