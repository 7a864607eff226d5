/*
 * make_seeds.c — (fuzzing only) writes the binary seeds of tools/fuzz/corpus: tiny models and
 * tokenizer-only GGUFs. Run once when the formats change (the outputs are committed):
 *     build-fuzz/make_seeds tools/fuzz/corpus
 * The text seeds (requests, configs, session files) are written by hand.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../../tests/encoder_fixture.h"
#include "../../tests/hybrid_fixture.h"
#include "fuzz_util.h"

static int write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) return 1;
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    char dir[512], path[600];
    snprintf(dir, sizeof(dir), "%s/fuzz_gguf", argv[1]);
    int bad = 0;
    /* a tiny llama without and with a vocabulary, and a tiny qwen2 in F16 */
    tiny_spec sp = tiny_default("llama");
    sp.n_embd = 8, sp.n_ff = 8, sp.n_layer = 1, sp.n_head = 2, sp.n_head_kv = 1, sp.rope_dims = 4, sp.n_vocab = 16;
    snprintf(path, sizeof(path), "%s/llama-novocab.gguf", dir);
    bad |= tiny_write(path, &sp);
    sp.vocab = true, sp.n_vocab = 300;
    snprintf(path, sizeof(path), "%s/llama-vocab.gguf", dir);
    bad |= tiny_write(path, &sp);
    tiny_spec q = tiny_default("qwen2");
    q.n_embd = 8, q.n_ff = 8, q.n_layer = 1, q.n_head = 2, q.n_head_kv = 1, q.rope_dims = 4, q.n_vocab = 16;
    q.wtype = GGUF_TYPE_F16, q.tied = true;
    snprintf(path, sizeof(path), "%s/qwen2-f16-tied.gguf", dir);
    bad |= tiny_write(path, &q);
    /* the other families: sliding windows and soft-caps, QK-norm and head_dim, fused matrices, experts */
    const char *fams[] = {"gemma2", "gemma3", "phi3", "qwen3moe"};
    for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
        tiny_spec g = tiny_default(fams[i]);
        g.n_embd = 8, g.n_ff = 8, g.n_layer = 2, g.n_head = 2, g.n_head_kv = 1, g.rope_dims = 4, g.n_vocab = 16;
        g.head_dim = 4, g.window = 3, g.attn_softcap = i == 0 ? 50.0f : 0, g.final_softcap = i == 0 ? 30.0f : 0;
        if (i == 1 || i == 2) g.window = 0; /* phi3 has none; gemma3 gets its key below */
        if (i == 1) g.window = 5;
        if (i == 2) g.head_dim = 0;
        if (i == 3) g.window = 0, g.n_expert = 4, g.n_expert_used = 2, g.n_ff_exp = 4;
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, fams[i]);
        bad |= tiny_write(path, &g);
    }
    /* the hybrid Gated DeltaNet families: qwen35 (dense, with an MTP block) and qwen3next (experts,
     * grouped heads, fused beta-alpha), 2 key and 4 value heads of 8 */
    const char *hyb[] = {"qwen35", "qwen3next"};
    for (size_t i = 0; i < sizeof(hyb) / sizeof(hyb[0]); i++) {
        hy_spec hs = {.base = tiny_default(hyb[i]), .interval = 2, .conv_k = 4, .hk = 2, .hv = 4, .dk = 8};
        tiny_spec *g = &hs.base;
        g->n_embd = 8, g->n_ff = 8, g->n_layer = 2, g->n_head = 2, g->n_head_kv = 1, g->rope_dims = 4, g->n_vocab = 16;
        g->head_dim = 8;
        if (i == 0) hs.n_mtp = 1;
        if (i == 1) g->n_expert = 4, g->n_expert_used = 2, g->n_ff_exp = 4, hs.n_ff_shexp = 4;
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, hyb[i]);
        bad |= hy_write(path, &hs);
    }
    /* an encoder: modern-bert (LayerNorm pre-norm layers, the window pattern and activation keys,
     * a fused ffn_up of 2 n_ff rows, no attn_norm on layer 0), 2 heads of 4, 3 layers */
    tiny_spec mb = mbert_silu();
    mb.n_embd = 8, mb.n_ff = 8, mb.n_layer = 3, mb.n_head = 2, mb.n_head_kv = 2, mb.rope_dims = 4;
    mb.n_vocab = 300, mb.window = 4, mb.swa_period = 2; /* with its vocabulary: the file loads whole */
    snprintf(path, sizeof(path), "%s/modern-bert.gguf", dir);
    bad |= enc_write(path, &mb);
    /* tokenizer-only files of both families */
    size_t n;
    uint8_t *img = fuzz_tiny_vocab_image(true, NULL, &n);
    bad |= write_file(dir, "vocab-spm.gguf", img, n);
    free(img);
    img = fuzz_tiny_vocab_image(false, "llama3", &n);
    bad |= write_file(dir, "vocab-bpe-llama3.gguf", img, n);
    free(img);
    if (bad) fprintf(stderr, "make_seeds: could not write every seed under %s\n", dir);
    return bad;
}
