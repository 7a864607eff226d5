/*
 * test_head_roles.c — head roles (engine/head_roles.c): every head's previous-token, induction,
 * sink and local scores equal the same scores computed from a float64 reference forward pass
 * over the same probes, within 1e-3; probes are repeated runs of distinct tokens; labels follow
 * the documented thresholds; bad candidates are refused; a hybrid model's attention layers are
 * scored as a plain model's, its Gated DeltaNet layers left out.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/head_roles.h"
#include "engine_rig.h"
#include "hybrid_fixture.h"

/* The four scores of head (l, h) from reference weights attn (n_layer, n_head, L, L). */
static head_scores ref_scores(const double *attn, int l, int h, int H, int L, int o, int T, int window) {
    const double *a = attn + ((size_t)l * H + h) * L * L;
    head_scores s = {0};
    int n_loc = 0;
    double loc = 0;
    for (int i = 1; i < L; i++) {
        s.previous_token += a[i * L + i - 1] / (L - 1);
        s.sink += a[i * L] / (L - 1);
        if (i >= o + T) s.induction += a[i * L + i - T + 1] / T;
        if (i >= window) {
            for (int j = i - window + 1; j <= i; j++) loc += a[i * L + j];
            n_loc++;
        }
    }
    s.local = loc / n_loc;
    return s;
}

Test(head_roles, scores_equal_float64_reference_on_the_same_probes) {
    tiny_spec sp = tiny_default("llama");
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 16); /* probes longer than a batch: evaluated in chunks */
    int32_t cand[40];
    for (int i = 0; i < 40; i++) cand[i] = 3 + i;
    head_roles_params p = {.candidates = cand, .n_candidates = 40, .bos = 1, .length = 12, .n_probes = 2, .seed = 9};
    head_roles hr;
    attnd_err err;
    cr_assert_eq(head_roles_compute(r.e, r.pool, &p, &hr, &err), ATTND_OK, "%s", err.msg);
    cr_assert(hr.length == 12 && hr.n_probes == 2 && hr.window == 4);
    int T = 12, o = 1, L = o + 2 * T, H = sp.n_head, LH = sp.n_layer * H;
    head_scores *want = calloc((size_t)LH, sizeof(*want));
    double *attn = malloc(sizeof(double) * (size_t)LH * L * L), *logits = malloc(sizeof(double) * L * sp.n_vocab);
    int32_t ids[25];
    for (int k = 0; k < 2; k++) {
        head_roles_probe(ids, &p, T, k);
        cr_assert_eq(ids[0], 1);
        for (int i = 0; i < T; i++) {
            cr_assert_eq(ids[o + i], ids[o + T + i], "the second copy repeats the first");
            for (int j = 0; j < i; j++) cr_assert_neq(ids[o + i], ids[o + j], "tokens of a copy are distinct");
        }
        ref_forward_attn(&sp, r.path, ids, L, logits, attn);
        for (int c = 0; c < LH; c++) {
            head_scores s = ref_scores(attn, c / H, c % H, H, L, o, T, 4);
            want[c].previous_token += s.previous_token / 2, want[c].induction += s.induction / 2;
            want[c].sink += s.sink / 2, want[c].local += s.local / 2;
        }
    }
    for (int c = 0; c < LH; c++) {
        const head_scores *g = &hr.scores[c], *w = &want[c];
        cr_assert(fabs(g->previous_token - w->previous_token) <= 1e-3 && fabs(g->induction - w->induction) <= 1e-3 &&
                      fabs(g->sink - w->sink) <= 1e-3 && fabs(g->local - w->local) <= 1e-3,
                  "head %d: %g %g %g %g vs %g %g %g %g", c, g->previous_token, g->induction, g->sink, g->local,
                  w->previous_token, w->induction, w->sink, w->local);
        cr_assert(g->local >= 0 && g->local <= 1 + 1e-6 && g->sink >= 0 && g->sink <= 1 + 1e-6);
    }
    cr_assert_eq(kv_pool_bytes_used(r.pool), 0);
    free(want), free(attn), free(logits);
    head_roles_free(&hr);
    tiny_rig_close(&r);
}

Test(head_roles, labels_follow_the_thresholds) {
    const char *lab[4];
    cr_assert_eq(head_roles_labels(&(head_scores){.previous_token = 0.9, .local = 0.95}, lab), 1);
    cr_assert_str_eq(lab[0], "previous_token"); /* local is implied, not repeated */
    cr_assert_eq(head_roles_labels(&(head_scores){.induction = 0.31, .sink = 0.6, .local = 0.2}, lab), 2);
    cr_assert(!strcmp(lab[0], "induction") && !strcmp(lab[1], "sink"));
    cr_assert_eq(head_roles_labels(&(head_scores){.previous_token = 0.39, .local = 0.7}, lab), 1);
    cr_assert_str_eq(lab[0], "local");
    cr_assert_eq(head_roles_labels(&(head_scores){.induction = 0.29, .sink = 0.59}, lab), 0);
}

Test(head_roles, bad_candidates_are_refused) {
    tiny_spec sp = tiny_default("llama");
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 16);
    int32_t cand[] = {3, 100000};
    head_roles hr;
    attnd_err err;
    cr_assert_eq(head_roles_compute(r.e, r.pool, &(head_roles_params){.candidates = cand, .n_candidates = 2, .bos = -1},
                                    &hr, &err),
                 ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "outside the vocabulary"), "%s", err.msg);
    cr_assert_eq(head_roles_compute(r.e, r.pool, &(head_roles_params){.candidates = cand, .n_candidates = 1, .bos = -1},
                                    &hr, &err),
                 ATTND_ERR_INVALID);
    cr_assert(hr.scores == NULL);
    tiny_rig_close(&r);
}

Test(head_roles, a_hybrid_models_attention_layers_only) {
    /* qwen35: layers 0 and 2 Gated DeltaNet, 1 and 3 attention (4 heads) */
    hy_spec hs = {.base = tiny_default("qwen35"), .interval = 2, .conv_k = 4, .hk = 2, .hv = 4, .dk = 32};
    tiny_spec *sp = &hs.base;
    sp->vocab = true, sp->n_vocab = 320, sp->n_ctx = 128, sp->seed = 9;
    sp->n_embd = 64, sp->n_layer = 4, sp->n_head = 4, sp->n_head_kv = 2, sp->head_dim = 32, sp->rope_dims = 16;
    sp->n_ff = 64, sp->rope_base = 1e6f, sp->rms_eps = 1e-6f;
    tiny_rig r;
    char path[sizeof(r.path)];
    tiny_tmpname(path, sizeof(path), "hyroles");
    cr_assert_eq(hy_write(path, &hs), 0);
    tiny_rig_load(&r, path, KV_F32, 32, 2, 64);
    int32_t cand[40];
    for (int i = 0; i < 40; i++) cand[i] = 260 + i;
    head_roles_params p = {.candidates = cand, .n_candidates = 40, .bos = -1, .length = 12, .n_probes = 2, .seed = 3};
    head_roles hr;
    attnd_err err;
    cr_assert_eq(head_roles_compute(r.e, r.pool, &p, &hr, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(hr.recurrent_every, 2);
    for (int l = 0; l < 4; l++) {
        cr_assert_eq(head_roles_scored(&hr, l), l % 2 == 1, "layer %d", l);
        for (int h = 0; h < 4; h++) {
            const head_scores *s = &hr.scores[l * 4 + h];
            double sum = s->previous_token + s->sink + s->local;
            if (l % 2) cr_assert(sum > 0, "attention layer %d head %d has no scores", l, h);
            else cr_assert_eq(sum + s->induction, 0.0, "DeltaNet layer %d head %d was scored", l, h);
        }
    }
    head_roles_free(&hr);
    tiny_rig_close(&r);
    unlink(path);
}
