/*
 * test_server_request.c — the request layer (server/api: http.c's checks and routes, the
 * endpoints, genreq.c, sse.c's stream loop and the writers) without a socket: each request runs
 * through http_req_run with a recorder as its transport (req_io), on a server whose model,
 * scheduler and stores are real (the stories260K fixture) but which never binds a port.
 *
 * What is checked: whole and streamed answers agree, the route table's 404/405, the checks before
 * the body (auth, body cap), validation errors, n > 1 choices, sessions, the Responses API's
 * store and follow-ups, and llama.cpp's /completion.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/engine.h"
#include "attnd/tokenizer.h"
#include "http.h"
#include "routes.h"

#define MODEL ATTND_DATA_DIR "/models/stories260K.gguf"

static struct server srv;

static void setup(void) {
    attnd_err err;
    server_settings_default(&srv.cfg);
    srv.routes = http_routes;
    srv.n_routes = http_n_routes;
    srv.cfg.threads = 1;
    srv.cfg.max_parallel = 4;
    srv.cfg.body_limit = 4096;
    srv.cfg.max_tokens_cap = 4096;
    srv.cfg.default_max_tokens = 8;
    cr_assert_eq(metrics_create(&srv.met, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(model_load(&srv.m, MODEL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&srv.tok, model_gguf(srv.m), &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_store_create(&srv.store, NULL, "t", 16, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(rstore_create(&srv.responses, NULL, "t", 16, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sched_create(&srv.sch, srv.m, srv.tok, srv.store, &srv.cfg, &err), ATTND_OK, "%s", err.msg);
    srv.model_id = "stories260K";
    srv.n_ctx = model_info_get(srv.m)->n_ctx;
    srv.n_vocab = model_info_get(srv.m)->n_vocab;
    atomic_store(&srv.ready, true);
}

static void teardown(void) {
    sched_destroy(srv.sch);
    rstore_destroy(srv.responses);
    sess_store_destroy(srv.store);
    tok_destroy(srv.tok);
    model_destroy(srv.m);
    metrics_destroy(srv.met);
    memset(&srv, 0, sizeof(srv));
}

TestSuite(request, .init = setup, .fini = teardown, .timeout = 120);

// ---- the recorder: a transport that keeps what the request layer sends ------------------

typedef struct rec {
    int status, replies;
    bool streamed, stream_error;
    char *body;                   /* (len) the answer's bytes, NUL-terminated */
    size_t len;
    char headers[2048];           /* "Name: value\n" each */
    const char *req_headers[8];   /* name, value pairs of the request */
    bool gone;                    /* the client has left (never, here: see test_server_scheduler) */
} rec;

static void rec_append(rec *c, const char *p, size_t n) {
    c->body = realloc(c->body, c->len + n + 1);
    cr_assert_not_null(c->body);
    memcpy(c->body + c->len, p, n);
    c->len += n;
    c->body[c->len] = '\0';
}

static void rec_headers(rec *c, const http_header *h, int n) {
    for (int i = 0; i < n; i++) {
        size_t l = strlen(c->headers);
        snprintf(c->headers + l, sizeof(c->headers) - l, "%s: %s\n", h[i].name, h[i].value);
    }
}

static enum MHD_Result rec_reply(req *r, int status, const char *body, size_t len, const http_header *h, int n) {
    rec *c = r->io->user;
    c->status = status;
    c->replies++;
    rec_headers(c, h, n);
    rec_append(c, body, len);
    return MHD_YES;
}

/* Drains the stream as libmicrohttpd would, on the request's thread. */
static enum MHD_Result rec_stream(req *r, int status, http_reader reader, void *cls, const http_header *h, int n) {
    rec *c = r->io->user;
    c->status = status;
    c->replies++;
    c->streamed = true;
    rec_headers(c, h, n);
    rec_append(c, "", 0);
    char chunk[512];
    uint64_t pos = 0;
    for (;;) {
        ssize_t got = reader(cls, pos, chunk, sizeof(chunk));
        if (got == MHD_CONTENT_READER_END_OF_STREAM) break;
        if (got == MHD_CONTENT_READER_END_WITH_ERROR) {
            c->stream_error = true;
            break;
        }
        cr_assert_geq(got, 0);
        rec_append(c, chunk, (size_t)got);
        pos += (uint64_t)got;
    }
    return MHD_YES;
}

static const char *rec_header(req *r, const char *name) {
    rec *c = r->io->user;
    for (int i = 0; i < 8 && c->req_headers[i]; i += 2)
        if (!strcasecmp(c->req_headers[i], name)) return c->req_headers[i + 1];
    return NULL;
}

static bool rec_gone(req *r) { return ((rec *)r->io->user)->gone; }

/* Runs method url with body (NULL = none) to its end; the answer is in *c (caller frees c->body). */
static void run(rec *c, const char *method, const char *url, const char *body) {
    req_io io = {rec_reply, rec_stream, rec_header, rec_gone, c};
    req *r = http_req_create(&srv, method, url, &io);
    cr_assert_not_null(r);
    http_req_run(r, body, body ? strlen(body) : 0);
    cr_assert_eq(c->replies, 1, "exactly one answer to %s %s (got %d)", method, url, c->replies);
    http_req_end(r, MHD_REQUEST_TERMINATED_COMPLETED_OK);
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
    srv.cfg.api_key = "sekrit";
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
    srv.cfg.api_key = NULL;
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
    j = post_json("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 0}", 400);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "param")), "n");
    json_decref(j);
    j = post_json("/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"many\"}", 400);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "param")), "max_tokens");
    json_decref(j);
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
    j = post_json("/v1/completions", "{\"prompt\": \"Once\", \"session_id\": \"nope\", " GREEDY "}", 404);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "param")), "session_id");
    json_decref(j);
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
    snprintf(body, sizeof(body), "{\"input\": \"and then\", \"previous_response_id\": \"%s\", \"max_output_tokens\": 4}",
             id);
    json_t *b = post_json("/v1/responses", body, 200);
    json_int_t cached = json_integer_value(
        json_object_get(json_object_get(json_object_get(b, "usage"), "input_tokens_details"), "cached_tokens"));
    cr_assert_gt(cached, 0, "the follow-up reuses the first turn's KV");
    json_decref(b);
    json_t *e = post_json("/v1/responses", "{\"input\": \"x\", \"previous_response_id\": \"resp_none\"}", 404);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(e, "error"), "param")),
                     "previous_response_id");
    json_decref(e);
    json_decref(a);
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
