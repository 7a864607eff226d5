/*
 * test_deltanet.c — the hybrid Gated DeltaNet families (qwen35, qwen35moe): the forward pass
 * against the float64 reference of hybrid_fixture.h at the real DeltaNet head sizes (prefill,
 * decode one token at a time, batches mixing sequences), llama.cpp's greedy tokens after a long
 * prompt (tests/data/reference-hybrid.json), the recurrent state of a sequence
 * (truncation without checkpoints recomputes from 0, forks copy it, the budget counts it; the
 * checkpoints are test_kv_state.c's), the MTP blocks left out
 * of the main pass, the MTP block as the model's own draft (its logits against the float64
 * reference, greedy output unchanged by its drafts), and files refused by name.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/attn_capture.h"
#include "attnd/spec.h"
#include "deltanet.h"
#include "quant.h"
#include "engine_rig.h"
#include "family_specs.h"
#include "test_scale.h"
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
    n_tok = test_size(n_tok, 68); /* still past the chunked form's 64 */
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
    enum { N_FULL = 40 };
    const int N = test_size(N_FULL, 20);
    rig_open(&r, &hs, 2 * N);
    int V = hs.base.n_vocab;
    int32_t a[N_FULL], b[N_FULL];
    tiny_random_tokens(a, N, V, 1);
    tiny_random_tokens(b, N, V, 2);
    double *ra = malloc(sizeof(double) * (size_t)N * V), *rb = malloc(sizeof(double) * (size_t)N * V);
    hy_ref_forward(&hs, r.path, a, N, ra);
    hy_ref_forward(&hs, r.path, b, N, rb);
    kv_seq *sa = tiny_rig_seq(&r), *sb = tiny_rig_seq(&r);
    float *lg = malloc(sizeof(float) * 2 * (size_t)N * V);
    eval_run(r.e, sa, a, 8, lg); /* a is ahead by 8 */
    batch_entry bt[2 * N_FULL];
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
    enum { N_FULL = 48 };
    const int N = test_size(N_FULL, 28), CUT = test_size(20, 12);
    rig_open(&r, &hs, N);
    int V = hs.base.n_vocab;
    int32_t tok[N_FULL], alt[N_FULL];
    tiny_random_tokens(tok, N, V, 3);
    memcpy(alt, tok, sizeof(int32_t) * (size_t)N);
    tiny_random_tokens(alt + CUT, N - CUT, V, 4);
    double *rt = malloc(sizeof(double) * (size_t)N * V), *ra = malloc(sizeof(double) * (size_t)N * V);
    hy_ref_forward(&hs, r.path, tok, N, rt);
    hy_ref_forward(&hs, r.path, alt, N, ra);
    float *lg = malloc(sizeof(float) * (size_t)N * V);
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

/* The MTP block's logits after a prompt (its cache written by the main pass's evaluations, in one
 * batch or a token at a time) against the float64 reference of hybrid_fixture.h (hy_ref_mtp); a
 * fork's block sees the same cache and hidden state: the same logits, bit for bit. */
static void check_mtp_logits(const char *arch) {
    hy_spec hs = small_spec(arch);
    hs.n_mtp = 1;
    tiny_rig r;
    rig_open(&r, &hs, 16);
    cr_assert(model_info_get(r.m)->mtp, "%s: the MTP block did not load", arch);
    enum { N = 12 };
    int V = hs.base.n_vocab, E = hs.base.n_embd;
    int32_t tok[N];
    tiny_random_tokens(tok, N, V, 21);
    double *ref = malloc(sizeof(double) * N * (size_t)V);
    hy_ref_mtp(&hs, r.path, tok, N, ref);
    float *lg = malloc(sizeof(float) * N * (size_t)V), *h = malloc(sizeof(float) * (size_t)E);
    kv_seq *a = tiny_rig_seq(&r), *b = tiny_rig_seq(&r);
    eval_run(r.e, a, tok, N - 1, lg); /* one batch */
    for (int t = 0; t < N - 1; t++) eval_run(r.e, b, tok + t, 1, lg); /* a token at a time */
    attnd_err err;
    for (int i = 0; i < 2; i++) {
        kv_seq *s = i ? b : a;
        engine_mtp_entry in = {s, tok[N - 1], N - 1, NULL};
        cr_assert_eq(engine_mtp_step(r.e, &in, 1, lg, h, &err), ATTND_OK, "%s", err.msg);
        cr_expect_eq(kv_seq_len(s), N - 1, "a draft step does not grow the sequence");
        double e = rel_err(lg, ref + (size_t)(N - 1) * V, (size_t)V);
        cr_expect(e <= 2e-5, "%s MTP logits (%s): relative error %g", arch, i ? "decode" : "prefill", e);
    }
    engine_mtp_entry in = {a, tok[N - 1], N - 1, NULL};
    cr_assert_eq(engine_mtp_step(r.e, &in, 1, lg, h, &err), ATTND_OK, "%s", err.msg);
    kv_seq *f = NULL;
    cr_assert_eq(kv_seq_fork(&f, a, &err), ATTND_OK, "%s", err.msg);
    in.seq = f;
    cr_assert_eq(engine_mtp_step(r.e, &in, 1, lg + V, h, &err), ATTND_OK, "%s", err.msg);
    cr_expect(memcmp(lg, lg + V, sizeof(float) * (size_t)V) == 0, "%s: a fork's MTP logits differ", arch);
    kv_seq_destroy(f);
    engine_mtp_entry bad = {a, tok[0], N - 3, NULL}; /* before the sequence's length */
    cr_expect_eq(engine_mtp_step(r.e, &bad, 1, lg, h, &err), ATTND_ERR_INVALID);
    free(ref), free(lg), free(h);
    tiny_rig_close(&r);
}

Test(deltanet, qwen35_mtp_logits_match_float64_reference) { check_mtp_logits("qwen35"); }
Test(deltanet, qwen35moe_mtp_logits_match_float64_reference) { check_mtp_logits("qwen35moe"); }
Test(deltanet, qwen3next_mtp_logits_match_float64_reference) { check_mtp_logits("qwen3next"); }

/* Greedy decoding drafting with the MTP block (every step, draft_max tokens) gives exactly the
 * tokens of decoding without it, its rejections rolled back through the hybrid's kept states:
 * with a random block (nearly every draft rejected) and with one that copies the main model's
 * prediction (hy_spec.mtp_good: most drafts kept). */
static void check_mtp_greedy(const char *arch, bool good) {
    hy_spec hs = small_spec(arch);
    hs.n_mtp = 1, hs.mtp_good = good, hs.mtp_share = 1;
    tiny_rig r;
    rig_open(&r, &hs, 40);
    enum { NP = 20, NG_FULL = 40 };
    const int NG = test_size(NG_FULL, 16);
    int32_t prompt[NP], plain[NG_FULL], drafted[NG_FULL];
    tiny_random_tokens(prompt, NP, hs.base.n_vocab, 33);
    kv_seq *a = tiny_rig_seq(&r), *b = tiny_rig_seq(&r);
    attnd_err err;
    int n_a = 0, n_b = 0;
    engine_timings ta, tb;
    engine_gen g = {.n_predict = NG};
    cr_assert_eq(engine_generate(r.e, a, prompt, NP, &g, plain, &n_a, &ta, &err), ATTND_OK, "%s", err.msg);
    spec_params p;
    spec_params_default(&p);
    p.draft_max = 4, p.fixed = true, p.draft_min_p = 0, p.mtp = r.e, p.mtp_seq = b;
    spec *sp = NULL;
    cr_assert_eq(spec_create(&sp, &p, &err), ATTND_OK, "%s", err.msg);
    g.spec = sp;
    cr_assert_eq(engine_generate(r.e, b, prompt, NP, &g, drafted, &n_b, &tb, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(n_a, NG);
    cr_assert_eq(n_b, NG);
    for (int i = 0; i < NG; i++) cr_expect_eq(drafted[i], plain[i], "%s: token %d differs with MTP drafts", arch, i);
    cr_expect_eq(kv_seq_len(a), kv_seq_len(b));
    cr_expect(tb.n_drafted > 0, "%s: the MTP block drafted nothing", arch);
    if (good) cr_expect_gt(2 * tb.n_accepted, tb.n_drafted, "%s: a copying block's drafts are mostly kept", arch);
    int64_t d, k;
    spec_totals(sp, &d, &k);
    cr_expect_eq(d, tb.n_drafted);
    cr_expect_eq(k, tb.n_accepted);
    if (getenv("ATTND_TEST_VERBOSE")) fprintf(stderr, "%s: %d drafted, %d kept\n", arch, tb.n_drafted, tb.n_accepted);
    spec_destroy(sp);
    tiny_rig_close(&r);
}

Test(deltanet, qwen35_mtp_drafts_leave_greedy_output_unchanged) {
    check_mtp_greedy("qwen35", false);
    check_mtp_greedy("qwen35", true);
}

Test(deltanet, qwen35moe_mtp_drafts_leave_greedy_output_unchanged) { check_mtp_greedy("qwen35moe", true); }

/* A pool without the block's cache (the setting off) holds the main layers only, and MTP drafting
 * is refused for its sequences. */
Test(deltanet, mtp_off_leaves_the_block_uncached) {
    hy_spec hs = small_spec("qwen35");
    hs.n_mtp = 1;
    tiny_rig r;
    rig_open(&r, &hs, 16);
    attnd_err err;
    size_t with = kv_pool_bytes_per_token(r.pool);
    cr_assert_eq(kv_pool_set_mtp(r.pool, false, &err), ATTND_OK, "%s", err.msg);
    cr_expect_lt(kv_pool_bytes_per_token(r.pool), with);
    cr_expect_eq(kv_pool_set_mtp(r.pool, true, &err), ATTND_ERR_INVALID);
    kv_seq *s = tiny_rig_seq(&r);
    spec_params p;
    spec_params_default(&p);
    p.mtp = r.e, p.mtp_seq = s;
    spec *sp = NULL;
    cr_expect_eq(spec_create(&sp, &p, &err), ATTND_ERR_INVALID);
    tiny_rig_close(&r);
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
        int n_out, n_gen = test_size(HYBRID_N_GEN, 12); /* llama.cpp's first n_gen tokens */
        engine_gen g = {.n_predict = n_gen};
        attnd_err err;
        cr_assert_eq(engine_generate(r.e, tiny_rig_seq(&r), prompt, HYBRID_N_PROMPT, &g, out, &n_out, NULL, &err),
                     ATTND_OK, "%s", err.msg);
        cr_assert_eq(n_out, n_gen);
        for (int t = 0; t < n_gen; t++)
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
    cr_expect(json_is_false(json_object_get(json_object_get(j, "mtp"), "drafts")));
    json_decref(j);
    hs.n_mtp = 1; /* with an MTP block: it drafts, and its cache counts */
    cr_assert_eq(hy_write(path, &hs), 0);
    p = popen(cmd, "r");
    cr_assert(p);
    j = json_loadf(p, 0, &je);
    cr_assert_eq(pclose(p), 0);
    cr_assert(j, "%s", je.text);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "mtp"), "layers")), 1);
    cr_expect(json_is_true(json_object_get(json_object_get(j, "mtp"), "drafts")));
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "kv_bytes_per_token"), "f16")), 2 * 2 * 2 * 256 * 2,
                 "the MTP block's K and V beside the attention layer's");
    json_decref(j);
    /* `attnd generate` drafts with it by default, --no-mtp does not: the same tokens */
    json_t *runs[2];
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof(cmd), "'%s' generate --model '%s' --tokens 5,9,33,70,120,7 --n 12 --temp 0 --json%s",
                 ATTND_BINARY, path, i ? " --no-mtp" : "");
        p = popen(cmd, "r");
        cr_assert(p);
        runs[i] = json_loadf(p, 0, &je);
        cr_assert_eq(pclose(p), 0);
        cr_assert(runs[i], "%s", je.text);
    }
    cr_expect(json_equal(json_object_get(runs[0], "tokens"), json_object_get(runs[1], "tokens")));
    cr_expect_gt(json_integer_value(json_object_get(json_object_get(runs[0], "timings"), "drafted")), 0);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(runs[1], "timings"), "drafted")), 0);
    json_decref(runs[0]), json_decref(runs[1]);
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

/* ---- the recurrence's two forms, against float64 (deltanet.h, one layer on its own) ---- */

/* A random DeltaNet layer at the real head size (dk = dv = 128) and its inputs for n entries:
 * decays spread from near 1 (long memory, the hard case for the chunked form's sums) to e^-30
 * (value head 0: its decays underflow within a chunk). */
typedef struct dn_case {
    dn_dims d;
    int n;
    float *qkv, *z, *beta, *alpha; /* (n, C), (n, hv dv), (n, hv), (n, hv) */
    float *qkv0;                   /* (n, C) qkv as made (dn_forward overwrites qkv with the conv's output) */
    float conv_w[4 * 1024], dt_bias[8], ssm_a[8], norm_w[128];
} dn_case;

static void dn_case_init(dn_case *c, int n, bool grouped, uint64_t seed) {
    memset(c, 0, sizeof(*c));
    c->d = (dn_dims){.K = 4, .hk = 2, .hv = 4, .dk = 128, .dv = 128, .eps = 1e-6f, .grouped = grouped};
    c->d.conv_dim = 2 * c->d.hk * c->d.dk + c->d.hv * c->d.dv;
    c->n = n;
    int C = c->d.conv_dim, VD = c->d.hv * c->d.dv, hv = c->d.hv;
    c->qkv = malloc(sizeof(float) * (size_t)n * C), c->z = malloc(sizeof(float) * (size_t)n * VD);
    c->beta = malloc(sizeof(float) * (size_t)n * hv), c->alpha = malloc(sizeof(float) * (size_t)n * hv);
    c->qkv0 = malloc(sizeof(float) * (size_t)n * C);
    for (size_t i = 0; i < (size_t)n * C; i++) c->qkv0[i] = c->qkv[i] = tiny_uniform(&seed, 1.0f);
    for (size_t i = 0; i < (size_t)n * VD; i++) c->z[i] = tiny_uniform(&seed, 2.0f);
    for (size_t i = 0; i < (size_t)n * hv; i++) c->beta[i] = tiny_uniform(&seed, 2.0f), c->alpha[i] = tiny_uniform(&seed, 0.5f);
    for (int i = 0; i < C * c->d.K; i++) c->conv_w[i] = tiny_uniform(&seed, 0.8f);
    for (int h = 0; h < hv; h++) { /* softplus(dt_bias) from 1e-3 to 0.1, a from -1 to -16 */
        float dt = expf(-6.9f + 2.3f * (float)h / (float)(hv - 1) * 2.0f);
        c->dt_bias[h] = logf(expm1f(dt));
        c->ssm_a[h] = h == 0 ? -300.0f : -1.0f - 15.0f * fabsf(tiny_uniform(&seed, 1.0f));
    }
    for (int i = 0; i < c->d.dv; i++) c->norm_w[i] = 1.0f + tiny_uniform(&seed, 0.3f);
}

static void dn_case_free(dn_case *c) { free(c->qkv0), free(c->qkv), free(c->z), free(c->beta), free(c->alpha); }

static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double ref_silu(double x) { return x * ref_sigmoid(x); }

/* Entry t of c through the layer in float64, state st (deltanet.h's layout) carried on; out (hv dv). */
static void dn_ref_entry(const dn_case *c, int t, double *st, double *out) {
    const dn_dims *d = &c->d;
    int C = d->conv_dim, K = d->K, dk = d->dk, dv = d->dv;
    double x[1024], u[128];
    for (int ch = 0; ch < C; ch++) {
        double acc = 0, in = c->qkv0[(size_t)t * C + ch];
        for (int k = 0; k < K - 1; k++) acc += st[(size_t)k * C + ch] * c->conv_w[ch * K + k];
        acc += in * c->conv_w[ch * K + K - 1];
        for (int k = 0; k + 1 < K - 1; k++) st[(size_t)k * C + ch] = st[(size_t)(k + 1) * C + ch];
        st[(size_t)(K - 2) * C + ch] = in;
        x[ch] = ref_silu(acc);
    }
    for (int h = 0; h < 2 * d->hk; h++) {
        double ss = 0;
        for (int i = 0; i < dk; i++) ss += x[h * dk + i] * x[h * dk + i];
        for (int i = 0; i < dk; i++) x[h * dk + i] /= fmax(sqrt(ss), d->eps);
    }
    for (int h = 0; h < d->hv; h++) {
        int kh = d->grouped ? h / (d->hv / d->hk) : h % d->hk;
        const double *q = x + kh * dk, *k = x + (d->hk + kh) * dk, *v = x + 2 * d->hk * dk + h * dv;
        double beta = ref_sigmoid(c->beta[(size_t)t * d->hv + h]), sp = c->alpha[(size_t)t * d->hv + h] + c->dt_bias[h];
        double decay = exp(c->ssm_a[h] * (sp > 20 ? sp : log1p(exp(sp))));
        double *S = st + (size_t)(K - 1) * C + (size_t)h * dv * dk; /* S[c * dk + i] = S[i][c] */
        for (int i = 0; i < dv * dk; i++) S[i] *= decay;
        for (int cc = 0; cc < dv; cc++) {
            double sk = 0;
            for (int i = 0; i < dk; i++) sk += S[cc * dk + i] * k[i];
            u[cc] = beta * (v[cc] - sk);
        }
        double ss = 0, *o = out + h * dv;
        for (int cc = 0; cc < dv; cc++) {
            double s = 0;
            for (int i = 0; i < dk; i++) S[cc * dk + i] += k[i] * u[cc], s += S[cc * dk + i] * q[i];
            o[cc] = s / sqrt((double)dk), ss += o[cc] * o[cc];
        }
        for (int cc = 0; cc < dv; cc++)
            o[cc] = o[cc] / sqrt(ss / dv + d->eps) * c->norm_w[cc] * ref_silu(c->z[(size_t)t * d->hv * dv + h * dv + cc]);
    }
}

/* max |a - ref| / max |ref| over n values. */
static double rel_err_max(const float *a, const double *ref, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - ref[i])), scale = fmax(scale, fabs(ref[i]));
    cr_assert(scale > 1e-3, "degenerate case");
    return worst / scale;
}

/* A job over c's entries [t0, t0 + n) of one sequence (state st, float) as one batch; out (n, hv dv). */
static dn_job dn_case_job(const dn_case *c, int t0, int n, float **st, int *order, int *run, float *scratch,
                          float *out, dn_form form, int n_threads) {
    size_t VD = (size_t)c->d.hv * c->d.dv;
    for (int i = 0; i < n; i++) order[i] = i;
    run[0] = 0, run[1] = n;
    return (dn_job){.d = &c->d, .n = n, .order = order, .run_start = run, .n_runs = 1, .state = st,
                    .qkv = c->qkv + (size_t)t0 * c->d.conv_dim, .z = c->z + (size_t)t0 * VD,
                    .beta = c->beta + (size_t)t0 * c->d.hv, .alpha = c->alpha + (size_t)t0 * c->d.hv, .conv_w = c->conv_w,
                    .dt_bias = c->dt_bias, .ssm_a = c->ssm_a, .norm_w = c->norm_w, .out = out, .scratch = scratch,
                    .form = form, .n_threads = n_threads};
}

/* Prefixes of one sequence the tests compare at, and the reference's state at each. */
static const int DN_ENDS[] = {1, 41, 63, 64, 65, 70, 130, 200};
#define N_DN_ENDS ((int)ATTND_ARRAY_LEN(DN_ENDS))

/* The float64 reference over c's first n entries from a zero state: out (n, hv dv), and the state
 * after each length of DN_ENDS (states, (N_DN_ENDS, dn_state_floats)). */
static void dn_ref_run(const dn_case *c, int n, double *out, double *states) {
    size_t SF = dn_state_floats(&c->d), VD = (size_t)c->d.hv * c->d.dv;
    double *st = calloc(SF, sizeof(double));
    for (int t = 0; t < n; t++) {
        dn_ref_entry(c, t, st, out + (size_t)t * VD);
        for (int e = 0; e < N_DN_ENDS; e++)
            if (DN_ENDS[e] == t + 1) memcpy(states + (size_t)e * SF, st, sizeof(double) * SF);
    }
    free(st);
}

static const double *dn_ref_state(const double *states, size_t SF, int len) {
    for (int e = 0; e < N_DN_ENDS; e++)
        if (DN_ENDS[e] == len) return states + (size_t)e * SF;
    cr_assert_fail("no reference state at length %d", len);
    return NULL;
}

/* One sequence prefilled as the batches seg[0], seg[1], ... (each from the state the previous
 * left), in each form on 2 threads: every output and the state after each batch equal float64
 * within 1e-4 relative. */
static void check_forms(const dn_case *cc, const double *rout, const double *rst, const int *seg, int n_seg) {
    dn_case c = *cc;
    size_t SF = dn_state_floats(&c.d), VD = (size_t)c.d.hv * c.d.dv;
    float *st = malloc(sizeof(float) * SF), *out = malloc(sizeof(float) * (size_t)c.n * VD);
    float *scratch = malloc(sizeof(float) * 2 * dn_scratch_floats(&c.d));
    int *order = malloc(sizeof(int) * (size_t)c.n), run[2];
    const char *names[] = {"auto", "sequential", "chunked"};
    for (dn_form f = DN_FORM_AUTO; f <= DN_FORM_CHUNKED; f++) {
        memcpy(c.qkv, c.qkv0, sizeof(float) * (size_t)c.n * c.d.conv_dim);
        memset(st, 0, sizeof(float) * SF);
        for (int i = 0, t0 = 0; i < n_seg; t0 += seg[i++]) {
            dn_job j = dn_case_job(&c, t0, seg[i], &st, order, run, scratch, out + (size_t)t0 * VD, f, 2);
            dn_forward(&j);
            double eo = rel_err_max(out + (size_t)t0 * VD, rout + (size_t)t0 * VD, (size_t)seg[i] * VD);
            double es = rel_err_max(st, dn_ref_state(rst, SF, t0 + seg[i]), SF);
            if (getenv("ATTND_TEST_VERBOSE")) fprintf(stderr, "%s %d+%d: out %g state %g\n", names[f], t0, seg[i], eo, es);
            cr_expect(eo <= 1e-4, "%s form, entries %d + %d: outputs off by %g relative", names[f], t0, seg[i], eo);
            cr_expect(es <= 1e-4, "%s form, entries %d + %d: state off by %g relative", names[f], t0, seg[i], es);
        }
    }
    free(st), free(out), free(scratch), free(order);
}

/* Prompt lengths around the chunk of 64 (1, 63, 64, 65, 130) and a prompt continuing a sequence
 * that already has a state (70 entries, then 130 more), for both head orders. */
Test(deltanet, chunked_and_sequential_forms_match_float64_across_chunk_boundaries) {
    for (int grouped = 0; grouped < 2; grouped++) {
        dn_case c;
        dn_case_init(&c, 200, grouped, 21 + (uint64_t)grouped);
        size_t SF = dn_state_floats(&c.d), VD = (size_t)c.d.hv * c.d.dv;
        double *rout = malloc(sizeof(double) * 200 * VD), *rst = malloc(sizeof(double) * N_DN_ENDS * SF);
        dn_ref_run(&c, 200, rout, rst);
        static const int lens[] = {1, 63, 64, 65, 130};
        for (int pass = 0; pass < 2; pass++) { /* the chunked form's products: vector kernels, then portable */
            quant_isa saved = quant_isa_force(pass == 0 ? quant_isa_best() : QUANT_ISA_PORTABLE);
            for (size_t i = 0; i < ATTND_ARRAY_LEN(lens); i++) check_forms(&c, rout, rst, &lens[i], 1);
            check_forms(&c, rout, rst, (const int[]){70, 130}, 2);
            quant_isa_force(saved);
        }
        free(rout), free(rst);
        dn_case_free(&c);
    }
}

/* d = the layer of c with rows first, first + 2, ... of c's inputs (n of them). */
static void dn_case_rows(dn_case *d, const dn_case *c, int first, int n) {
    dn_case_init(d, n, c->d.grouped, 0);
    size_t C = (size_t)c->d.conv_dim, VD = (size_t)c->d.hv * c->d.dv, hv = (size_t)c->d.hv;
    for (int t = 0; t < n; t++) {
        size_t r = (size_t)first + 2 * (size_t)t;
        memcpy(d->qkv0 + t * C, c->qkv0 + r * C, sizeof(float) * C);
        memcpy(d->z + t * VD, c->z + r * VD, sizeof(float) * VD);
        memcpy(d->beta + t * hv, c->beta + r * hv, sizeof(float) * hv);
        memcpy(d->alpha + t * hv, c->alpha + r * hv, sizeof(float) * hv);
    }
    memcpy(d->conv_w, c->conv_w, sizeof(c->conv_w)), memcpy(d->dt_bias, c->dt_bias, sizeof(c->dt_bias));
    memcpy(d->ssm_a, c->ssm_a, sizeof(c->ssm_a)), memcpy(d->norm_w, c->norm_w, sizeof(c->norm_w));
}

/* Two sequences in one batch, entries interleaved (run 0 the even rows, run 1 the odd ones), in
 * the chunked form: a checkpoint inside run 0's first chunk (after its entry 41) ends a chunk
 * there and copies the state then; run 1 keeps a verify's record of its first 5 entries (the
 * state before them and their logs), which the sequential form gives it, and dn_replay rebuilds
 * the state after each. Every copy, rebuilt state, output and final state equals its sequence's
 * float64 reference. */
Test(deltanet, chunked_form_copies_checkpoints_and_leaves_verify_steps_sequential) {
    enum { N = 100, STEPS = 5, AT = 41 };
    dn_case c, ca, cb;
    dn_case_init(&c, 2 * N, false, 31);
    dn_case_rows(&ca, &c, 0, N), dn_case_rows(&cb, &c, 1, N);
    size_t SF = dn_state_floats(&c.d), VD = (size_t)c.d.hv * c.d.dv;
    double *ra = malloc(sizeof(double) * N * VD), *rb = malloc(sizeof(double) * N * VD);
    double *sa = calloc(SF, sizeof(double)), *sb = calloc(SF, sizeof(double));
    double *ckpt = malloc(sizeof(double) * SF), *steps = malloc(sizeof(double) * STEPS * SF);
    for (int t = 0; t < N; t++) {
        dn_ref_entry(&ca, t, sa, ra + (size_t)t * VD);
        dn_ref_entry(&cb, t, sb, rb + (size_t)t * VD);
        if (t == AT) memcpy(ckpt, sa, sizeof(double) * SF);
        if (t < STEPS) memcpy(steps + (size_t)t * SF, sb, sizeof(double) * SF);
    }

    float *st0 = calloc(SF, sizeof(float)), *st1 = calloc(SF, sizeof(float)), *st[2] = {st0, st1};
    size_t LF = dn_log_floats(&c.d);
    float *got_ckpt = malloc(sizeof(float) * SF), *got_steps = malloc(sizeof(float) * STEPS * SF);
    float *before = malloc(sizeof(float) * SF), *logs = malloc(sizeof(float) * STEPS * LF);
    float *out = malloc(sizeof(float) * 2 * N * VD), *scratch = malloc(sizeof(float) * 2 * dn_scratch_floats(&c.d));
    int order[2 * N], run[3] = {0, N, 2 * N};
    for (int t = 0; t < N; t++) order[t] = 2 * t, order[N + t] = 2 * t + 1;
    dn_snap snaps[2 * DN_SNAPS] = {{got_ckpt, AT, 1}, {NULL, 0, 0}};
    dn_steps steps_kept[2] = {{NULL, NULL, 0, 0}, {before, logs, N, STEPS}};
    dn_job j = {.d = &c.d, .n = 2 * N, .order = order, .run_start = run, .n_runs = 2, .state = st, .qkv = c.qkv,
                .z = c.z, .beta = c.beta, .alpha = c.alpha, .conv_w = c.conv_w, .dt_bias = c.dt_bias, .ssm_a = c.ssm_a,
                .norm_w = c.norm_w, .out = out, .snap = snaps, .snap_stride = SF, .steps = steps_kept,
                .log_stride = LF, .scratch = scratch, .form = DN_FORM_CHUNKED, .n_threads = 2};
    dn_forward(&j);
    for (int i = 0; i < STEPS; i++) dn_replay(&c.d, got_steps + i * SF, before, logs, LF, i + 1);

    double worst = 0;
    for (int t = 0; t < N; t++) {
        worst = fmax(worst, rel_err_max(out + (size_t)2 * t * VD, ra + (size_t)t * VD, VD));
        worst = fmax(worst, rel_err_max(out + (size_t)(2 * t + 1) * VD, rb + (size_t)t * VD, VD));
    }
    cr_expect(worst <= 1e-4, "outputs off by %g relative", worst);
    cr_expect(rel_err_max(got_ckpt, ckpt, SF) <= 1e-4, "checkpoint off by %g", rel_err_max(got_ckpt, ckpt, SF));
    for (int i = 0; i < STEPS; i++)
        cr_expect(rel_err_max(got_steps + i * SF, steps + i * SF, SF) <= 1e-4, "the state after step %d", i);
    cr_expect(rel_err_max(st0, sa, SF) <= 1e-4, "run 0's state");
    cr_expect(rel_err_max(st1, sb, SF) <= 1e-4, "run 1's state");
    free(st0), free(st1), free(got_ckpt), free(got_steps), free(out), free(scratch), free(before), free(logs);
    free(ra), free(rb), free(sa), free(sb), free(ckpt), free(steps);
    dn_case_free(&ca), dn_case_free(&cb), dn_case_free(&c);
}

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The sequential form's vector step (one pass per state row, AVX2) gives every bit of the portable
 * one, over 12 decode steps of one sequence whose value head 0 decays to subnormals at once; and
 * dn_forward hands the caller's floating-point mode back (it flushes subnormals while it runs). */
Test(deltanet, sequential_step_is_bit_exact_across_kernels_and_restores_the_fp_mode) {
    enum { N = 12 };
    dn_case c;
    dn_case_init(&c, N, false, 41);
    size_t SF = dn_state_floats(&c.d), VD = (size_t)c.d.hv * c.d.dv;
    float *st[2] = {calloc(SF, sizeof(float)), calloc(SF, sizeof(float))}, *out[2];
    int order[1], run[2];
    for (int pass = 0; pass < 2; pass++) {
        out[pass] = malloc(sizeof(float) * N * VD);
        quant_isa saved = quant_isa_force(pass == 0 ? quant_isa_best() : QUANT_ISA_PORTABLE);
        memcpy(c.qkv, c.qkv0, sizeof(float) * (size_t)N * c.d.conv_dim);
        for (int t = 0; t < N; t++) { /* one entry per call, as decode */
            dn_job j = dn_case_job(&c, t, 1, &st[pass], order, run, NULL, out[pass] + (size_t)t * VD,
                                   DN_FORM_SEQUENTIAL, 1);
#if defined(__x86_64__)
            unsigned csr = _mm_getcsr();
            dn_forward(&j);
            cr_assert_eq(_mm_getcsr(), csr, "dn_forward left MXCSR %#x, was %#x", _mm_getcsr(), csr);
#else
            dn_forward(&j);
#endif
        }
        quant_isa_force(saved);
    }
    cr_expect(memcmp(out[0], out[1], sizeof(float) * N * VD) == 0, "outputs differ between the kernels");
    cr_expect(memcmp(st[0], st[1], sizeof(float) * SF) == 0, "states differ between the kernels");
    double ref_out[N * 4 * 128], *ref_st = calloc(SF, sizeof(double));
    for (int t = 0; t < N; t++) dn_ref_entry(&c, t, ref_st, ref_out + (size_t)t * VD);
    cr_expect(rel_err_max(out[0], ref_out, N * VD) <= 1e-4, "outputs off the float64 reference");
    free(st[0]), free(st[1]), free(out[0]), free(out[1]), free(ref_st);
    dn_case_free(&c);
}
