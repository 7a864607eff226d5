/*
 * fuzz_attn_api.c — (fuzzing only) the attention-inspection request fields (server/api/attn_api.c:
 * layers, heads, top_k, weights, logit_lens, experts) on arbitrary bytes, then the checks against
 * a model's sizes and the answer caps, as POST /v1/attention takes them before anything is
 * allocated. A refusal must name a field and have a message; experts on the dense model must be
 * refused, naming "experts" when the rest of the selection is valid.
 */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "attn_api.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    json_t *body = fuzz_body(data, size, 1);
    if (!body) return 0;
    /* the shipped model's shape, dense or (byte 0's low bit) with 8 experts, 2 a token; byte 0
     * also picks how many positions the request would cover */
    bool moe = data[0] & 1;
    model_info mi = {.arch = moe ? "qwen3moe" : "llama", .n_layer = 6, .n_head = 4, .n_head_kv = 4, .n_vocab = 4096,
                     .n_ctx = 512, .n_embd = 288, .head_dim = 72, .n_expert = moe ? 8 : 0,
                     .n_expert_used = moe ? 2 : 0, .n_ff_exp = moe ? 64 : 0};
    attn_api_request r;
    const char *param = NULL;
    attnd_err err;
    attnd_status st = attn_api_parse(body, &r, &param, &err);
    if (st != ATTND_OK) {
        FUZZ_CHECK(param != NULL && err.msg[0], "a refusal names no field");
    } else {
        attn_capture_params p = attn_api_params(&r, 1 + data[0] * 2);
        st = attn_api_check(&mi, &p, 1000000, (uint64_t)16 << 20, &param, &err);
        FUZZ_CHECK(st == ATTND_OK || (param != NULL && err.msg[0]), "a refused selection names no field");
        if (r.experts && !moe) { /* refused; for experts itself when nothing else is wrong */
            attn_capture_params q = p;
            q.experts = false;
            const char *qparam = NULL;
            bool rest_ok = attn_api_check(&mi, &q, 1000000, (uint64_t)16 << 20, &qparam, NULL) == ATTND_OK;
            FUZZ_CHECK(st != ATTND_OK, "a dense model took experts");
            FUZZ_CHECK(!rest_ok || !strcmp(param, "experts"), "a dense model's experts refusal names another field");
        }
        if (st == ATTND_OK) FUZZ_CHECK(attn_capture_count(&mi, &p) <= 1000000, "the cap let a larger ask through");
    }
    attn_api_request_free(&r);
    json_decref(body);
    return 0;
}
