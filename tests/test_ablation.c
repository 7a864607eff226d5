/*
 * test_ablation.c — head ablation in the engine (engine_seq_ablate, attnd/engine.h): logits with
 * every head of a layer zeroed, or a head scaled, equal an independent float64 forward pass with
 * the same heads' outputs scaled before W_O, within 1e-3; an ablated sequence batched next to a
 * plain one leaves the plain one's logits bit-identical to a run without ablation; mean ablation
 * (the head's causal mean output) evaluated in two chunks equals the reference too; clearing the
 * ablation gives the unablated logits back, bit for bit; bad layers and heads are refused.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/ablate_sweep.h"
#include "attnd/engine.h"
#include "engine_rig.h"

enum { N = 40 };

/* Logits (n, V) of tokens evaluated in one batch on each of seqs[0..n_seq) (the same tokens). */
static float *eval_all(engine *e, kv_seq **seqs, int n_seq, const int32_t *tok, int n, int V) {
    batch_entry *b = calloc((size_t)(n * n_seq), sizeof(*b));
    float *lg = malloc(sizeof(float) * (size_t)(n * n_seq) * (size_t)V);
    for (int s = 0; s < n_seq; s++)
        for (int i = 0; i < n; i++) b[s * n + i] = (batch_entry){seqs[s], tok[i], i, true};
    attnd_err err;
    cr_assert_eq(engine_eval(e, b, n * n_seq, lg, &err), ATTND_OK, "%s", err.msg);
    free(b);
    return lg;
}

/* max |engine - reference| over every position's logits. */
static double worst(const float *lg, const double *ref, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, fabs(lg[i] - ref[i]));
    return w;
}

static void check_ablation(const char *arch, const engine_ablation_head *heads, int n_heads) {
    tiny_spec sp = tiny_default(arch);
    sp.n_layer = 3;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 2 * N);
    int V = sp.n_vocab;
    int32_t tok[N];
    tiny_random_tokens(tok, N, V, 3);
    engine_ablation a = {heads, n_heads, calloc((size_t)n_heads * (size_t)tiny_head_dim(&sp), sizeof(double)),
                         calloc((size_t)n_heads, sizeof(int))};
    attnd_err err;
    cr_assert_eq(engine_ablation_check(model_info_get(r.m), &a, &err), ATTND_OK, "%s", err.msg);
    kv_seq *plain = tiny_rig_seq(&r), *abl = tiny_rig_seq(&r);
    engine_seq_ablate(abl, &a);
    float *lg = eval_all(r.e, (kv_seq *[]){plain, abl}, 2, tok, N, V); /* plain first, then ablated */
    double *scale = malloc(sizeof(double) * (size_t)(sp.n_layer * sp.n_head));
    for (int i = 0; i < sp.n_layer * sp.n_head; i++) scale[i] = 1;
    int *mean = calloc((size_t)(sp.n_layer * sp.n_head), sizeof(int));
    for (int i = 0; i < n_heads; i++) {
        scale[heads[i].layer * sp.n_head + heads[i].head] = heads[i].scale;
        mean[heads[i].layer * sp.n_head + heads[i].head] = heads[i].mode == ENGINE_ABLATE_MEAN;
    }
    double *ref = malloc(sizeof(double) * N * (size_t)V), *ref0 = malloc(sizeof(double) * N * (size_t)V);
    ref_forward_ex(&sp, r.path, tok, N, ref, &(ref_extra){.head_scale = scale, .head_mean = mean});
    ref_forward(&sp, r.path, tok, N, ref0);
    double w = worst(lg + (size_t)N * V, ref, N * V), w0 = worst(lg, ref0, N * V);
    cr_assert(w <= 1e-3, "%s: ablated logits vs float64 reference: %g", arch, w);
    cr_assert(w0 <= 1e-3, "%s: the plain sequence next to it: %g", arch, w0);
    cr_assert(worst(lg + (size_t)N * V, ref0, N * V) > 1e-2, "the ablation changed nothing");
    free(scale), free(mean), free(ref), free(ref0), free(lg), free(a.mean_sum), free(a.mean_n);
    tiny_rig_close(&r);
}

Test(ablation, zeroing_every_head_of_a_layer_equals_float64_reference) {
    engine_ablation_head h[4];
    for (int i = 0; i < 4; i++) h[i] = (engine_ablation_head){.layer = 1, .head = i, .scale = 0};
    check_ablation("llama", h, 4);
}

Test(ablation, scaled_and_zeroed_grouped_heads_equal_float64_reference) {
    engine_ablation_head h[] = {{.layer = 0, .head = 3, .scale = 0}, {.layer = 2, .head = 1, .scale = 0.5f},
                                {.layer = 2, .head = 2, .scale = 2.0f}};
    check_ablation("qwen2", h, 3);
}

Test(ablation, mean_and_scaled_mean_heads_equal_float64_reference) {
    engine_ablation_head h[] = {{.layer = 0, .head = 1, .scale = 0, .mode = ENGINE_ABLATE_MEAN},
                                {.layer = 1, .head = 2, .scale = 0.25f, .mode = ENGINE_ABLATE_MEAN},
                                {.layer = 2, .head = 0, .scale = 0, .mode = ENGINE_ABLATE_ZERO}};
    check_ablation("llama", h, 3);
}

/* Mean ablation keeps its running sums across evaluations: a prompt evaluated in two chunks,
 * then one token at a time, gives the logits of one whole-prompt evaluation within 1e-4 (a
 * mean over later positions would move the early ones far more). */
Test(ablation, mean_ablation_is_causal_across_chunks) {
    tiny_spec sp = tiny_default("llama");
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, N);
    int V = sp.n_vocab, hd = tiny_head_dim(&sp);
    int32_t tok[N];
    tiny_random_tokens(tok, N, V, 5);
    engine_ablation_head h = {.layer = 1, .head = 3, .scale = 0, .mode = ENGINE_ABLATE_MEAN};
    double sums[2][64] = {{0}};
    int counts[2] = {0};
    cr_assert(hd <= 64);
    engine_ablation whole = {&h, 1, sums[0], &counts[0]}, parts = {&h, 1, sums[1], &counts[1]};
    kv_seq *s0 = tiny_rig_seq(&r), *s1 = tiny_rig_seq(&r);
    engine_seq_ablate(s0, &whole);
    engine_seq_ablate(s1, &parts);
    float *lg = eval_all(r.e, &s0, 1, tok, N, V), *lp = malloc(sizeof(float) * (size_t)N * V);
    attnd_err err;
    int cut[] = {0, N / 2, N - 3, N - 2, N - 1, N};
    for (int c = 0; c + 1 < (int)ATTND_ARRAY_LEN(cut); c++) {
        batch_entry b[N];
        for (int i = cut[c]; i < cut[c + 1]; i++) b[i - cut[c]] = (batch_entry){s1, tok[i], i, true};
        cr_assert_eq(engine_eval(r.e, b, cut[c + 1] - cut[c], lp + (size_t)cut[c] * V, &err), ATTND_OK, "%s", err.msg);
    }
    double w = 0;
    for (int i = 0; i < N * V; i++) w = fmax(w, fabs(lg[i] - lp[i]));
    cr_assert(w <= 1e-4, "chunked vs whole: %g", w);
    cr_assert_eq(counts[1], N);
    free(lg), free(lp);
    tiny_rig_close(&r);
}

Test(ablation, no_ablation_is_bit_identical_and_clearing_restores_it) {
    tiny_spec sp = tiny_default("llama");
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F16, N);
    int32_t tok[N];
    tiny_random_tokens(tok, N, sp.n_vocab, 4);
    size_t bytes = sizeof(float) * N * (size_t)sp.n_vocab;
    kv_seq *s = tiny_rig_seq(&r);
    float *before = eval_all(r.e, &s, 1, tok, N, sp.n_vocab);
    engine_ablation_head h = {.layer = 0, .head = 0, .scale = 0};
    engine_ablation a = {.heads = &h, .n = 1};
    kv_seq_truncate(s, 0);
    engine_seq_ablate(s, &a);
    float *ablated = eval_all(r.e, &s, 1, tok, N, sp.n_vocab);
    kv_seq_truncate(s, 0);
    engine_seq_ablate(s, NULL);
    float *after = eval_all(r.e, &s, 1, tok, N, sp.n_vocab);
    cr_assert_eq(memcmp(before, after, bytes), 0, "cleared: bit-identical to never ablated");
    cr_assert_neq(memcmp(before, ablated, bytes), 0);
    engine_seq_ablate(s, &(engine_ablation){.heads = &h, .n = 0});
    kv_seq_truncate(s, 0);
    float *empty = eval_all(r.e, &s, 1, tok, N, sp.n_vocab);
    cr_assert_eq(memcmp(before, empty, bytes), 0, "an empty list is no ablation");
    free(before), free(ablated), free(after), free(empty);
    tiny_rig_close(&r);
}

Test(ablation, heads_out_of_range_are_refused_naming_the_entry) {
    model_info mi = {.n_layer = 6, .n_head = 4};
    attnd_err err;
    engine_ablation_head bad[] = {{.layer = 1, .head = 0}, {.layer = 6, .head = 0}};
    cr_assert_eq(engine_ablation_check(&mi, &(engine_ablation){.heads = bad, .n = 2}, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "ablate[1]") && strstr(err.msg, "0..5"), "%s", err.msg);
    bad[1] = (engine_ablation_head){.layer = 0, .head = 4};
    cr_assert_eq(engine_ablation_check(&mi, &(engine_ablation){.heads = bad, .n = 2}, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "head 4"), "%s", err.msg);
    bad[1] = (engine_ablation_head){.layer = 0, .head = 1, .scale = NAN};
    cr_assert_eq(engine_ablation_check(&mi, &(engine_ablation){.heads = bad, .n = 2}, &err), ATTND_ERR_INVALID);
    cr_assert_eq(engine_ablation_check(&mi, &(engine_ablation){.heads = bad, .n = 1}, &err), ATTND_OK);
    bad[1] = (engine_ablation_head){.layer = 0, .head = 1, .mode = ENGINE_ABLATE_MEAN};
    cr_assert_eq(engine_ablation_check(&mi, &(engine_ablation){.heads = bad, .n = 2}, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "running-sum"), "%s", err.msg);
}

// ---- the sweep: every head ablated in turn (attnd/ablate_sweep.h) -------------------------

/* log softmax of row (V) in place. */
static void ref_log_softmax(double *row, int V) {
    double mx = row[0], sum = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, row[v]);
    for (int v = 0; v < V; v++) sum += exp(row[v] - mx);
    for (int v = 0; v < V; v++) row[v] -= mx + log(sum);
}

/* Every head's change of log P(target) and KL(P || Q) from the sweep equals the float64
 * reference with that head ablated from position `from` on, within 1e-3. */
/* step > 0: in batches of at most step entries (ablate_sweep_next, as the server interleaves a
 * sweep with its decode steps), the sequences held between them within ablate_sweep_kv_bytes. */
static attnd_status sweep_in_steps(tiny_rig *r, const ablate_sweep_params *p, int step, ablate_sweep_result *res,
                                   attnd_err *err) {
    if (step <= 0) return ablate_sweep_run(r->e, r->pool, p, res, err);
    ablate_sweep *w;
    attnd_status st = ablate_sweep_create(&w, r->e, r->pool, p, err);
    size_t cap = ablate_sweep_kv_bytes(r->e, r->pool, p);
    int batches = 0;
    for (bool done = false; st == ATTND_OK && !done; batches++) {
        st = ablate_sweep_next(w, step, &done, err);
        cr_assert_leq(kv_pool_bytes_used(r->pool), cap, "the sweep holds more KV than it said");
    }
    if (st == ATTND_OK) ablate_sweep_take_result(w, res);
    ablate_sweep_destroy(w);
    cr_assert_eq(res->n_batches, batches, "one batch per step");
    return st;
}

static void check_sweep(const char *arch, int from, engine_ablate_mode mode, float scale, int max_seqs, int step) {
    tiny_spec sp = tiny_default(arch);
    sp.n_layer = 3;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 2 * N);
    int V = sp.n_vocab, H = sp.n_head, LH = sp.n_layer * H;
    int32_t tok[N];
    tiny_random_tokens(tok, N, V, 7);
    ablate_sweep_params p = {.tokens = tok, .n_tokens = N, .target = from ? tok[3] : -1, .from = from, .mode = mode,
                             .scale = scale, .max_seqs = max_seqs};
    ablate_sweep_result res;
    attnd_err err;
    cr_assert_eq(sweep_in_steps(&r, &p, step, &res, &err), ATTND_OK, "%s", err.msg);
    if (step > 0) cr_assert_leq(res.n_evaluated, (long)step * res.n_batches, "steps of at most %d", step);
    if (step > 0) cr_assert_gt(res.n_batches, (res.n_sequences - 1) * (N - from) / step, "batches of about %d", step);
    double *ref = malloc(sizeof(double) * N * (size_t)V), *base = malloc(sizeof(double) * (size_t)V);
    ref_forward(&sp, r.path, tok, N, ref);
    memcpy(base, ref + (size_t)(N - 1) * V, sizeof(double) * V);
    ref_log_softmax(base, V);
    if (p.target < 0) { /* the plain run's most probable token */
        int best = 0;
        for (int v = 1; v < V; v++) best = base[v] > base[best] ? v : best;
        cr_assert_eq(res.target, best);
        p.target = best;
    }
    cr_assert_eq(res.target, p.target);
    cr_assert(fabs(res.base_logprob - base[p.target]) <= 1e-3, "base %g vs %g", res.base_logprob, base[p.target]);
    double *scale_v = malloc(sizeof(double) * LH);
    int *mean = malloc(sizeof(int) * LH);
    double moved = 0;
    for (int c = 0; c < LH; c++) {
        for (int i = 0; i < LH; i++) scale_v[i] = 1, mean[i] = mode == ENGINE_ABLATE_MEAN;
        scale_v[c] = scale;
        ref_forward_ex(&sp, r.path, tok, N, ref, &(ref_extra){.head_scale = scale_v, .head_mean = mean, .scale_from = from});
        double *q = ref + (size_t)(N - 1) * V, kl = 0;
        ref_log_softmax(q, V);
        for (int v = 0; v < V; v++) kl += exp(base[v]) * (base[v] - q[v]);
        double dl = q[p.target] - base[p.target];
        cr_assert(fabs(res.dlogprob[c] - dl) <= 1e-3, "%s head %d: dlogprob %g vs %g", arch, c, res.dlogprob[c], dl);
        cr_assert(fabs(res.kl[c] - kl) <= 1e-3, "%s head %d: kl %g vs %g", arch, c, res.kl[c], kl);
        moved = fmax(moved, kl);
    }
    cr_assert(moved > 1e-3, "no head moved the prediction (the sweep measured nothing)");
    cr_assert_eq(res.n_sequences, LH + 1);
    cr_assert(res.batch_seqs >= 1 && res.n_batches >= 2 && res.wall_ms >= 0);
    cr_assert_eq(kv_pool_bytes_used(r.pool), 0, "the sweep left KV blocks in the pool");
    ablate_sweep_result_free(&res);
    free(ref), free(base), free(scale_v), free(mean);
    tiny_rig_close(&r);
}

Test(ablation, sweep_of_every_head_over_the_whole_prompt_equals_float64_reference) {
    check_sweep("llama", 0, ENGINE_ABLATE_ZERO, 0, 0, 0);
}

Test(ablation, sweep_at_the_measured_position_of_forks_equals_float64_reference) {
    check_sweep("qwen2", N - 1, ENGINE_ABLATE_ZERO, 0, 0, 0);
}

Test(ablation, mean_sweep_from_a_shared_prefix_in_small_waves_equals_float64_reference) {
    check_sweep("llama", 10, ENGINE_ABLATE_MEAN, 0.25f, 5, 0); /* 12 heads in waves of 5 */
}

/* The server's way: batches of a few entries between its decode steps, a wave's runs cut at any
 * point, give the same answers. */
Test(ablation, mean_sweep_in_small_steps_equals_float64_reference) {
    check_sweep("llama", 10, ENGINE_ABLATE_MEAN, 0.25f, 5, 7);
}

Test(ablation, sweep_in_steps_of_one_entry_equals_float64_reference) {
    check_sweep("qwen2", 0, ENGINE_ABLATE_ZERO, 0, 4, 1);
}

Test(ablation, sweep_refuses_a_bad_target_or_start) {
    model_info mi = {.n_layer = 2, .n_head = 2, .n_vocab = 10, .n_ctx = 8};
    int32_t tok[] = {1, 2, 3};
    attnd_err err;
    ablate_sweep_params p = {.tokens = tok, .n_tokens = 3, .target = 10};
    cr_assert_eq(ablate_sweep_check(&mi, &(ablate_sweep_params){.tokens = tok, .n_tokens = 3, .target = -2}, &err),
                 ATTND_ERR_INVALID);
    cr_assert_eq(ablate_sweep_check(&mi, &p, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "target"), "%s", err.msg);
    p.target = 9, p.from = 3;
    cr_assert_eq(ablate_sweep_check(&mi, &p, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "from") && strstr(err.msg, "0..2"), "%s", err.msg);
    p.from = 2;
    cr_assert_eq(ablate_sweep_check(&mi, &p, &err), ATTND_OK);
}
