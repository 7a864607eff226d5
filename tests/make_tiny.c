/*
 * make_tiny.c — writes the generated random-weight models that the fidelity tests quantize and
 * compare with llama.cpp (tests/test_models.h makes them on first use; tests/data/regenerate.sh
 * makes the same files for llama.cpp's references):
 *
 *     make_tiny OUT.gguf qwen896    2-layer qwen2, rows 896 wide (Qwen2.5-0.5B's), 14 heads on 2 KV heads
 *     make_tiny OUT.gguf llama960   2-layer llama, rows 960 wide (SmolLM2-360M's), 15 heads on 5 KV heads
 *     make_tiny OUT.gguf rank       2-layer llama, rows 64 wide, a reranker: pooling_type rank and a
 *                                   [yes, no] head (cls.output, Qwen3-Reranker's shape), for the
 *                                   rerank endpoints' tests
 *     make_tiny OUT.gguf bert       encoder_fixture.h's small bert (32 wide, mean pooling): a model
 *                                   that only embeds, for the role checks of the endpoints' tests
 *     make_tiny OUT.gguf bert-rank  the same with a one-logit head (a cross-encoder, bge-reranker's kind)
 *     make_tiny OUT.gguf chat       2-layer llama, rows 64 wide, context 8192, the ChatML markers
 *                                   <|im_start|> <|im_end|> as control tokens: a model for a real
 *                                   tool-capable chat template (served with chat_template_file),
 *                                   whose tool descriptions do not fit a 512-token context
 *     make_tiny OUT.gguf fim        2-layer llama, rows 64 wide, the FIM tokens <|fim_prefix|>
 *                                   <|fim_suffix|> <|fim_middle|> <|fim_pad|> as control tokens: a
 *                                   code model for fill-in-the-middle (Ollama's suffix)
 *     make_tiny OUT.gguf xlmr VOCAB.gguf
 *     make_tiny OUT.gguf xlmr-rank VOCAB.gguf
 *                                   encoder_fixture.h's XLM-RoBERTa (bge-m3's layout, CLS pooling; or
 *                                   bge-reranker-v2-m3's, a one-logit head) with the unigram vocabulary
 *                                   of VOCAB.gguf (tests/data/tokenizers/xlmr-ugm.gguf)
 *     make_tiny OUT.gguf lowbit TYPE
 *                                   2-layer llama, rows 256 wide, every 2-D weight random blocks of
 *                                   TYPE (IQ1_S ... NVFP4, issue 47: formats attnd cannot write)
 *
 * Their widths are not multiples of 256, so the k-quant mixes take llama.cpp's shape fallbacks
 * (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, ...); ffn_down rows (1024) stay k-quants. F16 weights,
 * untied heads, a 320-token SentencePiece-style vocabulary (so llama.cpp loads them), fixed seeds.
 *
 * The lowbit models' blocks are random bytes (every index, sign and sub-scale byte is valid)
 * with the block scales set so that each tensor's weights have the rms of the uniform values the
 * same spec draws (no inf, nan or huge scales): what a quantizer's output looks like to a kernel.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "encoder_fixture.h"
#include "quant.h"

/* The block scales of nb blocks of `type` at raw: f16 d = f (each block f times 1 + u / 4, u
 * uniform in [-1, 1)); NVFP4's four E4M3 bytes a block: mantissas random, exponent 7 + log2 f. */
static void lowbit_scales(uint8_t *raw, uint32_t type, int64_t nb, float f, uint64_t *rng) {
    size_t bb = gguf_type_block_bytes(type);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = raw + (size_t)b * bb;
        uint16_t d = quant_f32_to_f16(f * (1.0f + tiny_uniform(rng, 0.25f)));
        switch (type) {
        case GGUF_TYPE_NVFP4: {
            long e = 7 + lroundf(log2f(f));
            e = e < 1 ? 1 : e > 14 ? 14 : e;
            for (int k = 0; k < 4; k++) blk[k] = (uint8_t)(e << 3 | (long)(tiny_rng(rng) & 7));
            break;
        }
        case GGUF_TYPE_IQ1_M: /* the top nibble of each of the four scale words is a nibble of d */
            for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | ((d >> (4 * k)) & 15) << 4);
            break;
        case GGUF_TYPE_TQ1_0: memcpy(blk + 52, &d, 2); break;
        case GGUF_TYPE_TQ2_0: memcpy(blk + 64, &d, 2); break;
        default: memcpy(blk, &d, 2); break; /* IQ1_S, IQ2_*, IQ3_*: d first */
        }
    }
}

static double rms_of(const float *v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s / (double)n);
}

/* Replaces tensor t's values by random blocks of `type` with the rms of those values. */
static void lowbit_tensor(tiny_tensor *t, uint32_t type, uint64_t *rng) {
    int64_t n = (int64_t)(t->ne[0] * t->ne[1]), nb = n / gguf_type_block_elems(type);
    t->raw_bytes = (size_t)nb * gguf_type_block_bytes(type);
    t->raw = malloc(t->raw_bytes);
    for (size_t i = 0; i < t->raw_bytes; i++) t->raw[i] = (uint8_t)tiny_rng(rng);
    float *y = malloc(sizeof(float) * (size_t)n);
    lowbit_scales(t->raw, type, nb, 1.0f, rng); /* unit scales: measure, then scale (the rms is linear in d) */
    quant_dequantize_row(y, t->raw, type, n);
    float f = (float)(rms_of(t->vals, n) / rms_of(y, n));
    lowbit_scales(t->raw, type, nb, f, rng);
    free(y);
    t->type = type;
}

static int write_lowbit(const char *path, const char *type_name) {
    uint32_t type = 0;
    while (type < 64 && !(gguf_type_name(type) && !strcmp(gguf_type_name(type), type_name))) type++;
    if (type == 64 || !gguf_type_computable(type) || gguf_type_block_elems(type) < 64) {
        fprintf(stderr, "make_tiny: lowbit needs a computable type of 64- or 256-weight blocks (IQ2_XXS ... NVFP4), not '%s'\n", type_name);
        return 2;
    }
    tiny_spec sp = tiny_default("llama");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.n_layer = 2, sp.n_ff = 768, sp.n_embd = 256;
    sp.n_head = 4, sp.n_head_kv = 2, sp.rope_dims = 64, sp.tied = false, sp.seed = 256;
    tiny_tensor *ts = calloc(TINY_MAX_TENSORS, sizeof(*ts));
    int nt = tiny_tensors(&sp, ts);
    uint64_t rng = 0x10b17 + type;
    for (int i = 0; i < nt; i++)
        if (ts[i].n_dims == 2) lowbit_tensor(&ts[i], type, &rng);
    int rc = tiny_write_tensors(path, &sp, ts, nt);
    free(ts);
    if (rc) fprintf(stderr, "make_tiny: could not write %s\n", path);
    return rc;
}

/* A tiny decoder reranker: pooling_type rank (4) and a two-row head. */
static int write_rank(const char *path) {
    tiny_spec sp = tiny_default("llama");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 256, sp.n_layer = 2, sp.n_embd = 64, sp.n_head = 4, sp.n_head_kv = 2;
    sp.n_ff = 128, sp.rope_dims = 16, sp.wtype = GGUF_TYPE_F32, sp.seed = 4;
    sp.pooling = 1 + 4, sp.n_cls_out = 2;
    if (tiny_write(path, &sp) != 0) {
        fprintf(stderr, "make_tiny: could not write %s\n", path);
        return 1;
    }
    return 0;
}

/* A small chat model: a long context for prompts that spell tools out in byte tokens. */
static int write_chat(const char *path) {
    static const char *const markers[] = {"<|im_start|>", "<|im_end|>"};
    tiny_spec sp = tiny_default("llama");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 8192, sp.n_layer = 2, sp.n_embd = 64, sp.n_head = 4, sp.n_head_kv = 2;
    sp.n_ff = 128, sp.rope_dims = 16, sp.wtype = GGUF_TYPE_F32, sp.seed = 8192, sp.tied = false;
    sp.specials = markers, sp.n_specials = 2;
    if (tiny_write(path, &sp) != 0) {
        fprintf(stderr, "make_tiny: could not write %s\n", path);
        return 1;
    }
    return 0;
}

/* A small code model: the FIM tokens (Qwen2.5-Coder's spellings) as control tokens, for Ollama's
 * /api/generate with a suffix in the client battery. */
static int write_fim(const char *path) {
    static const char *const fim[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>"};
    tiny_spec sp = tiny_default("llama");
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.n_layer = 2, sp.n_embd = 64, sp.n_head = 4, sp.n_head_kv = 2;
    sp.n_ff = 128, sp.rope_dims = 16, sp.wtype = GGUF_TYPE_F32, sp.seed = 31, sp.tied = false;
    sp.specials = fim, sp.n_specials = (int)ATTND_ARRAY_LEN(fim);
    if (tiny_write(path, &sp) != 0) {
        fprintf(stderr, "make_tiny: could not write %s\n", path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[2], "lowbit")) return write_lowbit(argv[1], argv[3]);
    if (argc == 4 && (!strcmp(argv[2], "xlmr") || !strcmp(argv[2], "xlmr-rank"))) {
        tiny_spec sp = enc_xlmr(argv[3], !strcmp(argv[2], "xlmr-rank"));
        return enc_write(argv[1], &sp) != 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: make_tiny OUT.gguf qwen896|llama960|rank|chat|fim|bert|bert-rank|modern-bert"
                        " | make_tiny OUT.gguf lowbit TYPE"
                        " | make_tiny OUT.gguf xlmr|xlmr-rank VOCAB.gguf\n");
        return 2;
    }
    if (!strcmp(argv[2], "rank")) return write_rank(argv[1]);
    if (!strcmp(argv[2], "chat")) return write_chat(argv[1]);
    if (!strcmp(argv[2], "fim")) return write_fim(argv[1]);
    if (!strcmp(argv[2], "bert") || !strcmp(argv[2], "bert-rank")) {
        tiny_spec sp = enc_small();
        if (!strcmp(argv[2], "bert-rank")) sp.pooling = 1 + 4, sp.n_cls_out = 1, sp.seed = 6;
        return enc_write(argv[1], &sp) != 0;
    }
    if (!strcmp(argv[2], "modern-bert")) { /* mbert_silu's recipe (SwiGLU, a window of 10) at 64 wide */
        tiny_spec sp = mbert_silu();
        sp.n_embd = 64, sp.n_head = 4, sp.n_head_kv = 4, sp.n_ff = 96, sp.rope_dims = 16;
        return enc_write(argv[1], &sp) != 0;
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
