/*
 * test_server_completion_body.c — the generation endpoints' response JSON
 * (server/api/completion_body.c), built from plain C data with a fake three-token vocabulary: the
 * OpenAI completion, chat and chunk shapes, both logprobs layouts (with echo's prompt entries),
 * usage, timings, llama.cpp's /completion answer and the model list.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "completion_body.h"

/* Token i is VOCAB[i]; token 2 is invalid UTF-8 on its own. */
static const char *VOCAB[] = {"Hello", " world", "\xe2\x82"};

static bool fake_bytes(void *user, int32_t id, const char **p, size_t *n) {
    (void)user;
    if (id < 0 || id >= 3) return false;
    *p = VOCAB[id];
    *n = strlen(VOCAB[id]);
    return true;
}

static const token_logprob PIECES[2] = {{0, -0.5f}, {1, -1.5f}};
static const token_logprob TOPS[4] = {{0, -0.5f}, {2, -2.0f}, {1, -1.5f}, {0, -3.0f}}; /* (2 pieces, 2 tops) */
static const int32_t PROMPT[2] = {1, 0};
static const float PROMPT_LP[2] = {NAN, -0.25f};

static completion_body_ctx ctx(bool chat) {
    return (completion_body_ctx){"cmpl-1", "m", 1700000000, chat, false, NULL, fake_bytes, NULL};
}

static completion_body_gen gen(int top_logprobs) {
    return (completion_body_gen){.text = "Hello world", .text_len = 11, .pieces = PIECES, .n_pieces = 2,
                     .tops = top_logprobs > 0 ? TOPS : NULL, .top_logprobs = top_logprobs,
                     .prompt = PROMPT, .n_prompt = 2, .prompt_lp = PROMPT_LP, .finish_reason = "length",
                     .n_cached = 1, .n_generated = 3, .prompt_ms = 2.0, .gen_ms = 30.0};
}

/* The value at a path of object keys and array indexes ("choices", "0", "text"). */
static json_t *at(json_t *o, const char *const *path, int n) {
    for (int i = 0; i < n && o; i++)
        o = json_is_array(o) ? json_array_get(o, (size_t)atoi(path[i])) : json_object_get(o, path[i]);
    return o;
}
#define AT(o, ...) at(o, (const char *const[]){__VA_ARGS__}, (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *)))

Test(completion_body, a_completion_has_the_openai_shape) {
    completion_body_ctx c = ctx(false);
    completion_body_gen g = gen(-1);
    json_t *o = completion_body_final(&c, &g, NULL, 0);
    cr_assert_str_eq(json_string_value(AT(o, "object")), "text_completion");
    cr_assert_str_eq(json_string_value(AT(o, "id")), "cmpl-1");
    cr_assert_eq(json_integer_value(AT(o, "created")), 1700000000);
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "text")), "Hello world");
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "finish_reason")), "length");
    cr_assert(json_is_null(AT(o, "choices", "0", "logprobs")), "no logprobs asked for");
    cr_assert_eq(json_integer_value(AT(o, "usage", "prompt_tokens")), 2);
    cr_assert_eq(json_integer_value(AT(o, "usage", "completion_tokens")), 3);
    cr_assert_eq(json_integer_value(AT(o, "usage", "total_tokens")), 5);
    cr_assert_eq(json_integer_value(AT(o, "usage", "prompt_tokens_details", "cached_tokens")), 1);
    cr_assert_eq(json_integer_value(AT(o, "timings", "prompt_n")), 1, "prompt tokens not taken from the cache");
    cr_assert_float_eq(json_real_value(AT(o, "timings", "predicted_per_second")), 100.0, 1e-9);
    cr_assert_null(AT(o, "session_id"));
    json_decref(o);
}

Test(completion_body, echo_puts_the_prompt_first_and_its_logprobs_too) {
    completion_body_ctx c = ctx(false);
    completion_body_gen g = gen(0);
    json_t *o = completion_body_final(&c, &g, " worldHello", 11);
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "text")), " worldHelloHello world");
    json_t *lp = AT(o, "choices", "0", "logprobs");
    cr_assert_eq(json_array_size(AT(lp, "tokens")), 4, "2 prompt + 2 generated tokens");
    cr_assert_str_eq(json_string_value(AT(lp, "tokens", "0")), " world");
    cr_assert(json_is_null(AT(lp, "token_logprobs", "0")), "nothing predicts the first prompt token");
    cr_assert_float_eq(json_real_value(AT(lp, "token_logprobs", "1")), -0.25, 1e-6);
    cr_assert_float_eq(json_real_value(AT(lp, "token_logprobs", "3")), -1.5, 1e-6);
    cr_assert_eq(json_integer_value(AT(lp, "text_offset", "1")), 6, "after \" world\"");
    cr_assert_eq(json_integer_value(AT(lp, "text_offset", "3")), 16);
    json_decref(o);
}

Test(completion_body, completion_top_logprobs_map_token_text_to_logprob) {
    completion_body_ctx c = ctx(false);
    completion_body_gen g = gen(2);
    size_t off = 100;
    json_t *lp = completion_body_completion_logprobs(&c, &g, 1, 2, false, &off);
    cr_assert_eq(off, 106, "the offset advances past the token's text");
    json_t *top = AT(lp, "top_logprobs", "0");
    cr_assert_eq(json_object_size(top), 2);
    cr_assert_float_eq(json_real_value(json_object_get(top, " world")), -1.5, 1e-6);
    cr_assert_float_eq(json_real_value(json_object_get(top, "Hello")), -3.0, 1e-6);
    json_decref(lp);
}

Test(completion_body, chat_logprobs_carry_bytes_and_replace_invalid_utf8) {
    completion_body_ctx c = ctx(true);
    completion_body_gen g = gen(2);
    json_t *lp = completion_body_chat_logprobs(&c, &g, 0, 2);
    cr_assert_eq(json_array_size(AT(lp, "content")), 2);
    cr_assert_str_eq(json_string_value(AT(lp, "content", "0", "token")), "Hello");
    cr_assert_eq(json_array_size(AT(lp, "content", "0", "bytes")), 5);
    cr_assert_eq(json_integer_value(AT(lp, "content", "0", "bytes", "0")), 'H');
    json_t *alt = AT(lp, "content", "0", "top_logprobs", "1");
    cr_assert_str_eq(json_string_value(AT(alt, "token")), "\xef\xbf\xbd\xef\xbf\xbd", "U+FFFD for each stray byte");
    cr_assert_eq(json_integer_value(AT(alt, "bytes", "0")), 0xe2, "the raw bytes stay exact");
    json_decref(lp);
}

Test(completion_body, a_chat_completion_has_an_assistant_message) {
    completion_body_ctx c = ctx(true);
    c.session_id = "s1";
    completion_body_gen g = gen(-1);
    g.finish_reason = NULL;
    json_t *o = completion_body_final(&c, &g, NULL, 0);
    cr_assert_str_eq(json_string_value(AT(o, "object")), "chat.completion");
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "message", "role")), "assistant");
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "message", "content")), "Hello world");
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "finish_reason")), "stop");
    cr_assert_str_eq(json_string_value(AT(o, "session_id")), "s1");
    json_decref(o);
}

Test(completion_body, chunks_name_their_object_and_say_usage_null_when_asked) {
    completion_body_ctx c = ctx(true);
    c.include_usage = true;
    json_t *d = json_object();
    json_object_set_new(d, "content", json_string("Hi"));
    json_t *o = completion_body_chunk(&c, d, NULL, NULL);
    cr_assert_str_eq(json_string_value(AT(o, "object")), "chat.completion.chunk");
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "delta", "content")), "Hi");
    cr_assert(json_is_null(AT(o, "choices", "0", "finish_reason")));
    cr_assert(json_is_null(AT(o, "usage")), "usage: null on every chunk but the last");
    json_decref(o);
    completion_body_gen g = gen(-1);
    o = completion_body_usage_chunk(&c, &g);
    cr_assert_eq(json_array_size(AT(o, "choices")), 0);
    cr_assert_eq(json_integer_value(AT(o, "usage", "total_tokens")), 5);
    json_decref(o);
    c.chat = false;
    o = completion_body_chunk(&c, json_string("x"), NULL, "stop");
    cr_assert_str_eq(json_string_value(AT(o, "object")), "text_completion");
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "text")), "x");
    cr_assert_str_eq(json_string_value(AT(o, "choices", "0", "finish_reason")), "stop");
    json_decref(o);
}

Test(completion_body, the_llama_answer_reports_limit_counts_and_token_ids) {
    completion_body_ctx c = ctx(false);
    completion_body_gen g = gen(-1);
    json_t *o = completion_body_llama(&c, &g, g.text, g.text_len, true, 0, 2, true);
    cr_assert_str_eq(json_string_value(AT(o, "content")), "Hello world");
    cr_assert(json_is_true(AT(o, "stop")));
    cr_assert_eq(json_array_size(AT(o, "tokens")), 2);
    cr_assert_eq(json_integer_value(AT(o, "tokens", "1")), 1);
    cr_assert_str_eq(json_string_value(AT(o, "stop_type")), "limit");
    cr_assert(json_is_true(AT(o, "stopped_limit")));
    cr_assert_eq(json_integer_value(AT(o, "tokens_evaluated")), 2);
    cr_assert_eq(json_integer_value(AT(o, "tokens_cached")), 1);
    json_decref(o);
    g.finish_reason = "stop";
    o = completion_body_llama(&c, &g, "", 0, false, 2, 2, true);
    cr_assert_str_eq(json_string_value(AT(o, "stop_type")), "eos");
    cr_assert(json_is_true(AT(o, "stopped_eos")));
    json_decref(o);
    g.finish_reason = NULL; /* cut by shutdown or cancellation */
    o = completion_body_llama(&c, &g, "", 0, false, 2, 2, true);
    cr_assert_str_eq(json_string_value(AT(o, "stop_type")), "none", "a cut stream is neither eos nor a limit");
    cr_assert(json_is_false(AT(o, "stopped_eos")) && json_is_false(AT(o, "stopped_limit")));
    json_decref(o);
    o = completion_body_llama(&c, &g, "wor", 3, false, 0, 0, false);
    cr_assert(json_is_false(AT(o, "stop")));
    cr_assert_null(AT(o, "tokens"), "ids only when return_tokens");
    cr_assert_null(AT(o, "timings"), "counts only in the final event");
    json_decref(o);
}

Test(completion_body, the_model_list_has_one_model_with_meta) {
    completion_body_model_desc d = {"tiny", 1, 256, 512, 2048, 260000, "chatml", NULL, 0, 1, 64};
    json_t *o = completion_body_models(&d);
    cr_assert_str_eq(json_string_value(AT(o, "object")), "list");
    cr_assert_str_eq(json_string_value(AT(o, "data", "0", "id")), "tiny");
    cr_assert_eq(json_integer_value(AT(o, "data", "0", "context_length")), 256);
    cr_assert_eq(json_integer_value(AT(o, "data", "0", "meta", "n_params")), 260000);
    cr_assert_str_eq(json_string_value(AT(o, "data", "0", "meta", "chat_template")), "chatml");
    cr_assert_null(AT(o, "data", "0", "meta", "defaults"), "no defaults given, none shown");
    cr_assert_eq(json_array_size(AT(o, "data", "0", "meta", "roles")), 1);
    cr_assert_str_eq(json_string_value(AT(o, "data", "0", "meta", "roles", "0")), "generate");
    cr_assert_null(AT(o, "data", "0", "meta", "n_embd"), "a generation-only model shows no vector size");
    json_decref(o);
}

Test(completion_body, the_model_says_what_it_serves) {
    completion_body_model_desc d = {"bge", 1, 512, 512, 512, 33000000, "chatml", NULL, 0, 2 | 4, 384};
    json_t *o = completion_body_model(&d);
    cr_assert_eq(json_array_size(AT(o, "meta", "roles")), 2);
    cr_assert_str_eq(json_string_value(AT(o, "meta", "roles", "0")), "embed");
    cr_assert_str_eq(json_string_value(AT(o, "meta", "roles", "1")), "rank");
    cr_assert_eq(json_integer_value(AT(o, "meta", "n_embd")), 384);
    json_decref(o);
}

Test(completion_body, the_model_shows_the_servers_sampling_defaults_as_typed) {
    sampler_params p;
    sampler_params_default(&p);
    p.repeat_penalty = 1.15f;
    completion_body_model_desc d = {"tiny", 1, 256, 512, 2048, 260000, "chatml", &p, 300, 1, 64};
    json_t *o = completion_body_model(&d);
    cr_assert_eq(json_integer_value(AT(o, "meta", "defaults", "max_tokens")), 300);
    cr_assert_eq(json_real_value(AT(o, "meta", "defaults", "temperature")), 0.8, "0.8f shown as 0.8");
    cr_assert_eq(json_real_value(AT(o, "meta", "defaults", "repeat_penalty")), 1.15);
    cr_assert_eq(json_integer_value(AT(o, "meta", "defaults", "top_k")), p.top_k);
    cr_assert_eq(json_integer_value(AT(o, "meta", "defaults", "repeat_last_n")), p.repeat_last_n);
    json_decref(o);
}
