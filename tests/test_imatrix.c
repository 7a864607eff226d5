/* test_imatrix.c — importance matrices: the sums, both file formats (and a file in llama.cpp's
 * exact GGUF layout), and quantize's importance-weighted error against the unweighted one. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/imatrix.h"
#include "attnd/quantize.h"
#include "engine_rig.h"
#include "family_specs.h"
#include "gguf_builder.h"
#include "quant.h"
/* What the matmul hook adds into: the imatrix, and the model's experts per MoE tensor. */
typedef struct sink {
    imatrix *im;
    int n_expert;
} sink;

static void collect(void *user, const char *weight, int expert, const float *x, int n, int cols) {
    sink *k = user;
    attnd_err err;
    cr_assert_not_null(weight, "a matmul without its tensor's name");
    cr_assert_eq(imatrix_add(k->im, weight, expert, expert < 0 ? 1 : k->n_expert, x, n, cols, &err), ATTND_OK, "%s",
                 err.msg);
}

/* tokens[0..n) evaluated on a fresh sequence of r in chunks of `chunk`, the hook collecting into
 * a new imatrix. */
static imatrix *collect_run(tiny_rig *r, const int32_t *tok, int n, int chunk) {
    sink k = {.n_expert = model_info_get(r->m)->n_expert};
    cr_assert_eq(imatrix_create(&k.im), ATTND_OK);
    engine_set_attention_cb(r->e, NULL, &k);
    engine_set_matmul_cb(r->e, collect);
    kv_seq *s = tiny_rig_seq(r);
    batch_entry b[64];
    attnd_err err;
    for (int done = 0; done < n; done += chunk) {
        int c = n - done < chunk ? n - done : chunk;
        for (int i = 0; i < c; i++) b[i] = (batch_entry){s, tok[done + i], done + i, false};
        cr_assert_eq(engine_eval(r->e, b, c, NULL, &err), ATTND_OK, "%s", err.msg);
    }
    engine_set_matmul_cb(r->e, NULL);
    return k.im;
}

/* Layer 0's q, k and v see rmsnorm(token_embd[t]) * attn_norm: their sums equal those computed
 * here in float64 from the file; every layer weight counts every row. */
Test(imatrix, hook_sums_equal_float64_inputs_of_layer_0) {
    tiny_spec sp = tiny_default("llama");
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 16);
    enum { N = 37 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, sp.n_vocab, 3);
    imatrix *im = collect_run(&r, tok, N, 16);
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, r.path, &err), ATTND_OK, "%s", err.msg);
    int E = sp.n_embd;
    double want[64] = {0}, x[64], xn[64];
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < E; i++) x[i] = ref_elem(ref_t(f, "token_embd.weight"), (uint64_t)tok[t] * E + i);
        ref_rmsnorm(xn, x, ref_tl(f, 0, "attn_norm.weight"), E, sp.rms_eps);
        for (int i = 0; i < E; i++) want[i] += xn[i] * xn[i];
    }
    const char *qkv[] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"};
    for (int w = 0; w < 3; w++) {
        const imatrix_entry *e = imatrix_find(im, qkv[w]);
        cr_assert(e, "%s not collected", qkv[w]);
        cr_assert_eq(e->cols, E);
        for (int i = 0; i < E; i++)
            cr_assert(fabs(e->sum2[i] - want[i]) <= 1e-4 * want[i], "%s[%d]: %g, float64 %g", qkv[w], i, e->sum2[i],
                      want[i]);
    }
    int layer_weights = 0;
    for (int i = 0; i < im->n; i++) {
        if (strncmp(im->entries[i].name, "blk.", 4)) continue;
        layer_weights++;
        cr_assert_eq(im->entries[i].count[0], N, "%s counted %g rows", im->entries[i].name, im->entries[i].count[0]);
    }
    cr_assert_eq(layer_weights, 7 * sp.n_layer, "q, k, v, o, gate, up, down per layer");
    cr_assert(imatrix_find(im, "blk.1.ffn_down.weight")->cols == sp.n_ff);
    gguf_close(f);
    imatrix_destroy(im);
    tiny_rig_close(&r);
}

/* MoE: each expert tensor's rows are counted per expert, as the float64 reference routes them. */
Test(imatrix, expert_counts_follow_the_reference_routing) {
    tiny_spec sp = tiny_default("qwen3moe");
    sp.n_layer = 2, sp.n_expert = 8, sp.n_expert_used = 3, sp.n_ff_exp = 24, sp.head_dim = 16, sp.rope_dims = 16;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 16);
    enum { N = 30, K = 3 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, sp.n_vocab, 4);
    imatrix *im = collect_run(&r, tok, N, 16);
    int *route = malloc(sizeof(int) * sp.n_layer * N * K);
    double *route_w = malloc(sizeof(double) * sp.n_layer * N * K), *logits = malloc(sizeof(double) * N * sp.n_vocab);
    ref_forward_ex(&sp, r.path, tok, N, logits, &(ref_extra){.experts = route, .expert_w = route_w});
    for (int l = 0; l < sp.n_layer; l++) {
        double want[8] = {0};
        for (int i = 0; i < N * K; i++) want[route[l * N * K + i]]++;
        const char *names[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        for (int w = 0; w < 3; w++) {
            char nm[64];
            snprintf(nm, sizeof(nm), "blk.%d.%s.weight", l, names[w]);
            const imatrix_entry *e = imatrix_find(im, nm);
            cr_assert(e && e->n_mat == 8, "%s", nm);
            cr_assert_eq(e->cols, w == 2 ? sp.n_ff_exp : sp.n_embd);
            for (int x = 0; x < 8; x++)
                cr_assert_eq(e->count[x], want[x], "%s expert %d: %g rows, reference %g", nm, x, e->count[x], want[x]);
        }
    }
    free(route), free(route_w), free(logits);
    imatrix_destroy(im);
    tiny_rig_close(&r);
}

/* A hybrid MoE model (Qwen3.5-MoE: DeltaNet and attention layers, routed and shared experts):
 * every layer weight is reported with its name; each dense one counts every row, each expert
 * tensor k rows per token over its experts. */
Test(imatrix, hybrid_moe_weights_are_all_counted) {
    hy_spec hs = hybrid_small("qwen35moe");
    char path[256];
    tiny_tmpname(path, sizeof(path), "qwen35moe");
    cr_assert_eq(hy_write(path, &hs), 0);
    tiny_rig r;
    tiny_rig_load(&r, path, KV_F32, 16, 1, 256);
    r.sp = hs.base;
    memcpy(r.path, path, sizeof(path)); /* tiny_rig_close removes it */
    enum { N = 24 };
    int32_t tok[N];
    tiny_random_tokens(tok, N, hs.base.n_vocab, 5);
    imatrix *im = collect_run(&r, tok, N, 16);
    int dense = 0, experts = 0;
    for (int i = 0; i < im->n; i++) {
        const imatrix_entry *e = &im->entries[i];
        if (strncmp(e->name, "blk.", 4)) continue;
        double total = 0;
        for (int x = 0; x < e->n_mat; x++) total += e->count[x];
        if (e->n_mat == 1) {
            dense++;
            cr_assert_eq(total, N, "%s: %g rows", e->name, total);
        } else {
            experts++;
            cr_assert_eq(e->n_mat, hs.base.n_expert, "%s", e->name);
            cr_assert_eq(total, N * hs.base.n_expert_used, "%s: %g rows", e->name, total);
        }
    }
    cr_assert_eq(experts, 3 * hs.base.n_layer, "gate, up, down experts per layer");
    cr_assert_geq(dense, 4 * hs.base.n_layer, "mixer in/out, router, shared expert at least");
    cr_assert(imatrix_find(im, "blk.0.ssm_out.weight"), "the DeltaNet output projection");
    imatrix_destroy(im);
    tiny_rig_close(&r);
}

/* A uniform in [-1, 1) from a 64-bit LCG state. */
static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*s >> 11) / 9007199254740992.0) * 2.f - 1.f;
}

/* Two weights, one of 2 experts; sums over rows checked against float64 sums made here. */
static imatrix *build(double *want_dense, double *want_e1) {
    imatrix *im;
    cr_assert_eq(imatrix_create(&im), ATTND_OK);
    uint64_t s = 7;
    float x[5 * 8];
    attnd_err err;
    memset(want_dense, 0, sizeof(double) * 8);
    memset(want_e1, 0, sizeof(double) * 8);
    for (int call = 0; call < 3; call++) {
        for (int i = 0; i < 5 * 8; i++) x[i] = frand(&s) * (1 + i % 8);
        cr_assert_eq(imatrix_add(im, "blk.0.attn_q.weight", -1, 1, x, 5, 8, &err), ATTND_OK);
        cr_assert_eq(imatrix_add(im, "blk.0.ffn_up_exps.weight", 1, 2, x, 3, 8, &err), ATTND_OK);
        for (int r = 0; r < 5; r++)
            for (int j = 0; j < 8; j++) want_dense[j] += (double)x[r * 8 + j] * x[r * 8 + j];
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < 8; j++) want_e1[j] += (double)x[r * 8 + j] * x[r * 8 + j];
    }
    im->chunk_size = 5;
    im->chunk_count = 3;
    im->dataset = strdup("wiki.txt");
    return im;
}

Test(imatrix, sums_are_the_squares_of_every_row_per_expert) {
    double dense[8], e1[8];
    imatrix *im = build(dense, e1);
    const imatrix_entry *d = imatrix_find(im, "blk.0.attn_q.weight"), *e = imatrix_find(im, "blk.0.ffn_up_exps.weight");
    cr_assert(d && e);
    cr_assert_eq(d->count[0], 15);
    cr_assert_eq(e->n_mat, 2);
    cr_assert_eq(e->count[0], 0);
    cr_assert_eq(e->count[1], 9);
    for (int j = 0; j < 8; j++) {
        cr_assert_float_eq(d->sum2[j], dense[j], 1e-9 * dense[j]);
        cr_assert_float_eq(e->sum2[8 + j], e1[j], 1e-9 * e1[j]);
        cr_assert_eq(e->sum2[j], 0);
    }
    float imp[8];
    imatrix_importance(e, 0, imp);
    cr_assert_eq(imp[3], 1.0f, "an expert with no rows reads as all 1 (llama.cpp's partial data)");
    attnd_err err;
    cr_assert_eq(imatrix_add(im, "blk.0.attn_q.weight", -1, 1, (float[4]){0}, 1, 4, &err), ATTND_ERR_INVALID);
    imatrix_destroy(im);
}

static void check_means(const imatrix *a, const imatrix *b) {
    cr_assert_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        const imatrix_entry *x = &a->entries[i], *y = imatrix_find(b, x->name);
        cr_assert(y, "%s lost", x->name);
        cr_assert_eq(x->n_mat, y->n_mat);
        cr_assert_eq(x->cols, y->cols);
        for (int m = 0; m < x->n_mat; m++) {
            float ix[8], iy[8];
            imatrix_importance(x, m, ix);
            imatrix_importance(y, m, iy);
            for (int j = 0; j < x->cols; j++)
                cr_assert_float_eq(ix[j], iy[j], 1e-5f * ix[j], "%s[%d][%d]", x->name, m, j);
        }
    }
}

Test(imatrix, gguf_round_trip_keeps_sums_counts_and_metadata) {
    double dense[8], e1[8];
    imatrix *im = build(dense, e1), *back;
    char path[] = "/tmp/attnd_imx_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    attnd_err err;
    cr_assert_eq(imatrix_write_gguf(im, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(imatrix_load(&back, path, &err), ATTND_OK, "%s", err.msg);
    unlink(path);
    cr_assert_eq(back->chunk_count, 3);
    cr_assert_eq(back->chunk_size, 5);
    cr_assert_str_eq(back->dataset, "wiki.txt");
    const imatrix_entry *e = imatrix_find(back, "blk.0.ffn_up_exps.weight");
    cr_assert_eq(e->count[1], 9);
    cr_assert_float_eq(e->sum2[8 + 2], e1[2], 1e-6 * e1[2]);
    check_means(im, back);
    imatrix_destroy(im);
    imatrix_destroy(back);
}

Test(imatrix, dat_round_trip_keeps_the_means) {
    double dense[8], e1[8];
    imatrix *im = build(dense, e1), *back;
    /* the legacy format stores 1s for an expert with no rows: as the importance reads anyway */
    char path[] = "/tmp/attnd_imx_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    attnd_err err;
    cr_assert_eq(imatrix_write_dat(im, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(imatrix_load(&back, path, &err), ATTND_OK, "%s", err.msg);
    unlink(path);
    cr_assert_eq(back->chunk_count, 3);
    cr_assert_str_eq(back->dataset, "wiki.txt");
    const imatrix_entry *e = imatrix_find(back, "blk.0.ffn_up_exps.weight");
    cr_assert_eq(e->n_mat, 1, "the legacy format has one count per entry");
    cr_assert_eq(e->cols, 16);
    cr_assert_eq(e->count[0], 2, "ncall = ceil(9 rows / chunk of 5)");
    const imatrix_entry *d = imatrix_find(back, "blk.0.attn_q.weight");
    float got[8];
    imatrix_importance(d, 0, got);
    for (int j = 0; j < 8; j++) cr_assert_float_eq(got[j], dense[j] / 15, 1e-5 * dense[j] / 15);
    imatrix_destroy(im);
    imatrix_destroy(back);
}

/* A file laid out as llama.cpp's imatrix tool writes it: general.type, the three imatrix keys,
 * then NAME.in_sum2 [cols, n_mat] and NAME.counts [1, n_mat], F32, sorted by name. */
Test(imatrix, reads_llama_cpp_gguf_layout) {
    gbuf b = {0};
    const char *ds[] = {"a.txt", "calib.txt"};
    gb_header(&b, 3, 2, 4);
    gb_kv_str(&b, "general.type", "imatrix");
    gb_kv_arr_str(&b, "imatrix.datasets", ds, 2);
    gb_kv_u32(&b, "imatrix.chunk_count", 10);
    gb_kv_u32(&b, "imatrix.chunk_size", 512);
    gb_tensor(&b, "blk.3.ffn_down_exps.weight.counts", 2, (uint64_t[]){1, 2}, GGUF_TYPE_F32, 0);
    gb_tensor(&b, "blk.3.ffn_down_exps.weight.in_sum2", 2, (uint64_t[]){4, 2}, GGUF_TYPE_F32, 32);
    gb_align(&b, 32);
    float counts[8] = {4, 0}, sums[8] = {4, 8, 12, 16, 5, 6, 7, 8};
    gb_bytes(&b, counts, sizeof(counts));
    gb_bytes(&b, sums, sizeof(sums));
    imatrix *im;
    attnd_err err;
    cr_assert_eq(imatrix_load_memory(&im, b.p, b.n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(im->chunk_count, 10);
    cr_assert_eq(im->chunk_size, 512);
    cr_assert_str_eq(im->dataset, "calib.txt");
    const imatrix_entry *e = imatrix_find(im, "blk.3.ffn_down_exps.weight");
    cr_assert(e);
    cr_assert_eq(e->n_mat, 2);
    cr_assert_eq(e->cols, 4);
    float imp[4];
    imatrix_importance(e, 0, imp);
    cr_assert_eq(imp[0], 1.0f);
    cr_assert_eq(imp[3], 4.0f);
    imatrix_importance(e, 1, imp);
    cr_assert_eq(imp[2], 1.0f, "no rows: 1, as llama-quantize");
    imatrix_destroy(im);
    /* a sum without counts is refused */
    b.n = 0, b.n_kv = 0;
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "w.in_sum2", 2, (uint64_t[]){4, 1}, GGUF_TYPE_F32, 0);
    gb_align(&b, 32);
    gb_bytes(&b, sums, 16);
    cr_assert_eq(imatrix_load_memory(&im, b.p, b.n, &err), ATTND_ERR_FORMAT);
    cr_assert(strstr(err.msg, "w.counts"), "%s", err.msg);
    free(b.p);
}

Test(imatrix, truncated_dat_is_refused) {
    uint8_t d[] = {1, 0, 0, 0, 3, 0, 0, 0, 'a', 'b', 'c', 1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0x80, 0x3f};
    imatrix *im;
    attnd_err err;
    cr_assert_eq(imatrix_load_memory(&im, d, sizeof(d), &err), ATTND_ERR_FORMAT);
    cr_assert_null(im);
    cr_assert_eq(imatrix_load_memory(&im, d, 0, &err), ATTND_ERR_FORMAT);
}

/* sum over the row of imp[i] (x[i] - dequant[i])^2 */
static double weighted_err(const float *x, const float *imp, uint32_t type, int n, const float *use_imp) {
    uint8_t q[4096];
    float y[1024];
    quantize_row_weighted(q, x, type, n, use_imp);
    quant_dequantize_row(y, q, type, n);
    double e = 0;
    for (int i = 0; i < n; i++) e += (double)imp[i] * (x[i] - y[i]) * (x[i] - y[i]);
    return e;
}

Test(imatrix, weighted_quantization_lowers_the_importance_weighted_error) {
    enum { N = 1024, ROWS = 16 };
    static const uint32_t types[] = {GGUF_TYPE_Q2_K, GGUF_TYPE_Q3_K, GGUF_TYPE_Q4_K,   GGUF_TYPE_Q5_K,  GGUF_TYPE_Q6_K,
                                     GGUF_TYPE_Q4_0, GGUF_TYPE_Q5_0, GGUF_TYPE_IQ4_NL, GGUF_TYPE_IQ4_XS};
    float imp[N], x[N];
    uint64_t s = 42;
    for (int i = 0; i < N; i++) imp[i] = i % 7 == 0 ? 50.f : 0.05f + 0.1f * fabsf(frand(&s)); /* skewed columns */
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        double plain = 0, weighted = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < N; i++) x[i] = frand(&s) * (1 + (i % 13 == 0) * 3);
            plain += weighted_err(x, imp, types[t], N, NULL);
            weighted += weighted_err(x, imp, types[t], N, imp);
        }
        cr_assert(quantize_type_weighted(types[t]));
        printf("imatrix: %-6s weighted error %.4g -> %.4g (%.1f%% lower)\n", gguf_type_name(types[t]), plain, weighted,
               100 * (1 - weighted / plain));
        cr_assert_lt(weighted, plain, "%s: %g >= %g", gguf_type_name(types[t]), weighted, plain);
    }
    cr_assert(!quantize_type_weighted(GGUF_TYPE_Q8_0));
}
