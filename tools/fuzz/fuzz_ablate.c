/*
 * fuzz_ablate.c — (fuzzing only) the "ablate" request field (server/api/ablate_api.c) on
 * arbitrary bytes, then the range check against the shipped model's shape: a refusal names
 * "ablate" with a message; an accepted list has no repeated (layer, head), only known modes and
 * finite scales, and echoes as JSON. Then the ablation sweep's fields ("measure": "ablation",
 * target_position, target_token, ablate_from, ablate_mode, ablate_scale): a refusal names one.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ablate_api.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = fuzz_body(data, size, 0);
    if (!body) return 0;
    model_info mi = {.n_layer = 6, .n_head = 4, .n_head_kv = 4, .n_vocab = 4096, .n_ctx = 512, .n_embd = 288,
                     .head_dim = 72};
    engine_ablation_head *h = NULL;
    int n = 0;
    const char *param = NULL;
    attnd_err err;
    attnd_status st = ablate_api_parse(body, &h, &n, &param, &err);
    if (st == ATTND_ERR_INVALID) {
        FUZZ_CHECK(param && !strcmp(param, "ablate") && err.msg[0], "a refusal names no field");
    } else if (st == ATTND_OK) {
        FUZZ_CHECK((h == NULL) == (n == 0), "entries and count disagree");
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(h[i].mode == ENGINE_ABLATE_ZERO || h[i].mode == ENGINE_ABLATE_MEAN, "unknown mode let through");
            FUZZ_CHECK(isfinite(h[i].scale), "a scale that is not finite");
            for (int k = 0; k < i; k++)
                FUZZ_CHECK(h[k].layer != h[i].layer || h[k].head != h[i].head, "a repeated head let through");
        }
        st = ablate_api_check(&mi, h, n, &err);
        FUZZ_CHECK(st == ATTND_OK || err.msg[0], "a range refusal has no message");
        json_t *echo = ablate_api_json(h, n);
        FUZZ_CHECK(echo && (int)json_array_size(echo) == n, "the echo lost entries");
        json_decref(echo);
    }
    free(h);
    ablate_measure am;
    param = NULL;
    st = ablate_api_parse_measure(body, &am, &param, &err);
    FUZZ_CHECK(st == ATTND_OK || (param && err.msg[0]), "a sweep refusal names no field");
    if (st == ATTND_OK && am.on) FUZZ_CHECK(isfinite(am.scale) && am.from >= -1, "a bad sweep let through");
    json_decref(body);
    return 0;
}
