/*
 * test_server_request.c — the request layer (server/api: http.c's checks and routes, the
 * endpoints, genreq.c, sse.c's stream loop and the writers) without a socket: each request runs
 * through http_req_run with a recorder as its transport (req_io), on a server whose model,
 * scheduler and stores are real (the stories260K fixture) but which never binds a port.
 *
 * What is checked: whole and streamed answers agree, the route table's 404/405, the checks before
 * the body (auth, body cap), validation errors, n > 1 choices, sessions, the Responses API's
 * store and follow-ups, reasoning (a think block, and a template whose generation prompt opens
 * one) as Responses items and chat reasoning_content, llama.cpp's /completion, /v1/attention, and
 * forced tool calls that are not what they claim (content and the natural finish_reason, whole
 * and streamed alike, content null without text).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_fixture.h"
#include "infill.h"
#include "server_rig.h"

#define MODEL ATTND_DATA_DIR "/models/stories260K.gguf"

static struct server *srv;

static void setup(void) {
    attnd_err err;
    srv = rig_open(MODEL, NULL, 1, &err);
    cr_assert_not_null(srv, "%s", err.msg);
    srv->cfg.body_limit = 4096;
    srv->cfg.default_max_tokens = 8;
}

static void teardown(void) { server_destroy(srv); }

TestSuite(request, .init = setup, .fini = teardown, .timeout = 120);

typedef rig_rec rec;

/* Runs method url with body (NULL = none) to its end: exactly one answer, in *c. */
static void run(rec *c, const char *method, const char *url, const char *body) {
    rig_run(srv, c, method, url, body);
    cr_assert_eq(c->replies, 1, "exactly one answer to %s %s (got %d)", method, url, c->replies);
}

/* The answer's JSON (new ref); fails the test when it is not JSON. */
static json_t *json_of(const rec *c) {
    json_error_t je;
    json_t *j = json_loads(c->body, 0, &je);
    cr_assert_not_null(j, "not JSON (%s): %.200s", je.text, c->body);
    return j;
}

static json_t *post_json(const char *url, const char *body, int want_status) {
    rec c = {0};
    run(&c, "POST", url, body);
    cr_assert_eq(c.status, want_status, "%s: status %d, body %.300s", url, c.status, c.body);
    cr_assert_not_null(strstr(c.headers, "Content-Type: application/json"), "%s", c.headers);
    json_t *j = json_of(&c);
    free(c.body);
    return j;
}

/* POSTs body, which must be refused with status naming param. */
static void expect_refused(const char *url, const char *body, int status, const char *param) {
    json_t *j = post_json(url, body, status);
    const char *got = json_string_value(json_object_get(json_object_get(j, "error"), "param"));
    cr_assert(got && !strcmp(got, param), "%s %s: param %s, want %s", url, body, got ? got : "null", param);
    json_decref(j);
}

/* The text of every "data:" event's delta (chat) or text (completion), concatenated. */
static char *stream_text(const char *sse, bool chat, int *n_events, bool *done) {
    char *text = calloc(1, 1);
    size_t len = 0;
    *n_events = 0;
    *done = false;
    for (const char *p = sse; (p = strstr(p, "data: ")); p += 6) {
        const char *end = strstr(p, "\n\n");
        cr_assert_not_null(end, "every event ends with a blank line");
        if (!strncmp(p + 6, "[DONE]", 6)) {
            *done = true;
            continue;
        }
        json_t *ev = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
        cr_assert_not_null(ev, "an event is JSON: %.100s", p);
        (*n_events)++;
        json_t *c0 = json_array_get(json_object_get(ev, "choices"), 0);
        const char *t = chat ? json_string_value(json_object_get(json_object_get(c0, "delta"), "content"))
                             : json_string_value(json_object_get(c0, "text"));
        if (t) {
            text = realloc(text, len + strlen(t) + 1);
            strcpy(text + len, t);
            len += strlen(t);
        }
        json_decref(ev);
    }
    return text;
}

/* Posts body to /v1/chat/completions (a streamed request) and joins the strings that pick takes
 * from each event's choices[0].delta; "" where there are none. The caller frees it. */
static char *stream_join(const char *body, const json_t *(*pick)(const json_t *delta)) {
    rec c = {0};
    run(&c, "POST", "/v1/chat/completions", body);
    buf joined = {0};
    for (const char *p = c.body; (p = strstr(p, "data: {"));) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        const json_t *s = pick(json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "delta"));
        if (json_is_string(s)) buf_puts(&joined, json_string_value(s));
        json_decref(ev);
        p = end;
    }
    free(c.body);
    return joined.p ? joined.p : strdup("");
}

static const json_t *reasoning_of(const json_t *delta) { return json_object_get(delta, "reasoning_content"); }

static const json_t *call_arguments_of(const json_t *delta) {
    const json_t *tc = json_array_get(json_object_get(delta, "tool_calls"), 0);
    return json_object_get(json_object_get(tc, "function"), "arguments");
}

// ---- tests --------------------------------------------------------------------------------

#define GREEDY "\"temperature\": 0, \"max_tokens\": 6"

Test(request, a_chat_completion_answers_whole_and_streamed_alike) {
    json_t *j = post_json("/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], " GREEDY "}", 200);
    cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    const char *whole = json_string_value(json_object_get(msg, "content"));
    cr_assert_not_null(whole);
    json_int_t n_gen = json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
    cr_assert(n_gen >= 1 && n_gen <= 6, "completion_tokens %lld", (long long)n_gen);

    rec c = {0};
    run(&c, "POST", "/v1/chat/completions",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], \"stream\": true, " GREEDY "}");
    cr_assert_eq(c.status, 200);
    cr_assert(c.streamed && !c.stream_error);
    cr_assert_not_null(strstr(c.headers, "Content-Type: text/event-stream"));
    int n_events;
    bool done;
    char *streamed = stream_text(c.body, true, &n_events, &done);
    cr_assert(done, "the stream ends with [DONE]");
    cr_assert_geq(n_events, 2, "a role chunk and at least the final chunk");
    cr_assert_str_eq(streamed, whole, "greedy: the streamed text is the whole answer's");
    free(streamed);
    free(c.body);
    json_decref(j);
}

Test(request, n_choices_of_a_prompt_list_come_back_in_order) {
    json_t *j = post_json("/v1/completions", "{\"prompt\": [\"One day\", \"The cat\"], \"n\": 2, " GREEDY "}", 200);
    json_t *choices = json_object_get(j, "choices");
    cr_assert_eq(json_array_size(choices), 4, "2 prompts x n = 2");
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(json_integer_value(json_object_get(json_array_get(choices, i), "index")), (json_int_t)i);
    const char *a = json_string_value(json_object_get(json_array_get(choices, 0), "text"));
    const char *b = json_string_value(json_object_get(json_array_get(choices, 1), "text"));
    cr_assert_str_eq(a, b, "greedy: both choices of one prompt agree");
    json_decref(j);
}

Test(request, the_route_table_answers_404_and_405_with_allow) {
    rec c = {0};
    run(&c, "GET", "/v1/nothing-here", NULL);
    cr_assert_eq(c.status, 404);
    json_t *j = json_of(&c);
    cr_assert_not_null(json_object_get(j, "error"));
    json_decref(j);
    free(c.body);
    rec d = {0};
    run(&d, "PUT", "/v1/chat/completions", "{}");
    cr_assert_eq(d.status, 405);
    cr_assert_not_null(strstr(d.headers, "Allow: POST"), "%s", d.headers);
    free(d.body);
}

Test(request, the_checks_before_the_body_refuse_bad_keys_and_big_bodies) {
    srv->cfg.api_key = "sekrit";
    rec c = {0};
    run(&c, "GET", "/v1/models", NULL);
    cr_assert_eq(c.status, 401);
    cr_assert_not_null(strstr(c.headers, "WWW-Authenticate: Bearer"));
    free(c.body);
    rec h = {0};
    run(&h, "GET", "/health", NULL);
    cr_assert_eq(h.status, 200, "/health is open: the route table says so");
    free(h.body);
    rec d = {.req_headers = {"Authorization", "Bearer sekrit"}};
    run(&d, "GET", "/v1/models", NULL);
    cr_assert_eq(d.status, 200, "%s", d.body);
    free(d.body);
    srv->cfg.api_key = NULL;
    char big[5000];
    memset(big, ' ', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    rec e = {0};
    run(&e, "POST", "/v1/completions", big);
    cr_assert_eq(e.status, 413, "the body cap is 4096 bytes");
    free(e.body);
}

Test(request, invalid_bodies_are_refused_with_the_field_named) {
    json_t *j = post_json("/v1/completions", "{\"prompt\": ", 400);
    cr_assert_not_null(strstr(json_string_value(json_object_get(json_object_get(j, "error"), "message")), "JSON"));
    json_decref(j);
    expect_refused("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 0}", 400,
                   "n");
    expect_refused("/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"many\"}", 400, "max_tokens");
}

Test(request, a_session_keeps_the_history_of_its_turns) {
    json_t *s = post_json("/v1/sessions", "{\"id\": \"story\"}", 200);
    cr_assert_str_eq(json_string_value(json_object_get(s, "id")), "story");
    json_decref(s);
    json_t *j = post_json("/v1/completions", "{\"prompt\": \"Once\", \"session_id\": \"story\", " GREEDY "}", 200);
    json_int_t n = json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")) +
                   json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
    json_decref(j);
    rec c = {0};
    run(&c, "GET", "/v1/sessions/story", NULL);
    cr_assert_eq(c.status, 200);
    j = json_of(&c);
    cr_assert_eq(json_integer_value(json_object_get(j, "tokens")), n, "the prompt and the reply are the history");
    json_decref(j);
    free(c.body);
    expect_refused("/v1/completions", "{\"prompt\": \"Once\", \"session_id\": \"nope\", " GREEDY "}", 404,
                   "session_id");
}

Test(request, a_stored_response_is_returned_and_continued) {
    json_t *a = post_json("/v1/responses", "{\"input\": \"Once upon a time\", \"max_output_tokens\": 4}", 200);
    const char *status = json_string_value(json_object_get(a, "status"));
    json_int_t out = json_integer_value(json_object_get(json_object_get(a, "usage"), "output_tokens"));
    cr_assert(!strcmp(status, "incomplete") ? out == 4 : !strcmp(status, "completed") && out < 4,
              "status %s after %lld tokens", status, (long long)out);
    const char *id = json_string_value(json_object_get(a, "id"));
    cr_assert_not_null(id);
    char url[128], body[256];
    snprintf(url, sizeof(url), "/v1/responses/%s", id);
    rec c = {0};
    run(&c, "GET", url, NULL);
    cr_assert_eq(c.status, 200);
    json_t *got = json_of(&c);
    cr_assert_str_eq(json_string_value(json_object_get(got, "id")), id);
    json_decref(got);
    free(c.body);
    snprintf(body, sizeof(body),
             "{\"input\": \"and then\", \"previous_response_id\": \"%s\", \"max_output_tokens\": 4}", id);
    json_t *b = post_json("/v1/responses", body, 200);
    json_int_t cached = json_integer_value(
        json_object_get(json_object_get(json_object_get(b, "usage"), "input_tokens_details"), "cached_tokens"));
    cr_assert_gt(cached, 0, "the follow-up reuses the first turn's KV");
    json_decref(b);
    expect_refused("/v1/responses", "{\"input\": \"x\", \"previous_response_id\": \"resp_none\"}", 404,
                   "previous_response_id");
    json_decref(a);
}

/* A reply that opens with <think>…</think> (held to it by a grammar) is a reasoning item and a
 * message whose output_text has no reasoning in it. */
Test(request, a_think_block_in_a_response_is_its_reasoning_item) {
    json_t *a = post_json("/v1/responses", "{\"input\": \"Once\", \"temperature\": 0, \"max_output_tokens\": 30, "
                          "\"grammar\": \"root ::= \\\"<think>\\\" [a-z]{2,6} \\\"</think>\\\" [a-z]{2,6}\"}", 200);
    const json_t *out = json_object_get(a, "output");
    cr_assert_eq(json_array_size(out), 2);
    const json_t *rs = json_array_get(out, 0), *msg = json_array_get(out, 1);
    cr_assert_str_eq(json_string_value(json_object_get(rs, "type")), "reasoning");
    const char *answer = json_string_value(json_object_get(json_array_get(json_object_get(msg, "content"), 0), "text"));
    cr_assert(answer && strlen(answer) >= 2 && !strchr(answer, '<'), "output_text '%s'", answer);
    const json_t *details = json_object_get(json_object_get(a, "usage"), "output_tokens_details");
    cr_assert_gt(json_integer_value(json_object_get(details, "reasoning_tokens")), 2, "<think>, a word and </think>");
    json_decref(a);
}

/* A reply without reasoning has none in its usage. */
Test(request, a_reply_without_reasoning_counts_no_reasoning_tokens) {
    json_t *j = post_json("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], "
                          "\"max_tokens\": 6, \"grammar\": \"root ::= [a-z ]{1,20}\"}", 200);
    const json_t *u = json_object_get(j, "usage");
    cr_assert_gt(json_integer_value(json_object_get(u, "completion_tokens")), 0);
    const json_t *v = json_object_get(json_object_get(u, "completion_tokens_details"), "reasoning_tokens");
    cr_assert(json_is_integer(v) && json_integer_value(v) == 0, "reasoning_tokens 0");
    json_t *a = post_json("/v1/responses", "{\"input\": \"Once\", \"max_output_tokens\": 6}", 200);
    v = json_object_get(json_object_get(json_object_get(a, "usage"), "output_tokens_details"), "reasoning_tokens");
    cr_assert(json_is_integer(v) && json_integer_value(v) == 0, "Responses' reasoning_tokens 0");
    json_decref(a);
    json_decref(j);
}

Test(request, llama_completion_takes_n_predict_and_streams_until_stop) {
    json_t *j = post_json("/completion", "{\"prompt\": \"Once\", \"n_predict\": 3, \"temperature\": 0}", 200);
    cr_assert(json_is_string(json_object_get(j, "content")));
    cr_assert(json_is_true(json_object_get(j, "stop")));
    json_decref(j);
    rec c = {0};
    run(&c, "POST", "/completion", "{\"prompt\": \"Once\", \"n_predict\": 3, \"stream\": true}");
    cr_assert_eq(c.status, 200);
    cr_assert_null(strstr(c.body, "[DONE]"), "llama.cpp's stream has no [DONE]");
    cr_assert_not_null(strstr(c.body, "\"stop\":true"), "it ends with the stop event: %.300s", c.body);
    free(c.body);
}

Test(request, attention_answers_one_row_per_position_of_each_head_asked_for) {
    json_t *j = post_json("/v1/attention", "{\"prompt\": \"Once upon\", \"layers\": [0], \"heads\": [1]}", 200);
    cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "attention");
    json_int_t n_prompt = json_integer_value(json_object_get(j, "n_prompt"));
    cr_assert_gt(n_prompt, 1);
    json_t *heads = json_object_get(j, "attention");
    cr_assert_eq(json_array_size(heads), 1, "one layer x one head");
    json_t *h = json_array_get(heads, 0);
    cr_assert_eq(json_integer_value(json_object_get(h, "layer")), 0);
    cr_assert_eq(json_integer_value(json_object_get(h, "head")), 1);
    json_t *rows = json_object_get(h, "weights");
    cr_assert_eq((json_int_t)json_array_size(rows), n_prompt - json_integer_value(json_object_get(j, "first_row")));
    json_t *last = json_array_get(rows, json_array_size(rows) - 1);
    double sum = 0;
    for (size_t i = 0; i < json_array_size(last); i++) sum += json_number_value(json_array_get(last, i));
    cr_assert_float_eq(sum, 1.0, 1e-3, "a softmax row sums to 1 (%f)", sum);
    json_decref(j);
    expect_refused("/v1/attention", "{\"prompt\": \"Once\", \"layers\": [99]}", 400, "layers");
    expect_refused("/v1/attention", "{\"prompt\": \"Once\", \"stream\": true}", 400, "stream");
}

// ---- reasoning: a template whose generation prompt opens <think> ----------------------------

/* ChatML that renders an assistant's reasoning_content and ends its generation prompt with an
 * open <think>, as DeepSeek-R1 style templates do. */
static const char R1_TEMPLATE[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.reasoning_content %}<think>{{ m.reasoning_content }}"
    "</think>{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "<think>\n{% endif %}";
static char r1_path[64];

/* Starts srv on model with the chat template (written to r1_path, a temporary file), its
 * replies capped at max_tokens. */
static void template_server(const char *model, const char *template, int max_tokens) {
    snprintf(r1_path, sizeof(r1_path), "/tmp/attnd-template-XXXXXX");
    int fd = mkstemp(r1_path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, template, strlen(template)), (ssize_t)strlen(template));
    close(fd);
    server_settings cfg;
    rig_settings(&cfg, model, NULL, 1);
    cfg.chat_template_file = r1_path;
    attnd_err err;
    srv = rig_start(&cfg, false, &err);
    cr_assert_not_null(srv, "%s", err.msg);
    srv->cfg.default_max_tokens = max_tokens;
}

static void r1_setup(void) { template_server(MODEL, R1_TEMPLATE, 40); }

static void r1_teardown(void) {
    server_destroy(srv);
    unlink(r1_path);
}

TestSuite(reasoning, .init = r1_setup, .fini = r1_teardown, .timeout = 120);

/* The model (random to us) is held to "reasoning</think>answer" by a GBNF grammar, greedy. */
#define R1_GRAMMAR "\"grammar\": \"root ::= [a-z]{2,6} \\\"</think>\\\" [a-z]{2,6}\", \"temperature\": 0"

static const char *part_text(const json_t *item) {
    return json_string_value(json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
}

Test(reasoning, a_reply_after_an_open_think_is_a_reasoning_item_and_a_message) {
    json_t *a = post_json("/v1/responses", "{\"input\": \"Once\", " R1_GRAMMAR "}", 200);
    const json_t *out = json_object_get(a, "output"), *rs = json_array_get(out, 0), *msg = json_array_get(out, 1);
    cr_assert_eq(json_array_size(out), 2, "reasoning and message: %s", json_dumps(out, 0));
    cr_assert_str_eq(json_string_value(json_object_get(rs, "type")), "reasoning");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "type")), "message");
    const char *thought = part_text(rs), *answer = part_text(msg);
    cr_assert(thought && strlen(thought) >= 2 && strlen(thought) <= 6 && !strchr(thought, '<'), "reasoning '%s'", thought);
    cr_assert(answer && strlen(answer) >= 2 && strlen(answer) <= 6 && !strchr(answer, '<'), "answer '%s'", answer);
    cr_log_info("reasoning '%s', answer '%s'", thought, answer);

    /* streamed, the items and their text are the same, and the events rebuild them */
    rec c = {0};
    run(&c, "POST", "/v1/responses", "{\"input\": \"Once\", \"stream\": true, " R1_GRAMMAR "}");
    cr_assert_eq(c.status, 200);
    buf rs_text = {0}, msg_text = {0};
    json_t *final = NULL;
    int added = 0, done = 0;
    for (const char *p = c.body; (p = strstr(p, "\ndata: "));) {
        p += 7;
        const char *end = strstr(p, "\n\n");
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        cr_assert_not_null(ev);
        const char *type = json_string_value(json_object_get(ev, "type"));
        const json_t *d = json_object_get(ev, "delta");
        if (!strcmp(type, "response.reasoning_text.delta")) buf_puts(&rs_text, json_string_value(d));
        if (!strcmp(type, "response.output_text.delta")) buf_puts(&msg_text, json_string_value(d));
        added += !strcmp(type, "response.output_item.added");
        done += !strcmp(type, "response.output_item.done");
        if (!strcmp(type, "response.completed")) final = json_incref(json_object_get(ev, "response"));
        json_decref(ev);
        p = end;
    }
    cr_assert(added == 2 && done == 2, "%d items added, %d done", added, done);
    cr_assert_str_eq(rs_text.p, thought, "the streamed reasoning is the whole answer's (greedy)");
    cr_assert_str_eq(msg_text.p, answer);
    cr_assert_not_null(final);
    cr_assert_str_eq(part_text(json_array_get(json_object_get(final, "output"), 0)), thought);
    json_decref(final);
    buf_free(&rs_text), buf_free(&msg_text);
    free(c.body);

    /* the follow-up carries the stored reasoning back through the template */
    char body[256];
    snprintf(body, sizeof(body), "{\"input\": \"and\", \"previous_response_id\": \"%s\", \"max_output_tokens\": 2}",
             json_string_value(json_object_get(a, "id")));
    json_t *b = post_json("/v1/responses", body, 200);
    json_decref(b);
    json_decref(a);
}

Test(reasoning, chat_completions_split_reasoning_content_after_an_open_think) {
    static const char BODY[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], " R1_GRAMMAR;
    char body[512];
    snprintf(body, sizeof(body), "%s}", BODY);
    json_t *j = post_json("/v1/chat/completions", body, 200);
    const json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    const char *thought = json_string_value(json_object_get(msg, "reasoning_content"));
    const char *answer = json_string_value(json_object_get(msg, "content"));
    cr_assert(thought && strlen(thought) >= 2 && !strchr(thought, '<'), "reasoning_content '%s'", thought);
    cr_assert(answer && strlen(answer) >= 2 && !strchr(answer, '<'), "content '%s'", answer);
    snprintf(body, sizeof(body), "%s, \"stream\": true}", BODY);
    char *streamed = stream_join(body, reasoning_of);
    cr_assert_str_eq(streamed, thought, "delta.reasoning_content joins to the whole answer's");
    free(streamed);
    json_decref(j);
}

/* A reasoning item sent back in the input is the assistant's reasoning_content, which this
 * template renders: the prompt grows by it, and nothing is refused. */
Test(reasoning, reasoning_items_in_the_input_reach_the_template) {
    static const char *TURNS = "{\"role\": \"user\", \"content\": \"Once\"}, %s"
                               "{\"type\": \"message\", \"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", "
                               "\"text\": \"there\"}]}, {\"role\": \"user\", \"content\": \"was\"}";
    static const char *RS = "{\"type\": \"reasoning\", \"id\": \"rs_x\", \"summary\": [], \"content\": "
                            "[{\"type\": \"reasoning_text\", \"text\": \"a long and winding thought\"}]}, ";
    char turns[1024], body[1200];
    snprintf(turns, sizeof(turns), TURNS, "");
    snprintf(body, sizeof(body), "{\"input\": [%s], \"max_output_tokens\": 1, \"store\": false}", turns);
    json_t *plain = post_json("/v1/responses", body, 200);
    snprintf(turns, sizeof(turns), TURNS, RS);
    snprintf(body, sizeof(body), "{\"input\": [%s], \"max_output_tokens\": 1, \"store\": false}", turns);
    json_t *with = post_json("/v1/responses", body, 200);
    json_int_t n0 = json_integer_value(json_object_get(json_object_get(plain, "usage"), "input_tokens"));
    json_int_t n1 = json_integer_value(json_object_get(json_object_get(with, "usage"), "input_tokens"));
    cr_assert_gt(n1, n0 + 5, "the reasoning is in the prompt (%lld vs %lld tokens)", (long long)n1, (long long)n0);
    json_decref(plain);
    json_decref(with);
}

/* The tokens up to the one that completes "</think>" (the prompt opened the block), counted
 * from the logprobs' tokens: what usage's reasoning_tokens must say. */
static int think_tokens_of(const json_t *choice) {
    const json_t *lp = json_object_get(json_object_get(choice, "logprobs"), "content");
    buf seen = {0};
    int n = 0;
    for (size_t i = 0; i < json_array_size(lp) && !(seen.p && strstr(seen.p, "</think>")); i++, n++)
        buf_puts(&seen, json_string_value(json_object_get(json_array_get(lp, i), "token")));
    cr_assert(seen.p && strstr(seen.p, "</think>"), "the reply closes its reasoning: %s", seen.p ? seen.p : "");
    buf_free(&seen);
    return n;
}

static json_int_t reasoning_tokens_of(const json_t *usage, const char *details) {
    const json_t *v = json_object_get(json_object_get(usage, details), "reasoning_tokens");
    cr_assert(json_is_integer(v), "usage.%s.reasoning_tokens is a number", details);
    return json_integer_value(v);
}

/* usage counts the reasoning tokens: whole, n = 2 (summed), streamed (include_usage) and in
 * Responses; each equals the tokens the logprobs show before the answer. */
Test(reasoning, usage_counts_the_tokens_of_the_reasoning) {
    static const char BODY[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"logprobs\": true, "
                               R1_GRAMMAR;
    char body[512];
    snprintf(body, sizeof(body), "%s}", BODY);
    json_t *j = post_json("/v1/chat/completions", body, 200);
    const json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    int want = think_tokens_of(choice);
    json_int_t total = json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
    cr_assert_gt(total, want, "the answer has tokens of its own");
    cr_assert_eq(reasoning_tokens_of(json_object_get(j, "usage"), "completion_tokens_details"), want);
    cr_log_info("%d of %lld tokens were reasoning", want, (long long)total);

    snprintf(body, sizeof(body), "%s, \"n\": 2}", BODY);
    json_t *two = post_json("/v1/chat/completions", body, 200);
    int want2 = think_tokens_of(json_array_get(json_object_get(two, "choices"), 0)) +
                think_tokens_of(json_array_get(json_object_get(two, "choices"), 1));
    cr_assert_eq(reasoning_tokens_of(json_object_get(two, "usage"), "completion_tokens_details"), want2);
    json_decref(two);

    rec c = {0};
    snprintf(body, sizeof(body), "%s, \"stream\": true, \"stream_options\": {\"include_usage\": true}}", BODY);
    run(&c, "POST", "/v1/chat/completions", body);
    const char *u = strstr(c.body, "\"usage\":{");
    cr_assert_not_null(u, "the stream ends with its usage: %.400s", c.body);
    const char *line = u;
    while (line > c.body && line[-1] != '\n') line--;
    json_t *ev = json_loadb(line + 6, (size_t)(strstr(line, "\n\n") - line - 6), 0, NULL);
    cr_assert_eq(reasoning_tokens_of(json_object_get(ev, "usage"), "completion_tokens_details"), want);
    json_decref(ev);
    free(c.body);

    json_t *a = post_json("/v1/responses", "{\"input\": \"Once\", " R1_GRAMMAR "}", 200);
    cr_assert_eq(reasoning_tokens_of(json_object_get(a, "usage"), "output_tokens_details"), want);
    json_decref(a);
    json_decref(j);
}

/* A reasoning budget closes the <think> block the prompt opened once it is spent: the close is
 * the budget's tokens after the prompt, the answer goes on after it; Anthropic's budget_tokens
 * is the same budget. */
Test(reasoning, a_reasoning_budget_closes_the_block_when_it_is_spent) {
    int32_t *close;
    size_t n_close;
    attnd_err err;
    cr_assert_eq(tok_encode(srv->tok, "</think>", 8, false, true, &close, &n_close, &err), ATTND_OK);
    free(close);
    json_t *j = post_json("/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"logprobs\": true, "
                          "\"temperature\": 0, \"reasoning_budget_tokens\": 5}",
                          200);
    const json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    cr_assert_eq(think_tokens_of(choice), 5 + (int)n_close, "5 tokens of reasoning, then the %zu of </think>", n_close);
    const json_t *msg = json_object_get(choice, "message");
    cr_expect_gt(json_string_length(json_object_get(msg, "reasoning_content")), 0);
    cr_expect_gt(json_string_length(json_object_get(msg, "content")), 0, "the answer goes on after the block");
    json_decref(j);
    expect_refused("/v1/chat/completions",
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"reasoning_budget_tokens\": 0}", 400,
                   "reasoning_budget_tokens");
    j = post_json("/v1/messages",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"max_tokens\": 40, \"temperature\": 0, "
                  "\"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 5}}",
                  200);
    const json_t *blocks = json_object_get(j, "content");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(blocks, 0), "type")), "thinking");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(blocks, 1), "type")), "text",
                     "the thinking block was closed, the answer follows");
    json_decref(j);
}

// ---- tool calls are what they claim (issue 44) -------------------------------------------------

/* A whole chat answer and the same streamed, joined as OpenAI's client libraries join deltas:
 * content starts as the role chunk's (null) and grows by each string; tool calls by index. */
typedef struct joined {
    json_t *content;     /* string or null */
    char finish[32];
    int n_calls;
    char names[4][64];
} joined;

static void join_stream(const char *body, joined *out) {
    rec c = {0};
    run(&c, "POST", "/v1/chat/completions", body);
    memset(out, 0, sizeof(*out));
    buf text = {0};
    bool any = false, role_seen = false;
    for (const char *p = c.body; (p = strstr(p, "data: {"));) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        const json_t *ch = json_array_get(json_object_get(ev, "choices"), 0), *d = json_object_get(ch, "delta");
        if (json_object_get(d, "role")) {
            role_seen = true;
            cr_assert(json_is_null(json_object_get(d, "content")), "the role chunk says content null");
        }
        const json_t *t = json_object_get(d, "content");
        if (json_is_string(t)) any = true, buf_puts(&text, json_string_value(t));
        const json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        const char *nm = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (nm && out->n_calls < 4) snprintf(out->names[out->n_calls++], 64, "%s", nm);
        if (json_is_string(json_object_get(ch, "finish_reason")))
            snprintf(out->finish, sizeof(out->finish), "%s", json_string_value(json_object_get(ch, "finish_reason")));
        json_decref(ev);
        p = end;
    }
    cr_assert(role_seen);
    out->content = any ? json_string(text.p ? text.p : "") : json_null();
    buf_free(&text);
    free(c.body);
}

/* Posts body (without its closing brace) whole and streamed; both must say the same. Returns the
 * whole choice (new reference). */
static json_t *whole_and_streamed(const char *body) {
    char b[2048];
    snprintf(b, sizeof(b), "%s}", body);
    json_t *j = post_json("/v1/chat/completions", b, 200);
    json_t *choice = json_incref(json_array_get(json_object_get(j, "choices"), 0));
    json_decref(j);
    const json_t *msg = json_object_get(choice, "message"), *content = json_object_get(msg, "content");
    snprintf(b, sizeof(b), "%s, \"stream\": true}", body);
    joined s;
    join_stream(b, &s);
    cr_assert(json_equal(s.content, (json_t *)content), "content: streamed %s, whole %s", json_dumps(s.content, JSON_ENCODE_ANY),
              json_dumps(content, JSON_ENCODE_ANY));
    cr_assert_str_eq(s.finish, json_string_value(json_object_get(choice, "finish_reason")));
    const json_t *calls = json_object_get(msg, "tool_calls");
    cr_assert_eq((size_t)s.n_calls, json_array_size(calls));
    for (int k = 0; k < s.n_calls; k++)
        cr_assert_str_eq(s.names[k], json_string_value(json_object_get(json_object_get(json_array_get(calls, (size_t)k),
                                                                                      "function"), "name")));
    json_decref(s.content);
    return choice;
}

#define PING_TOOLS "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"ping\"}}]"

/* An unclosed <think>: no text, so content is null whole and streamed (the role chunk's null,
 * never joined to a string), and the reasoning is all there is. */
Test(request, an_unclosed_think_has_content_null_whole_and_streamed) {
    json_t *choice = whole_and_streamed("{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"temperature\": 0, "
                                        "\"grammar\": \"root ::= \\\"<think>\\\" [a-z]{2,6}\"");
    const json_t *msg = json_object_get(choice, "message");
    cr_assert(json_is_null(json_object_get(msg, "content")), "%s", json_dumps(msg, 0));
    cr_assert(json_string_length(json_object_get(msg, "reasoning_content")) >= 2);
    json_decref(choice);
}

/* Output forced through a grammar to call a function the request does not have, with
 * duplicate names, or with a raw control character: content as written, finish_reason "stop",
 * no tool_calls, whole and streamed alike. */
Test(request, forced_calls_that_are_not_valid_come_back_as_content) {
    static const char *const FORCED[] = {
        "<tool_call>{\\\\\\\"name\\\\\\\": \\\\\\\"rm_rf_root\\\\\\\", \\\\\\\"arguments\\\\\\\": {}}</tool_call>",
        "<tool_call>{\\\\\\\"name\\\\\\\": \\\\\\\"ping\\\\\\\", \\\\\\\"name\\\\\\\": \\\\\\\"exec\\\\\\\"}</tool_call>",
        "<tool_call>{\\\\\\\"name\\\\\\\": \\\\\\\"ping\\\\\\\", \\\\\\\"arguments\\\\\\\": {\\\\\\\"a\\\\\\\": "
        "\\\\\\\"\\\\x01\\\\\\\"}}</tool_call>",
    };
    static const char *const TEXT[] = {
        "<tool_call>{\"name\": \"rm_rf_root\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"ping\", \"name\": \"exec\"}</tool_call>",
        "<tool_call>{\"name\": \"ping\", \"arguments\": {\"a\": \"\x01\"}}</tool_call>",
    };
    for (size_t k = 0; k < ATTND_ARRAY_LEN(FORCED); k++) {
        char body[1024];
        snprintf(body, sizeof(body), "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"temperature\": 0, "
                 "\"max_tokens\": 200, " PING_TOOLS ", \"grammar\": \"root ::= \\\"%s\\\"\"", FORCED[k]);
        json_t *choice = whole_and_streamed(body);
        const json_t *msg = json_object_get(choice, "message");
        cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "stop", "%s", json_dumps(choice, 0));
        cr_assert_null(json_object_get(msg, "tool_calls"), "%zu: no call", k);
        cr_assert_str_eq(json_string_value(json_object_get(msg, "content")), TEXT[k]);
        json_decref(choice);
    }
}

/* A valid call cut by max_tokens is no call: its text is content and finish_reason is "length";
 * the same call uncut is a call with "tool_calls". */
Test(request, a_forced_call_cut_by_max_tokens_is_content_with_length) {
    static const char BODY[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"temperature\": 0, "
                               PING_TOOLS ", \"grammar\": \"root ::= \\\"<tool_call>{\\\\\\\"name\\\\\\\": "
                               "\\\\\\\"ping\\\\\\\", \\\\\\\"arguments\\\\\\\": {\\\\\\\"n\\\\\\\": 12345}}</tool_call>\\\"\"";
    char body[1024];
    snprintf(body, sizeof(body), "%s, \"max_tokens\": 20", BODY);
    json_t *choice = whole_and_streamed(body);
    const json_t *msg = json_object_get(choice, "message");
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "length", "%s", json_dumps(choice, 0));
    cr_assert_null(json_object_get(msg, "tool_calls"));
    const char *content = json_string_value(json_object_get(msg, "content"));
    cr_assert(content && !strncmp(content, "<tool_call>{\"name\"", 18), "%s", json_dumps(choice, 0));
    json_decref(choice);
    snprintf(body, sizeof(body), "%s, \"max_tokens\": 200", BODY);
    choice = whole_and_streamed(body);
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls", "%s", json_dumps(choice, 0));
    cr_assert(json_is_null(json_object_get(json_object_get(choice, "message"), "content")));
    json_decref(choice);
}

// ---- a Qwen3-Coder template: forced calls in its XML format -------------------------------

/* The part of Qwen3-Coder's template that writes calls (its tools' description does not fit the
 * fixture's 512-token context): a call in the history as <function=…><parameter=…>. */
static const char CODER_TEMPLATE[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for tc in m.tool_calls %}<tool_call>\n"
    "<function={{ tc.function.name }}>\n{% for k, v in tc.function.arguments|items %}<parameter={{ k }}>\n{{ v }}\n"
    "</parameter>\n{% endfor %}</function>\n</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}";

static void coder_setup(void) {
    template_server(MODEL, CODER_TEMPLATE, 120);
    cr_assert_eq(srv->chat.tool_format, TOOLCALL_FMT_QWEN_XML, "the template's calls are XML");
}

TestSuite(coder, .init = coder_setup, .fini = r1_teardown, .timeout = 120);

#define CODER_TOOLS                                                                                                   \
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"set\", \"parameters\": {\"type\": \"object\", "  \
    "\"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 99}, \"ok\": {\"type\": "          \
    "\"boolean\"}}, \"required\": [\"n\", \"ok\"]}}}], \"tool_choice\": \"required\", \"parallel_tool_calls\": false"

/* The random model, forced by the XML grammar, writes a call that parses into typed JSON
 * arguments; streamed, its fragments join to the same arguments. */
Test(coder, a_forced_call_is_written_in_xml_and_parsed_into_json) {
    static const char BODY[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"temperature\": 0, "
                               CODER_TOOLS;
    char body[1024];
    snprintf(body, sizeof(body), "%s}", BODY);
    json_t *j = post_json("/v1/chat/completions", body, 200);
    const json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls", "%s", json_dumps(j, 0));
    const json_t *fn = json_object_get(json_array_get(json_object_get(json_object_get(choice, "message"), "tool_calls"), 0),
                                       "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "name")), "set");
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    json_t *a = json_loads(args ? args : "", 0, NULL);
    cr_assert(json_is_integer(json_object_get(a, "n")) && json_is_boolean(json_object_get(a, "ok")), "arguments %s", args);
    json_int_t n = json_integer_value(json_object_get(a, "n"));
    cr_assert(n >= 0 && n <= 99);
    json_decref(a);

    snprintf(body, sizeof(body), "%s, \"stream\": true}", BODY);
    char *joined = stream_join(body, call_arguments_of);
    cr_assert_str_eq(joined, args, "the streamed fragments join to the arguments");
    free(joined);
    json_decref(j);
}

/* Qwen3.5 may open a call inside its unclosed thinking: the <tool_call> ends the reasoning and
 * the call is read, in chat completions (whole and streamed) and in Responses. The random model is
 * held to such a reply by a GBNF grammar. */
#define THINK_TO_CALL_GRAMMAR "\"grammar\": \"root ::= \\\"<think>hm\\\\n<tool_call>\\\\n<function=set>\\\\n<parameter=n>\\\\n3\\\\n</parameter>\\\\n<parameter=ok>\\\\ntrue\\\\n</parameter>\\\\n</function>\\\\n</tool_call>\\\"\""

Test(coder, a_call_inside_unclosed_reasoning_ends_it) {
    static const char BODY[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"temperature\": 0, "
                               "\"max_tokens\": 200, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                               "\"set\", \"parameters\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": "
                               "\"integer\"}, \"ok\": {\"type\": \"boolean\"}}}}}], " THINK_TO_CALL_GRAMMAR;
    json_t *choice = whole_and_streamed(BODY);
    const json_t *msg = json_object_get(choice, "message");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "reasoning_content")), "hm\n", "%s", json_dumps(choice, 0));
    cr_assert(json_is_null(json_object_get(msg, "content")), "%s", json_dumps(choice, 0));
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls");
    const json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "arguments")), "{\"n\":3,\"ok\":true}");
    json_decref(choice);
    char body[1024];
    snprintf(body, sizeof(body), "%s, \"stream\": true}", BODY);
    char *streamed = stream_join(body, reasoning_of);
    cr_assert_str_eq(streamed, "hm\n", "delta.reasoning_content stops at the call");
    free(streamed);

    /* Responses: a reasoning item, then the function call; usage counts the reasoning's tokens */
    json_t *r = post_json("/v1/responses", "{\"input\": \"Once\", \"temperature\": 0, \"max_output_tokens\": 200, "
                          "\"tools\": [{\"type\": \"function\", \"name\": \"set\", \"parameters\": {\"type\": "
                          "\"object\", \"properties\": {\"n\": {\"type\": \"integer\"}, \"ok\": {\"type\": "
                          "\"boolean\"}}}}], " THINK_TO_CALL_GRAMMAR "}", 200);
    const json_t *out = json_object_get(r, "output");
    cr_assert_eq(json_array_size(out), 2, "%s", json_dumps(out, 0));
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(out, 0), "type")), "reasoning");
    cr_assert_str_eq(part_text(json_array_get(out, 0)), "hm\n");
    const json_t *call = json_array_get(out, 1);
    cr_assert_str_eq(json_string_value(json_object_get(call, "type")), "function_call", "%s", json_dumps(out, 0));
    cr_assert_str_eq(json_string_value(json_object_get(call, "name")), "set");
    cr_assert_str_eq(json_string_value(json_object_get(call, "arguments")), "{\"n\":3,\"ok\":true}");
    json_int_t rt = json_integer_value(json_object_get(json_object_get(json_object_get(r, "usage"),
                                                                       "output_tokens_details"), "reasoning_tokens"));
    cr_assert(rt >= 10 && rt <= 12, "the <think>hm\\n tokens are reasoning, the call's are not: %lld", (long long)rt);
    json_decref(r);
}

// ---- a Gemma 4 template: forced calls in Gemma's syntax -------------------------------------

/* The part of Gemma 4's template that writes calls: <|tool_call>call:NAME{key:value}<tool_call|>. */
static const char GEMMA4_TEMPLATE[] =
    "{% for m in messages %}<|turn>{{ m.role }}\n{% if m.tool_calls %}{% for tc in m.tool_calls %}<|tool_call>call:"
    "{{ tc.function.name }}{{ '{' }}{% for k, v in tc.function.arguments|items %}{{ k }}:{{ v }}{% endfor %}{{ '}' }}"
    "<tool_call|>{% endfor %}{% else %}{{ m.content }}{% endif %}<turn|>\n{% endfor %}{% for t in tools %}"
    "{{ t.function.name }}{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}";

static void gemma4_setup(void) {
    template_server(MODEL, GEMMA4_TEMPLATE, 120);
    cr_assert_eq(srv->chat.tool_format, TOOLCALL_FMT_GEMMA4, "the template's calls are Gemma's");
}

TestSuite(gemma4, .init = gemma4_setup, .fini = r1_teardown, .timeout = 120);

/* The random model, forced by the Gemma grammar, writes a call that parses into typed JSON
 * arguments under the schema; streamed, its fragments join to the same arguments. */
Test(gemma4, a_forced_call_is_written_in_gemma_syntax_and_parsed_into_json) {
    static const char BODY[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"temperature\": 0, "
                               CODER_TOOLS;
    char body[1024];
    snprintf(body, sizeof(body), "%s}", BODY);
    json_t *j = post_json("/v1/chat/completions", body, 200);
    const json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls", "%s", json_dumps(j, 0));
    const json_t *fn = json_object_get(json_array_get(json_object_get(json_object_get(choice, "message"), "tool_calls"), 0),
                                       "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "name")), "set");
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    json_t *a = json_loads(args ? args : "", 0, NULL);
    cr_assert(json_is_integer(json_object_get(a, "n")) && json_is_boolean(json_object_get(a, "ok")), "arguments %s", args);
    json_int_t n = json_integer_value(json_object_get(a, "n"));
    cr_assert(n >= 0 && n <= 99);
    json_decref(a);
    snprintf(body, sizeof(body), "%s, \"stream\": true}", BODY);
    char *joined = stream_join(body, call_arguments_of);
    cr_assert_str_eq(joined, args, "the streamed fragments join to the arguments");
    free(joined);
    json_decref(j);
}

// ---- forced calls whose markers are special tokens: harmony and granite ---------------------

/* A tiny random model whose vocabulary has harmony's and granite's special tokens (control
 * tokens; the tokenizer shows harmony's channel markup as text, as llama.cpp does). */
static const char *const SPECIAL_PIECES[] = {"<|channel|>", "<|constrain|>", "<|message|>", "<|call|>",
                                             "<|start|>",   "<|return|>",    "<|end|>",     "<|tool_call|>"};
static char special_model[128];

static const char HARMONY_TEMPLATE[] =
    "{% for m in messages %}<|start|>{{ m.role }}{% if m.tool_calls %}{% for tc in m.tool_calls %}<|channel|>commentary "
    "to=functions.{{ tc.function.name }} <|constrain|>json<|message|>{{ tc.function.arguments | tojson }}<|call|>"
    "{% endfor %}{% else %}<|message|>{{ m.content }}<|end|>{% endif %}{% endfor %}{% for t in tools %}"
    "{{ t.function.name }}{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}";
static const char GRANITE_TEMPLATE[] =
    "{% for m in messages %}<|start|>{{ m.role }}{% if m.tool_calls %}<|tool_call|>{{ m.tool_calls | tojson }}"
    "{% else %}{{ m.content }}{% endif %}<|end|>{% endfor %}{% for t in tools %}{{ t.function.name }}{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}";

static void special_server(const char *template, toolcall_format want) {
    tiny_spec sp = tiny_default("llama");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.seed = 29;
    sp.specials = SPECIAL_PIECES, sp.n_specials = (int)ATTND_ARRAY_LEN(SPECIAL_PIECES);
    tiny_tmpname(special_model, sizeof(special_model), "special");
    cr_assert_eq(tiny_write(special_model, &sp), 0);
    template_server(special_model, template, 120);
    cr_assert_eq(srv->chat.tool_format, want, "the template's call format");
}

static void harmony_setup(void) { special_server(HARMONY_TEMPLATE, TOOLCALL_FMT_HARMONY); }
static void granite_setup(void) { special_server(GRANITE_TEMPLATE, TOOLCALL_FMT_GRANITE); }
static void special_teardown(void) {
    r1_teardown();
    unlink(special_model);
}

TestSuite(harmony, .init = harmony_setup, .fini = special_teardown, .timeout = 120);
TestSuite(granite, .init = granite_setup, .fini = special_teardown, .timeout = 120);

/* tool_choice required on the random model: the reply is one call of "set" with arguments under
 * its schema, and the special tokens came as tokens: each of whole[] is one logprobs entry of its
 * own (harmony's markup, shown as text), or (whole NULL) a token without text came (granite's
 * control token). */
static void forced_special_call(const char *const *whole, int n_whole) {
    static const char BODY[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"temperature\": 0, "
                               "\"logprobs\": true, " CODER_TOOLS "}";
    json_t *j = post_json("/v1/chat/completions", BODY, 200);
    const json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    const json_t *msg = json_object_get(choice, "message");
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls", "%s", json_dumps(j, 0));
    const json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "name")), "set");
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    json_t *a = json_loads(args ? args : "", 0, NULL);
    cr_assert(json_is_integer(json_object_get(a, "n")) && json_is_boolean(json_object_get(a, "ok")), "arguments %s", args);
    json_decref(a);
    const json_t *lp = json_object_get(json_object_get(choice, "logprobs"), "content");
    int textless = 0, found = 0;
    buf text = {0};
    for (size_t i = 0; i < json_array_size(lp); i++) {
        const char *t = json_string_value(json_object_get(json_array_get(lp, i), "token"));
        textless += t && !t[0];
        for (int k = 0; k < n_whole; k++) found += t && !strcmp(t, whole[k]);
        buf_puts(&text, t ? t : "");
    }
    if (!whole) cr_assert_geq(textless, 1, "a special token without text was generated: %s", text.p);
    cr_assert_eq(found, n_whole, "each marker came as its own token: %s", text.p);
    cr_log_info("%d tokens, %d without text: %s", (int)json_array_size(lp), textless, text.p ? text.p : "");
    buf_free(&text);
    json_decref(j);
}

Test(harmony, a_forced_call_writes_the_channel_markup_as_tokens) {
    static const char *const MARKUP[] = {"<|channel|>", "<|constrain|>", "<|message|>"};
    forced_special_call(MARKUP, 3);
}

Test(granite, a_forced_call_opens_with_the_tool_call_token) { forced_special_call(NULL, 0); }

/* A GBNF grammar whose token terminal names no token of the model is refused with its name; one
 * that names tokens by id runs. */
Test(request, a_grammar_naming_an_unknown_token_is_refused) {
    rec c = {0};
    run(&c, "POST", "/completion", "{\"prompt\": \"Once\", \"n_predict\": 3, \"grammar\": \"root ::= <|nope|>\"}");
    cr_assert_geq(c.status, 400, "%d %s", c.status, c.body);
    cr_assert_lt(c.status, 500, "a client error: %d %s", c.status, c.body);
    cr_assert_not_null(strstr(c.body, "<|nope|>"), "%s", c.body);
    free(c.body);
    json_t *j = post_json("/completion", "{\"prompt\": \"Once\", \"n_predict\": 3, \"return_tokens\": true, "
                          "\"grammar\": \"root ::= <[2]> | [a-z ]+ <[5]>\"}", 200);
    cr_assert(json_is_array(json_object_get(j, "tokens")));
    json_decref(j);
}

// ---- Anthropic's Messages API and Ollama's API through the request layer ------------------------

Test(request, messages_take_x_api_key_and_answer_errors_in_anthropic_shape) {
    srv->cfg.api_key = "sekrit";
    const char *body = "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"Once\"}]}";
    rec a = {0};
    run(&a, "POST", "/v1/messages", body);
    json_t *j = json_of(&a);
    cr_assert_eq(a.status, 401);
    cr_assert_str_eq(json_string_value(json_object_get(j, "type")), "error");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")), "authentication_error");
    json_decref(j);
    free(a.body);
    rec ok = {.req_headers = {"x-api-key", "sekrit", "anthropic-version", "2023-06-01"}};
    run(&ok, "POST", "/v1/messages", body);
    cr_assert_eq(ok.status, 200, "%s", ok.body);
    j = json_of(&ok);
    cr_assert_str_eq(json_string_value(json_object_get(j, "type")), "message");
    cr_assert_str_eq(json_string_value(json_object_get(j, "stop_reason")), "max_tokens");
    json_decref(j);
    free(ok.body);
    srv->cfg.api_key = NULL;
    rec bad = {0};
    run(&bad, "POST", "/v1/messages", "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}]}");
    j = json_of(&bad);
    cr_assert_eq(bad.status, 400);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")), "invalid_request_error");
    json_decref(j);
    free(bad.body);
}

Test(request, a_streamed_message_is_anthropic_events_with_the_whole_answers_text) {
    const char *whole_body = "{\"max_tokens\": 12, \"temperature\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"Once\"}]}";
    json_t *whole = post_json("/v1/messages", whole_body, 200);
    rec c = {0};
    run(&c, "POST", "/v1/messages",
        "{\"max_tokens\": 12, \"temperature\": 0, \"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"Once\"}]}");
    cr_assert(c.streamed);
    cr_assert_not_null(strstr(c.headers, "Content-Type: text/event-stream"));
    cr_assert(strstr(c.body, "event: message_start\n") == c.body, "%.200s", c.body);
    cr_assert_not_null(strstr(c.body, "event: message_stop\n"));
    /* the text deltas join to the whole answer's text */
    char *text = calloc(1, strlen(c.body) + 1);
    for (const char *p = c.body; (p = strstr(p, "\"text_delta\",\"text\":")) != NULL; p++) {
        json_t *s = json_loadb(p + 20, strcspn(p + 20, "}"), JSON_DECODE_ANY, NULL);
        cr_assert(json_is_string(s));
        strcat(text, json_string_value(s));
        json_decref(s);
    }
    const char *want = json_string_value(json_object_get(json_array_get(json_object_get(whole, "content"), 0), "text"));
    cr_assert_str_eq(text, want ? want : "");
    free(text);
    free(c.body);
    json_decref(whole);
}

Test(request, ollama_streams_ndjson_and_answers_errors_as_ollama_does) {
    rec c = {0};
    run(&c, "POST", "/api/generate", "{\"model\": \"stories260K\", \"prompt\": \"Once\", \"raw\": true, \"options\": {\"num_predict\": 6}}");
    cr_assert_eq(c.status, 200, "%s", c.body);
    cr_assert(c.streamed);
    cr_assert_not_null(strstr(c.headers, "Content-Type: application/x-ndjson"), "%s", c.headers);
    int lines = 0;
    bool done = false;
    for (char *line = c.body, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1, lines++) {
        json_t *o = json_loadb(line, (size_t)(nl - line), 0, NULL);
        cr_assert(json_is_object(o), "line %d is not a JSON object", lines);
        cr_assert_not(done, "a line after the done line");
        done = json_is_true(json_object_get(o, "done"));
        json_decref(o);
    }
    cr_assert(done && lines >= 2, "%d lines", lines);
    free(c.body);
    json_t *e = post_json("/api/chat", "{\"model\": \"another\", \"messages\": []}", 404);
    cr_assert(json_is_string(json_object_get(e, "error")), "Ollama's {\"error\": \"...\"}");
    json_decref(e);
}

// ---- /infill: a model whose vocabulary has the fill-in-the-middle tokens ---------------------

Test(request, infill_on_a_model_without_fim_tokens_is_a_400_that_says_so) {
    rec c = {0};
    run(&c, "POST", "/infill", "{\"input_prefix\": \"def f(\", \"input_suffix\": \")\"}");
    cr_assert_eq(c.status, 400, "%s", c.body);
    cr_assert_not_null(strstr(c.body, "cannot fill in the middle"), "%s", c.body);
    free(c.body);
}

static const char *const FIM_PIECES[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>"};
static char fim_model[128];

static void fim_setup(void) {
    tiny_spec sp = tiny_default("llama");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.seed = 31;
    sp.specials = FIM_PIECES, sp.n_specials = (int)ATTND_ARRAY_LEN(FIM_PIECES);
    tiny_tmpname(fim_model, sizeof(fim_model), "fim");
    cr_assert_eq(tiny_write(fim_model, &sp), 0);
    attnd_err err;
    srv = rig_open(fim_model, NULL, 1, &err);
    cr_assert_not_null(srv, "%s", err.msg);
    srv->cfg.default_max_tokens = 8;
}

static void fim_teardown(void) {
    server_destroy(srv);
    unlink(fim_model);
}

TestSuite(fim, .init = fim_setup, .fini = fim_teardown, .timeout = 120);

/* The prompt /infill runs is the layout's (test_server_infill.c checks it token by token): the
 * answer is /completion's, whole and streamed alike. */
Test(fim, infill_runs_the_fim_prompt_as_a_completion_whole_and_streamed) {
    static const char BODY[] = "{\"input_prefix\": \"Once upon\", \"input_suffix\": \" the end.\", \"prompt\": \" a\", "
                               "\"input_extra\": [{\"filename\": \"a.txt\", \"text\": \"Lily\"}], \"n_predict\": 4, "
                               "\"temperature\": 0%s}";
    char body[512];
    snprintf(body, sizeof body, BODY, "");
    json_t *j = post_json("/infill", body, 200);
    json_t *in = json_loads(body, 0, NULL);
    infill_input ii;
    const char *param;
    attnd_err err;
    int32_t *ids;
    size_t n;
    cr_assert_eq(infill_parse(in, &ii, &param, &err), ATTND_OK);
    cr_assert_eq(infill_layout(srv->tok, &ii, srv->n_ctx, 4, &ids, &n, &err), ATTND_OK);
    cr_expect_eq(json_integer_value(json_object_get(j, "tokens_evaluated")), (json_int_t)n, "the FIM prompt's %zu tokens", n);
    cr_expect_eq(ids[n - 1], tok_fim(srv->tok, TOK_FIM_MID));
    const char *whole = json_string_value(json_object_get(j, "content"));
    cr_assert_not_null(whole);
    cr_expect(json_integer_value(json_object_get(j, "tokens_predicted")) <= 4);
    snprintf(body, sizeof body, BODY, ", \"stream\": true");
    rec c = {0};
    run(&c, "POST", "/infill", body);
    cr_assert_eq(c.status, 200);
    buf joined = {0};
    for (const char *p = c.body; (p = strstr(p, "data: {"));) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        const char *piece = json_string_value(json_object_get(ev, "content"));
        if (piece) buf_puts(&joined, piece);
        json_decref(ev);
        p = end;
    }
    cr_expect_str_eq(joined.p ? joined.p : "", whole, "streamed and whole agree");
    buf_free(&joined);
    free(c.body), free(ids);
    infill_input_free(&ii);
    json_decref(in), json_decref(j);
    expect_refused("/infill", "{\"input_prefix\": \"a\"}", 400, "input_suffix");
}

/* Ollama's /api/generate with a suffix runs the same layout (prompt as the prefix) as a raw
 * completion: the whole answer's prompt_eval_count is the layout's length, the NDJSON lines join
 * to it; on a model without FIM tokens it is a 400 in Ollama's shape. */
Test(fim, ollama_generate_with_a_suffix_runs_the_fim_prompt_whole_and_streamed) {
    static const char BODY[] = "{\"model\": \"%s\", \"prompt\": \"Lily went\", \"suffix\": \" home.\", \"system\": \"x\", "
                               "\"options\": {\"num_predict\": 4, \"temperature\": 0}, \"stream\": %s}";
    char body[512];
    snprintf(body, sizeof body, BODY, srv->model_id, "false");
    json_t *j = post_json("/api/generate", body, 200);
    infill_input in = {.prefix = "Lily went", .suffix = " home.", .prompt = ""};
    int32_t *ids;
    size_t n;
    attnd_err err;
    cr_assert_eq(infill_layout(srv->tok, &in, srv->n_ctx, 4, &ids, &n, &err), ATTND_OK);
    free(ids);
    cr_expect_eq(json_integer_value(json_object_get(j, "prompt_eval_count")), (json_int_t)n, "the FIM prompt's %zu tokens", n);
    const char *whole = json_string_value(json_object_get(j, "response"));
    cr_assert(whole && json_is_true(json_object_get(j, "done")), "%s", json_dumps(j, 0));
    cr_expect_leq(json_integer_value(json_object_get(j, "eval_count")), 4);
    snprintf(body, sizeof body, BODY, srv->model_id, "true");
    rec c = {0};
    run(&c, "POST", "/api/generate", body);
    cr_assert_eq(c.status, 200, "%s", c.body);
    buf joined = {0};
    json_t *last = NULL;
    for (char *line = c.body, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        json_decref(last);
        last = json_loadb(line, (size_t)(nl - line), 0, NULL);
        const char *piece = json_string_value(json_object_get(last, "response"));
        cr_assert_not_null(piece, "a line without a response: %.200s", line);
        buf_puts(&joined, piece);
    }
    cr_expect_str_eq(joined.p ? joined.p : "", whole, "streamed and whole agree");
    cr_expect(json_is_true(json_object_get(last, "done")));
    cr_expect_str_eq(json_string_value(json_object_get(last, "done_reason")), json_string_value(json_object_get(j, "done_reason")));
    json_decref(last), json_decref(j);
    buf_free(&joined), free(c.body);
}

Test(request, ollama_generate_with_a_suffix_on_a_model_without_fim_tokens_is_a_400) {
    json_t *e = post_json("/api/generate", "{\"model\": \"stories260K\", \"prompt\": \"a\", \"suffix\": \"b\"}", 400);
    const char *msg = json_string_value(json_object_get(e, "error"));
    cr_expect(msg && strstr(msg, "cannot fill in the middle") && strstr(msg, "prefix, suffix, middle"), "%s", msg);
    json_decref(e);
}

// ---- unknown fields: ignored, but named -----------------------------------------------------

Test(request, unknown_fields_are_named_in_a_warning_header_whole_and_streamed) {
    rec c = {0};
    run(&c, "POST", "/v1/chat/completions",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2, \"temprature\": 0.2}");
    cr_assert_eq(c.status, 200, "not refused: %s", c.body);
    cr_expect_not_null(strstr(c.headers, "Warning: 299 attnd \"unknown field ignored: temprature\"\n"), "%s", c.headers);
    free(c.body);
    c = (rec){0};
    run(&c, "POST", "/completion", "{\"prompt\": \"Once\", \"n_predict\": 2, \"stream\": true, \"ignore_eos\": true, \"n_keep\": 1}");
    cr_assert_eq(c.status, 200);
    cr_expect_not_null(strstr(c.headers, "unknown field ignored: n_keep\""), "%s", c.headers);
    free(c.body);
    c = (rec){0};
    run(&c, "POST", "/v1/completions", "{\"prompt\": \"Once\", \"max_tokens\": 2}");
    cr_expect_null(strstr(c.headers, "Warning"), "a clean request has no warning: %s", c.headers);
    free(c.body);
}

// ---- structured output that parses within max_tokens (issue 49) --------------------------------

/* json_object and a strict schema at budgets from 8 tokens (the schema's shortest answer,
 * {"n":0}, is 7 characters) at temperature 1: every answer parses, finish_reason "length" when
 * the budget closed it; close_within_budget false leaves it cut. */
Test(request, json_answers_close_within_max_tokens) {
    static const char SCHEMA[] = "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"strict\": true, "
                                 "\"schema\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}, \"required\": [\"n\"]}}}";
    static const char OBJECT[] = "\"response_format\": {\"type\": \"json_object\"}";
    int cut = 0;
    for (int mt = 8; mt <= 24; mt += 4)
        for (int k = 0; k < 2; k++) {
            char body[1024];
            snprintf(body, sizeof body,
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"max_tokens\": %d, \"temperature\": 1, "
                     "\"seed\": %d, %s}",
                     mt, mt + k, k ? OBJECT : SCHEMA);
            json_t *j = post_json("/v1/chat/completions", body, 200);
            const json_t *c = json_array_get(json_object_get(j, "choices"), 0);
            const char *content = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
            json_t *parsed = content ? json_loads(content, JSON_DECODE_ANY, NULL) : NULL;
            cr_expect_not_null(parsed, "max_tokens %d: %s", mt, content ? content : "(null)");
            cr_expect_leq(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), mt);
            json_decref(parsed);
            json_decref(j);
        }
    for (int seed = 0; seed < 3; seed++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"Once\"}], \"max_tokens\": 8, \"temperature\": 1, "
                 "\"seed\": %d, \"close_within_budget\": false, %s}",
                 seed, SCHEMA);
        json_t *j = post_json("/v1/chat/completions", body, 200);
        const char *content = json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content"));
        json_t *parsed = content ? json_loads(content, JSON_DECODE_ANY, NULL) : NULL;
        cut += parsed == NULL;
        json_decref(parsed);
        json_decref(j);
    }
    cr_expect_gt(cut, 0, "off, a budget of 8 cuts some answers (the check above is not vacuous)");
}
