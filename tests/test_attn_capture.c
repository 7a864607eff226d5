/*
 * test_attn_capture.c — attention capture (attnd/attn_capture.h): the weights recorded during
 * prefill, chunked prefill and generation equal an independent float64 forward pass within 1e-3
 * (F32 KV cache), rows are causal and sum to 1, top_k keeps the largest weights, only the bound
 * sequence of a batch is recorded and nothing else changes, reused (cached) positions have no
 * rows, the experts of a MoE model are the reference's routing, and bad selections are refused
 * naming the field. Encoders (bert, nomic-bert, gemma-embedding): rows both ways, each input of an
 * engine_embed call over its own tokens, equal to a float64 forward within 1e-4. A hybrid model's
 * Gated DeltaNet layers: the effective rows equal the float64 formula (explicit products of the
 * decays and (I - beta k k^T)) and reconstruct the recurrence's output from its values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/attn_capture.h"
#include "attnd/engine.h"
#include "attnd/sampler.h"
#include "engine_rig.h"
#include "hybrid_fixture.h"

/* The fixture of arch with 3 layers, F32 caches. */
static void rig_open(tiny_rig *r, const char *arch, int max_batch) {
    tiny_spec sp = tiny_default(arch);
    sp.n_layer = 3;
    tiny_rig_open(r, &sp, KV_F32, max_batch);
}

/* Evaluates tokens[0..n) onto s in chunks of `chunk` entries (no logits wanted). */
static void feed(engine *e, kv_seq *s, const int32_t *tokens, int n, int chunk) {
    batch_entry b[64];
    attnd_err err;
    for (int done = 0; done < n;) {
        int c = n - done < chunk ? n - done : chunk, pos0 = kv_seq_len(s);
        for (int i = 0; i < c; i++) b[i] = (batch_entry){s, tokens[done + i], pos0 + i, false};
        cr_assert_eq(engine_eval(e, b, c, NULL, &err), ATTND_OK, "%s", err.msg);
        done += c;
    }
}

/* Evaluates tokens[0..n) onto s in chunks with c bound to s and hooked into e. */
static void feed_captured(engine *e, attn_capture *c, kv_seq *s, const int32_t *tokens, int n, int chunk) {
    attn_capture_bind(c, s);
    attn_hook h;
    attn_hook_install(&h, e, c, NULL, 0);
    feed(e, s, tokens, n, chunk);
    attn_hook_remove(&h);
}

/* Largest |capture - reference| over rows [first, first + n) of every selected (layer, head);
 * also asserts each row's length and sum. ref: (n_layer, n_head, n_tok, n_tok). */
static double worst_vs_reference(const attn_capture *c, const double *ref, int n_head, int n_tok, int first, int n) {
    double worst = 0;
    for (int li = 0; li < attn_capture_n_layers(c); li++)
        for (int hi = 0; hi < attn_capture_n_heads(c); hi++)
            for (int p = first; p < first + n; p++) {
                const float *w;
                const int32_t *ix;
                int len = attn_capture_row(c, li, hi, p, &w, &ix);
                cr_assert_eq(len, p + 1, "row %d has %d weights", p, len);
                cr_assert_null(ix);
                const double *rr = ref + (((size_t)attn_capture_layer(c, li) * n_head + attn_capture_head(c, hi)) *
                                              n_tok + p) * n_tok;
                double sum = 0;
                for (int j = 0; j <= p; j++) {
                    sum += w[j];
                    worst = fmax(worst, fabs(w[j] - rr[j]));
                }
                cr_assert(fabs(sum - 1) < 1e-5, "row %d sums to %.8f", p, sum);
            }
    return worst;
}

static double *reference(const tiny_rig *r, const int32_t *tok, int n) {
    double *logits = malloc(sizeof(double) * (size_t)n * r->sp.n_vocab);
    double *attn = malloc(sizeof(double) * (size_t)r->sp.n_layer * r->sp.n_head * n * n);
    ref_forward_attn(&r->sp, r->path, tok, n, logits, attn);
    free(logits);
    return attn;
}

/* Rows [first, first + n) of c are within 1e-3 of the float64 reference of r's model over
 * tok[0..n_tok). */
static void expect_reference_rows(const tiny_rig *r, const attn_capture *c, const int32_t *tok, int n_tok, int first,
                                  int n, const char *what) {
    double *ref = reference(r, tok, n_tok);
    double worst = worst_vs_reference(c, ref, r->sp.n_head, n_tok, first, n);
    cr_assert(worst <= 1e-3, "%s: max |capture - float64 reference| = %g", what, worst);
    free(ref);
}

// ---- values against the float64 reference -------------------------------------------------------

static void check_prefill(const char *arch) {
    tiny_rig r;
    rig_open(&r, arch, 32);
    enum { N = 150 }; /* > 2 KV blocks, in chunks of 32: queries of later chunks read earlier ones */
    int32_t tok[N];
    tiny_random_tokens(tok, N, r.sp.n_vocab, 11);
    attn_capture *c;
    attnd_err err;
    attn_capture_params p = {.n_positions = N}; /* every layer and head */
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK, "%s", err.msg);
    feed_captured(r.e, c, tiny_rig_seq(&r), tok, N, 32);
    int first, n = attn_capture_rows(c, &first);
    cr_assert_eq(first, 0);
    cr_assert_eq(n, N);
    cr_assert_eq(attn_capture_n_layers(c), r.sp.n_layer);
    cr_assert_eq(attn_capture_n_heads(c), r.sp.n_head);
    expect_reference_rows(&r, c, tok, N, 0, N, arch);
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

Test(attn_capture, llama_weights_equal_float64_reference_within_1e3) { check_prefill("llama"); }
Test(attn_capture, qwen2_grouped_heads_equal_float64_reference_within_1e3) { check_prefill("qwen2"); }

static int32_t greedy(void *user, const float *logits) {
    (void)user;
    return sampler_argmax(logits, 48);
}

Test(attn_capture, generation_rows_follow_the_prompt_and_match_reference) {
    tiny_rig r;
    rig_open(&r, "llama", 16);
    enum { NP = 20, NG = 12 };
    int32_t all[NP + NG];
    tiny_random_tokens(all, NP, r.sp.n_vocab, 5);
    int layers[] = {2, 0}, heads[] = {3};
    attn_capture_params p = {.layers = layers, .n_layers = 2, .heads = heads, .n_heads = 1, .n_positions = NP + NG};
    attn_capture *c;
    attnd_err err;
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(attn_capture_layer(c, 0), 2);
    cr_assert_eq(attn_capture_layer(c, 1), 0);
    cr_assert_eq(attn_capture_head(c, 0), 3);
    kv_seq *s = tiny_rig_seq(&r);
    attn_capture_bind(c, s);
    attn_hook h;
    attn_hook_install(&h, r.e, c, NULL, 0);
    engine_gen g = {.n_predict = NG, .pick = greedy};
    int n_out;
    cr_assert_eq(engine_generate(r.e, s, all, NP, &g, all + NP, &n_out, NULL, &err), ATTND_OK, "%s", err.msg);
    attn_hook_remove(&h);
    cr_assert_eq(n_out, NG);
    /* Every evaluated position has a row: the prompt and each generated token but the last,
     * which is never fed back. */
    int first, n = attn_capture_rows(c, &first);
    cr_assert_eq(first, 0);
    cr_assert_eq(n, NP + NG - 1);
    expect_reference_rows(&r, c, all, NP + NG, 0, n, "generation");
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

// ---- top_k ------------------------------------------------------------------------------------------

Test(attn_capture, top_k_keeps_the_largest_weights_heaviest_first) {
    tiny_rig r;
    rig_open(&r, "llama", 128);
    enum { N = 40, K = 5 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, r.sp.n_vocab, 3);
    attn_capture_params pw = {.n_positions = N}, pk = {.top_k = K, .n_positions = N};
    attn_capture *caps[2];
    attnd_err err;
    cr_assert_eq(attn_capture_create(&caps[0], r.m, &pw, &err), ATTND_OK);
    cr_assert_eq(attn_capture_create(&caps[1], r.m, &pk, &err), ATTND_OK);
    kv_seq *a = tiny_rig_seq(&r), *b = tiny_rig_seq(&r);
    attn_capture *list = NULL; /* both sequences in one batch, each capture bound to its own */
    attn_capture_link(&list, caps[0], a);
    attn_capture_link(&list, caps[1], b);
    batch_entry batch[2 * N];
    for (int i = 0; i < N; i++) {
        batch[i] = (batch_entry){a, tok[i], i, false};
        batch[N + i] = (batch_entry){b, tok[i], i, false};
    }
    cr_assert_eq(attn_capture_eval(list, r.e, batch, 2 * N, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(attn_capture_top_k(caps[1]), K);
    for (int li = 0; li < r.sp.n_layer; li++)
        for (int hi = 0; hi < r.sp.n_head; hi++)
            for (int p = 0; p < N; p++) {
                const float *w, *wk;
                const int32_t *ix;
                attn_capture_row(caps[0], li, hi, p, &w, NULL);
                int nk = attn_capture_row(caps[1], li, hi, p, &wk, &ix);
                cr_assert_eq(nk, p + 1 < K ? p + 1 : K);
                for (int i = 0; i < nk; i++) {
                    cr_assert(ix[i] >= 0 && ix[i] <= p);
                    cr_assert_eq(wk[i], w[ix[i]], "pair %d of row %d is not the row's weight", i, p);
                    if (i) cr_assert(wk[i - 1] >= wk[i], "row %d not heaviest first", p);
                    for (int j = 0; j < i; j++) cr_assert_neq(ix[j], ix[i]);
                }
                /* nothing left out is heavier than the lightest kept */
                for (int j = 0; j <= p; j++) {
                    bool kept = false;
                    for (int i = 0; i < nk; i++) kept |= ix[i] == j;
                    if (!kept) cr_assert(w[j] <= wk[nk - 1], "row %d dropped a heavier weight", p);
                }
            }
    attn_capture_destroy(caps[0]), attn_capture_destroy(caps[1]);
    tiny_rig_close(&r);
}

// ---- isolation -------------------------------------------------------------------------------------

Test(attn_capture, only_the_bound_sequence_is_recorded_and_results_do_not_change) {
    tiny_rig r;
    rig_open(&r, "llama", 128);
    enum { N = 24 };
    int32_t ta[N], tb[N];
    tiny_random_tokens(ta, N, r.sp.n_vocab, 21);
    tiny_random_tokens(tb, N, r.sp.n_vocab, 22);
    int V = r.sp.n_vocab;
    float *plain = malloc(sizeof(float) * 2 * N * V), *hooked = malloc(sizeof(float) * 2 * N * V);
    attnd_err err;
    attn_capture_params p = {.n_positions = N};
    attn_capture *c;
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK);
    for (int run = 0; run < 2; run++) {
        kv_seq *a = tiny_rig_seq(&r), *b = tiny_rig_seq(&r);
        batch_entry batch[2 * N]; /* interleaved: a0 b0 a1 b1 ... */
        for (int i = 0; i < N; i++) {
            batch[2 * i] = (batch_entry){a, ta[i], i, true};
            batch[2 * i + 1] = (batch_entry){b, tb[i], i, true};
        }
        attn_capture *list = NULL;
        if (run) attn_capture_link(&list, c, b);
        cr_assert_eq(attn_capture_eval(list, r.e, batch, 2 * N, run ? hooked : plain, &err), ATTND_OK, "%s", err.msg);
    }
    cr_assert_eq(memcmp(plain, hooked, sizeof(float) * 2 * N * V), 0, "capturing changed the logits");
    int first, n = attn_capture_rows(c, &first);
    cr_assert_eq(n, N);
    expect_reference_rows(&r, c, tb, N, 0, N, "b's rows"); /* the rows are b's, not a's */
    free(plain), free(hooked);
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

Test(attn_capture, reused_positions_have_no_rows) {
    tiny_rig r;
    rig_open(&r, "llama", 16);
    enum { N = 30, CACHED = 12 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, r.sp.n_vocab, 8);
    attnd_err err;
    kv_seq *s = tiny_rig_seq(&r);
    feed(r.e, s, tok, CACHED, 16); /* a session's earlier turn, evaluated without inspection */
    int heads[] = {1};
    attn_capture_params p = {.heads = heads, .n_heads = 1, .n_positions = N};
    attn_capture *c;
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK);
    feed_captured(r.e, c, s, tok + CACHED, N - CACHED, 16);
    int first, n = attn_capture_rows(c, &first);
    cr_assert_eq(first, CACHED);
    cr_assert_eq(n, N - CACHED);
    expect_reference_rows(&r, c, tok, N, first, n, "rows after the cached prefix");
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

// ---- norm-weighted attention and the logit lens against the float64 reference ------------------

/* Largest |norm row - reference| over every (layer, head, position): the reference's α_ij times
 * its ‖W_O^h v_j‖, normalised over j. Also asserts the norm rows differ from the raw ones
 * somewhere by more than the tolerance (else the test would not tell them apart). */
static double worst_norm_vs_reference(const attn_capture *c, const double *attn, const double *vnorm, int H, int n) {
    double worst = 0, apart = 0;
    for (int li = 0; li < attn_capture_n_layers(c); li++)
        for (int hi = 0; hi < attn_capture_n_heads(c); hi++)
            for (int p = 0; p < n; p++) {
                const float *w;
                cr_assert_eq(attn_capture_row(c, li, hi, p, &w, NULL), p + 1);
                size_t lh = (size_t)attn_capture_layer(c, li) * H + attn_capture_head(c, hi);
                const double *a = attn + (lh * n + p) * n, *vn = vnorm + lh * n;
                double sum = 0;
                for (int j = 0; j <= p; j++) sum += a[j] * vn[j];
                for (int j = 0; j <= p; j++) {
                    worst = fmax(worst, fabs(w[j] - a[j] * vn[j] / sum));
                    apart = fmax(apart, fabs(w[j] - a[j]));
                }
            }
    cr_assert(apart > 1e-2, "norm-weighted rows equal the raw ones (max difference %g)", apart);
    return worst;
}

static void check_norm(const char *arch, int chunk) {
    tiny_rig r;
    rig_open(&r, arch, 32);
    enum { N = 90 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, r.sp.n_vocab, 5);
    attn_capture *c;
    attnd_err err;
    int heads[] = {3, 1}; /* out of order: the norms are computed on the lowest selected head */
    attn_capture_params p = {.heads = heads, .n_heads = 2, .n_positions = N, .weights = ATTN_WEIGHTS_NORM};
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK, "%s", err.msg);
    feed_captured(r.e, c, tiny_rig_seq(&r), tok, N, chunk);
    size_t L = (size_t)r.sp.n_layer, H = (size_t)r.sp.n_head;
    double *logits = malloc(sizeof(double) * N * r.sp.n_vocab), *attn = malloc(sizeof(double) * L * H * N * N);
    double *vnorm = malloc(sizeof(double) * L * H * N);
    ref_forward_ex(&r.sp, r.path, tok, N, logits, &(ref_extra){.attn = attn, .vnorm = vnorm});
    double worst = worst_norm_vs_reference(c, attn, vnorm, r.sp.n_head, N);
    cr_assert(worst <= 1e-3, "%s: max |norm weight - float64 reference| = %g", arch, worst);
    free(logits), free(attn), free(vnorm);
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

Test(attn_capture, norm_weights_equal_float64_reference_within_1e3) { check_norm("llama", 32); }
Test(attn_capture, norm_weights_of_grouped_heads_token_by_token_equal_reference) { check_norm("qwen2", 1); }

/* The lens of every (layer, position) against the reference's softmax of its lens logits: each
 * reported probability within 1e-3 of the reference's for that id, most probable first, and no
 * token left out more probable than the last one reported. */
static void expect_lens_reference(const attn_capture *c, const double *lens, int n, int V, int k) {
    double *pr = malloc(sizeof(double) * (size_t)V);
    for (int li = 0; li < attn_capture_n_layers(c); li++)
        for (int p = 0; p < n; p++) {
            const double *lg = lens + ((size_t)attn_capture_layer(c, li) * n + p) * V;
            double mx = -INFINITY, z = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, lg[v]);
            for (int v = 0; v < V; v++) z += pr[v] = exp(lg[v] - mx);
            const float *w;
            const int32_t *ids;
            cr_assert_eq(attn_capture_lens(c, li, p, &w, &ids), k);
            for (int i = 0; i < k; i++) {
                cr_assert(fabs(w[i] - pr[ids[i]] / z) <= 1e-3, "layer %d pos %d: token %d p=%g, reference %g", li, p,
                          ids[i], w[i], pr[ids[i]] / z);
                if (i) cr_assert(w[i] <= w[i - 1]);
                pr[ids[i]] = -1; /* reported */
            }
            for (int v = 0; v < V; v++) cr_assert(pr[v] / z <= w[k - 1] + 1e-3, "token %d was left out", v);
        }
    free(pr);
}

Test(attn_capture, logit_lens_equals_float64_reference_within_1e3) {
    tiny_rig r;
    rig_open(&r, "qwen3", 32);
    enum { N = 40, K = 5 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, r.sp.n_vocab, 9);
    attn_capture *c;
    attnd_err err;
    int layers[] = {2, 0};
    attn_capture_params p = {.layers = layers, .n_layers = 2, .n_positions = N, .lens_k = K};
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK, "%s", err.msg);
    feed_captured(r.e, c, tiny_rig_seq(&r), tok, N, 16);
    size_t V = (size_t)r.sp.n_vocab;
    double *logits = malloc(sizeof(double) * N * V), *lens = malloc(sizeof(double) * r.sp.n_layer * N * V);
    ref_forward_ex(&r.sp, r.path, tok, N, logits, &(ref_extra){.lens = lens});
    expect_lens_reference(c, lens, N, (int)V, K);
    /* the last layer's lens is the model's own next-token distribution */
    cr_assert_eq(memcmp(lens + (size_t)2 * N * V, logits, sizeof(double) * N * V), 0);
    free(logits), free(lens);
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

/* MoE (qwen3moe, 8 experts, top 3): the experts each selected layer routed each position to, in
 * a chunked prefill and then a token decoded alone, are the float64 reference's, heaviest first,
 * with its weights within 1e-4. */
Test(attn_capture, experts_equal_float64_reference_routing) {
    tiny_spec sp = tiny_default("qwen3moe");
    sp.n_layer = 3, sp.n_expert = 8, sp.n_expert_used = 3, sp.n_ff_exp = 24, sp.head_dim = 16, sp.rope_dims = 16;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 16);
    enum { N = 30, K = 3 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, sp.n_vocab, 4);
    attn_capture *c;
    attnd_err err;
    int layers[] = {2, 0}, heads[] = {1};
    attn_capture_params p = {.layers = layers, .n_layers = 2, .heads = heads, .n_heads = 1, .n_positions = N,
                             .experts = true};
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(attn_capture_n_experts(c), K);
    kv_seq *s = tiny_rig_seq(&r);
    feed_captured(r.e, c, s, tok, N - 1, 7);
    feed_captured(r.e, c, s, tok + N - 1, 1, 1); /* decode: one token, its own pass */
    int first, n = attn_capture_rows(c, &first);
    cr_assert_eq(n, N);
    int *ref = malloc(sizeof(int) * sp.n_layer * N * K);
    double *ref_w = malloc(sizeof(double) * sp.n_layer * N * K), *logits = malloc(sizeof(double) * N * sp.n_vocab);
    ref_forward_ex(&sp, r.path, tok, N, logits, &(ref_extra){.experts = ref, .expert_w = ref_w});
    for (int li = 0; li < 2; li++)
        for (int pos = 0; pos < N; pos++) {
            const int32_t *ids;
            const float *w;
            cr_assert_eq(attn_capture_experts(c, li, pos, &ids, &w), K);
            size_t at = ((size_t)layers[li] * N + pos) * K;
            for (int k = 0; k < K; k++) {
                cr_assert_eq(ids[k], ref[at + k], "layer %d position %d: expert %d, reference %d", layers[li], pos,
                             ids[k], ref[at + k]);
                cr_assert(fabs(w[k] - ref_w[at + k]) < 1e-4, "layer %d position %d: weight %g, reference %g",
                          layers[li], pos, w[k], ref_w[at + k]);
            }
        }
    free(ref), free(ref_w), free(logits);
    attn_capture_destroy(c);
    /* off unless asked: no experts kept, and the engine's hook is not installed */
    p.experts = false;
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(attn_capture_n_experts(c), 0);
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

// ---- bad selections and sizes ----------------------------------------------------------------------

Test(attn_capture, bad_selections_are_refused_naming_the_field) {
    tiny_rig r;
    rig_open(&r, "llama", 4);
    const model_info *mi = model_info_get(r.m);
    attnd_err err;
    const char *field;
    int bad_layer[] = {0, 3}, twice[] = {1, 1}, bad_head[] = {4}, neg[] = {-1};
    attn_capture_params p = {.layers = bad_layer, .n_layers = 2, .n_positions = 8};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "layers");
    cr_assert(strstr(err.msg, "3") && strstr(err.msg, "0..2"), "%s", err.msg);
    p = (attn_capture_params){.layers = twice, .n_layers = 2, .n_positions = 8};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "layers");
    cr_assert(strstr(err.msg, "twice"), "%s", err.msg);
    p = (attn_capture_params){.heads = bad_head, .n_heads = 1, .n_positions = 8};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "heads");
    p = (attn_capture_params){.heads = neg, .n_heads = 1, .n_positions = 8};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "heads");
    p = (attn_capture_params){.top_k = -2, .n_positions = 8};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "top_k");
    p = (attn_capture_params){.n_positions = mi->n_ctx + 1};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "n_positions");
    attn_capture *c = (attn_capture *)&r; /* must be reset to NULL on failure */
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_ERR_INVALID);
    cr_assert_null(c);
    p = (attn_capture_params){.n_positions = 8, .weights = (attn_weights)7};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "weights");
    p = (attn_capture_params){.n_positions = 8, .lens_k = mi->n_vocab + 1};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "logit_lens");
    p = (attn_capture_params){.n_positions = 8, .experts = true}; /* llama: dense */
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "experts");
    cr_assert(strstr(err.msg, "dense") && strstr(err.msg, "llama"), "%s", err.msg);
    p = (attn_capture_params){.n_positions = 8};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_OK);
    cr_assert_null(field);
    tiny_rig_close(&r);
}

Test(attn_capture, count_is_layers_times_heads_times_row_lengths) {
    model_info mi = {.n_layer = 6, .n_head = 4, .n_ctx = 256};
    int layers[] = {1, 2}, heads[] = {0};
    attn_capture_params p = {.n_positions = 10};
    cr_assert_eq(attn_capture_count(&mi, &p), 6u * 4u * 55u);
    p = (attn_capture_params){.layers = layers, .n_layers = 2, .heads = heads, .n_heads = 1, .n_positions = 10};
    cr_assert_eq(attn_capture_count(&mi, &p), 2u * 55u);
    p.top_k = 3; /* rows of 1, 2, 3, then 3 each */
    cr_assert_eq(attn_capture_count(&mi, &p), 2u * (1 + 2 + 3 + 7 * 3));
    p.top_k = 50; /* larger than any row */
    cr_assert_eq(attn_capture_count(&mi, &p), 2u * 55u);
}

Test(attn_capture, a_truncated_and_extended_sequence_gets_its_new_rows) {
    tiny_rig r;
    rig_open(&r, "llama", 16);
    enum { N = 28, KEEP = 10 };
    int32_t first_try[N], tok[N];
    tiny_random_tokens(first_try, N, r.sp.n_vocab, 31);
    tiny_random_tokens(tok, N, r.sp.n_vocab, 32);
    memcpy(tok, first_try, sizeof(int32_t) * KEEP); /* the same first KEEP tokens, then others */
    attnd_err err;
    kv_seq *s = tiny_rig_seq(&r);
    int layers[] = {1};
    attn_capture_params p = {.layers = layers, .n_layers = 1, .n_positions = N};
    attn_capture *c;
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK);
    attn_capture_bind(c, s);
    attn_hook h;
    attn_hook_install(&h, r.e, c, NULL, 0);
    feed(r.e, s, first_try, N, 16);
    kv_seq_truncate(s, KEEP); /* as the scheduler keeps a session's common prefix */
    feed(r.e, s, tok + KEEP, N - KEEP, 16);
    attn_hook_remove(&h);
    int first, n = attn_capture_rows(c, &first);
    cr_assert_eq(first, 0);
    cr_assert_eq(n, N);
    expect_reference_rows(&r, c, tok, N, 0, N, "the final sequence");
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

// ---- encoders: rows both ways, each input over its own tokens ---------------------------------

#include "attnd/embed.h"
#include "encoder_fixture.h"

/* An encoder file of sp (bert: encoder_fixture.h's tensors; gemma-embedding: engine_fixture.h's),
 * loaded, with an engine of max_batch entries (inputs beyond it run in further passes). */
static void enc_open(const tiny_spec *sp, char *path, size_t n, model **m, engine **e, int max_batch) {
    tiny_tmpname(path, n, "encattn");
    cr_assert_eq(enc_write(path, sp), 0);
    attnd_err err = {0};
    cr_assert_eq(model_load(m, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(e, *m, max_batch, 2, &err), ATTND_OK, "%s", err.msg);
}

/* engine_embed of in[0..n) with c hooked (entries = NULL, as the server and the CLI do). */
static void embed_captured(engine *e, attn_capture *c, const embed_input *in, int n, int n_embd) {
    int total = 0;
    for (int i = 0; i < n; i++) total += in[i].n_tokens;
    float *out = malloc(sizeof(float) * (size_t)total * (size_t)n_embd);
    attn_hook h;
    attn_hook_install(&h, e, c, NULL, 0);
    attnd_err err = {0};
    cr_assert_eq(engine_embed_tokens(e, in, n, out, &err), ATTND_OK, "%s", err.msg);
    attn_hook_remove(&h);
    free(out);
}

/* Every row of c (every layer and head) against the float64 weights of each input alone:
 * (n_layer, n_head, len, len) per input from ref(i). Rows cover their own input's tokens only. */
typedef void (*enc_ref_fn)(const tiny_spec *sp, const char *path, const embed_input *in, double *attn);

static void check_encoder_rows(const tiny_spec *sp, const char *path, const attn_capture *c, const embed_input *in,
                               int n, enc_ref_fn ref) {
    int L = sp->n_layer, H = sp->n_head, first, total = 0;
    for (int i = 0; i < n; i++) total += in[i].n_tokens;
    cr_assert_eq(attn_capture_rows(c, &first), total);
    cr_assert_eq(first, 0);
    cr_assert_eq(attn_capture_n_inputs(c), n);
    double worst = 0;
    for (int i = 0, start = 0; i < n; start += in[i].n_tokens, i++) {
        int len = in[i].n_tokens, f0;
        cr_assert_eq(attn_capture_input(c, i, &f0), len);
        cr_assert_eq(f0, start);
        double *attn = malloc(sizeof(double) * (size_t)L * H * len * len);
        ref(sp, path, &in[i], attn);
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < len; t++) {
                    const float *w;
                    const int32_t *ix;
                    int k0, nk = attn_capture_keys(c, start + t, &k0);
                    cr_assert(nk == len && k0 == start, "row %d: keys %d..%d, input %d..%d", start + t, k0, k0 + nk,
                              start, start + len);
                    cr_assert_eq(attn_capture_row(c, l, h, start + t, &w, &ix), len);
                    cr_assert_null(ix);
                    for (int j = 0; j < len; j++) {
                        double d = fabs(w[j] - attn[(((size_t)l * H + h) * len + t) * len + j]);
                        worst = d > worst ? d : worst;
                        cr_assert(d < 1e-4, "input %d l%d h%d row %d key %d: off by %g", i, l, h, t, j, d);
                    }
                }
        free(attn);
    }
    cr_log_info("encoder rows: largest difference from float64 %.3g", worst);
}

static void bert_ref(const tiny_spec *sp, const char *path, const embed_input *in, double *attn) {
    double *x = malloc(sizeof(double) * (size_t)in->n_tokens * sp->n_embd);
    eref_forward(sp, path, in->tokens, in->types, in->n_tokens, x, attn);
    free(x);
}

static void gemma_ref(const tiny_spec *sp, const char *path, const embed_input *in, double *attn) {
    double *lg = malloc(sizeof(double) * (size_t)in->n_tokens * sp->n_vocab);
    ref_forward_attn(sp, path, in->tokens, in->n_tokens, lg, attn);
    free(lg);
}

static const int32_t EA[9] = {1, 300, 17, 45, 260, 301, 99, 8, 2}, EB[5] = {1, 270, 280, 290, 2}, EC[1] = {1};

/* bert and nomic-bert (RoPE at each input's own positions): three inputs in two passes
 * (max_batch 10: 9 | 5 + 1), every row over its own input's tokens, equal to the float64 forward
 * of that input alone within 1e-4. */
static void check_several_inputs(const char *arch) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = enc_small();
    sp.arch = arch, sp.rope_base = 1000.0f;
    enc_open(&sp, path, sizeof(path), &m, &e, 10);
    embed_input in[3] = {{EA, 9, NULL}, {EB, 5, NULL}, {EC, 1, NULL}};
    int lens[3] = {9, 5, 1};
    attn_capture_params p = {.inputs = lens, .n_inputs = 3, .n_positions = 15};
    attn_capture *c;
    attnd_err err;
    cr_assert_eq(attn_capture_create(&c, m, &p, &err), ATTND_OK, "%s", err.msg);
    embed_captured(e, c, in, 3, sp.n_embd);
    check_encoder_rows(&sp, path, c, in, 3, bert_ref);
    attn_capture_destroy(c);
    engine_destroy(e), model_destroy(m), unlink(path);
}

Test(attn_capture, encoder_rows_of_several_inputs_equal_float64_forward) {
    check_several_inputs("bert");
    check_several_inputs("nomic-bert");
}

/* gemma-embedding: local layers see window / 2 keys either side (the rest weigh 0), two inputs
 * in one pass. */
Test(attn_capture, encoder_rows_of_sliding_windows_equal_float64_forward) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = gemma_emb_small();
    enc_open(&sp, path, sizeof(path), &m, &e, 64);
    const int32_t toks[11] = {2, 300, 17, 45, 260, 301, 99, 8, 270, 33, 1};
    embed_input in[2] = {{toks, 11, NULL}, {EB, 5, NULL}};
    int lens[2] = {11, 5};
    attn_capture_params p = {.inputs = lens, .n_inputs = 2, .n_positions = 16};
    attn_capture *c;
    attnd_err err;
    cr_assert_eq(attn_capture_create(&c, m, &p, &err), ATTND_OK, "%s", err.msg);
    embed_captured(e, c, in, 2, sp.n_embd);
    check_encoder_rows(&sp, path, c, in, 2, gemma_ref);
    const float *w;
    attn_capture_row(c, 0, 0, 0, &w, NULL); /* layer 0 is local: position 0 sees 0..3 */
    for (int j = 4; j < 11; j++) cr_assert_eq(w[j], 0.0f, "key %d outside the window: %g", j, w[j]);
    attn_capture_destroy(c);
    engine_destroy(e), model_destroy(m), unlink(path);
}

/* top_k of a selected layer and head: the k largest of each row's own input, as positions of
 * the whole call (the second input's start at 9), heaviest first; a row shorter than k keeps all. */
Test(attn_capture, encoder_top_k_pairs_are_positions_of_the_call) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = enc_small();
    enc_open(&sp, path, sizeof(path), &m, &e, 64);
    embed_input in[2] = {{EA, 9, NULL}, {EB, 5, NULL}};
    int lens[2] = {9, 5}, layer = 1, head = 2;
    attn_capture_params whole = {.inputs = lens, .n_inputs = 2, .n_positions = 14, .layers = &layer, .n_layers = 1,
                                 .heads = &head, .n_heads = 1};
    attn_capture_params top = whole;
    top.top_k = 6;
    attn_capture *cw, *ct;
    attnd_err err;
    cr_assert_eq(attn_capture_create(&cw, m, &whole, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(attn_capture_create(&ct, m, &top, &err), ATTND_OK, "%s", err.msg);
    embed_captured(e, cw, in, 2, sp.n_embd);
    embed_captured(e, ct, in, 2, sp.n_embd);
    cr_assert_eq(attn_capture_count(model_info_get(m), &top), 9u * 6u + 5u * 5u);
    for (int pos = 0; pos < 14; pos++) {
        const float *w, *tw;
        const int32_t *ix;
        int k0, n = attn_capture_keys(cw, pos, &k0);
        attn_capture_row(cw, 0, 0, pos, &w, NULL);
        int k = attn_capture_row(ct, 0, 0, pos, &tw, &ix);
        cr_assert_eq(k, n < 6 ? n : 6, "row %d: %d pairs", pos, k);
        for (int i = 0; i < k; i++) {
            cr_assert(ix[i] >= k0 && ix[i] < k0 + n, "row %d: position %d outside its input", pos, ix[i]);
            cr_assert_eq(tw[i], w[ix[i] - k0]);
            if (i) cr_assert(tw[i] <= tw[i - 1]);
        }
    }
    attn_capture_destroy(cw), attn_capture_destroy(ct);
    engine_destroy(e), model_destroy(m), unlink(path);
}

Test(attn_capture, encoder_captures_refuse_what_they_cannot_record) {
    model_info mi = {.n_layer = 2, .n_head = 4, .n_ctx = 128, .n_vocab = 320, .arch = "bert"};
    int lens[2] = {9, 5}, empty[1] = {0};
    const char *field;
    attnd_err err;
    attn_capture_params p = {.inputs = lens, .n_inputs = 2, .n_positions = 14, .weights = ATTN_WEIGHTS_NORM};
    cr_assert_eq(attn_capture_check(&mi, &p, &field, &err), ATTND_ERR_UNSUPPORTED);
    cr_assert_str_eq(field, "weights");
    cr_assert(strstr(err.msg, "encoder") && strstr(err.msg, "bert"), "%s", err.msg);
    p = (attn_capture_params){.inputs = lens, .n_inputs = 2, .n_positions = 14, .lens_k = 3};
    cr_assert_eq(attn_capture_check(&mi, &p, &field, &err), ATTND_ERR_UNSUPPORTED);
    cr_assert_str_eq(field, "logit_lens");
    p = (attn_capture_params){.inputs = lens, .n_inputs = 2, .n_positions = 13};
    cr_assert_eq(attn_capture_check(&mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "n_positions");
    p = (attn_capture_params){.inputs = empty, .n_inputs = 1, .n_positions = 0};
    cr_assert_eq(attn_capture_check(&mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "inputs");
    p = (attn_capture_params){.inputs = lens, .n_inputs = 2, .n_positions = 14};
    cr_assert_eq(attn_capture_check(&mi, &p, &field, &err), ATTND_OK);
    cr_assert_eq(attn_capture_count(&mi, &p), 2u * 4u * (81u + 25u)); /* squares, not a triangle */
}

// ---- a hybrid model's Gated DeltaNet layers: effective rows ------------------------------------

/* 2 layers of arch (layer 0 DeltaNet, layer 1 attention), 2 key heads and 4 value heads of 32;
 * qwen3next: value head h reads key head h / 2 (grouped), experts in the FFN. */
static hy_spec dn_spec(const char *arch) {
    hy_spec hs = {.base = tiny_default(arch), .interval = 2, .conv_k = 4, .hk = 2, .hv = 4, .dk = 32};
    tiny_spec *sp = &hs.base;
    sp->vocab = true, sp->n_vocab = 320, sp->n_ctx = 128, sp->seed = 7;
    sp->n_embd = 64, sp->n_layer = 2, sp->n_head = 4, sp->n_head_kv = 2, sp->head_dim = 32, sp->rope_dims = 16;
    sp->n_ff = 64, sp->rope_base = 1e6f, sp->rms_eps = 1e-6f;
    if (strcmp(arch, "qwen35")) sp->n_expert = 4, sp->n_expert_used = 2, sp->n_ff_exp = 32, hs.n_ff_shexp = 48;
    return hs;
}

/* What layer 0's recurrence read and wrote, per position (engine_dn_cb), as doubles. */
typedef struct dn_seen {
    int n, dk, hv, hk;
    bool grouped;
    double *q, *k, *v, *bg, *o; /* (n, hv, dk) per value head (its key head's q, k), (n, hv, 2), (n, hv, dk) */
} dn_seen;

static void dn_collect(void *user, int entry, int layer, int pos, const engine_dn_io *io) {
    (void)entry;
    dn_seen *s = user;
    if (layer != 0 || pos >= s->n) return;
    s->dk = io->dk, s->hv = io->hv, s->hk = io->hk, s->grouped = io->grouped;
    for (int h = 0; h < io->hv; h++) {
        int kh = engine_dn_key_head(io, h);
        size_t at = ((size_t)pos * io->hv + h) * io->dk;
        for (int e = 0; e < io->dk; e++) {
            s->q[at + e] = io->q[(size_t)kh * io->dk + e], s->k[at + e] = io->k[(size_t)kh * io->dk + e];
            s->v[at + e] = io->v[(size_t)h * io->dv + e], s->o[at + e] = io->o[(size_t)h * io->dv + e];
        }
        s->bg[((size_t)pos * io->hv + h) * 2] = io->beta[h], s->bg[((size_t)pos * io->hv + h) * 2 + 1] = io->g[h];
    }
}

/* w_tj of value head h by the formula with explicit d_k x d_k products: M = A_{j+1} ... A_t,
 * w_tj = beta_j k_j^T M q_t / sqrt(d_k), A_i = e^{g_i} (I - beta_i k_i k_i^T). row: (t + 1). */
static void dn_formula(double *row, const dn_seen *s, int h, int t) {
    int dk = s->dk;
    double *M = calloc((size_t)dk * dk, sizeof(double)), *N = malloc(sizeof(double) * (size_t)dk * dk);
    for (int e = 0; e < dk; e++) M[(size_t)e * dk + e] = 1;
    const double *q = s->q + ((size_t)t * s->hv + h) * dk;
    for (int j = t; j >= 0; j--) {
        const double *k = s->k + ((size_t)j * s->hv + h) * dk, *bg = s->bg + ((size_t)j * s->hv + h) * 2;
        double w = 0;
        for (int a = 0; a < dk; a++)
            for (int b = 0; b < dk; b++) w += k[a] * M[(size_t)a * dk + b] * q[b];
        row[j] = bg[0] * w / sqrt((double)dk);
        for (int a = 0; a < dk; a++) /* M <- A_j M */
            for (int b = 0; b < dk; b++) {
                double kM = 0;
                for (int c = 0; c < dk; c++) kM += k[c] * M[(size_t)c * dk + b];
                N[(size_t)a * dk + b] = exp(bg[1]) * (M[(size_t)a * dk + b] - bg[0] * k[a] * kM);
            }
        memcpy(M, N, sizeof(double) * (size_t)dk * dk);
    }
    free(M), free(N);
}

/* Layer 0's rows of c (whole) against the formula, and o_t = sum_j w_tj v_j against the
 * recurrence's own output; then layer 1's softmax rows. */
static void check_dn_rows(const attn_capture *c, const dn_seen *s, int N, const char *what) {
    cr_assert(attn_capture_layer_deltanet(c, 0) && !attn_capture_layer_deltanet(c, 1));
    cr_assert_eq(attn_capture_layer_heads(c, 0), 4);
    cr_assert_eq(attn_capture_layer_heads(c, 1), 4);
    cr_assert_eq(attn_capture_layer_from(c, 0), 0);
    int first, n = attn_capture_rows(c, &first);
    cr_assert_eq(first, 0);
    cr_assert_eq(n, N);
    double worst_w = 0, worst_o = 0, *ref = malloc(sizeof(double) * (size_t)N);
    bool negative = false;
    for (int h = 0; h < s->hv; h++) {
        double oscale = 0;
        for (int t = 0; t < N; t++)
            for (int e = 0; e < s->dk; e++) oscale = fmax(oscale, fabs(s->o[((size_t)t * s->hv + h) * s->dk + e]));
        cr_assert(oscale > 1e-3, "degenerate fixture: head %d's output near 0", h);
        for (int t = 0; t < N; t++) {
            const float *w;
            cr_assert_eq(attn_capture_row(c, 0, h, t, &w, NULL), t + 1);
            dn_formula(ref, s, h, t);
            for (int j = 0; j <= t; j++) worst_w = fmax(worst_w, fabs(w[j] - ref[j])), negative |= w[j] < 0;
            for (int e = 0; e < s->dk; e++) {
                double rec = 0;
                for (int j = 0; j <= t; j++) rec += (double)w[j] * s->v[((size_t)j * s->hv + h) * s->dk + e];
                worst_o = fmax(worst_o, fabs(rec - s->o[((size_t)t * s->hv + h) * s->dk + e]) / oscale);
            }
        }
    }
    cr_expect(worst_w <= 1e-6, "%s: max |row - float64 formula| = %g", what, worst_w);
    cr_expect(worst_o <= 1e-5, "%s: max |sum_j w_tj v_j - o_t| / max |o| = %g", what, worst_o);
    cr_expect(negative, "%s: no negative effective weight in %d rows (a softmax would have none)", what, N);
    for (int h = 0; h < 4; h++)
        for (int t = 0; t < N; t++) {
            const float *w;
            double sum = 0;
            for (int j = 0, k = attn_capture_row(c, 1, h, t, &w, NULL); j < k; j++) sum += w[j];
            cr_expect(fabs(sum - 1) < 1e-5, "%s: attention layer row %d sums to %g", what, t, sum);
        }
    free(ref);
}

static void check_recurrence(const char *arch) {
    hy_spec hs = dn_spec(arch);
    tiny_rig r;
    char path[sizeof(r.path)];
    tiny_tmpname(path, sizeof(path), arch);
    cr_assert_eq(hy_write(path, &hs), 0);
    tiny_rig_load(&r, path, KV_F32, 32, 2, 64);
    enum { N = 24 }; /* one batch of 24 takes the chunked form; one at a time the sequential one */
    int32_t tok[N];
    tiny_random_tokens(tok, N, hs.base.n_vocab, 3);
    dn_seen s = {.n = N};
    size_t per = (size_t)N * hs.hv * hs.dk;
    s.q = malloc(sizeof(double) * per), s.k = malloc(sizeof(double) * per), s.v = malloc(sizeof(double) * per);
    s.o = malloc(sizeof(double) * per), s.bg = malloc(sizeof(double) * (size_t)N * hs.hv * 2);
    attnd_err err;
    for (int chunk = N; chunk >= 1; chunk = chunk == N ? 1 : 0) {
        engine_set_attention_cb(r.e, NULL, &s); /* the DeltaNet hook's user */
        engine_set_deltanet_cb(r.e, dn_collect);
        feed(r.e, tiny_rig_seq(&r), tok, N, chunk);
        engine_set_deltanet_cb(r.e, NULL);
        attn_capture *c;
        attn_capture_params p = {.n_positions = N, .deltanet = true};
        cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK, "%s", err.msg);
        feed_captured(r.e, c, tiny_rig_seq(&r), tok, N, chunk);
        cr_assert_eq(s.grouped, strcmp(arch, "qwen35") != 0);
        check_dn_rows(c, &s, N, chunk == 1 ? "one at a time" : "one batch");
        attn_capture_destroy(c);
    }
    free(s.q), free(s.k), free(s.v), free(s.o), free(s.bg);
    tiny_rig_close(&r);
    unlink(path);
}

Test(attn_capture, deltanet_rows_are_the_recurrence_exactly) { check_recurrence("qwen35"); }

Test(attn_capture, deltanet_rows_of_grouped_value_heads_are_the_recurrence_exactly) { check_recurrence("qwen3next"); }

Test(attn_capture, deltanet_top_k_keeps_the_largest_magnitudes_and_refusals_name_the_field) {
    hy_spec hs = dn_spec("qwen35");
    tiny_rig r;
    char path[sizeof(r.path)];
    tiny_tmpname(path, sizeof(path), "dncap2");
    cr_assert_eq(hy_write(path, &hs), 0);
    tiny_rig_load(&r, path, KV_F32, 32, 2, 64);
    enum { N = 12 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, hs.base.n_vocab, 4);
    attnd_err err;
    int layer0 = 0, head[1] = {2};
    attn_capture *cw, *ck;
    attn_capture_params pw = {.layers = &layer0, .n_layers = 1, .heads = head, .n_heads = 1, .n_positions = N,
                              .deltanet = true};
    attn_capture_params pk = pw;
    pk.top_k = 3;
    cr_assert_eq(attn_capture_create(&cw, r.m, &pw, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(attn_capture_create(&ck, r.m, &pk, &err), ATTND_OK, "%s", err.msg);
    feed_captured(r.e, cw, tiny_rig_seq(&r), tok, N, N);
    feed_captured(r.e, ck, tiny_rig_seq(&r), tok, N, N);
    for (int t = 0; t < N; t++) {
        const float *w, *tw;
        const int32_t *ix;
        attn_capture_row(cw, 0, 0, t, &w, NULL);
        int k = attn_capture_row(ck, 0, 0, t, &tw, &ix);
        cr_assert_eq(k, t + 1 < 3 ? t + 1 : 3);
        for (int i = 0; i < k; i++) {
            cr_assert_eq(tw[i], w[ix[i]]);
            if (i) cr_assert(fabsf(tw[i]) <= fabsf(tw[i - 1]));
            for (int j = 0; j <= t && k == 3 && i == k - 1; j++) /* nothing left out is larger */
                cr_assert(j == ix[0] || j == ix[1] || j == ix[2] || fabsf(w[j]) <= fabsf(tw[i]));
        }
    }
    attn_capture_destroy(cw), attn_capture_destroy(ck);

    /* the hook leaves the pass as it was: the same logits, bit for bit, with and without it */
    int V = hs.base.n_vocab;
    float *lg[2] = {malloc(sizeof(float) * (size_t)N * V), malloc(sizeof(float) * (size_t)N * V)};
    for (int k = 0; k < 2; k++) {
        kv_seq *s = tiny_rig_seq(&r);
        batch_entry b[N];
        for (int i = 0; i < N; i++) b[i] = (batch_entry){s, tok[i], i, true};
        cw = NULL;
        if (k) cr_assert_eq(attn_capture_create(&cw, r.m, &pw, &err), ATTND_OK, "%s", err.msg);
        if (k) attn_capture_bind(cw, s);
        cr_assert_eq(attn_capture_eval(cw, r.e, b, N, lg[k], &err), ATTND_OK, "%s", err.msg);
        if (k) cr_assert_eq(attn_capture_rows(cw, &(int){0}), N); /* the hook ran */
        attn_capture_destroy(cw);
    }
    cr_assert(!memcmp(lg[0], lg[1], sizeof(float) * (size_t)N * V), "logits changed under the DeltaNet hook");
    free(lg[0]), free(lg[1]);

    const model_info *mi = model_info_get(r.m);
    const char *field;
    attn_capture_params p = {.n_positions = N};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_UNSUPPORTED); /* without .deltanet */
    cr_assert_str_eq(field, "model");
    p = (attn_capture_params){.n_positions = N, .deltanet = true, .weights = ATTN_WEIGHTS_NORM};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_UNSUPPORTED);
    cr_assert_str_eq(field, "weights");
    cr_assert(strstr(err.msg, "DeltaNet"), "%s", err.msg);
    int big[1] = {4};
    p = (attn_capture_params){.heads = big, .n_heads = 1, .n_positions = N, .deltanet = true};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(field, "heads");
    p = (attn_capture_params){.n_positions = N, .deltanet = true};
    cr_assert_eq(attn_capture_blocks(mi, &p), 8u); /* 4 value heads + 4 attention heads */
    cr_assert_eq(attn_capture_count(mi, &p), 8u * N * (N + 1) / 2);
    cr_assert_eq(attn_capture_dn_weights(mi, &p), 4u * N * (N + 1) / 2); /* layer 0's value heads */
    cr_assert_eq(attn_capture_dn_weights(mi, &pk), 1u * N * (N + 1) / 2); /* whole rows, also with top_k */
    cr_assert_eq(attn_capture_count(mi, &pk), 3u + (N - 2) * 3u);          /* 1 + 2 + 3 * (N - 2) returned */
    tiny_rig_close(&r);
    unlink(path);
}
