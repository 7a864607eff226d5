/*
 * test_server_genreq.c — the generation request (server/api/genreq.c) on its own: no request
 * layer, no libmicrohttpd. A genreq is made over a loaded server's parts (the stories260K
 * fixture: model, tokenizer, scheduler, session store), given a parsed body as an endpoint
 * would, and driven step by step: its failures come back as an attnd_status and a genreq_err
 * (kind, message, the body field at fault), its jobs run on the real scheduler.
 *
 * The last suite pins genreq_http.c's table: how each kind of failure becomes an HTTP status.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "genreq.h"
#include "genreq_http.h"
#include "server_rig.h"

#define MODEL ATTND_DATA_DIR "/models/stories260K.gguf"

static struct server *srv;

static void setup(void) {
    attnd_err err;
    srv = rig_open(MODEL, NULL, 1, &err);
    cr_assert_not_null(srv, "%s", err.msg);
    srv->cfg.default_max_tokens = 8;
}

static void teardown(void) { server_destroy(srv); }

TestSuite(genreq, .init = setup, .fini = teardown, .timeout = 120);

/* A genreq over srv's parts, asked by who (NULL: an anonymous caller). */
static genreq *make(const genreq_who *who) {
    genreq_env env = {&srv->cfg, srv->m, srv->tok, &srv->chat, srv->store, srv->sch, srv->n_ctx, &srv->stopping,
                      srv->model_id, srv->n_vocab};
    genreq_who anon = {.owner = "", .request_id = "req-test", .tenant = "addr:test"};
    genreq *g = genreq_create(&env, who ? who : &anon);
    cr_assert_not_null(g);
    return g;
}

/* A genreq whose oreq is body (JSON text) parsed as the completions endpoint parses it. */
static genreq *parsed(const char *body, bool chat) {
    genreq *g = make(NULL);
    json_error_t je;
    g->body = json_loads(body, 0, &je);
    cr_assert_not_null(g->body, "%s", je.text);
    g->chat = chat;
    const char *param = NULL;
    attnd_err err;
    cr_assert_eq(oai_parse(g->body, chat, &srv->cfg, srv->n_vocab, &g->oreq, &param, &err), ATTND_OK, "%s", err.msg);
    return g;
}

static void finish(genreq *g) {
    genreq_end(g, true, "test");
    genreq_destroy(g);
}

Test(genreq, a_prompt_runs_to_its_max_tokens_and_counts_what_it_generated) {
    genreq *g = parsed("{\"prompt\": \"Once upon a time\", \"max_tokens\": 5, \"temperature\": 0, \"logit_bias\": {\"2\": -100}}",
                       false);
    genreq_err e = {0};
    cr_assert_eq(genreq_submit_all(g, &e), ATTND_OK, "%s", e.msg);
    cr_assert_eq(genreq_n_jobs(g), 1);
    cr_assert_gt(g->n_prompt, 1, "the prompt's tokens are counted");
    cr_assert(genreq_wait_all(g), "no client went away");
    sched_output o;
    sched_job_output(g->job, &o);
    cr_assert(o.done && o.status == ATTND_OK, "%s", o.errmsg);
    cr_assert_eq(o.n_prompt, g->n_prompt);
    cr_assert_eq(o.n_generated, 5);
    cr_assert_str_eq(o.finish_reason, "length");
    cr_assert(genreq_persist(g), "no session: nothing to save");
    cr_assert_eq(genreq_end(g, true, "test"), 5, "the end counts every generated token");
    cr_assert_not(g->cancelled, "a completed request cancels nothing");
    genreq_destroy(g);
}

Test(genreq, n_choices_of_a_prompt_read_it_once) {
    genreq *g = parsed("{\"prompt\": \"Once upon a time\", \"max_tokens\": 3, \"n\": 3, \"logit_bias\": {\"2\": -100}}", false);
    genreq_err e = {0};
    cr_assert_eq(genreq_submit_all(g, &e), ATTND_OK, "%s", e.msg);
    cr_assert_eq(genreq_n_jobs(g), 3);
    cr_assert(genreq_wait_all(g));
    completion_body_gen sum;
    genreq_usage_sum(g, &sum);
    sched_output o;
    sched_job_output(g->job, &o);
    cr_assert_eq(sum.n_prompt, o.n_prompt, "three choices, one prompt read");
    cr_assert_eq(sum.n_generated, 9);
    cr_assert_eq(sum.n_reasoning, -1, "not a chat reply");
    cr_assert_eq(genreq_end(g, true, "test"), 9);
    genreq_destroy(g);
}

Test(genreq, a_request_that_did_not_complete_cancels_every_job) {
    genreq *g = parsed("{\"prompt\": \"Once\", \"max_tokens\": 64, \"n\": 2, \"logit_bias\": {\"2\": -100}}", false);
    genreq_err e = {0};
    cr_assert_eq(genreq_submit_all(g, &e), ATTND_OK, "%s", e.msg);
    genreq_end(g, false, "test");
    cr_assert(g->cancelled);
    for (int k = 0; k < genreq_n_jobs(g); k++)
        cr_assert(sched_job_cancel(genreq_job(g, k)), "job %d was cancelled by the end", k);
    genreq_destroy(g);
}

Test(genreq, an_empty_prompt_is_a_bad_request_naming_the_prompt_field) {
    genreq *g = make(NULL);
    genreq_err e = {0};
    int max_tokens = 0;
    cr_assert_eq(genreq_fit_context(g, 0, &max_tokens, &e), ATTND_ERR_INVALID);
    cr_assert_eq(e.fail, GENREQ_BAD_REQUEST);
    cr_assert_str_eq(e.param, "prompt");
    cr_assert_eq(max_tokens, -1);
    g->chat = true;
    genreq_fit_context(g, 0, &max_tokens, &e);
    cr_assert_str_eq(e.param, "messages", "chat names its messages");
    g->prompt_param = "input";
    genreq_fit_context(g, 0, &max_tokens, &e);
    cr_assert_str_eq(e.param, "input", "an API names its own field");
    finish(g);
}

Test(genreq, a_prompt_filling_the_context_is_too_long_with_openais_code) {
    genreq *g = make(NULL);
    g->oreq.max_tokens = -1;
    genreq_err e = {0};
    int max_tokens;
    cr_assert_eq(genreq_fit_context(g, (size_t)srv->n_ctx, &max_tokens, &e), ATTND_ERR_INVALID);
    cr_assert_eq(e.fail, GENREQ_TOO_LONG);
    cr_assert_str_eq(e.code, "context_length_exceeded");
    cr_assert_not_null(strstr(e.msg, "maximum context length"), "%s", e.msg);
    /* max_tokens 0 needs no room: the same prompt fits */
    g->oreq.max_tokens = 0;
    cr_assert_eq(genreq_fit_context(g, (size_t)srv->n_ctx, &max_tokens, &e), ATTND_OK);
    cr_assert_eq(max_tokens, 0);
    finish(g);
}

Test(genreq, max_tokens_is_clamped_to_the_room_left) {
    genreq *g = make(NULL);
    genreq_err e = {0};
    int max_tokens;
    g->oreq.max_tokens = 100;
    cr_assert_eq(genreq_fit_context(g, (size_t)srv->n_ctx - 3, &max_tokens, &e), ATTND_OK);
    cr_assert_eq(max_tokens, 3);
    g->oreq.max_tokens = -1; /* not given: the server's default */
    cr_assert_eq(genreq_fit_context(g, 4, &max_tokens, &e), ATTND_OK);
    cr_assert_eq(max_tokens, srv->cfg.default_max_tokens);
    finish(g);
}

Test(genreq, an_unknown_session_says_how_to_create_it_and_hints_at_the_header_behind_a_proxy) {
    genreq *g = make(NULL);
    g->oreq.session_id = "nowhere";
    genreq_err e = {0};
    sess *se = (sess *)1;
    cr_assert_eq(genreq_acquire_session(g, &se, &e), ATTND_ERR_NOT_FOUND);
    cr_assert_null(se);
    cr_assert_eq(e.fail, GENREQ_SESSION);
    cr_assert_str_eq(e.param, "session_id");
    cr_assert_not_null(strstr(e.msg, "create it first with POST /v1/sessions {\"id\": \"nowhere\"}"), "%s", e.msg);
    cr_assert_null(strstr(e.msg, "X-Session-Id"), "one server, no proxy: no balancer hint (%s)", e.msg);
    finish(g);
    /* instances sharing sessions through a store stand behind a balancer: the hint */
    srv->cfg.session_store = "redis://127.0.0.1:1";
    g = make(NULL);
    g->oreq.session_id = "nowhere";
    genreq_acquire_session(g, &se, &e);
    srv->cfg.session_store = NULL;
    cr_assert_not_null(strstr(e.msg, "X-Session-Id"), "a store: the hint (%s)", e.msg);
    finish(g);
    /* a proxy sent the header for another id: the hint */
    genreq_who other = {.owner = "", .request_id = "r", .tenant = "t", .session_header = "elsewhere"};
    g = make(&other);
    g->oreq.session_id = "nowhere";
    genreq_acquire_session(g, &se, &e);
    cr_assert_not_null(strstr(e.msg, "X-Session-Id"), "another id in the header: the hint (%s)", e.msg);
    finish(g);
    /* a proxy that saw the id in the header routed it right: no hint */
    genreq_who who = {.owner = "", .request_id = "r", .tenant = "t", .session_header = "nowhere"};
    g = make(&who);
    g->oreq.session_id = "nowhere";
    genreq_acquire_session(g, &se, &e);
    cr_assert_null(strstr(e.msg, "X-Session-Id"), "%s", e.msg);
    finish(g);
}

Test(genreq, a_malformed_session_id_is_a_bad_request) {
    genreq *g = make(NULL);
    g->oreq.session_id = "no spaces/allowed";
    genreq_err e = {0};
    sess *se;
    cr_assert_eq(genreq_acquire_session(g, &se, &e), ATTND_ERR_INVALID);
    cr_assert_eq(e.fail, GENREQ_BAD_REQUEST);
    cr_assert_str_eq(e.param, "session_id");
    finish(g);
}

Test(genreq, a_session_is_held_by_one_turn_at_a_time) {
    char made[SESS_ID_MAX + 1];
    attnd_err err;
    cr_assert_eq(sess_create(srv->store, "", "story", made, &err), ATTND_OK, "%s", err.msg);
    genreq *g = parsed("{\"prompt\": \"Once\", \"session_id\": \"story\"}", false);
    genreq *other = parsed("{\"prompt\": \"Once\", \"session_id\": \"story\"}", false);
    genreq_err e = {0};
    sess *se, *se2;
    cr_assert_eq(genreq_acquire_session(g, &se, &e), ATTND_OK, "%s", e.msg);
    cr_assert_str_eq(g->sess_id, "story");
    cr_assert_eq(genreq_acquire_session(other, &se2, &e), ATTND_ERR_BUSY, "the session is busy with g's turn");
    cr_assert_eq(e.fail, GENREQ_SESSION);
    cr_assert_str_eq(e.param, "session_id");
    sess_abandon(srv->store, se);
    g->sess_id[0] = '\0';
    finish(g);
    /* a whole turn on it: submitted, done, saved, and the session is free again */
    g = parsed("{\"prompt\": \"Once\", \"max_tokens\": 2, \"session_id\": \"story\"}", false);
    cr_assert_eq(genreq_submit_all(g, &e), ATTND_OK, "%s", e.msg);
    cr_assert(genreq_wait_all(g));
    cr_assert(genreq_persist(g), "no state directory: nothing to make durable");
    finish(g);
    cr_assert_eq(genreq_acquire_session(other, &se2, &e), ATTND_OK, "free again after the turn: %s", e.msg);
    sess_abandon(srv->store, se2);
    other->sess_id[0] = '\0';
    finish(other);
}

Test(genreq, ablate_refuses_what_it_cannot_be_combined_with) {
    genreq *g = parsed("{\"prompt\": \"Once\", \"n\": 2, \"ablate\": [{\"layer\": 0, \"head\": 0, \"scale\": 0}]}", false);
    genreq_err e = {0};
    cr_assert_eq(genreq_submit_all(g, &e), ATTND_ERR_INVALID);
    cr_assert_eq(e.fail, GENREQ_BAD_REQUEST);
    cr_assert_str_eq(e.param, "n");
    cr_assert_eq(genreq_n_jobs(g), 0, "nothing was submitted");
    finish(g);
}

Test(genreq, a_token_id_prompt_is_taken_as_given) {
    genreq *g = parsed("{\"prompt\": [1, 400, 401], \"max_tokens\": 1}", false);
    int32_t *ids;
    size_t n;
    genreq_err e = {0};
    cr_assert_eq(genreq_prompt_tokens(g, 0, &ids, &n, &e), ATTND_OK, "%s", e.msg);
    cr_assert_eq(n, 3);
    cr_assert(ids[0] == 1 && ids[1] == 400 && ids[2] == 401);
    free(ids);
    finish(g);
}

// ---- genreq_http.c: a failure's HTTP status ----------------------------------------------

Test(genreq_http, each_kind_of_failure_has_its_status) {
    struct {
        genreq_fail fail;
        attnd_status st;
        bool no_space;
        int want;
    } rows[] = {
        {GENREQ_BAD_REQUEST, ATTND_ERR_INVALID, false, 400},
        {GENREQ_TOO_LONG, ATTND_ERR_INVALID, false, 400},
        {GENREQ_SESSION, ATTND_ERR_NOT_FOUND, false, 404},
        {GENREQ_SESSION, ATTND_ERR_BUSY, false, 409},
        {GENREQ_SESSION, ATTND_ERR_IO, false, 503},
        {GENREQ_OVERLOADED, ATTND_ERR_BUSY, false, 429},
        {GENREQ_OVERLOADED, ATTND_ERR_NOMEM, false, 503},
        {GENREQ_STOPPING, ATTND_ERR_BUSY, false, 503},
        {GENREQ_UNSAVED, ATTND_ERR_IO, true, 507},
        {GENREQ_UNSAVED, ATTND_ERR_BUSY, false, 409},
        {GENREQ_UNSAVED, ATTND_ERR_IO, false, 503},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        genreq_err e = {.fail = rows[i].fail, .st = rows[i].st, .no_space = rows[i].no_space};
        cr_assert_eq(genreq_http_status(&e), rows[i].want, "row %zu: %d, want %d", i, genreq_http_status(&e),
                     rows[i].want);
    }
}
