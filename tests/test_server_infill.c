/*
 * test_server_infill.c — llama-server's /infill without HTTP (server/api/infill.c): the request's
 * fields and their errors, and the fill-in-the-middle prompt token by token: the repository-level
 * layout on Qwen2's vocabulary (its FIM tokens found by their spelling), the snippet layout with
 * BOS on a SentencePiece vocabulary with the older prefix/suffix/middle keys, and the trimming of
 * prefix, suffix and extra context to the context.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_builder.h"
#include "infill.h"

static tokenizer *load_gguf(const void *p, size_t n) {
    gguf_file *f;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open_memory(&f, p, n, &err), ATTND_OK, "%s", err.msg);
    tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, f, &err), ATTND_OK, "%s", err.msg);
    gguf_close(f);
    return t;
}

static tokenizer *qwen(void) {
    gguf_file *f;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open(&f, ATTND_DATA_DIR "/tokenizers/qwen2-bpe.gguf", &err), ATTND_OK, "%s", err.msg);
    tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, f, &err), ATTND_OK, "%s", err.msg);
    gguf_close(f);
    return t;
}

/* A growing expected token list. */
typedef struct want {
    int32_t ids[4096];
    size_t n;
} want;

static void want_id(want *w, int32_t id) { w->ids[w->n++] = id; }
static void want_text(want *w, const tokenizer *t, const char *text, bool special) {
    int32_t *ids;
    size_t n;
    attnd_err err;
    cr_assert_eq(tok_encode(t, text, strlen(text), false, special, &ids, &n, &err), ATTND_OK);
    cr_assert_lt(w->n + n, 4096);
    memcpy(w->ids + w->n, ids, n * sizeof(*ids));
    w->n += n;
    free(ids);
}

static void expect_layout(const int32_t *got, size_t n, const want *w) {
    cr_assert_eq(n, w->n, "%zu tokens, want %zu", n, w->n);
    for (size_t i = 0; i < n; i++) cr_assert_eq(got[i], w->ids[i], "token %zu: %d, want %d", i, got[i], w->ids[i]);
}

/* Parses body (which must be valid) and lays it out. */
static int32_t *layout(const tokenizer *t, const char *body, int n_ctx, int n_predict, size_t *n) {
    json_t *b = json_loads(body, 0, NULL);
    cr_assert_not_null(b);
    infill_input in;
    const char *param;
    attnd_err err;
    cr_assert_eq(infill_parse(b, &in, &param, &err), ATTND_OK, "%s", err.msg);
    int32_t *ids;
    cr_assert_eq(infill_layout(t, &in, n_ctx, n_predict, &ids, n, &err), ATTND_OK, "%s", err.msg);
    infill_input_free(&in);
    json_decref(b);
    return ids;
}

enum { Q_PRE = 151659, Q_MID = 151660, Q_SUF = 151661, Q_REP = 151663, Q_SEP = 151664 };

Test(infill, qwen_lays_out_repository_context_then_prefix_suffix_middle) {
    tokenizer *t = qwen();
    size_t n;
    int32_t *ids = layout(t,
                          "{\"input_prefix\": \"def add(a, b):\\n    \", \"input_suffix\": \"\\n\\nprint(add(1, 2))\\n\","
                          " \"prompt\": \"return<|fim_pad|>\", \"input_extra\": [{\"filename\": \"util.py\", \"text\": "
                          "\"import os\\n\"}, {\"text\": \"x = <|fim_prefix|>1\\n\"}]}",
                          4096, 64, &n);
    want w = {0};
    want_id(&w, Q_REP), want_text(&w, t, "myproject\n", false);
    want_id(&w, Q_SEP), want_text(&w, t, "util.py\n", false), want_text(&w, t, "import os\n", false);
    want_id(&w, Q_SEP), want_text(&w, t, "tmp\n", false), want_text(&w, t, "x = <|fim_prefix|>1\n", false);
    want_id(&w, Q_SEP), want_text(&w, t, "filename\n", false);
    want_id(&w, Q_PRE), want_text(&w, t, "def add(a, b):\n    ", false), want_text(&w, t, "return", false);
    want_id(&w, 151662); /* the prompt's special tokens are tokens */
    want_id(&w, Q_SUF), want_text(&w, t, "\n\nprint(add(1, 2))\n", false);
    want_id(&w, Q_MID);
    expect_layout(ids, n, &w);
    free(ids);
    /* the extra text's <|fim_prefix|> stayed text: the only prefix token is the layout's */
    ids = layout(t, "{\"input_prefix\": \"a\", \"input_suffix\": \"b\"}", 4096, 64, &n);
    w = (want){0};
    want_id(&w, Q_REP), want_text(&w, t, "myproject\n", false), want_id(&w, Q_SEP), want_text(&w, t, "filename\n", false);
    want_id(&w, Q_PRE), want_text(&w, t, "a", false), want_id(&w, Q_SUF), want_text(&w, t, "b", false), want_id(&w, Q_MID);
    expect_layout(ids, n, &w);
    free(ids);
    tok_destroy(t);
}

/* "x " repeated k times: one token per repetition in Qwen's vocabulary. */
static char *words(const char *word, int k) {
    size_t len = strlen(word);
    char *s = malloc(len * (size_t)k + 1);
    for (int i = 0; i < k; i++) memcpy(s + len * (size_t)i, word, len);
    s[len * (size_t)k] = 0;
    return s;
}

Test(infill, prefix_keeps_its_end_suffix_its_start_and_extra_fills_the_rest) {
    tokenizer *t = qwen();
    char *pre = words(" alpha", 300), *suf = words(" beta", 300), *extra = words(" gamma", 300);
    char body[16384];
    snprintf(body, sizeof body,
             "{\"input_prefix\": \"%s\", \"input_suffix\": \"%s\", \"prompt\": \" go\", "
             "\"input_extra\": [{\"filename\": \"f\", \"text\": \"%s\"}]}",
             pre, suf, extra);
    /* n_ctx 512, 100 to generate: room 512 - 100 - 3 markers = 409 = the window; the prefix keeps
     * 3 * (409 / 4) = 306 (all 300), the suffix 102 - 1 (the prompt) = 101 of 300, the extra
     * context the last 409 - 300 - 1 - 101 = 7 tokens */
    size_t n;
    int32_t *ids = layout(t, body, 512, 100, &n);
    cr_assert_eq(n, 409 + 3, "the prompt fills the context but the answer's room");
    want file = {0};
    want_text(&file, t, "filename\n", false);
    size_t sep = 7 - 1 - file.n; /* the current file's separator, from the end of the extra context */
    cr_expect_eq(ids[sep], Q_SEP);
    for (size_t i = 1; i < sep; i++) cr_expect_eq(ids[i], ids[0], "the extra context's last words");
    cr_expect_eq(ids[7], Q_PRE);
    cr_expect_eq(ids[7 + 1 + 300 + 1], Q_SUF, "the whole prefix and the prompt");
    cr_expect_eq(ids[n - 1], Q_MID);
    free(ids);
    /* a tighter context: the answer's room is capped at half (128), the window is 125: the prefix
     * keeps its last 93 tokens, the suffix its first 31 - 1 = 30, the extra context 1 token */
    ids = layout(t, body, 256, 1000, &n);
    cr_assert_eq(n, 125 + 3);
    cr_expect_eq(ids[0], file.ids[file.n - 1], "the extra context's last token");
    cr_expect_eq(ids[1], Q_PRE);
    want go = {0};
    want_text(&go, t, " go", true);
    cr_assert_eq(go.n, 1);
    cr_expect_eq(ids[2 + 93], go.ids[0], "the prefix's last 93 tokens, then the prompt");
    cr_expect_eq(ids[2 + 93 + 1], Q_SUF);
    cr_expect_eq(ids[n - 1], Q_MID);
    want s30 = {0};
    want_text(&s30, t, suf, false);
    for (size_t i = 0; i < 30; i++) cr_expect_eq(ids[2 + 93 + 2 + i], s30.ids[i], "the suffix's first tokens");
    free(ids);
    free(pre), free(suf), free(extra);
    tok_destroy(t);
}

/* A SentencePiece vocabulary with BOS added, the older prefix/suffix/middle keys and no file
 * separator (CodeLlama's way). */
static tokenizer *codellama_like(void) {
    static const char *toks[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81<PRE>", "\xE2\x96\x81<SUF>", "\xE2\x96\x81<MID>",
                                 "a", "b", "\xE2\x96\x81", "-", "s", "n", "i", "p", "e", "t", "<0x0A>"};
    float scores[17] = {0};
    int32_t types[17] = {2, 3, 3, 4, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6};
    gbuf b = {0};
    gb_header(&b, 3, 0, 7);
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    gb_kv_arr_str(&b, "tokenizer.ggml.tokens", toks, 17);
    gb_kv_arr_i32(&b, "tokenizer.ggml.token_type", types, 17);
    gb_kv_arr_f32(&b, "tokenizer.ggml.scores", scores, 17);
    gb_kv_u32(&b, "tokenizer.ggml.prefix_token_id", 3);
    gb_kv_u32(&b, "tokenizer.ggml.suffix_token_id", 4);
    gb_kv_u32(&b, "tokenizer.ggml.middle_token_id", 5);
    gb_align(&b, 32);
    tokenizer *t = load_gguf(b.p, b.n);
    free(b.p);
    return t;
}

Test(infill, without_a_file_separator_extra_chunks_follow_snippet_lines_after_bos) {
    tokenizer *t = codellama_like();
    cr_assert(tok_add_bos(t));
    size_t n;
    int32_t *ids = layout(t, "{\"input_prefix\": \"ab\", \"input_suffix\": \"ba\", \"input_extra\": [{\"text\": \"aa\"}]}",
                          512, 16, &n);
    want w = {0};
    want_id(&w, 1); /* BOS first */
    want_text(&w, t, "\n\n--- snippet ---\n\n", false), want_text(&w, t, "aa", false);
    want_id(&w, 3), want_text(&w, t, "ab", false), want_id(&w, 4), want_text(&w, t, "ba", false), want_id(&w, 5);
    expect_layout(ids, n, &w);
    free(ids);
    tok_destroy(t);
}

Test(infill, a_model_without_fim_tokens_is_refused_by_name) {
    static const char *toks[] = {"<unk>", "<s>", "</s>", "a", "<PRE>"};
    float scores[5] = {0};
    int32_t types[5] = {2, 3, 3, 1, 1};
    gbuf b;
    gb_spm_vocab(&b, toks, types, scores, 5);
    tokenizer *t = load_gguf(b.p, b.n);
    free(b.p);
    attnd_err err;
    cr_assert_eq(infill_check_model(t, &err), ATTND_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "suffix, middle") && !strstr(err.msg, "prefix,"), "<PRE> is there: %s", err.msg);
    tok_destroy(t);
    t = qwen();
    cr_expect_eq(infill_check_model(t, &err), ATTND_OK);
    tok_destroy(t);
}

static void expect_refused(const char *body, const char *param) {
    json_t *b = json_loads(body, 0, NULL);
    cr_assert_not_null(b, "%s", body);
    infill_input in;
    const char *got;
    attnd_err err;
    cr_expect_eq(infill_parse(b, &in, &got, &err), ATTND_ERR_INVALID, "%s", body);
    cr_expect(got && !strcmp(got, param), "%s: param %s, want %s", body, got ? got : "NULL", param);
    infill_input_free(&in);
    json_decref(b);
}

Test(infill, bad_fields_are_refused_by_name) {
    expect_refused("{\"input_suffix\": \"b\"}", "input_prefix");
    expect_refused("{\"input_prefix\": \"a\"}", "input_suffix");
    expect_refused("{\"input_prefix\": 1, \"input_suffix\": \"b\"}", "input_prefix");
    expect_refused("{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"prompt\": [1]}", "prompt");
    expect_refused("{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": {}}", "input_extra");
    expect_refused("{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": [\"x\"]}", "input_extra");
    expect_refused("{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": [{\"filename\": \"f\"}]}",
                   "input_extra");
    expect_refused("{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": [{\"text\": \"t\", \"filename\": 2}]}",
                   "input_extra");
    json_t *b = json_loads("{\"input_prefix\": \"\", \"input_suffix\": \"\", \"input_extra\": []}", 0, NULL);
    infill_input in;
    const char *param;
    attnd_err err;
    cr_expect_eq(infill_parse(b, &in, &param, &err), ATTND_OK, "empty strings and no extra are fine");
    cr_expect_str_eq(in.prompt, "");
    infill_input_free(&in);
    json_decref(b);
}
