/*
 * attn_reference.c — prints the float64 reference attention weights of a GGUF model (F32/F16
 * weights, llama or qwen2) for a list of token ids, for the shell tests that check the engine's
 * weights over HTTP and on the command line against an independent computation
 * (tests/test_http_attention.sh, tests/test_attention_cli.sh). The math is engine_fixture.h's
 * ref_forward_attn, which shares no code with the engine beyond the GGUF reader.
 *
 *   attn_reference MODEL.gguf 1,571,262 [norm]
 *   -> {"n_layer": L, "n_head": H, "attention": [[[row 0], [row 1], ...] per head] per layer}
 * where row i holds i + 1 weights; with "norm", the norm-weighted ones (α_ij ‖W_O^h v_j‖,
 * normalised over j), in the same shape.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/model.h"
#include "engine_fixture.h"

/* attn's rows (n_layer, n_head, n, n) weighted by vnorm (n_layer, n_head, n), renormalised. */
static void norm_weight(double *attn, const double *vnorm, int n_lh, int n) {
    for (int lh = 0; lh < n_lh; lh++)
        for (int i = 0; i < n; i++) {
            double *row = attn + ((size_t)lh * n + i) * n, sum = 0;
            for (int j = 0; j <= i; j++) sum += row[j] *= vnorm[(size_t)lh * n + j];
            for (int j = 0; j <= i; j++) row[j] = sum > 0 ? row[j] / sum : 0;
        }
}

int main(int argc, char **argv) {
    bool norm = argc == 4 && !strcmp(argv[3], "norm");
    if (argc != 3 && !norm) {
        fprintf(stderr, "usage: attn_reference MODEL.gguf ID,ID,... [norm]\n");
        return 2;
    }
    model *m;
    attnd_err err;
    if (model_load(&m, argv[1], &err)) {
        fprintf(stderr, "attn_reference: %s\n", err.msg);
        return 1;
    }
    const model_info *mi = model_info_get(m);
    tiny_spec sp = {.arch = mi->arch, .n_vocab = mi->n_vocab, .n_embd = mi->n_embd, .n_layer = mi->n_layer,
                    .n_head = mi->n_head, .n_head_kv = mi->n_head_kv, .n_ff = mi->n_ff, .n_ctx = mi->n_ctx,
                    .rope_dims = mi->rope_dims, .rope_base = mi->rope_base, .rms_eps = mi->rms_eps,
                    .head_dim = mi->head_dim, .window = mi->window};
    int n = 0, cap = 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    for (char *s = argv[2], *end; *s; s = *end == ',' ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= mi->n_vocab) {
            fprintf(stderr, "attn_reference: bad token id list '%s'\n", argv[2]);
            return 2;
        }
        if (n == cap) ids = realloc(ids, sizeof(int32_t) * (size_t)(cap *= 2));
        ids[n++] = (int32_t)v;
    }
    double *logits = malloc(sizeof(double) * (size_t)n * (size_t)mi->n_vocab);
    double *attn = malloc(sizeof(double) * (size_t)mi->n_layer * (size_t)mi->n_head * (size_t)n * (size_t)n);
    double *vnorm = norm ? malloc(sizeof(double) * (size_t)mi->n_layer * (size_t)mi->n_head * (size_t)n) : NULL;
    ref_forward_ex(&sp, argv[1], ids, n, logits, &(ref_extra){.attn = attn, .vnorm = vnorm});
    if (norm) norm_weight(attn, vnorm, mi->n_layer * mi->n_head, n);
    printf("{\"n_layer\": %d, \"n_head\": %d, \"attention\": [", mi->n_layer, mi->n_head);
    for (int l = 0; l < mi->n_layer; l++) {
        printf("%s[", l ? ", " : "");
        for (int h = 0; h < mi->n_head; h++) {
            printf("%s[", h ? ", " : "");
            for (int i = 0; i < n; i++) {
                const double *row = attn + (((size_t)l * mi->n_head + h) * n + i) * n;
                printf("%s[", i ? ", " : "");
                for (int j = 0; j <= i; j++) printf("%s%.9g", j ? ", " : "", row[j]);
                printf("]");
            }
            printf("]");
        }
        printf("]");
    }
    printf("]}\n");
    free(ids), free(logits), free(attn), free(vnorm);
    model_destroy(m);
    return 0;
}
