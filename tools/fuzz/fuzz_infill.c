/*
 * fuzz_infill.c — (fuzzing only) POST /infill's fields (infill.c) on arbitrary bytes, and the
 * fill-in-the-middle prompt they lay out.
 *
 * Input: byte 0 picks the vocabulary (even: SentencePiece, odd: byte-level BPE; both carry FIM
 * prefix, suffix, middle and file-separator tokens), byte 1 the context (16..1031 tokens), byte 2
 * the tokens to generate; the rest is the JSON body. A body that parses is laid out, and the
 * layout must end with the middle token, hold the prefix token before the suffix token, use only
 * ids of the vocabulary, and, without a prompt, leave the answer its room in the context.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "infill.h"

static tokenizer *g_tok[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    g_tok[0] = fuzz_tiny_tokenizer(true, NULL);
    g_tok[1] = fuzz_tiny_tokenizer(false, "qwen2");
    if (!g_tok[0] || !g_tok[1]) abort();
    for (int i = 0; i < 2; i++) {
        attnd_err err;
        if (infill_check_model(g_tok[i], &err) != ATTND_OK) abort();
    }
    return 0;
}

static void check_layout(const tokenizer *t, const int32_t *ids, size_t n, int n_ctx, int n_predict, bool prompt) {
    FUZZ_CHECK(n >= 3 && ids[n - 1] == tok_fim(t, TOK_FIM_MID), "the layout does not end with the middle token");
    size_t pre = n, suf = n;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t), "id %d outside the vocabulary", ids[i]);
        if (ids[i] == tok_fim(t, TOK_FIM_PRE) && pre == n) pre = i;
        if (ids[i] == tok_fim(t, TOK_FIM_SUF)) suf = i;
    }
    FUZZ_CHECK(pre < suf && suf < n - 1, "prefix at %zu, suffix at %zu of %zu", pre, suf, n);
    int reserve = n_predict < 1 ? 1 : n_predict > n_ctx / 2 ? n_ctx / 2 : n_predict;
    FUZZ_CHECK(prompt || n <= (size_t)(n_ctx - reserve), "%zu tokens leave no room for %d in %d", n, reserve, n_ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = fuzz_body(data, size, 3);
    if (!body) return 0;
    const tokenizer *t = g_tok[data[0] & 1];
    int n_ctx = 16 + data[1] * 4, n_predict = data[2] * 2 - 8;
    infill_input in;
    const char *param = NULL;
    attnd_err err;
    if (infill_parse(body, &in, &param, &err) == ATTND_OK) {
        int32_t *ids;
        size_t n;
        if (infill_layout(t, &in, n_ctx, n_predict, &ids, &n, &err) == ATTND_OK) {
            check_layout(t, ids, n, n_ctx, n_predict, in.prompt[0] != 0);
            free(ids);
        }
    } else {
        FUZZ_CHECK(param != NULL, "a refusal names no field: %s", err.msg);
    }
    infill_input_free(&in);
    json_decref(body);
    return 0;
}
