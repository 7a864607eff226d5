/*
 * quantize.c — llama.cpp's own quantizer, for making the files the suite checks that attnd loads
 * as llama.cpp writes them (tests/data/models/lcpp/, tests/data/regenerate.sh). node-llama-cpp
 * ships libllama but no quantize tool, so this calls its exported `llama_model_quantize`.
 *
 *   cc -O2 -o quantize tools/peers/llamacpp/quantize.c -ldl
 *   ./quantize PEER_DIR IN.gguf OUT.gguf TYPE        TYPE: Q4_0 ... IQ4_XS (the names below)
 *
 * PEER_DIR is the folder tools/peers/llamacpp/install.sh prints. From llama.h (public API):
 * `llama_model_quantize_params` begins with `int32_t nthread; enum llama_ftype ftype;` and is
 * returned by value from `llama_model_quantize_default_params()`; a struct with pointers is
 * returned through a caller-provided buffer (SysV x86-64), so a buffer larger than the real
 * struct is safe, and only the two leading fields are set here. The ftype numbers are llama.h's.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct params {
    int32_t nthread;
    int32_t ftype;
    unsigned char rest[1016]; /* the fields after these two, whatever this version has */
} params;

static const struct {
    const char *name;
    int32_t ftype;
} FTYPES[] = {
    {"Q4_0", 2},    {"Q4_1", 3},    {"Q8_0", 7},    {"Q5_0", 8},    {"Q5_1", 9},    {"Q2_K", 10},
    {"Q3_K_S", 11}, {"Q3_K_M", 12}, {"Q3_K_L", 13}, {"Q4_K_S", 14}, {"Q4_K_M", 15}, {"Q5_K_S", 16},
    {"Q5_K_M", 17}, {"Q6_K", 18},   {"IQ4_NL", 25}, {"IQ4_XS", 30},
};

static void *open_lib(const char *peer, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/%s", peer, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) fprintf(stderr, "quantize: %s\n", dlerror());
    return h;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: quantize PEER_DIR IN.gguf OUT.gguf TYPE\n");
        return 2;
    }
    int32_t ftype = -1;
    for (size_t i = 0; i < sizeof FTYPES / sizeof FTYPES[0]; i++)
        if (!strcmp(argv[4], FTYPES[i].name)) ftype = FTYPES[i].ftype;
    if (ftype < 0) {
        fprintf(stderr, "quantize: unknown type '%s'\n", argv[4]);
        return 2;
    }
    if (!open_lib(argv[1], "libggml-base.so") || !open_lib(argv[1], "libggml.v0.4.0.so")) return 1;
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
    p.nthread = 1;
    p.ftype = ftype;
    uint32_t rc = quantize(argv[2], argv[3], &p);
    if (rc != 0) fprintf(stderr, "quantize: llama_model_quantize failed (%u)\n", rc);
    return rc ? 1 : 0;
}
