/*
 * test_server_attn_api.c — attention inspection on the server side, on the shipped model
 * (models/attnd-sotu.gguf, no shared fixtures): the request fields (server/api/attn_api.c) and their
 * errors, the size cap and its message, the response JSON built from a capture, and inspection
 * jobs in the scheduler — their rows equal a direct capture's, a session's reused prefix has no
 * rows, and a plain job batched next to an inspecting one gets exactly the tokens it gets alone.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attn_api.h"
#include "attnd/engine.h"
#include "family_specs.h"
#include "sched_rig.h"

#define MODEL ATTND_SOURCE_DIR "/models/attnd-sotu.gguf"

static model *m;
static tokenizer *tok;

static void setup(void) { sched_rig_load(MODEL, &m, &tok); }

static void teardown(void) {
    tok_destroy(tok);
    model_destroy(m);
    tok = NULL, m = NULL;
}

TestSuite(attn_api, .init = setup, .fini = teardown, .timeout = 120);

static attnd_status parse(const char *body, attn_api_request *r, const char **param) {
    json_t *b = json_loads(body, 0, NULL);
    cr_assert_not_null(b, "bad test JSON %s", body);
    attnd_err err;
    attnd_status st = attn_api_parse(b, r, param, &err);
    json_decref(b);
    return st;
}

// ---- request fields -------------------------------------------------------------------------

Test(attn_api, selection_fields_are_read_and_default_to_everything) {
    attn_api_request r;
    const char *param;
    cr_assert_eq(parse("{\"layers\": [3, 1], \"heads\": 2, \"top_k\": 5}", &r, &param), ATTND_OK);
    cr_assert_eq(r.n_layers, 2);
    cr_assert_eq(r.layers[0], 3);
    cr_assert_eq(r.layers[1], 1);
    cr_assert_eq(r.n_heads, 1, "one index is a one-element list");
    cr_assert_eq(r.heads[0], 2);
    cr_assert_eq(r.top_k, 5);
    attn_capture_params p = attn_api_params(&r, 9);
    cr_assert_eq(p.n_positions, 9);
    cr_assert_eq(p.layers, r.layers);
    attn_api_request_free(&r);
    cr_assert_eq(parse("{\"layers\": null, \"prompt\": \"x\"}", &r, &param), ATTND_OK);
    cr_assert_null(r.layers);
    cr_assert_null(r.heads);
    cr_assert_eq(r.top_k, 0);
    cr_assert_eq(r.weights, ATTN_WEIGHTS_ATTENTION);
    cr_assert_eq(r.lens_k, 0);
    attn_api_request_free(&r);
    cr_assert_eq(parse("{\"weights\": \"norm\", \"logit_lens\": 3}", &r, &param), ATTND_OK);
    p = attn_api_params(&r, 4);
    cr_assert_eq(p.weights, ATTN_WEIGHTS_NORM);
    cr_assert_eq(p.lens_k, 3);
    cr_assert(!p.experts);
    attn_api_request_free(&r);
    cr_assert_eq(parse("{\"experts\": true}", &r, &param), ATTND_OK);
    cr_assert(attn_api_params(&r, 4).experts);
    attn_api_request_free(&r);
}

Test(attn_api, malformed_fields_are_refused_naming_them) {
    static const struct { const char *body, *param; } bad[] = {
        {"{\"layers\": []}", "layers"},       {"{\"layers\": \"all\"}", "layers"}, {"{\"layers\": [1.5]}", "layers"},
        {"{\"heads\": [-1]}", "heads"},       {"{\"heads\": [true]}", "heads"},    {"{\"top_k\": -3}", "top_k"},
        {"{\"top_k\": \"5\"}", "top_k"},
        {"{\"weights\": \"value\"}", "weights"}, {"{\"weights\": 1}", "weights"},
        {"{\"logit_lens\": -1}", "logit_lens"}, {"{\"logit_lens\": \"3\"}", "logit_lens"},
        {"{\"experts\": 1}", "experts"},      {"{\"experts\": \"yes\"}", "experts"},
    };
    for (size_t i = 0; i < ATTND_ARRAY_LEN(bad); i++) {
        attn_api_request r;
        const char *param = NULL;
        cr_assert_eq(parse(bad[i].body, &r, &param), ATTND_ERR_INVALID, "%s accepted", bad[i].body);
        cr_assert_str_eq(param, bad[i].param, "%s", bad[i].body);
        attn_api_request_free(&r);
    }
}

Test(attn_api, the_cap_refuses_a_larger_ask_and_says_how_to_narrow_it) {
    const model_info *mi = model_info_get(m); /* 6 layers x 4 heads */
    attn_capture_params p = {.n_positions = 10};    /* 24 x 55 = 1320 weights */
    const char *param;
    attnd_err err;
    cr_assert_eq(attn_api_check(mi, &p, 1320, 0, &param, &err), ATTND_OK);
    cr_assert_eq(attn_api_check(mi, &p, 0, 0, &param, &err), ATTND_OK, "0 = no cap");
    cr_assert_eq(attn_api_check(mi, &p, 1319, 0, &param, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(param, "layers");
    for (const char *w = "1320\0001319\0attention_max_weights\0layers\0heads\0top_k\0"; *w; w += strlen(w) + 1)
        cr_assert(strstr(err.msg, w), "'%s' missing from: %s", w, err.msg);
    int one = 1;
    p.layers = &one, p.n_layers = 1;
    cr_assert_eq(attn_api_check(mi, &p, 100, 0, &param, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(param, "heads", "the next field that narrows");
    p.heads = &one, p.n_heads = 1;
    cr_assert_eq(attn_api_check(mi, &p, 55, 0, &param, &err), ATTND_OK);
    int seven = 7;
    p.heads = &seven;
    cr_assert_eq(attn_api_check(mi, &p, 0, 0, &param, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(param, "heads");
    cr_assert(strstr(err.msg, "0..3"), "%s", err.msg);
}

Test(attn_api, the_byte_cap_refuses_an_answer_too_long_to_send_and_names_it) {
    const model_info *mi = model_info_get(m);
    attn_capture_params p = {.n_positions = 10}; /* 1320 weights */
    const char *param;
    attnd_err err;
    uint64_t bytes = attn_api_bytes(mi, &p);
    cr_assert_geq(bytes, 1320 * 12, "every weight at its longest (%llu)", (unsigned long long)bytes);
    cr_assert_eq(attn_api_check(mi, &p, 0, bytes, &param, &err), ATTND_OK);
    cr_assert_eq(attn_api_check(mi, &p, 0, bytes - 1, &param, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "attention_max_bytes"), "%s", err.msg);
    cr_assert_str_eq(param, "layers");
    p.top_k = 2; /* fewer weights, but each a [position, weight] pair */
    cr_assert_gt(attn_api_bytes(mi, &p) / attn_capture_count(mi, &p), bytes / 1320, "a pair costs more than a weight");
}

// ---- response -------------------------------------------------------------------------------

/* Evaluates ids on a fresh sequence with a capture of p; returns the capture. */
static attn_capture *capture_run_on(model *m, const int32_t *ids, int n, attn_capture_params p) {
    attnd_err err;
    engine *e;
    kv_pool *pool;
    kv_seq *s;
    attn_capture *c;
    cr_assert_eq(engine_create(&e, m, 64, 1, &err), ATTND_OK);
    cr_assert_eq(kv_pool_create(&pool, m, (size_t)16 << 20, KV_F16, &err), ATTND_OK);
    cr_assert_eq(kv_seq_create(&s, pool, &err), ATTND_OK);
    cr_assert_eq(attn_capture_create(&c, m, &p, &err), ATTND_OK, "%s", err.msg);
    batch_entry b[64];
    for (int i = 0; i < n; i++) b[i] = (batch_entry){s, ids[i], i, false};
    attn_capture *list = NULL;
    attn_capture_link(&list, c, s);
    cr_assert_eq(attn_capture_eval(list, e, b, n, NULL, &err), ATTND_OK, "%s", err.msg);
    kv_seq_destroy(s);
    kv_pool_destroy(pool);
    engine_destroy(e);
    return c;
}

static attn_capture *capture_run(const int32_t *ids, int n, attn_capture_params p) { return capture_run_on(m, ids, n, p); }

/* The text written straight from the capture (what the server sends) is the same JSON, weight
 * for weight and to the digit, as the tree's (what the CLI prints). */
static void expect_same_text(const json_t *tree, const attn_capture *c, const int32_t *ids, int n_ids, int n_prompt) {
    json_t *head = attn_api_head("sotu", model_info_get(m), tok, ids, n_ids, n_prompt, c);
    size_t len = 0;
    char *text = attn_api_dump_with(head, c, &len), *want = attn_api_dump(tree);
    cr_assert_not_null(text);
    cr_assert_eq(len, strlen(text));
    json_error_t je;
    json_t *back = json_loads(text, 0, &je), *want_tree = json_loads(want, 0, &je);
    cr_assert_not_null(back, "%s: %.200s", je.text, text);
    cr_assert(json_equal(back, want_tree), "the same JSON");
    cr_assert_eq(strlen(want), len, "the same text length");
    cr_assert(strstr(text, "\"attention\":[") && strstr(want, "\"attention\":["));
    cr_assert_str_eq(strstr(text, "\"attention\":["), strstr(want, "\"attention\":["), "the weights to the digit");
    free(text), free(want);
    json_decref(want_tree);
    json_decref(back), json_decref(head);
}

Test(attn_api, response_lists_tokens_and_causal_rows) {
    int32_t ids[] = {1, 571, 262, 545};
    int layer = 2;
    attn_capture *c = capture_run(ids, 4, (attn_capture_params){.layers = &layer, .n_layers = 1, .n_positions = 4});
    json_t *body = attn_api_response("sotu", model_info_get(m), tok, ids, 4, 3, c);
    cr_assert_not_null(body);
    cr_assert_str_eq(json_string_value(json_object_get(body, "object")), "attention");
    cr_assert_str_eq(json_string_value(json_object_get(body, "model")), "sotu");
    cr_assert_eq(json_integer_value(json_object_get(body, "n_layer")), 6);
    cr_assert_eq(json_integer_value(json_object_get(body, "n_head")), 4);
    cr_assert_eq(json_integer_value(json_object_get(body, "n_prompt")), 3);
    cr_assert_eq(json_integer_value(json_object_get(body, "first_row")), 0);
    json_t *toks = json_object_get(body, "tokens");
    cr_assert_eq(json_array_size(toks), 4);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(toks, 0), "text")), "<s>");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(toks, 3), "text")), " people");
    json_t *att = json_object_get(body, "attention");
    cr_assert_eq(json_array_size(att), 4, "every head of layer 2");
    for (size_t h = 0; h < 4; h++) {
        json_t *a = json_array_get(att, h);
        cr_assert_eq(json_integer_value(json_object_get(a, "layer")), 2);
        cr_assert_eq(json_integer_value(json_object_get(a, "head")), (json_int_t)h);
        json_t *rows = json_object_get(a, "weights");
        cr_assert_eq(json_array_size(rows), 4);
        for (size_t i = 0; i < 4; i++) {
            json_t *row = json_array_get(rows, i);
            cr_assert_eq(json_array_size(row), i + 1, "row %zu is causal", i);
            double sum = 0;
            for (size_t j = 0; j <= i; j++) sum += json_real_value(json_array_get(row, j));
            cr_assert(fabs(sum - 1) < 1e-5, "row %zu sums to %f", i, sum);
        }
    }
    char *text = attn_api_dump(body);
    cr_assert(strstr(text, "\"weights\":[[1.0],["), "%.200s", text);
    cr_assert_null(strstr(text, "0000000"), "weights are written with %d digits", ATTN_API_DIGITS);
    free(text);
    expect_same_text(body, c, ids, 4, 3);
    json_decref(body);
    attn_capture_destroy(c);
}

Test(attn_api, top_k_rows_are_position_weight_pairs) {
    int32_t ids[] = {1, 571, 262, 545, 270};
    int head = 1;
    attn_capture *c = capture_run(ids, 5, (attn_capture_params){.heads = &head, .n_heads = 1, .top_k = 2, .n_positions = 5});
    json_t *body = attn_api_response("sotu", model_info_get(m), tok, ids, 5, 5, c);
    json_t *att = json_object_get(body, "attention");
    cr_assert_eq(json_array_size(att), 6, "every layer, head 1");
    json_t *rows = json_object_get(json_array_get(att, 0), "weights");
    for (size_t i = 0; i < 5; i++) {
        json_t *row = json_array_get(rows, i);
        cr_assert_eq(json_array_size(row), i < 2 ? i + 1 : 2);
        for (size_t k = 0; k < json_array_size(row); k++) {
            json_t *pair = json_array_get(row, k);
            cr_assert_eq(json_array_size(pair), 2);
            json_int_t pos = json_integer_value(json_array_get(pair, 0));
            cr_assert(pos >= 0 && pos <= (json_int_t)i);
        }
    }
    expect_same_text(body, c, ids, 5, 5);
    json_decref(body);
    attn_capture_destroy(c);
}

Test(attn_api, norm_weights_and_the_logit_lens_are_in_the_answer) {
    int32_t ids[] = {1, 571, 262, 545, 270};
    int layers[] = {5, 1};
    attn_capture_params p = {.layers = layers, .n_layers = 2, .n_positions = 5, .weights = ATTN_WEIGHTS_NORM,
                             .lens_k = 3};
    attn_capture *c = capture_run(ids, 5, p);
    json_t *body = attn_api_response("sotu", model_info_get(m), tok, ids, 5, 5, c);
    cr_assert_not_null(body);
    cr_assert_str_eq(json_string_value(json_object_get(body, "weights")), "norm");
    json_t *lens = json_object_get(body, "logit_lens");
    cr_assert_eq(json_array_size(lens), 2, "one entry per selected layer");
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(lens, 0), "layer")), 5);
    json_t *top = json_object_get(json_array_get(lens, 1), "top");
    cr_assert_eq(json_array_size(top), 5, "a row per position");
    for (size_t i = 0; i < 5; i++) {
        json_t *row = json_array_get(top, i);
        cr_assert_eq(json_array_size(row), 3);
        double prev = 1;
        for (size_t k = 0; k < 3; k++) {
            double pk = json_real_value(json_array_get(json_array_get(row, k), 1));
            cr_assert(pk > 0 && pk <= prev, "most probable first");
            prev = pk;
        }
    }
    json_t *rows = json_object_get(json_array_get(json_object_get(body, "attention"), 0), "weights");
    double sum = 0;
    for (size_t j = 0; j < 5; j++) sum += json_real_value(json_array_get(json_array_get(rows, 4), j));
    cr_assert(fabs(sum - 1) < 1e-5, "norm rows are normalised (%f)", sum);
    expect_same_text(body, c, ids, 5, 5);
    json_decref(body);
    attn_capture_destroy(c);
    attn_capture_params q = p;
    q.lens_k = model_info_get(m)->n_vocab + 1;
    const char *param;
    attnd_err err;
    cr_assert_eq(attn_api_check(model_info_get(m), &q, 0, 0, &param, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(param, "logit_lens");
}

/* "experts": true on a Mixture-of-Experts model (the generated qwen3moe of tests/family_specs.h:
 * 8 experts, 2 a token): per selected layer, a row per position of its 2 distinct experts,
 * heaviest first, weights summing to 1, in the tree and in the text the server sends alike. The
 * shipped model is dense: a 400 naming "experts". */
Test(attn_api, experts_are_in_the_answer_of_a_moe_model_and_refused_on_a_dense_one) {
    tiny_spec sp = family_small("qwen3moe");
    char path[256];
    tiny_tmpname(path, sizeof(path), "moe");
    cr_assert_eq(tiny_write(path, &sp), 0);
    attnd_err err;
    model *mm;
    tokenizer *mt;
    sched_rig_load(path, &mm, &mt);
    int32_t ids[] = {1, 40, 77, 300, 12, 5};
    int layers[] = {1}, heads[] = {0};
    attn_capture_params p = {.layers = layers, .n_layers = 1, .heads = heads, .n_heads = 1, .n_positions = 6,
                             .experts = true};
    const char *param;
    cr_assert_eq(attn_api_check(model_info_get(mm), &p, 0, 0, &param, &err), ATTND_OK, "%s", err.msg);
    attn_capture *c = capture_run_on(mm, ids, 6, p);
    json_t *body = attn_api_response("moe", model_info_get(mm), mt, ids, 6, 6, c);
    json_t *ex = json_object_get(body, "experts");
    cr_assert_eq(json_array_size(ex), 1, "one entry per selected layer");
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(ex, 0), "layer")), 1);
    json_t *routes = json_object_get(json_array_get(ex, 0), "routes");
    cr_assert_eq(json_array_size(routes), 6, "a row per position");
    for (size_t i = 0; i < 6; i++) {
        json_t *row = json_array_get(routes, i);
        cr_assert_eq(json_array_size(row), 2);
        json_int_t a = json_integer_value(json_array_get(json_array_get(row, 0), 0));
        json_int_t b = json_integer_value(json_array_get(json_array_get(row, 1), 0));
        double wa = json_real_value(json_array_get(json_array_get(row, 0), 1));
        double wb = json_real_value(json_array_get(json_array_get(row, 1), 1));
        cr_assert(a >= 0 && a < 8 && b >= 0 && b < 8 && a != b, "experts %lld, %lld", (long long)a, (long long)b);
        cr_assert(wa >= wb && wb > 0, "heaviest first: %g, %g", wa, wb);
        cr_assert(fabs(wa + wb - 1) < 1e-5, "weights sum to 1: %g", wa + wb);
    }
    json_t *head = attn_api_head("moe", model_info_get(mm), mt, ids, 6, 6, c);
    size_t len;
    char *text = attn_api_dump_with(head, c, &len), *want = attn_api_dump(body);
    cr_assert_str_eq(text, want, "the text the server sends is the tree's");
    free(text), free(want);
    json_decref(head), json_decref(body);
    attn_capture_destroy(c);
    tok_destroy(mt);
    model_destroy(mm);
    unlink(path);
    cr_assert_eq(attn_api_check(model_info_get(m), &p, 0, 0, &param, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(param, "experts");
    cr_assert(strstr(err.msg, "dense"), "%s", err.msg);
}

// ---- inspection jobs in the scheduler ---------------------------------------------------------

static sched_job *job(const int32_t *ids, int n, int max_tokens, attn_capture *cap, sess *se) {
    sched_job_spec spec = {.n_prompt = n, .max_tokens = max_tokens, .top_logprobs = -1, .capture = cap, .se = se};
    spec.prompt = malloc(sizeof(int32_t) * (size_t)n);
    memcpy(spec.prompt, ids, sizeof(int32_t) * (size_t)n);
    sampler_params_default(&spec.sp);
    spec.sp.temperature = 0;
    sched_job *j;
    cr_assert_eq(sched_job_create(&j, &spec, NULL), ATTND_OK);
    cr_assert_null(spec.capture, "the capture was taken over");
    return j;
}

static sched_output run_to_end(sched_job *j) {
    sched_update u;
    do sched_job_wait(j, 1000, &u);
    while (!u.done);
    sched_output o;
    sched_job_output(j, &o);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    return o;
}

/* A one-thread scheduler over the test model with an in-memory session store. */
typedef struct rig {
    sess_store *store;
    sched *sch;
} rig;

static void rig_open(rig *r) {
    server_settings cfg;
    attnd_err err;
    cr_assert_eq(sess_store_create(&r->store, NULL, "t", 8, &err), ATTND_OK);
    server_settings_default(&cfg);
    cfg.threads = 1;
    r->sch = sched_rig_start(m, tok, r->store, &cfg);
}

static void rig_close(rig *r) {
    sched_destroy(r->sch);
    sess_store_destroy(r->store);
}

/* Submits j to r and runs it to the end (successfully). */
static sched_output run_job(rig *r, sched_job *j) {
    cr_assert_eq(sched_submit(r->sch, j, NULL), ATTND_OK);
    return run_to_end(j);
}

Test(attn_api, scheduler_jobs_record_rows_and_leave_other_jobs_alone) {
    rig r;
    rig_open(&r);
    attnd_err err;
    int32_t a[] = {1, 571, 262, 545, 270, 262, 502}, b[] = {1, 321, 364, 1480};
    /* b alone, then b batched with an inspecting job: the same tokens */
    sched_job *alone = job(b, 4, 12, NULL, NULL);
    sched_output oa = run_job(&r, alone);
    cr_assert_null(oa.capture);
    attn_capture_params p = {.n_positions = 7 + 5};
    attn_capture *cap;
    cr_assert_eq(attn_capture_create(&cap, m, &p, &err), ATTND_OK);
    sched_job *insp = job(a, 7, 5, cap, NULL), *beside = job(b, 4, 12, NULL, NULL);
    cr_assert_eq(sched_submit(r.sch, insp, NULL), ATTND_OK);
    cr_assert_eq(sched_submit(r.sch, beside, NULL), ATTND_OK);
    sched_output oi = run_to_end(insp), ob = run_to_end(beside);
    cr_assert_eq(ob.n_pieces, 12);
    for (int i = 0; i < 12; i++) cr_assert_eq(ob.pieces[i].id, oa.pieces[i].id, "token %d changed next to inspection", i);
    /* the inspecting job: every position but the last generated one has its row */
    cr_assert_eq(oi.capture, cap);
    int first, n = attn_capture_rows(cap, &first);
    cr_assert_eq(first, 0);
    cr_assert_eq(n, 7 + 5 - 1);
    /* a prompt-only inspection (max_tokens 0) still evaluates the prompt, even when cached */
    attn_capture *cap2;
    p.n_positions = 7;
    cr_assert_eq(attn_capture_create(&cap2, m, &p, &err), ATTND_OK);
    sched_job *again = job(a, 7, 0, cap2, NULL);
    sched_output o2 = run_job(&r, again);
    cr_assert_eq(o2.n_cached, 0, "an anonymous inspection reuses nothing: every row is computed");
    cr_assert_eq(attn_capture_rows(cap2, &first), 7);
    const float *w1, *w2;
    for (int pos = 0; pos < 7; pos++) {
        int len = attn_capture_row(cap, 3, 2, pos, &w1, NULL);
        attn_capture_row(cap2, 3, 2, pos, &w2, NULL);
        for (int j = 0; j < len; j++) cr_assert_float_eq(w1[j], w2[j], 1e-6, "row %d differs between runs", pos);
    }
    sched_job_unref(alone), sched_job_unref(insp), sched_job_unref(beside), sched_job_unref(again);
    rig_close(&r);
}

Test(attn_api, a_session_reuses_its_prefix_and_rows_start_after_it) {
    rig r;
    rig_open(&r);
    attnd_err err;
    sess *se;
    char id[SESS_ID_MAX + 1];
    cr_assert_eq(sess_create(r.store, NULL, "s1", id, &err), ATTND_OK, "%s", err.msg);
    int32_t turn1[] = {1, 571, 262, 545}, turn2[] = {1, 571, 262, 545, 270, 262, 502, 443};
    cr_assert_eq(sess_acquire(r.store, NULL, "s1", &se, &err), ATTND_OK);
    sched_job *j1 = job(turn1, 4, 2, NULL, se); /* evaluates (and caches) the prompt */
    run_job(&r, j1);
    cr_assert_eq(sess_acquire(r.store, NULL, "s1", &se, &err), ATTND_OK);
    attn_capture *cap;
    attn_capture_params p = {.n_positions = 8};
    cr_assert_eq(attn_capture_create(&cap, m, &p, &err), ATTND_OK);
    sched_job *j2 = job(turn2, 8, 0, cap, se);
    sched_output o = run_job(&r, j2);
    cr_assert_gt(o.n_cached, 0, "the session's prefix is reused");
    int first, n = attn_capture_rows(cap, &first);
    cr_assert_eq(first, o.n_cached);
    cr_assert_eq(first + n, 8);
    sched_job_unref(j1), sched_job_unref(j2);
    rig_close(&r);
}

Test(attn_api, a_hybrid_models_answer_marks_deltanet_rows_and_both_writers_agree) {
    hy_spec hs = hybrid_small("qwen35"); /* layers 0-2 Gated DeltaNet (32 value heads), 3 attention (16) */
    char path[256];
    tiny_tmpname(path, sizeof(path), "q35api");
    cr_assert_eq(hy_write(path, &hs), 0);
    model *mm;
    tokenizer *mt;
    sched_rig_load(path, &mm, &mt);
    int32_t ids[] = {260, 270, 280, 290, 300};
    int layers[] = {2, 3}, heads[] = {1};
    attn_capture_params p = {.layers = layers, .n_layers = 2, .heads = heads, .n_heads = 1, .n_positions = 5,
                             .deltanet = true};
    attnd_err err;
    const char *param;
    cr_assert_eq(attn_api_check(model_info_get(mm), &p, 0, 0, &param, &err), ATTND_OK, "%s", err.msg);
    attn_capture *c = capture_run_on(mm, ids, 5, p);
    json_t *body = attn_api_response("q35", model_info_get(mm), mt, ids, 5, 5, c);
    cr_assert_eq(json_integer_value(json_object_get(body, "n_value_heads")), 32);
    cr_assert_eq(json_integer_value(json_object_get(body, "full_attention_interval")), 4);
    json_t *att = json_object_get(body, "attention"), *dn = json_array_get(att, 0), *sm = json_array_get(att, 1);
    cr_assert_eq(json_array_size(att), 2);
    cr_assert_str_eq(json_string_value(json_object_get(dn, "kind")), "deltanet");
    cr_assert(json_is_true(json_object_get(dn, "effective")));
    cr_assert_eq(json_integer_value(json_object_get(dn, "from")), 0);
    cr_assert_str_eq(json_string_value(json_object_get(sm, "kind")), "attention");
    cr_assert_null(json_object_get(sm, "effective"));
    json_t *head = attn_api_head("q35", model_info_get(mm), mt, ids, 5, 5, c);
    size_t len;
    char *text = attn_api_dump_with(head, c, &len), *want = attn_api_dump(body);
    cr_assert(strstr(want, "e-"), "a weight below 1e-4 (written with an exponent, as jansson does: 4.9e-6)");
    cr_assert_str_eq(text, want, "the text the server sends is the tree's");
    free(text), free(want);
    json_decref(head), json_decref(body);
    attn_capture_destroy(c);
    p.deltanet = false; /* what other inspections ask: refused, naming the model */
    cr_assert_eq(attn_api_check(model_info_get(mm), &p, 0, 0, &param, &err), ATTND_ERR_UNSUPPORTED);
    cr_assert_str_eq(param, "model");
    tok_destroy(mt);
    model_destroy(mm);
    unlink(path);
}
