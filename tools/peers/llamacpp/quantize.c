/*
 * quantize.c — llama.cpp's own quantizer, for making the files the suite checks that attnd loads
 * as llama.cpp writes them (tests/data/models/lcpp/, tests/data/regenerate.sh). node-llama-cpp
 * ships libllama but no quantize tool, so this calls its exported `llama_model_quantize`.
 *
 *   cc -O2 -o quantize tools/peers/llamacpp/quantize.c -ldl
 *   ./quantize PEER_DIR IN.gguf OUT.gguf TYPE [IMATRIX.gguf]   TYPE: Q4_0 ... IQ1_M (the names below)
 *
 * PEER_DIR is the folder tools/peers/llamacpp/install.sh prints. The struct below is llama.h's
 * `llama_model_quantize_params` of the peer's llama.cpp (node-llama-cpp 3.21.1, the version in
 * /work/llama.cpp-src): nthread, ftype, two ggml types, six bools, four pointers (imatrix first),
 * max_buf_size. It is checked at run time against what `llama_model_quantize_default_params()`
 * returns (GGML_TYPE_COUNT in both type fields, quantize_output_tensor set, null pointers, an 8 GiB
 * buffer), so a peer with another layout stops here instead of reading garbage.
 *
 * IMATRIX.gguf is an importance matrix in llama.cpp's GGUF format (`attnd imatrix` writes it). It is
 * read with the peer's own gguf reader and handed over as llama-quantize does it
 * (tools/quantize/quantize.cpp load_imatrix): per weight NAME, NAME.in_sum2 divided by the rows
 * NAME.counts counted (per expert), 1 where a count is zero, in a list ended by a NULL name.
 * The ftype numbers are llama.h's.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.h: struct llama_model_imatrix_data */
typedef struct imatrix_data {
    const char *name;
    const float *data;
    size_t size;
} imatrix_data;

/* llama.h: llama_model_quantize_params (this llama.cpp version) */
typedef struct params {
    int32_t nthread;
    int32_t ftype;
    int32_t output_tensor_type, token_embedding_type; /* enum ggml_type; GGML_TYPE_COUNT = default */
    bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
    const imatrix_data *imatrix; /* ends with a NULL name */
    const void *kv_overrides, *tt_overrides;
    const int32_t *prune_layers;
    size_t max_buf_size;
} params;

enum { GGML_TYPE_COUNT = 43 }; /* ggml.h of this version */

static const struct {
    const char *name;
    int32_t ftype;
} FTYPES[] = {
    {"Q4_0", 2},    {"Q4_1", 3},    {"Q8_0", 7},    {"Q5_0", 8},    {"Q5_1", 9},    {"Q2_K", 10},
    {"Q3_K_S", 11}, {"Q3_K_M", 12}, {"Q3_K_L", 13}, {"Q4_K_S", 14}, {"Q4_K_M", 15}, {"Q5_K_S", 16},
    {"Q5_K_M", 17}, {"Q6_K", 18},   {"IQ4_NL", 25}, {"IQ4_XS", 30}, {"IQ2_XXS", 19}, {"IQ2_XS", 20},
    {"IQ3_XS", 22}, {"IQ3_XXS", 23}, {"IQ1_S", 24},  {"IQ3_S", 26},  {"IQ3_M", 27},  {"IQ2_S", 28},
    {"IQ2_M", 29},  {"IQ1_M", 31},
};

static void *open_lib(const char *peer, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/%s", peer, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) fprintf(stderr, "quantize: %s\n", dlerror());
    return h;
}

/* gguf.h / ggml.h of the peer, the few calls the imatrix reader needs */
typedef struct gguf_init_params {
    bool no_alloc;
    void **ctx; /* struct ggml_context ** */
} gguf_init_params;

typedef struct ggml_api {
    void *(*init_from_file)(const char *, gguf_init_params);
    int64_t (*n_tensors)(const void *);
    const char *(*tensor_name)(const void *, int64_t);
    void *(*get_tensor)(void *, const char *);
    float *(*data_f32)(const void *);
    int64_t (*nelements)(const void *);
} ggml_api;

/* The imatrix entries of the GGUF file `path` as llama-quantize hands them over, in a NULL-named
 * list (the caller frees each data and the list; the ggml context stays alive for the names), or
 * NULL with a message. */
static imatrix_data *imatrix_load(void *base, const char *path) {
    ggml_api g = {
        .init_from_file = (void *(*)(const char *, gguf_init_params))dlsym(base, "gguf_init_from_file"),
        .n_tensors = (int64_t(*)(const void *))dlsym(base, "gguf_get_n_tensors"),
        .tensor_name = (const char *(*)(const void *, int64_t))dlsym(base, "gguf_get_tensor_name"),
        .get_tensor = (void *(*)(void *, const char *))dlsym(base, "ggml_get_tensor"),
        .data_f32 = (float *(*)(const void *))dlsym(base, "ggml_get_data_f32"),
        .nelements = (int64_t(*)(const void *))dlsym(base, "ggml_nelements"),
    };
    if (!g.init_from_file || !g.n_tensors || !g.tensor_name || !g.get_tensor || !g.data_f32 || !g.nelements) {
        fprintf(stderr, "quantize: libggml-base lacks the gguf API\n");
        return NULL;
    }
    void *ctx = NULL;
    void *gguf = g.init_from_file(path, (gguf_init_params){.no_alloc = false, .ctx = &ctx});
    if (!gguf || !ctx) {
        fprintf(stderr, "quantize: cannot read the imatrix %s\n", path);
        return NULL;
    }
    int64_t n = g.n_tensors(gguf);
    imatrix_data *out = calloc((size_t)n + 1, sizeof *out);
    size_t k = 0;
    for (int64_t i = 0; out && i < n; i++) {
        const char *name = g.tensor_name(gguf, i);
        size_t len = strlen(name), suffix = strlen(".in_sum2");
        if (len <= suffix || strcmp(name + len - suffix, ".in_sum2")) continue;
        char counts_name[512];
        snprintf(counts_name, sizeof counts_name, "%.*s.counts", (int)(len - suffix), name);
        void *sums = g.get_tensor(ctx, name), *counts = g.get_tensor(ctx, counts_name);
        if (!counts) {
            fprintf(stderr, "quantize: %s has no %s\n", path, counts_name);
            return NULL;
        }
        int64_t n_sums = g.nelements(sums), n_counts = g.nelements(counts);
        if (n_counts <= 0 || n_sums % n_counts) {
            fprintf(stderr, "quantize: %s: %s does not split into %lld counts\n", path, name, (long long)n_counts);
            return NULL;
        }
        int64_t cols = n_sums / n_counts;
        const float *s = g.data_f32(sums), *c = g.data_f32(counts);
        float *mean = malloc((size_t)n_sums * sizeof *mean);
        char *weight = malloc(len - suffix + 1);
        if (!mean || !weight) return NULL;
        for (int64_t j = 0; j < n_counts; j++)
            for (int64_t x = 0; x < cols; x++) mean[j * cols + x] = c[j] > 0 ? s[j * cols + x] / c[j] : 1.0f;
        memcpy(weight, name, len - suffix);
        weight[len - suffix] = 0;
        out[k++] = (imatrix_data){.name = weight, .data = mean, .size = (size_t)n_sums};
    }
    if (!out || !k) fprintf(stderr, "quantize: %s holds no importance matrix\n", path);
    return k ? out : NULL;
}

/* false, with a message, when the defaults do not look like this version's struct */
static bool layout_matches(const params *p) {
    bool ok = p->ftype == 7 && p->output_tensor_type == GGML_TYPE_COUNT && p->token_embedding_type == GGML_TYPE_COUNT &&
              !p->allow_requantize && p->quantize_output_tensor && !p->only_copy && !p->pure && !p->keep_split &&
              !p->dry_run && !p->imatrix && !p->kv_overrides && !p->tt_overrides && !p->prune_layers &&
              p->max_buf_size == (size_t)8 << 30;
    if (!ok) fprintf(stderr, "quantize: llama_model_quantize_params of this libllama is not the layout quantize.c knows\n");
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: quantize PEER_DIR IN.gguf OUT.gguf TYPE [IMATRIX.gguf]\n");
        return 2;
    }
    int32_t ftype = -1;
    for (size_t i = 0; i < sizeof FTYPES / sizeof FTYPES[0]; i++)
        if (!strcmp(argv[4], FTYPES[i].name)) ftype = FTYPES[i].ftype;
    if (ftype < 0) {
        fprintf(stderr, "quantize: unknown type '%s'\n", argv[4]);
        return 2;
    }
    void *base = open_lib(argv[1], "libggml-base.so");
    if (!base || !open_lib(argv[1], "libggml.v0.4.0.so")) return 1;
    void *lib = open_lib(argv[1], "libllama.v0.4.0.so");
    if (!lib) return 1;
    void (*backend_init)(void) = (void (*)(void))dlsym(lib, "llama_backend_init");
    params (*defaults)(void) = (params(*)(void))dlsym(lib, "llama_model_quantize_default_params");
    uint32_t (*quantize)(const char *, const char *, const params *) =
        (uint32_t(*)(const char *, const char *, const params *))dlsym(lib, "llama_model_quantize");
    if (!backend_init || !defaults || !quantize) {
        fprintf(stderr, "quantize: libllama lacks the quantize API\n");
        return 1;
    }
    backend_init();
    params p = defaults();
    if (!layout_matches(&p)) return 1;
    p.nthread = 1;
    p.ftype = ftype;
    imatrix_data *im = NULL;
    if (argc == 6 && !(im = imatrix_load(base, argv[5]))) return 1;
    p.imatrix = im;
    uint32_t rc = quantize(argv[2], argv[3], &p);
    for (size_t i = 0; im && im[i].name; i++) free((void *)im[i].name), free((void *)im[i].data);
    free(im);
    if (rc != 0) fprintf(stderr, "quantize: llama_model_quantize failed (%u)\n", rc);
    return rc ? 1 : 0;
}
