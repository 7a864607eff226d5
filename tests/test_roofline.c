/*
 * test_roofline.c — attnd/roofline.h: the read-bandwidth probe gives a positive, finite GB/s on
 * 1 and 2 threads; a token's bytes (decode) and operations (prefill) equal sums taken here
 * independently from the tensors' shapes and the model's hyper-parameters (not from the file's
 * byte counts); the prefill peak is its ops/cycle x threads x the measured clock.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/roofline.h"
#include "engine_fixture.h"
#include "family_specs.h"

#define STORIES ATTND_DATA_DIR "/models/stories260K.gguf"

static model *load(const char *path) {
    model *m;
    attnd_err err;
    cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "%s", err.msg);
    return m;
}

/* Every tensor of an all-F32 file, 4 bytes an element from its shape; the token embedding table
 * counted as one row when the file has an output head. */
static double f32_weight_bytes(const model *m) {
    const gguf_file *f = model_gguf(m);
    bool tied = !gguf_find_tensor(f, "output.weight");
    double sum = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        cr_assert_eq(t->type, GGUF_TYPE_F32, "%s", t->name);
        double elems = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) elems *= (double)t->ne[d];
        if (!tied && !strcmp(t->name, "token_embd.weight")) elems = (double)t->ne[0];
        sum += 4 * elems;
    }
    return sum;
}

Test(roofline, probe_reads_at_a_positive_finite_rate_on_1_and_2_threads) {
    roofline_probe *p;
    attnd_err err;
    cr_assert_eq(roofline_probe_create(&p, (size_t)8 << 20, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(roofline_probe_bytes(p), (size_t)8 << 20);
    for (int t = 1; t <= 2; t++) {
        double gbs = roofline_read_gbs(p, t, 2);
        cr_assert(isfinite(gbs) && gbs > 0, "%d thread(s): %g GB/s", t, gbs);
    }
    cr_assert(strcmp(roofline_read_isa(), "") != 0);
    roofline_probe_destroy(p);
    roofline_probe_destroy(NULL);
}

Test(roofline, stories260K_decode_reads_all_its_tensors_as_its_embedding_is_the_head) {
    model *m = load(STORIES);
    const model_info *mi = model_info_get(m);
    cr_assert_null(gguf_find_tensor(model_gguf(m), "output.weight"), "stories260K ties its head to token_embd");
    double want = f32_weight_bytes(m);
    cr_assert_eq(want, 4.0 * (double)mi->n_params, "every element once: %.0f", want);
    cr_assert_eq(roofline_weight_bytes(m), want);
    /* f16 KV: keys and values of every layer, 2 bytes an element, for each of the 37 positions read */
    double kv = 2.0 * mi->n_layer * mi->n_head_kv * mi->head_dim * 2;
    cr_assert_eq(roofline_decode_bytes(m, KV_F16, 37), want + 37 * kv);
    cr_assert_eq(roofline_decode_bytes(m, KV_F32, 37), want + 37 * 2 * kv);
    model_destroy(m);
}

Test(roofline, an_untied_model_reads_one_row_of_its_embedding_table) {
    char path[256];
    tiny_spec sp = tiny_default("llama");
    tiny_tmpname(path, sizeof(path), "roofline");
    cr_assert_eq(tiny_write(path, &sp), 0);
    model *m = load(path);
    cr_assert_not_null(gguf_find_tensor(model_gguf(m), "output.weight"));
    double all = 4.0 * (double)model_info_get(m)->n_params;
    double want = all - 4.0 * sp.n_vocab * sp.n_embd + 4.0 * sp.n_embd;
    cr_assert_eq(f32_weight_bytes(m), want);
    cr_assert_eq(roofline_weight_bytes(m), want, "%.0f != %.0f", roofline_weight_bytes(m), want);
    model_destroy(m);
    unlink(path);
}

Test(roofline, prefill_ops_are_the_layers_matrices_and_attention) {
    char path[256];
    tiny_spec sp = tiny_default("llama");
    tiny_tmpname(path, sizeof(path), "roofline");
    cr_assert_eq(tiny_write(path, &sp), 0);
    model *m = load(path);
    int hd = sp.n_embd / sp.n_head, kv_dim = sp.n_head_kv * hd, n = 101;
    /* per layer: Q and O (embd x embd), K and V (embd x kv_dim), gate, up, down (embd x ff) */
    double matrices = (double)sp.n_embd * (2 * sp.n_embd + 2 * kv_dim) + 3.0 * sp.n_embd * sp.n_ff;
    double attention = 2.0 * sp.n_head * hd * (n + 1) / 2.0; /* Q.K and P.V over 51 keys on average */
    double want = 2 * sp.n_layer * (matrices + attention);
    cr_assert_eq(roofline_prefill_ops(m, n), want, "%.0f != %.0f", roofline_prefill_ops(m, n), want);
    model_destroy(m);
    unlink(path);
}

Test(roofline, the_prefill_peak_is_ops_per_cycle_times_threads_times_the_clock) {
    model *m = load(STORIES);
    roofline_peak pk = roofline_prefill_peak(m, 64, 2);
    cr_assert_not_null(pk.path);
    if (pk.ops_per_cycle > 0) {
        cr_assert(strstr(pk.path, "f32") != NULL, "an F32 model runs the float path, not %s", pk.path);
        cr_assert(pk.ghz > 0.1 && pk.ghz < 10, "clock %g GHz", pk.ghz);
        cr_assert_float_eq(pk.gops, pk.ops_per_cycle * 2 * pk.ghz, 1e-9);
    } else {
        cr_assert_eq(pk.gops, 0);
    }
    model_destroy(m);
}

// ---- the newer families: what decode reads of them -----------------------------------------------

/* Every tensor's bytes, less what decode does not read: the MTP blocks (blk.N for N >= n_layer),
 * all but one row of an embedding table that is not the head (token_embd when untied,
 * per_layer_token_embd), the unused experts' share; plus the recurrent state. Written apart from
 * roofline.c's loop, by the tensors' names. */
static double reads_by_name(const model *m) {
    const gguf_file *f = model_gguf(m);
    const model_info *mi = model_info_get(m);
    double sum = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int blk = -1;
        if (sscanf(t->name, "blk.%d.", &blk) == 1 && blk >= mi->n_layer) continue;
        double b = (double)t->n_bytes, rows = (double)(t->n_elems / t->ne[0]);
        if (!strcmp(t->name, "per_layer_token_embd.weight")) b /= rows;
        if (!strcmp(t->name, "token_embd.weight") && gguf_find_tensor(f, "output.weight")) b /= rows;
        if (strstr(t->name, "_exps")) b = b * mi->n_expert_used / mi->n_expert;
        sum += b;
    }
    return sum + (double)kv_state_bytes(m);
}

static void check_reads(const char *path, bool want_state, bool want_mtp, const char *table) {
    model *m = load(path);
    const model_info *mi = model_info_get(m);
    cr_assert_eq(kv_state_bytes(m) > 0, want_state, "%s: a recurrent state", path);
    cr_assert_eq(mi->n_mtp_layers > 0, want_mtp, "%s: MTP blocks", path);
    if (table) cr_assert_not_null(gguf_find_tensor(model_gguf(m), table), "%s: %s", path, table);
    double want = reads_by_name(m), got = roofline_weight_bytes(m);
    cr_assert(fabs(got - want) <= 1e-9 * want, "%s: %.0f bytes, want %.0f", path, got, want);
    /* the parameters counted the same way, in elements, never more than the file holds */
    cr_assert(roofline_active_params(m) > 0 && roofline_active_params(m) < (double)mi->n_params);
    model_destroy(m);
    unlink(path);
}

Test(roofline, hybrid_decode_reads_its_state_and_skips_the_mtp_blocks) {
    char path[256];
    hy_spec hs = hybrid_small("qwen35moe");
    hs.n_mtp = 1;
    tiny_tmpname(path, sizeof(path), "roofline-hy");
    cr_assert_eq(hy_write(path, &hs), 0);
    check_reads(path, true, true, NULL);
}

Test(roofline, gemma4_decode_reads_one_row_of_the_per_layer_embeddings) {
    char path[256];
    g4_spec gs = gemma4_small("gemma4-e");
    tiny_tmpname(path, sizeof(path), "roofline-g4");
    cr_assert_eq(g4_write(path, &gs), 0);
    check_reads(path, false, false, "per_layer_token_embd.weight");
}

Test(roofline, a_latent_moe_with_an_mtp_block_reads_the_experts_it_uses) {
    char path[256];
    ml_spec ms = mla_small("glm47-flash");
    ms.n_mtp = 1;
    tiny_tmpname(path, sizeof(path), "roofline-mla");
    cr_assert_eq(ml_write(path, &ms), 0);
    check_reads(path, false, true, NULL);
}
