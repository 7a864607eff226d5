/*
 * test_kv_state.c — checkpoints of a hybrid sequence's recurrent state (engine/kv_state.c): a
 * truncation goes back to the newest checkpoint at or below its target and recomputes only the
 * tokens after it, with logits bit-identical to recomputing from 0; checkpoints taken inside a
 * batch, at the interval while decoding, bounded per sequence (older ones thinned); shared by
 * forks and counted once in the budget. And the states a speculative verify keeps: rejected drafts
 * roll back exactly, so speculative greedy output is the plain one.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/spec.h"
#include "engine_rig.h"
#include "family_specs.h"

enum { N = 48, CUT = 20, EDIT = 30 };

static void rig_open(tiny_rig *r, int max_ckpt, int interval, size_t pool_mib) {
    hy_spec hs = hybrid_small("qwen35");
    char path[sizeof(r->path)];
    tiny_tmpname(path, sizeof(path), "kvstate");
    cr_assert_eq(hy_write(path, &hs), 0, "cannot write %s", path);
    tiny_rig_load(r, path, KV_F32, N, 2, pool_mib);
    r->sp = hs.base;
    memcpy(r->path, path, sizeof(path));
    attnd_err err;
    cr_assert_eq(kv_pool_set_checkpoints(r->pool, max_ckpt, interval, &err), ATTND_OK, "%s", err.msg);
}

/* Evaluates tok[0..n) at the end of s in one batch, every entry wanting logits (lg may be NULL). */
static void eval_run(engine *e, kv_seq *s, const int32_t *tok, int n, float *lg) {
    batch_entry b[N];
    int pos0 = kv_seq_len(s);
    for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tok[i], pos0 + i, lg != NULL};
    attnd_err err;
    cr_assert_eq(engine_eval(e, b, n, lg, &err), ATTND_OK, "%s", err.msg);
}

/* The two token lists: tok, and alt = tok with everything from EDIT on changed (an edited turn). */
static void edit_tokens(int32_t *tok, int32_t *alt, int V) {
    tiny_random_tokens(tok, N, V, 3);
    memcpy(alt, tok, sizeof(int32_t) * N);
    tiny_random_tokens(alt + EDIT, N - EDIT, V, 4);
}

/* A checkpoint asked for inside a prefill batch: truncating to EDIT goes back to it, only the
 * tokens after it are evaluated again, and their logits are bit for bit those of a sequence that
 * read the edited tokens from 0 in the same batches (the state copied mid-batch is the state a
 * batch ending there leaves). Without checkpoints the truncation goes back to 0. */
Test(kv_state, truncation_restores_the_checkpoint_and_recomputes_only_the_rest) {
    tiny_rig r;
    rig_open(&r, 4, 0, 256);
    int V = r.sp.n_vocab;
    int32_t tok[N], alt[N];
    edit_tokens(tok, alt, V);
    float *lg = malloc(sizeof(float) * N * V), *ref = malloc(sizeof(float) * N * V);
    kv_seq *s = tiny_rig_seq(&r), *fresh = tiny_rig_seq(&r);
    kv_seq_checkpoint_at(s, CUT);
    eval_run(r.e, s, tok, N, NULL);
    int pos[4];
    cr_assert_eq(kv_seq_checkpoints(s, pos, 4), 1);
    cr_assert_eq(pos[0], CUT, "the checkpoint asked for, taken inside the batch");
    kv_seq_truncate(s, EDIT);
    cr_assert_eq(kv_seq_len(s), CUT, "back to the checkpoint: %d tokens to recompute, not %d", EDIT - CUT, EDIT);
    eval_run(r.e, s, alt + CUT, N - CUT, lg);
    eval_run(r.e, fresh, alt, CUT, NULL);
    eval_run(r.e, fresh, alt + CUT, N - CUT, ref);
    cr_expect_eq(memcmp(lg, ref, sizeof(float) * (N - CUT) * V), 0, "restored logits differ from recomputed ones");
    kv_seq_truncate(s, CUT - 1);
    cr_expect_eq(kv_seq_len(s), 0, "no checkpoint at or below %d: back to 0", CUT - 1);
    cr_expect_eq(kv_seq_checkpoints(s, pos, 4), 0, "the checkpoints past the truncation are dropped");
    cr_expect_eq(kv_pool_checkpoint_bytes(r.pool), 0);
    free(lg), free(ref);
    tiny_rig_close(&r);

    rig_open(&r, 0, 0, 256); /* checkpoints off: as before */
    s = tiny_rig_seq(&r);
    kv_seq_checkpoint_at(s, CUT);
    eval_run(r.e, s, tok, N, NULL);
    kv_seq_truncate(s, EDIT);
    cr_expect_eq(kv_seq_len(s), 0, "without checkpoints a truncation recomputes from 0");
    tiny_rig_close(&r);
}

/* Decoding one token at a time takes one at each multiple of the interval; beyond the bound one
 * old one goes each time (kv_state.c's rule), so recent ones stay dense: with 4 kept every 8
 * tokens, after 64 tokens [32, 48, 56, 64] (8 goes for 40, 24 for 48, 16 for 56, 40 for 64). The
 * budget holds the blocks, the state and the 4 copies. */
Test(kv_state, decoding_checkpoints_at_the_interval_bounded_recent_ones_dense) {
    tiny_rig r;
    rig_open(&r, 4, 8, 256);
    int V = r.sp.n_vocab;
    int32_t tok[64];
    tiny_random_tokens(tok, 64, V, 9);
    kv_seq *s = tiny_rig_seq(&r);
    for (int i = 0; i < 64; i++) eval_run(r.e, s, tok + i, 1, NULL);
    int pos[8];
    cr_assert_eq(kv_seq_checkpoints(s, pos, 8), 4);
    cr_expect(pos[0] == 32 && pos[1] == 48 && pos[2] == 56 && pos[3] == 64, "kept %d %d %d %d", pos[0], pos[1], pos[2],
              pos[3]);
    size_t st = kv_state_bytes(r.m), block = kv_pool_bytes_for(r.pool, 1) - kv_pool_bytes_for(r.pool, 0);
    cr_expect_eq(kv_pool_bytes_for(r.pool, 0), 5 * st, "a sequence may hold its state and 4 checkpoints");
    cr_expect_eq(kv_pool_checkpoint_bytes(r.pool), 4 * st);
    cr_expect_eq(kv_pool_bytes_used(r.pool), block + 5 * st);
    cr_expect_eq(kv_seq_bytes(s), block + 5 * st);
    kv_seq_truncate(s, 50);
    cr_expect_eq(kv_seq_len(s), 48, "the newest checkpoint at or below 50");
    cr_expect_eq(kv_pool_checkpoint_bytes(r.pool), 2 * st, "56 and 64 are gone");
    tiny_rig_close(&r);
}

/* A fork holds its parent's checkpoints without copying them (the budget counts each once),
 * keeps them after the parent is gone, and restores from them; what the fork takes afterwards is
 * its own. A budget with no room for a checkpoint takes none and the evaluation goes on. */
Test(kv_state, forks_share_checkpoints_and_the_budget_counts_each_once) {
    tiny_rig r;
    rig_open(&r, 4, 0, 256);
    int V = r.sp.n_vocab;
    int32_t tok[N], alt[N];
    edit_tokens(tok, alt, V);
    size_t st = kv_state_bytes(r.m);
    kv_seq *parent = NULL, *child = NULL, *fresh = tiny_rig_seq(&r);
    attnd_err err;
    cr_assert_eq(kv_seq_create(&parent, r.pool, &err), ATTND_OK);
    kv_seq_checkpoint_at(parent, CUT);
    eval_run(r.e, parent, tok, N, NULL);
    size_t used = kv_pool_bytes_used(r.pool);
    cr_assert_eq(kv_seq_fork(&child, parent, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(kv_pool_bytes_used(r.pool), used + st, "the fork copies the state, not the checkpoint");
    cr_expect_eq(kv_seq_bytes_shared(child), kv_seq_bytes(child) - st, "blocks and checkpoint shared");
    cr_expect(kv_seq_checkpoint(child), "the turn's end of the fork");
    cr_expect_eq(kv_pool_checkpoint_bytes(r.pool), 2 * st);
    kv_seq_destroy(parent);
    cr_expect_eq(kv_pool_checkpoint_bytes(r.pool), 2 * st, "the fork still holds the parent's");
    kv_seq_truncate(child, EDIT);
    cr_assert_eq(kv_seq_len(child), CUT);
    float *lg = malloc(sizeof(float) * N * V), *ref = malloc(sizeof(float) * N * V);
    eval_run(r.e, child, alt + CUT, N - CUT, lg);
    eval_run(r.e, fresh, alt, CUT, NULL);
    eval_run(r.e, fresh, alt + CUT, N - CUT, ref);
    cr_expect_eq(memcmp(lg, ref, sizeof(float) * (N - CUT) * V), 0, "a fork restored from a shared checkpoint");
    cr_expect_eq(kv_pool_checkpoint_bytes(r.pool), st, "the fork's own one past the truncation is gone");
    kv_seq_destroy(child);
    cr_expect_eq(kv_pool_checkpoint_bytes(r.pool), 0);
    free(lg), free(ref);
    tiny_rig_close(&r);

    rig_open(&r, 4, 0, 22); /* 22 MiB: two states (6.3 MiB each), their blocks and one checkpoint */
    kv_seq *a = tiny_rig_seq(&r), *b = tiny_rig_seq(&r);
    kv_seq_checkpoint_at(a, 4);
    eval_run(r.e, a, tok, 8, NULL);
    cr_expect_eq(kv_seq_checkpoints(a, (int[4]){0}, 4), 1, "room for one");
    kv_seq_checkpoint_at(b, 4);
    eval_run(r.e, b, tok, 8, NULL);
    cr_expect_eq(kv_seq_checkpoints(b, (int[4]){0}, 4), 0, "no room: none taken, the batch still ran");
    cr_expect_leq(kv_pool_bytes_used(r.pool), kv_pool_bytes_budget(r.pool));
    tiny_rig_close(&r);
}

Test(kv_state, settings_are_checked) {
    tiny_rig r;
    rig_open(&r, 0, 0, 64);
    attnd_err err;
    cr_expect_eq(kv_pool_set_checkpoints(r.pool, -1, 0, &err), ATTND_ERR_INVALID);
    cr_expect_eq(kv_pool_set_checkpoints(r.pool, 65, 0, &err), ATTND_ERR_INVALID);
    cr_expect_eq(kv_pool_set_checkpoints(r.pool, 8, -1, &err), ATTND_ERR_INVALID);
    tiny_rig_seq(&r);
    cr_expect_eq(kv_pool_set_checkpoints(r.pool, 8, 64, &err), ATTND_ERR_INVALID, "not once sequences exist");
    cr_expect_eq(kv_pool_checkpoints(r.pool), 0);
    tiny_rig_close(&r);
}

/* A verify batch (a token and 4 drafts) keeps what rebuilds the state after each entry but the
 * last (the state before it, a log per entry): a truncation to any of them is exact (nothing
 * evaluated again) and what follows is bit for bit a sequence that never saw the rejected
 * drafts. The room is from the budget (one state and 4 logs, far less than 4 states), kept for
 * the next verify, given back by n = 0; no room, no steps kept (false). */
Test(kv_state, a_verify_keeps_each_step_and_rolls_back_exactly) {
    tiny_rig r;
    rig_open(&r, 0, 0, 256);
    int V = r.sp.n_vocab;
    int32_t tok[N], alt[N];
    edit_tokens(tok, alt, V);
    size_t st = kv_state_bytes(r.m);
    kv_seq *s = tiny_rig_seq(&r), *fresh = tiny_rig_seq(&r);
    eval_run(r.e, s, tok, CUT, NULL);
    size_t used = kv_pool_bytes_used(r.pool);
    cr_assert(kv_seq_keep_steps(s, 4));
    size_t room = kv_pool_steps_bytes(r.pool, 4);
    cr_expect(room > st && room < 2 * st, "one state and 4 logs: %zu bytes, a state %zu", room, st);
    cr_expect_eq(kv_pool_bytes_used(r.pool), used + room, "room for a state and 4 logs");
    cr_expect_eq(kv_seq_bytes(s), used + room);
    eval_run(r.e, s, alt + CUT, 5, NULL); /* the token and 4 drafts; 2 of them accepted */
    kv_seq_truncate(s, CUT + 3);
    cr_assert_eq(kv_seq_len(s), CUT + 3, "rolled back to the step, not recomputed");
    float *lg = malloc(sizeof(float) * N * V), *ref = malloc(sizeof(float) * N * V);
    eval_run(r.e, s, tok + CUT + 3, N - CUT - 3, lg);
    eval_run(r.e, fresh, tok, CUT, NULL);
    eval_run(r.e, fresh, alt + CUT, 3, NULL);
    eval_run(r.e, fresh, tok + CUT + 3, N - CUT - 3, ref);
    cr_expect_eq(memcmp(lg, ref, sizeof(float) * (N - CUT - 3) * V), 0, "after the rollback");
    kv_seq_truncate(s, CUT + 2);
    cr_expect_eq(kv_seq_len(s), 0, "the steps were of the batch before: gone (no checkpoints here)");
    cr_assert(kv_seq_keep_steps(s, 0));
    cr_expect_eq(kv_seq_bytes(s), st, "the room given back: the state alone");
    cr_expect_eq(kv_pool_bytes_used(r.pool), st + kv_seq_bytes(fresh));
    free(lg), free(ref);
    tiny_rig_close(&r);

    rig_open(&r, 0, 0, 16); /* 16 MiB: the state (6.3 MiB) and the room for a verify, not for two states more */
    s = tiny_rig_seq(&r);
    eval_run(r.e, s, tok, 4, NULL);
    size_t free_bytes = kv_pool_bytes_budget(r.pool) - kv_pool_bytes_used(r.pool);
    int most = (int)((free_bytes - st) / (kv_pool_steps_bytes(r.pool, 2) - kv_pool_steps_bytes(r.pool, 1)));
    cr_expect(kv_seq_keep_steps(s, 1), "room for one");
    cr_expect(kv_seq_keep_steps(s, most), "room for %d", most);
    cr_expect(!kv_seq_keep_steps(s, most + 1), "not for %d", most + 1);
    tiny_rig_close(&r);
}

/* Greedy generation of G tokens after prompt on a fresh sequence of r, speculating with sp (NULL:
 * plain); the timings into *tm. */
static void greedy(tiny_rig *r, spec *sp, const int32_t *prompt, int n, int32_t *out, engine_timings *tm) {
    enum { G = 48 };
    kv_seq *s = tiny_rig_seq(r);
    engine_gen g = {.n_predict = G, .spec = sp};
    int n_out;
    attnd_err err;
    cr_assert_eq(engine_generate(r->e, s, prompt, n, &g, out, &n_out, tm, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(n_out, G);
    cr_assert_eq(kv_seq_len(s), n + G - 1);
}

/* Greedy generation with drafts on the hybrid model gives the tokens of plain greedy generation:
 * prompt-lookup drafts on a random model are rejected (rolled back), the same model as its own
 * draft model has them accepted (kept). */
Test(kv_state, speculative_greedy_output_is_the_plain_output) {
    tiny_rig r;
    rig_open(&r, 0, 0, 256);
    int V = r.sp.n_vocab;
    enum { P = 24, G = 48 };
    int32_t prompt[2 * P], plain[G], fast[G];
    tiny_random_tokens(prompt, P, V, 21);
    memcpy(prompt + P, prompt, sizeof(int32_t) * P); /* repeated: lookup finds matches */
    engine_timings tm;
    greedy(&r, NULL, prompt, 2 * P, plain, &tm);
    spec_params p;
    spec_params_default(&p);
    p.fixed = true, p.draft_max = 4, p.ngram_min = 1;
    for (int own = 0; own < 2; own++) {
        if (own) p.draft = r.e, p.draft_pool = r.pool, p.draft_min_p = 0; /* the model drafts for itself */
        spec *sp;
        attnd_err err;
        cr_assert_eq(spec_create(&sp, &p, &err), ATTND_OK, "%s", err.msg);
        greedy(&r, sp, prompt, 2 * P, fast, &tm);
        cr_expect_arr_eq(fast, plain, sizeof(plain), "speculative output differs (%s)", own ? "own drafts" : "lookup");
        if (own) cr_expect_gt(tm.n_accepted, G / 2, "its own drafts are kept: %d of %d", tm.n_accepted, tm.n_drafted);
        else cr_expect(tm.n_drafted > 0 && tm.n_accepted < tm.n_drafted, "lookup: %d of %d", tm.n_accepted, tm.n_drafted);
        if (getenv("ATTND_TEST_VERBOSE")) fprintf(stderr, "drafted %d accepted %d\n", tm.n_drafted, tm.n_accepted);
        spec_destroy(sp);
    }
    tiny_rig_close(&r);
}

/* The yield of a running step: given up after its second DeltaNet layer, it leaves the state as it
 * was (each layer backed up into the sequence's room before it ran), and the step run again gives
 * the logits of a sequence that never gave it up, bit for bit. A sequence without the room never
 * yields (the engine does not even ask). */
typedef struct yield_ctl {
    int asked, at; /* calls so far; give up at call `at` (0 = never) */
} yield_ctl;

static bool yield_at(void *user) {
    yield_ctl *c = user;
    return ++c->asked == c->at;
}

Test(kv_state, a_step_given_up_leaves_the_state_as_it_was) {
    tiny_rig r;
    rig_open(&r, 0, 0, 256);
    int V = r.sp.n_vocab;
    int32_t tok[N], alt[N];
    edit_tokens(tok, alt, V);
    kv_seq *s = tiny_rig_seq(&r), *ref = tiny_rig_seq(&r), *bare = tiny_rig_seq(&r);
    eval_run(r.e, s, tok, CUT, NULL);
    eval_run(r.e, ref, tok, CUT, NULL);
    eval_run(r.e, bare, tok, CUT, NULL);
    cr_assert(kv_seq_keep_room(s, 1));
    yield_ctl c = {.at = 2};
    engine_set_yield(r.e, yield_at, &c);
    batch_entry b[4];
    for (int i = 0; i < 4; i++) b[i] = (batch_entry){s, tok[CUT + i], CUT + i, true};
    float *lg = malloc(sizeof(float) * 4 * V), *want = malloc(sizeof(float) * 4 * V);
    attnd_err err;
    cr_assert_eq(engine_eval(r.e, b, 4, lg, &err), ATTND_ERR_BUSY, "given up after the second layer");
    cr_assert_eq(kv_seq_len(s), CUT);
    cr_assert_eq(engine_eval(r.e, b, 4, lg, &err), ATTND_OK, "%s", err.msg);
    engine_set_yield(r.e, NULL, NULL);
    eval_run(r.e, ref, tok + CUT, 4, want);
    cr_expect_eq(memcmp(lg, want, sizeof(float) * 4 * V), 0, "the step run again differs");
    c = (yield_ctl){.at = 1};
    engine_set_yield(r.e, yield_at, &c);
    for (int i = 0; i < 4; i++) b[i].seq = bare;
    cr_expect_eq(engine_eval(r.e, b, 4, lg, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(c.asked, 0, "no room to back the state up: never asked");
    engine_set_yield(r.e, NULL, NULL);
    free(lg), free(want);
    tiny_rig_close(&r);
}
