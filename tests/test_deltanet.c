/*
 * test_deltanet.c — the hybrid Gated DeltaNet families (qwen35, qwen35moe): the forward pass
 * against the float64 reference of hybrid_fixture.h at the real DeltaNet head sizes (prefill,
 * decode one token at a time, batches mixing sequences), llama.cpp's greedy tokens after a long
 * prompt (tests/data/reference-hybrid.json), the recurrent state of a sequence
 * (truncation without checkpoints recomputes from 0, forks copy it, the budget counts it; the
 * checkpoints are test_kv_state.c's), the MTP blocks left out
 * of the main pass, and files refused by name.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/attn_capture.h"
#include "attnd/spec.h"
#include "engine_rig.h"
#include "family_specs.h"
#include <jansson.h>

static hy_spec small_spec(const char *arch) { return hybrid_small(arch); }

static void rig_open(tiny_rig *r, const hy_spec *hs, int max_batch) {
    char path[sizeof(r->path)];
    tiny_tmpname(path, sizeof(path), hs->base.arch);
    cr_assert_eq(hy_write(path, hs), 0, "cannot write %s", path);
    tiny_rig_load(r, path, KV_F32, max_batch, 2, 256);
    r->sp = hs->base;
    memcpy(r->path, path, sizeof(path));
}

/* Largest |a - ref| over n logits, relative to the reference's largest |logit|. */
static double rel_err(const float *a, const double *ref, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - ref[i])), scale = fmax(scale, fabs(ref[i]));
    cr_assert(scale > 0.1, "degenerate fixture: logits all near zero");
    return worst / scale;
}

static void eval_run(engine *e, kv_seq *s, const int32_t *tok, int n, float *logits) {
    batch_entry *b = malloc(sizeof(*b) * (size_t)n);
    int pos0 = kv_seq_len(s);
    for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tok[i], pos0 + i, true};
    attnd_err err;
    cr_assert_eq(engine_eval(e, b, n, logits, &err), ATTND_OK, "%s", err.msg);
    free(b);
}

/* Prefill of n_tok tokens in one batch, then the same tokens one at a time on another sequence:
 * both against the float64 reference within tol (float32 sums over the recurrence). */
static void check_family(const char *arch, int n_tok, double tol) {
    hy_spec hs = small_spec(arch);
    tiny_rig r;
    rig_open(&r, &hs, n_tok);
    int V = hs.base.n_vocab;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_tok);
    tiny_random_tokens(tok, n_tok, V, 5);
    float *lg = malloc(sizeof(float) * (size_t)n_tok * V);
    double *ref = malloc(sizeof(double) * (size_t)n_tok * V);
    hy_ref_forward(&hs, r.path, tok, n_tok, ref);
    eval_run(r.e, tiny_rig_seq(&r), tok, n_tok, lg);
    double pre = rel_err(lg, ref, (size_t)n_tok * V);
    if (getenv("ATTND_TEST_VERBOSE")) fprintf(stderr, "%s prefill %g\n", arch, pre);
    cr_expect(pre <= tol, "%s prefill: relative error %g > %g", arch, pre, tol);
    kv_seq *s = tiny_rig_seq(&r);
    for (int t = 0; t < n_tok; t++) eval_run(r.e, s, tok + t, 1, lg + (size_t)t * V);
    double dec = rel_err(lg, ref, (size_t)n_tok * V);
    cr_expect(dec <= tol, "%s decode: relative error %g > %g", arch, dec, tol);
    free(tok), free(lg), free(ref);
    tiny_rig_close(&r);
}

Test(deltanet, qwen35_prefill_and_decode_match_float64_reference) { check_family("qwen35", 96, 2e-5); }

Test(deltanet, qwen35moe_shared_expert_matches_float64_reference) { check_family("qwen35moe", 88, 2e-5); }

Test(deltanet, qwen3next_grouped_heads_and_fused_beta_alpha_match_float64_reference) {
    check_family("qwen3next", 80, 2e-5);
}

/* Two sequences' entries interleaved in one batch, each carrying its own state: every row equals
 * the reference of its own sequence. */
Test(deltanet, interleaved_sequences_keep_their_own_state) {
    hy_spec hs = small_spec("qwen35");
    tiny_rig r;
    enum { N = 40 };
    rig_open(&r, &hs, 2 * N);
    int V = hs.base.n_vocab;
    int32_t a[N], b[N];
    tiny_random_tokens(a, N, V, 1);
    tiny_random_tokens(b, N, V, 2);
    double *ra = malloc(sizeof(double) * N * V), *rb = malloc(sizeof(double) * N * V);
    hy_ref_forward(&hs, r.path, a, N, ra);
    hy_ref_forward(&hs, r.path, b, N, rb);
    kv_seq *sa = tiny_rig_seq(&r), *sb = tiny_rig_seq(&r);
    float *lg = malloc(sizeof(float) * 2 * N * V);
    eval_run(r.e, sa, a, 8, lg); /* a is ahead by 8 */
    batch_entry bt[2 * N];
    int n = 0;
    for (int i = 0; i < N; i++) {
        if (i + 8 < N) bt[n++] = (batch_entry){sa, a[i + 8], i + 8, true};
        bt[n++] = (batch_entry){sb, b[i], i, true};
    }
    attnd_err err;
    cr_assert_eq(engine_eval(r.e, bt, n, lg, &err), ATTND_OK, "%s", err.msg);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        const double *ref = bt[t].seq == sa ? ra + (size_t)bt[t].pos * V : rb + (size_t)bt[t].pos * V;
        worst = fmax(worst, rel_err(lg + (size_t)t * V, ref, (size_t)V));
    }
    cr_expect(worst <= 2e-5, "interleaved batch: relative error %g", worst);
    free(ra), free(rb), free(lg);
    tiny_rig_close(&r);
}

/* kv_seq_truncate below the length goes back to 0 (a state cannot be cut), and evaluating again
 * from there gives the reference; a fork carries the parent's state on. */
Test(deltanet, truncation_restarts_and_fork_copies_the_state) {
    hy_spec hs = small_spec("qwen35");
    tiny_rig r;
    enum { N = 48, CUT = 20 };
    rig_open(&r, &hs, N);
    int V = hs.base.n_vocab;
    int32_t tok[N], alt[N];
    tiny_random_tokens(tok, N, V, 3);
    memcpy(alt, tok, sizeof(tok));
    tiny_random_tokens(alt + CUT, N - CUT, V, 4);
    double *rt = malloc(sizeof(double) * N * V), *ra = malloc(sizeof(double) * N * V);
    hy_ref_forward(&hs, r.path, tok, N, rt);
    hy_ref_forward(&hs, r.path, alt, N, ra);
    float *lg = malloc(sizeof(float) * N * V);
    kv_seq *s = tiny_rig_seq(&r);
    eval_run(r.e, s, tok, CUT, lg);
    kv_seq *child = NULL;
    cr_assert_eq(kv_seq_fork(&child, s, NULL), ATTND_OK);
    eval_run(r.e, child, alt + CUT, N - CUT, lg + (size_t)CUT * V);
    cr_expect(rel_err(lg + (size_t)CUT * V, ra + (size_t)CUT * V, (size_t)(N - CUT) * V) <= 2e-5, "fork");
    kv_seq_destroy(child);
    eval_run(r.e, s, tok + CUT, N - CUT, lg + (size_t)CUT * V); /* the parent's state was not touched */
    cr_expect(rel_err(lg, rt, (size_t)N * V) <= 2e-5, "parent after the fork");
    kv_seq_truncate(s, CUT);
    cr_assert_eq(kv_seq_len(s), 0, "a hybrid sequence truncated below its length restarts");
    eval_run(r.e, s, alt, N, lg);
    cr_expect(rel_err(lg, ra, (size_t)N * V) <= 2e-5, "recomputed after the truncation");
    free(rt), free(ra), free(lg);
    tiny_rig_close(&r);
}

/* The state is part of a sequence's memory: the pool counts it once per sequence, and a pool
 * without room for it refuses the reservation. */
Test(deltanet, state_counts_in_the_budget) {
    hy_spec hs = small_spec("qwen35");
    tiny_rig r;
    rig_open(&r, &hs, 8);
    size_t st = kv_state_bytes(r.m);
    /* 3 layers of (3 x 8192 conv tail + 32 x 128 x 128 state) floats */
    cr_assert_eq(st, (size_t)3 * (3 * 8192 + 32 * 128 * 128) * sizeof(float));
    kv_seq *s = tiny_rig_seq(&r);
    cr_assert_eq(kv_pool_bytes_used(r.pool), 0);
    int32_t t = 7;
    eval_run(r.e, s, &t, 1, (float[320]){0});
    size_t per_block = kv_pool_bytes_for(r.pool, 1) - st;
    cr_assert_eq(kv_pool_bytes_used(r.pool), per_block + st);
    cr_assert_eq(kv_seq_bytes(s), per_block + st);
    cr_assert_eq(kv_bytes_per_token(r.m, KV_F16), (size_t)2 * 1 * 2 * 256 * 2, "only the attention layer caches K/V");
    kv_seq *child = NULL;
    cr_assert_eq(kv_seq_fork(&child, s, NULL), ATTND_OK);
    cr_assert_eq(kv_pool_bytes_used(r.pool), per_block + 2 * st, "the fork copies the state");
    kv_seq_destroy(child);
    cr_assert_eq(kv_pool_bytes_used(r.pool), per_block + st);
    tiny_rig_close(&r);

    attnd_err err;
    model *m = NULL;
    kv_pool *pool = NULL;
    char path[256];
    tiny_tmpname(path, sizeof(path), "q35budget");
    cr_assert_eq(hy_write(path, &hs), 0);
    cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(kv_pool_create(&pool, m, st, KV_F32, &err), ATTND_ERR_INVALID, "one block and one state do not fit");
    cr_assert_eq(kv_pool_create(&pool, m, st + per_block, KV_F32, &err), ATTND_OK, "%s", err.msg);
    engine *e = NULL;
    cr_assert_eq(engine_create(&e, m, 4, 1, &err), ATTND_OK, "%s", err.msg);
    kv_seq *a = NULL, *b = NULL;
    cr_assert_eq(kv_seq_create(&a, pool, NULL), ATTND_OK);
    cr_assert_eq(kv_seq_create(&b, pool, NULL), ATTND_OK);
    float lg[320];
    cr_assert_eq(engine_eval(e, &(batch_entry){a, 5, 0, true}, 1, lg, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(engine_eval(e, &(batch_entry){b, 5, 0, true}, 1, lg, &err), ATTND_ERR_NOMEM, "no room for b's state");
    cr_expect_eq(kv_pool_bytes_used(pool), st + per_block, "the refused reservation took nothing");
    kv_seq *f = NULL;
    cr_expect_eq(kv_seq_fork(&f, a, NULL), ATTND_ERR_NOMEM, "no room for a fork's state");
    kv_seq_destroy(a), kv_seq_destroy(b);
    engine_destroy(e);
    kv_pool_destroy(pool);
    model_destroy(m);
    unlink(path);
}

/* block_count includes the MTP block; it is loaded as read and not run: the logits are those of
 * the same file without it. Speculation works on hybrid models (its verify keeps each step's
 * state: test_kv_state.c). */
Test(deltanet, mtp_blocks_are_not_part_of_the_main_pass) {
    hy_spec hs = small_spec("qwen35"), mtp = hs;
    mtp.n_mtp = 1;
    tiny_rig a, b;
    rig_open(&a, &hs, 16);
    rig_open(&b, &mtp, 16);
    cr_assert_eq(model_info_get(b.m)->n_layer, 4);
    cr_assert_eq(model_info_get(b.m)->n_mtp_layers, 1);
    cr_assert_eq(model_info_get(b.m)->n_recurrent_layers, 3);
    cr_assert(spec_supported(b.m));
    int32_t tok[16];
    tiny_random_tokens(tok, 16, 320, 9);
    float *la = malloc(sizeof(float) * 16 * 320), *lb = malloc(sizeof(float) * 16 * 320);
    eval_run(a.e, tiny_rig_seq(&a), tok, 16, la);
    eval_run(b.e, tiny_rig_seq(&b), tok, 16, lb);
    cr_assert_eq(memcmp(la, lb, sizeof(float) * 16 * 320), 0);
    free(la), free(lb);
    tiny_rig_close(&a);
    tiny_rig_close(&b);
}

/* A file whose DeltaNet sizes attnd does not compute (value heads not a multiple of the key
 * heads) is refused with the reason. */
Test(deltanet, unsupported_sizes_are_refused_by_name) {
    hy_spec hs = small_spec("qwen35");
    hs.hv = 24, hs.hk = 16;
    char path[256];
    tiny_tmpname(path, sizeof(path), "q35bad");
    cr_assert_eq(hy_write(path, &hs), 0);
    model *m = NULL;
    attnd_err err;
    cr_assert_eq(model_load(&m, path, &err), ATTND_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "Gated DeltaNet") != NULL, "%s", err.msg);
    unlink(path);
}

/* tests/data/reference-hybrid.json: llama.cpp's 40 greedy tokens after the 88-token prompt, for
 * the small model of each hybrid family (family_specs.h; regenerate.sh writes them with
 * tiny_model, the same files as here). attnd reproduces every one. */
Test(deltanet, greedy_reproduces_llama_cpp_after_a_long_prompt) {
    json_error_t je;
    json_t *refj = json_load_file(ATTND_DATA_DIR "/reference-hybrid.json", 0, &je);
    cr_assert(refj, "tests/data/reference-hybrid.json: %s", je.text);
    json_t *cases = json_object_get(refj, "cases");
    cr_assert_eq(json_array_size(cases), N_HYBRID);
    int32_t prompt[HYBRID_N_PROMPT];
    hybrid_prompt(prompt);
    for (size_t i = 0; i < N_HYBRID; i++) {
        json_t *c = json_array_get(cases, i), *want = json_object_get(c, "tokens");
        cr_assert_str_eq(json_string_value(json_object_get(c, "family")), HYBRID_NAMES[i]);
        cr_assert_eq(json_array_size(json_object_get(c, "prompt_tokens")), HYBRID_N_PROMPT);
        for (int t = 0; t < HYBRID_N_PROMPT; t++)
            cr_assert_eq(json_integer_value(json_array_get(json_object_get(c, "prompt_tokens"), (size_t)t)), prompt[t]);
        cr_assert_eq(json_array_size(want), HYBRID_N_GEN);
        hy_spec hs = hybrid_small(HYBRID_NAMES[i]);
        tiny_rig r;
        rig_open(&r, &hs, 32);
        int32_t out[HYBRID_N_GEN];
        int n_out;
        engine_gen g = {.n_predict = HYBRID_N_GEN};
        attnd_err err;
        cr_assert_eq(engine_generate(r.e, tiny_rig_seq(&r), prompt, HYBRID_N_PROMPT, &g, out, &n_out, NULL, &err),
                     ATTND_OK, "%s", err.msg);
        cr_assert_eq(n_out, HYBRID_N_GEN);
        for (int t = 0; t < HYBRID_N_GEN; t++)
            cr_expect_eq(out[t], json_integer_value(json_array_get(want, (size_t)t)), "%s: token %d: attnd %d, llama.cpp %lld",
                         HYBRID_NAMES[i], t, out[t], (long long)json_integer_value(json_array_get(want, (size_t)t)));
        tiny_rig_close(&r);
    }
    json_decref(refj);
}

/* `attnd info --json` reports the recurrent layers and their state per sequence beside the
 * attention layers' bytes per token. */
Test(deltanet, info_reports_state_bytes_per_sequence) {
    hy_spec hs = hybrid_small("qwen35");
    char path[256], cmd[700];
    tiny_tmpname(path, sizeof(path), "q35info");
    cr_assert_eq(hy_write(path, &hs), 0);
    snprintf(cmd, sizeof(cmd), "'%s' info --model '%s' --json", ATTND_BINARY, path);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    json_error_t je;
    json_t *j = json_loadf(p, 0, &je);
    cr_assert_eq(pclose(p), 0);
    cr_assert(j, "%s", je.text);
    json_t *kl = json_object_get(j, "kv_layers");
    cr_expect_eq(json_integer_value(json_object_get(kl, "global")), 1);
    cr_expect_eq(json_integer_value(json_object_get(kl, "recurrent")), 3);
    cr_expect_eq(json_integer_value(json_object_get(kl, "state_bytes_per_sequence")),
                 3 * (3 * 8192 + 32 * 128 * 128) * 4);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "kv_bytes_per_token"), "f16")), 2 * 2 * 256 * 2,
                 "one attention layer's K and V, 2 heads of 256");
    json_decref(j);
    unlink(path);
}

/* What hybrid models do not support yet is refused by name rather than answered wrongly: a
 * DeltaNet layer has no softmax weights to capture and no heads to ablate. */
Test(deltanet, attention_capture_and_ablation_are_refused_by_name) {
    hy_spec hs = hybrid_small("qwen35");
    tiny_rig r;
    rig_open(&r, &hs, 4);
    const model_info *mi = model_info_get(r.m);
    attnd_err err;
    const char *field = NULL;
    attn_capture_params p = {.n_positions = 4};
    cr_assert_eq(attn_capture_check(mi, &p, &field, &err), ATTND_ERR_UNSUPPORTED);
    cr_expect_str_eq(field, "model");
    cr_expect(strstr(err.msg, "Gated DeltaNet") != NULL, "%s", err.msg);
    engine_ablation_head h = {.layer = 3, .head = 0, .scale = 0};
    cr_assert_eq(engine_ablation_check(mi, &(engine_ablation){.heads = &h, .n = 1}, &err), ATTND_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "Gated DeltaNet") != NULL, "%s", err.msg);
    tiny_rig_close(&r);
}
