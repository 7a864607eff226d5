/*
 * test_server_embed.c — the embedding and rerank shapes (server/api/embreq.c, rerank.c): OpenAI's
 * and Ollama's bodies become inputs (text or ids) and the output's form, what cannot be served is
 * refused naming the field, vectors are cut (Matryoshka) and normalised, base64 carries the
 * little-endian float32 bytes, and rerank results are sorted with their documents and usage.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "embreq.h"
#include "rerank.h"

static json_t *load(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j, "test JSON is bad: %s", je.text);
    return j;
}

static json_t *parse_ok(const char *text, embreq_api api, embreq *r) {
    json_t *b = load(text);
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(embreq_parse(b, api, 8, 100, r, &param, &err), ATTND_OK, "%s: %s", text, err.msg);
    return b;
}

static void expect_bad(const char *text, embreq_api api, const char *want_param, const char *want_msg) {
    json_t *b = load(text);
    embreq r;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(embreq_parse(b, api, 8, 100, &r, &param, &err), ATTND_ERR_INVALID, "accepted: %s", text);
    cr_expect(param && !strcmp(param, want_param), "%s: param %s, want %s", text, param ? param : "(null)", want_param);
    cr_expect(strstr(err.msg, want_msg), "%s: message '%s' lacks '%s'", text, err.msg, want_msg);
    embreq_free(&r);
    json_decref(b);
}

Test(embreq, openai_input_forms_become_texts_and_ids) {
    embreq r;
    json_t *b = parse_ok("{\"input\": \"hello\"}", EMBREQ_OPENAI, &r);
    cr_assert_eq(r.n_items, 1);
    cr_expect(r.items[0].text && r.items[0].len == 5 && !memcmp(r.items[0].text, "hello", 5));
    cr_expect(!r.base64 && r.dimensions == 0 && r.norm == EMBREQ_NORM_L2 && !r.truncate);
    embreq_free(&r);
    json_decref(b);

    b = parse_ok("{\"input\": [3, 4, 99]}", EMBREQ_OPENAI, &r);
    cr_assert_eq(r.n_items, 1, "an array of ids is one input");
    cr_expect(!r.items[0].text && r.items[0].n_ids == 3 && r.items[0].ids[2] == 99);
    embreq_free(&r);
    json_decref(b);

    b = parse_ok("{\"input\": [\"a\", [1, 2], \"bc\"], \"encoding_format\": \"base64\", \"dimensions\": 4,"
                 " \"embd_normalize\": -1, \"truncate\": true, \"model\": \"m\"}",
                 EMBREQ_OPENAI, &r);
    cr_assert_eq(r.n_items, 3);
    cr_expect(r.items[0].len == 1 && r.items[1].n_ids == 2 && r.items[1].ids[1] == 2 && r.items[2].len == 2);
    cr_expect(r.base64 && r.dimensions == 4 && r.norm == EMBREQ_NORM_NONE && r.truncate && !strcmp(r.model, "m"));
    embreq_free(&r);
    json_decref(b);
}

Test(embreq, openai_bad_bodies_name_the_field) {
    expect_bad("{}", EMBREQ_OPENAI, "input", "required");
    expect_bad("{\"input\": []}", EMBREQ_OPENAI, "input", "empty");
    expect_bad("{\"input\": 5}", EMBREQ_OPENAI, "input", "must be");
    expect_bad("{\"input\": [[]]}", EMBREQ_OPENAI, "input", "empty array");
    expect_bad("{\"input\": [1, \"a\"]}", EMBREQ_OPENAI, "input", "mixes");
    expect_bad("{\"input\": [100]}", EMBREQ_OPENAI, "input", "outside the vocabulary");
    expect_bad("{\"input\": [-1]}", EMBREQ_OPENAI, "input", "outside the vocabulary");
    expect_bad("{\"input\": [\"a\", {}]}", EMBREQ_OPENAI, "input", "[1]");
    expect_bad("{\"input\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}", EMBREQ_OPENAI, "input",
               "at most 8");
    expect_bad("{\"input\": \"a\", \"encoding_format\": \"int8\"}", EMBREQ_OPENAI, "encoding_format", "base64");
    expect_bad("{\"input\": \"a\", \"dimensions\": 0}", EMBREQ_OPENAI, "dimensions", "positive");
    expect_bad("{\"input\": \"a\", \"dimensions\": 1.5}", EMBREQ_OPENAI, "dimensions", "positive");
    expect_bad("{\"input\": \"a\", \"truncate\": 1}", EMBREQ_OPENAI, "truncate", "boolean");
    expect_bad("{\"input\": \"a\", \"embd_normalize\": -2}", EMBREQ_OPENAI, "embd_normalize", "-1");
    expect_bad("[1]", EMBREQ_OPENAI, "body", "object");
}

Test(embreq, ollama_bodies_truncate_by_default_and_take_no_ids) {
    embreq r;
    json_t *b = parse_ok("{\"model\": \"m\", \"input\": [\"x\", \"yz\"], \"dimensions\": 2, \"keep_alive\": \"5m\"}",
                         EMBREQ_OLLAMA, &r);
    cr_expect(r.n_items == 2 && r.truncate && r.dimensions == 2 && r.norm == EMBREQ_NORM_L2);
    embreq_free(&r);
    json_decref(b);
    b = parse_ok("{\"model\": \"m\", \"input\": \"x\", \"truncate\": false}", EMBREQ_OLLAMA, &r);
    cr_expect(r.n_items == 1 && !r.truncate);
    embreq_free(&r);
    json_decref(b);
    b = parse_ok("{\"model\": \"m\"}", EMBREQ_OLLAMA, &r);
    cr_expect_eq(r.n_items, 0, "no input: loads the model, no embeddings");
    embreq_free(&r);
    json_decref(b);
    b = parse_ok("{\"model\": \"m\", \"prompt\": \"hi\"}", EMBREQ_OLLAMA_LEGACY, &r);
    cr_expect(r.n_items == 1 && r.items[0].len == 2 && r.norm == EMBREQ_NORM_NONE, "legacy: raw vectors");
    embreq_free(&r);
    json_decref(b);
    expect_bad("{\"input\": \"x\"}", EMBREQ_OLLAMA, "model", "required");
    expect_bad("{\"model\": \"m\", \"input\": [1, 2]}", EMBREQ_OLLAMA, "input", "string");
    expect_bad("{\"model\": \"m\", \"prompt\": 3}", EMBREQ_OLLAMA_LEGACY, "prompt", "string");
}

Test(embreq, dimensions_cut_then_renormalise) {
    const float raw[4] = {3, 4, 12, 0};
    float out[4];
    cr_assert_eq(embreq_finish(raw, 4, 2, EMBREQ_NORM_L2, out), 2);
    cr_expect_float_eq(out[0], 0.6f, 1e-6);
    cr_expect_float_eq(out[1], 0.8f, 1e-6);
    cr_assert_eq(embreq_finish(raw, 4, 0, EMBREQ_NORM_L2, out), 4);
    cr_expect_float_eq(out[2], 12.0f / 13.0f, 1e-6);
    cr_assert_eq(embreq_finish(raw, 4, 9, EMBREQ_NORM_NONE, out), 4, "dims above the model's: all of it");
    cr_expect(out[0] == 3 && out[2] == 12);
    embreq_finish(raw, 4, 0, EMBREQ_NORM_MAXABS, out);
    cr_expect_float_eq(out[2], 32760.0f, 1e-2);
    embreq_finish(raw, 4, 0, 1, out); /* p = 1: the sum of magnitudes */
    cr_expect_float_eq(out[0], 3.0f / 19.0f, 1e-6);
    const float zero[3] = {0, 0, 0};
    embreq_finish(zero, 3, 0, EMBREQ_NORM_L2, out);
    cr_expect(out[0] == 0 && out[1] == 0 && out[2] == 0, "a zero vector stays zero (no NaN)");
}

Test(embreq, base64_is_standard_with_padding) {
    char *s = embreq_base64("Man", 3);
    cr_expect_str_eq(s, "TWFu");
    free(s);
    s = embreq_base64("Ma", 2);
    cr_expect_str_eq(s, "TWE=");
    free(s);
    s = embreq_base64("M", 1);
    cr_expect_str_eq(s, "TQ==");
    free(s);
    s = embreq_base64("", 0);
    cr_expect_str_eq(s, "");
    free(s);
}

Test(embreq, openai_answer_floats_base64_and_usage) {
    embreq r;
    json_t *b = parse_ok("{\"input\": [\"a\", \"b\"]}", EMBREQ_OPENAI, &r);
    const float v[4] = {1.0f, -2.0f, 0.5f, 0.25f};
    json_t *a = embreq_answer(&r, v, 2, 7, "served", 0);
    cr_assert_not_null(a);
    cr_expect_str_eq(json_string_value(json_object_get(a, "object")), "list");
    cr_expect_str_eq(json_string_value(json_object_get(a, "model")), "served");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(a, "usage"), "prompt_tokens")), 7);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(a, "usage"), "total_tokens")), 7);
    json_t *d1 = json_array_get(json_object_get(a, "data"), 1);
    cr_expect_eq(json_integer_value(json_object_get(d1, "index")), 1);
    cr_expect_str_eq(json_string_value(json_object_get(d1, "object")), "embedding");
    cr_expect_eq(json_real_value(json_array_get(json_object_get(d1, "embedding"), 1)), 0.25);
    json_decref(a);
    r.base64 = true;
    a = embreq_answer(&r, v, 2, 7, "served", 0);
    /* 1.0f = 00 00 80 3f, -2.0f = 00 00 00 c0 (little-endian) */
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(a, "data"), 0), "embedding")),
                     "AACAPwAAAMA=");
    json_decref(a);
    embreq_free(&r);
    json_decref(b);
}

Test(embreq, ollama_answers_keep_ollamas_shape) {
    embreq r;
    json_t *b = parse_ok("{\"model\": \"m:latest\", \"input\": [\"a\", \"b\"]}", EMBREQ_OLLAMA, &r);
    const float v[2] = {1.0f, 0.5f};
    json_t *a = embreq_answer(&r, v, 1, 4, "served", 123);
    cr_expect_str_eq(json_string_value(json_object_get(a, "model")), "m:latest");
    cr_expect_eq(json_array_size(json_object_get(a, "embeddings")), 2);
    cr_expect_eq(json_real_value(json_array_get(json_array_get(json_object_get(a, "embeddings"), 1), 0)), 0.5);
    cr_expect_eq(json_integer_value(json_object_get(a, "total_duration")), 123);
    cr_expect_eq(json_integer_value(json_object_get(a, "prompt_eval_count")), 4);
    json_decref(a);
    embreq_free(&r);
    json_decref(b);
    b = parse_ok("{\"model\": \"m\", \"prompt\": \"a\"}", EMBREQ_OLLAMA_LEGACY, &r);
    a = embreq_answer(&r, v, 2, 4, "served", 0);
    cr_expect_eq(json_array_size(json_object_get(a, "embedding")), 2);
    cr_expect_eq(json_object_size(a), 1, "legacy: only embedding");
    json_decref(a);
    embreq_free(&r);
    json_decref(b);
}

// ---- rerank ---------------------------------------------------------------------------------------

Test(rerank, parses_strings_objects_and_top_n) {
    json_t *b = load("{\"model\": \"r\", \"query\": \"q\", \"documents\": [\"one\", {\"text\": \"two\"}, \"3\"],"
                     " \"top_n\": 2, \"return_documents\": true}");
    rerank_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(rerank_parse(b, 8, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_expect(r.n_docs == 3 && r.top_n == 2 && r.return_documents && !r.truncate);
    cr_expect(r.docs[1].len == 3 && !memcmp(r.docs[1].text, "two", 3));
    const float scores[3] = {0.1f, 0.9f, 0.5f};
    json_t *a = rerank_answer(&r, scores, 11, "served");
    json_t *res = json_object_get(a, "results");
    cr_assert_eq(json_array_size(res), 2, "top_n results");
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(res, 0), "index")), 1, "best first");
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(res, 1), "index")), 2);
    cr_expect_float_eq(json_real_value(json_object_get(json_array_get(res, 0), "relevance_score")), 0.9, 1e-6);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(res, 0), "document"), "text")), "two");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(a, "usage"), "total_tokens")), 11);
    cr_expect_str_eq(json_string_value(json_object_get(a, "model")), "r");
    json_decref(a);
    rerank_request_free(&r);
    json_decref(b);

    b = load("{\"query\": \"q\", \"texts\": [\"a\", \"b\"], \"top_n\": 0}");
    cr_assert_eq(rerank_parse(b, 8, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_expect(r.n_docs == 2 && r.top_n == 2 && !r.return_documents, "TEI's texts; top_n 0 = all");
    const float tie[2] = {0.5f, 0.5f};
    a = rerank_answer(&r, tie, 2, "served");
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(json_object_get(a, "results"), 0), "index")), 0,
                 "ties in document order");
    cr_expect_null(json_object_get(json_array_get(json_object_get(a, "results"), 0), "document"));
    json_decref(a);
    rerank_request_free(&r);
    json_decref(b);
}

static void rerank_bad(const char *text, const char *want_param) {
    json_t *b = load(text);
    rerank_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(rerank_parse(b, 2, &r, &param, &err), ATTND_ERR_INVALID, "accepted: %s", text);
    cr_expect(param && !strcmp(param, want_param), "%s: param %s, want %s", text, param ? param : "(null)", want_param);
    cr_expect(err.msg[0], "no message");
    rerank_request_free(&r);
    json_decref(b);
}

Test(rerank, bad_bodies_name_the_field) {
    rerank_bad("{\"documents\": [\"a\"]}", "query");
    rerank_bad("{\"query\": 1, \"documents\": [\"a\"]}", "query");
    rerank_bad("{\"query\": \"q\"}", "documents");
    rerank_bad("{\"query\": \"q\", \"documents\": []}", "documents");
    rerank_bad("{\"query\": \"q\", \"documents\": [\"a\", 1]}", "documents");
    rerank_bad("{\"query\": \"q\", \"documents\": [{\"txt\": \"a\"}]}", "documents");
    rerank_bad("{\"query\": \"q\", \"documents\": [\"a\", \"b\", \"c\"]}", "documents");
    rerank_bad("{\"query\": \"q\", \"documents\": [\"a\"], \"top_n\": -1}", "top_n");
    rerank_bad("{\"query\": \"q\", \"documents\": [\"a\"], \"return_documents\": \"yes\"}", "return_documents");
}

Test(rerank, pair_tokens_from_the_template_or_the_special_tokens) {
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, ATTND_DATA_DIR "/models/stories260K.gguf", &err), ATTND_OK, "%s", err.msg);
    tokenizer *t;
    cr_assert_eq(tok_load(&t, f, &err), ATTND_OK, "%s", err.msg);
    int32_t *ids, *q, *d;
    size_t n, nq, nd;
    /* no template: tok_encode_pair's layout, here (a SentencePiece vocabulary that adds only BOS) BOS q d */
    cr_assert_eq(rerank_pair_tokens(t, NULL, "Tom ran", 7, "a cat", 5, &ids, &n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_encode(t, "Tom ran", 7, true, false, &q, &nq, &err), ATTND_OK);
    cr_assert_eq(tok_encode(t, "a cat", 5, true, false, &d, &nd, &err), ATTND_OK);
    cr_assert(tok_add_bos(t) && d[0] == tok_bos(t), "the fixture adds a BOS");
    cr_assert_eq(n, nq + nd - 1);
    cr_expect(!memcmp(ids, q, nq * sizeof(*q)) && !memcmp(ids + nq, d + 1, (nd - 1) * sizeof(*d)));
    cr_expect_eq(ids[0], tok_bos(t));
    free(ids);
    free(q);
    free(d);
    /* a template: {query} and {document} filled, no special tokens added */
    cr_assert_eq(rerank_pair_tokens(t, "Q: {query} D: {document} {x}", "Tom", 3, "a cat", 5, &ids, &n, &err), ATTND_OK);
    cr_assert_eq(tok_encode(t, "Q: Tom D: a cat {x}", 19, false, true, &q, &nq, &err), ATTND_OK);
    cr_expect(n == nq && !memcmp(ids, q, n * sizeof(*q)));
    cr_expect_neq(ids[0], tok_bos(t));
    free(ids);
    free(q);
    tok_destroy(t);
    gguf_close(f);
}
