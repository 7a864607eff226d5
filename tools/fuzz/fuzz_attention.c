/*
 * fuzz_attention.c — (fuzzing only) /v1/attention's selection fields on arbitrary bytes.
 *
 * A body whose layers / heads / top_k parse is checked against a model's sizes (the shipped
 * model's shape: 6 layers x 4 heads, 512 positions) and both caps, as the server checks it before
 * anything is allocated; the byte estimate must cover the weights at their shortest.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn_api.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    json_t *body = fuzz_body(data, size, 2);
    if (!body) return 0;
    attn_api_request ar;
    const char *param = NULL;
    attnd_err err;
    if (attn_api_parse(body, &ar, &param, &err) == ATTND_OK) {
        model_info mi;
        memset(&mi, 0, sizeof(mi));
        mi.n_layer = 6, mi.n_head = 4, mi.n_head_kv = 4, mi.n_ctx = 512, mi.n_embd = 64, mi.head_dim = 16;
        int n_positions = 1 + ((data[0] << 8 | data[1]) % 512);
        attn_capture_params p = attn_api_params(&ar, n_positions);
        attnd_status st = attn_api_check(&mi, &p, 1000000, (uint64_t)16 << 20, &param, &err);
        if (st == ATTND_OK) {
            uint64_t n = attn_capture_count(&mi, &p);
            FUZZ_CHECK(n <= 1000000, "accepted %llu weights over the cap", (unsigned long long)n);
            FUZZ_CHECK(attn_api_bytes(&mi, &p) >= n * 3, "the byte estimate is below the shortest weights");
        } else {
            FUZZ_CHECK(param != NULL, "a refusal names no field: %s", err.msg);
        }
    } else {
        FUZZ_CHECK(param != NULL, "a refusal names no field: %s", err.msg);
    }
    attn_api_request_free(&ar);
    json_decref(body);
    return 0;
}
