/*
 * fuzz_embed.c — (fuzzing only) the embedding and rerank request parsers on arbitrary bytes, and
 * their answers.
 *
 * The input's first byte picks the parser: 0 OpenAI's /v1/embeddings, 1 Ollama's /api/embed,
 * 2 its legacy /api/embeddings, 3 rerank. A body that parses gets an answer from made-up vectors
 * (every input's own bytes as floats): it must serialise, hold one entry per input (rerank: top_n
 * results sorted by score, each index once), and finished vectors must have norm 1 or 0. A
 * refusal must name a field and give an error body that serialises.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embreq.h"
#include "fuzz_util.h"
#include "rerank.h"

#define DIM 5

/* Made-up raw vectors (n, DIM) from the input's bytes, finished as the request says. */
static float *vectors(const embreq *r, const uint8_t *data, size_t size, int *dim) {
    float *v = calloc((size_t)r->n_items * DIM + 1, sizeof(float));
    FUZZ_CHECK(v != NULL, "out of memory");
    *dim = r->dimensions > 0 && r->dimensions < DIM ? r->dimensions : DIM;
    for (int i = 0; i < r->n_items; i++) {
        float raw[DIM];
        for (int k = 0; k < DIM; k++) raw[k] = (float)((int)data[(i * DIM + k) % size] - 128) / 16.0f;
        int n = embreq_finish(raw, DIM, r->dimensions, r->norm, v + (size_t)i * *dim);
        FUZZ_CHECK(n == *dim, "embreq_finish wrote %d floats, want %d", n, *dim);
        if (r->norm == EMBREQ_NORM_L2) {
            double s = 0;
            for (int k = 0; k < n; k++) s += (double)v[i * *dim + k] * v[i * *dim + k];
            FUZZ_CHECK(s == 0 || fabs(s - 1) < 1e-4, "an L2-normalised vector has norm^2 %g", s);
        }
    }
    return v;
}

static void check_embed(const json_t *body, embreq_api api, const uint8_t *data, size_t size) {
    embreq r;
    const char *param = NULL;
    attnd_err err = {{0}};
    if (embreq_parse(body, api, 64, 1000, &r, &param, &err) != ATTND_OK) {
        FUZZ_CHECK(param && err.msg[0], "a refusal without a field or message");
        embreq_free(&r);
        return;
    }
    for (int i = 0; i < r.n_items; i++)
        for (int k = 0; k < r.items[i].n_ids; k++) FUZZ_CHECK(r.items[i].ids[k] >= 0 && r.items[i].ids[k] < 1000, "a bad id kept");
    int dim;
    float *v = vectors(&r, data, size, &dim);
    json_t *a = embreq_answer(&r, v, dim, 3, "m", 1);
    FUZZ_CHECK(a != NULL, "no answer");
    if (api == EMBREQ_OPENAI) FUZZ_CHECK(json_array_size(json_object_get(a, "data")) == (size_t)r.n_items, "entries != inputs");
    if (api == EMBREQ_OLLAMA) FUZZ_CHECK(json_array_size(json_object_get(a, "embeddings")) == (size_t)r.n_items, "entries != inputs");
    fuzz_check_json(a, "answer");
    json_decref(a);
    free(v);
    embreq_free(&r);
}

static void check_rerank(const json_t *body, const uint8_t *data, size_t size) {
    rerank_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    if (rerank_parse(body, 64, &r, &param, &err) != ATTND_OK) {
        FUZZ_CHECK(param && err.msg[0], "a refusal without a field or message");
        rerank_request_free(&r);
        return;
    }
    FUZZ_CHECK(r.top_n >= 1 && r.top_n <= r.n_docs, "top_n %d of %d documents", r.top_n, r.n_docs);
    float *s = malloc((size_t)r.n_docs * sizeof(float));
    FUZZ_CHECK(s != NULL, "out of memory");
    for (int i = 0; i < r.n_docs; i++) s[i] = (float)data[i % size];
    json_t *a = rerank_answer(&r, s, 1, "m");
    FUZZ_CHECK(a != NULL, "no answer");
    json_t *res = json_object_get(a, "results");
    FUZZ_CHECK(json_array_size(res) == (size_t)r.top_n, "results != top_n");
    double prev = INFINITY;
    for (size_t i = 0; i < json_array_size(res); i++) {
        double sc = json_real_value(json_object_get(json_array_get(res, i), "relevance_score"));
        FUZZ_CHECK(sc <= prev, "results not sorted");
        prev = sc;
    }
    fuzz_check_json(a, "answer");
    json_decref(a);
    free(s);
    rerank_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] % 4;
    json_t *body = fuzz_body(data, size, 1);
    if (!body) return 0;
    if (mode == 3) check_rerank(body, data, size);
    else check_embed(body, (embreq_api)mode, data, size);
    json_decref(body);
    return 0;
}
