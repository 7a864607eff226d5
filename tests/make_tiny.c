/*
 * make_tiny.c — writes the generated random-weight models that the fidelity tests quantize and
 * compare with llama.cpp (tests/test_models.h makes them on first use; tests/data/regenerate.sh
 * makes the same files for llama.cpp's references):
 *
 *     make_tiny OUT.gguf qwen896    2-layer qwen2, rows 896 wide (Qwen2.5-0.5B's), 14 heads on 2 KV heads
 *     make_tiny OUT.gguf llama960   2-layer llama, rows 960 wide (SmolLM2-360M's), 15 heads on 5 KV heads
 *
 * Their widths are not multiples of 256, so the k-quant mixes take llama.cpp's shape fallbacks
 * (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, ...); ffn_down rows (1024) stay k-quants. F16 weights,
 * untied heads, a 320-token SentencePiece-style vocabulary (so llama.cpp loads them), fixed seeds.
 */
#include <stdio.h>
#include <string.h>

#include "engine_fixture.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_tiny OUT.gguf qwen896|llama960\n");
        return 2;
    }
    bool qwen = !strcmp(argv[2], "qwen896");
    if (!qwen && strcmp(argv[2], "llama960")) {
        fprintf(stderr, "make_tiny: unknown model '%s' (qwen896 or llama960)\n", argv[2]);
        return 2;
    }
    tiny_spec sp = tiny_default(qwen ? "qwen2" : "llama");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.n_layer = 2, sp.n_ff = 1024, sp.wtype = GGUF_TYPE_F16;
    sp.n_embd = qwen ? 896 : 960, sp.n_head = qwen ? 14 : 15, sp.n_head_kv = qwen ? 2 : 5, sp.rope_dims = 64;
    /* untied: a tied random head (embedding scale 1) repeats one token, which tests little; the
     * mixes' rules for tied heads are checked in test_quantize.c */
    sp.tied = false, sp.seed = qwen ? 896 : 960;
    if (tiny_write(argv[1], &sp) != 0) {
        fprintf(stderr, "make_tiny: could not write %s\n", argv[1]);
        return 1;
    }
    return 0;
}
