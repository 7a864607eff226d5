/*
 * fuzz_util.h — (fuzzing only) helpers shared by the libFuzzer harnesses in tools/fuzz/:
 * handing fuzz input to code that wants a path (a memfd seen through /proc/self/fd), and tiny
 * tokenizer vocabularies built in memory, one per family, so no harness depends on fixtures; a
 * private state directory for the store harnesses; a request harness's JSON body, and the check
 * that a JSON body a harness got serialises.
 * Header-only; every function is static.
 */
#ifndef ATTND_FUZZ_UTIL_H
#define ATTND_FUZZ_UTIL_H


#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

#include "attnd/gguf.h"
#include "attnd/tokenizer.h"

/* Aborts the run (a finding): a harness-level invariant the code under test broke. */
#define FUZZ_CHECK(cond, ...)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* v (a body the code under test built: an error body, a chat body) exists and serialises; what
 * names it in the finding. */
static inline void fuzz_check_json(json_t *v, const char *what) {
    FUZZ_CHECK(v != NULL, "no %s", what);
    char *s = json_dumps(v, 0);
    FUZZ_CHECK(s != NULL, "the %s does not serialise", what);
    free(s);
}

/* A request harness's body: the JSON in data after its first skip bytes (those pick the harness's
 * mode), or NULL when there are fewer or it is not JSON. The caller owns it. */
static inline json_t *fuzz_body(const uint8_t *data, size_t size, size_t skip) {
    if (size < skip) return NULL;
    return json_loadb((const char *)data + skip, size - skip, 0, NULL);
}

/* Writes data into a fresh memfd and puts its /proc path in path; returns the fd (close it
 * after use) or -1. */
static inline int fuzz_memfd(const uint8_t *data, size_t size, char path[64]) {
    int fd = memfd_create("fuzz", 0);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

// ---- a private state directory ---------------------------------------------------------------

/* Makes a fresh /tmp/attnd-fuzz-<tag>-XXXXXX directory in dir and the path of file in it in path
 * (for the store harnesses, whose input is one file of a state directory); aborts on failure. */
static inline void fuzz_state_dir(const char *tag, const char *file, char dir[64], char path[128]) {
    snprintf(dir, 64, "/tmp/attnd-fuzz-%s-XXXXXX", tag);
    if (!mkdtemp(dir)) abort();
    snprintf(path, 128, "%s/%s", dir, file);
}

/* Writes the input as the whole file at path (aborts when it cannot). */
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size) fwrite(data, 1, size, f);
    fclose(f);
}

// ---- GGUF images built in memory ---------------------------------------------------------------

typedef struct fbuf {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv;
} fbuf;

static inline void fb_put(fbuf *b, const void *d, size_t n) {
    while (b->n + n > b->cap) {
        b->cap = b->cap ? b->cap * 2 : 4096;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static inline void fb_u32(fbuf *b, uint32_t v) { fb_put(b, &v, 4); }
static inline void fb_u64(fbuf *b, uint64_t v) { fb_put(b, &v, 8); }
static inline void fb_str(fbuf *b, const char *s) {
    fb_u64(b, strlen(s));
    fb_put(b, s, strlen(s));
}
static inline void fb_kv_str(fbuf *b, const char *k, const char *v) { fb_str(b, k), fb_u32(b, GGUF_VT_STRING), fb_str(b, v), b->n_kv++; }
static inline void fb_kv_u32(fbuf *b, const char *k, uint32_t v) { fb_str(b, k), fb_u32(b, GGUF_VT_UINT32), fb_u32(b, v), b->n_kv++; }
static inline void fb_kv_bool(fbuf *b, const char *k, bool v) {
    uint8_t c = v;
    fb_str(b, k), fb_u32(b, GGUF_VT_BOOL), fb_put(b, &c, 1), b->n_kv++;
}
static inline void fb_kv_strs(fbuf *b, const char *k, char **v, size_t n) {
    fb_str(b, k), fb_u32(b, GGUF_VT_ARRAY), fb_u32(b, GGUF_VT_STRING), fb_u64(b, n);
    for (size_t i = 0; i < n; i++) fb_str(b, v[i]);
    b->n_kv++;
}
static inline void fb_kv_i32s(fbuf *b, const char *k, const int32_t *v, size_t n) {
    fb_str(b, k), fb_u32(b, GGUF_VT_ARRAY), fb_u32(b, GGUF_VT_INT32), fb_u64(b, n), fb_put(b, v, n * 4), b->n_kv++;
}
static inline void fb_kv_f32s(fbuf *b, const char *k, const float *v, size_t n) {
    fb_str(b, k), fb_u32(b, GGUF_VT_ARRAY), fb_u32(b, GGUF_VT_FLOAT32), fb_u64(b, n), fb_put(b, v, n * 4), b->n_kv++;
}

/* A vocabulary under construction: token strings, types and scores. */
typedef struct fvocab {
    char *tok[1024];
    int32_t type[1024];
    float score[1024];
    size_t n;
    char *merge[1024];
    size_t n_merges;
} fvocab;

static inline int fv_find(const fvocab *v, const char *s) {
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->tok[i], s)) return (int)i;
    return -1;
}
static inline int fv_add(fvocab *v, const char *s, int32_t type, float score) {
    int i = fv_find(v, s);
    if (i >= 0 || v->n >= 1024) return i;
    v->tok[v->n] = strdup(s);
    v->type[v->n] = type;
    v->score[v->n] = score;
    return (int)v->n++;
}
static inline void fv_free(fvocab *v) {
    for (size_t i = 0; i < v->n; i++) free(v->tok[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merge[i]);
}

/* GPT-2's byte -> character table (printable Latin-1 stands for itself, the rest from U+0100). */
static inline uint32_t fz_byte_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
    return 0x100 + n;
}
static inline size_t fz_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}
/* The byte-level spelling of a plain string (each byte through the GPT-2 table). */
static inline void fz_bytelevel(char *out, const char *s) {
    size_t k = 0;
    for (; *s; s++) k += fz_utf8(out + k, fz_byte_cp((unsigned char)*s));
    out[k] = '\0';
}

/* Words the tiny vocabularies can merge into single tokens. */
static const char *FZ_WORDS[] = {"the", " the", "hello", " world", "in", "ing", " a", "  ", "\n\n", "12", "é",
                                 "ab", "abc", " ab", "er", "on", "an", " is", "de", "<", "|>"};
/* Chat markers and other specials every tiny vocabulary carries (control unless noted). */
static const char *FZ_CONTROL[] = {"<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>",
                                   "<|eot_id|>", "<start_of_turn>", "<end_of_turn>", "<|end|>", "<|system|>",
                                   "<|assistant|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                                   "<|file_sep|>"};
static const char *FZ_USER[] = {"<|user|>", "[INST]", "[/INST]", "<tab>"};

/*
 * A tokenizer-only GGUF image of family "llama" (SentencePiece: <unk> <s> </s>, byte fallback,
 * scored pieces), "gpt2" (byte-level with merges; pre names the pre-tokenizer) or, with pre
 * "gemma4", "gemma4" (merges over raw UTF-8 with U+2581 for spaces, <0xXX> byte fallback). Every chat
 * family's markers are control tokens, a few others user-defined. *size gets the length;
 * the image is malloc'd (caller frees).
 */
static inline uint8_t *fuzz_tiny_vocab_image(bool spm, const char *pre, size_t *size) {
    fvocab v = {0};
    fbuf b = {0};
    char s[64];
    if (spm) {
        fv_add(&v, "<unk>", 2, 0), fv_add(&v, "<s>", 3, 0), fv_add(&v, "</s>", 3, 0);
        for (unsigned c = 0; c < 256; c++) snprintf(s, sizeof(s), "<0x%02X>", c), fv_add(&v, s, 6, 0);
        fv_add(&v, "\xE2\x96\x81", 1, -1);
        for (unsigned c = 0x20; c < 0x7F; c++) s[0] = (char)c, s[1] = 0, fv_add(&v, s, 1, -2 - (float)(c % 7));
        for (size_t w = 0; w < sizeof(FZ_WORDS) / sizeof(*FZ_WORDS); w++) {
            /* every prefix of the word, spaces as U+2581, shorter ones scored lower */
            const char *word = FZ_WORDS[w];
            size_t k = 0;
            for (size_t i = 0; word[i]; i++) {
                if (word[i] == ' ') memcpy(s + k, "\xE2\x96\x81", 3), k += 3;
                else s[k++] = word[i];
                s[k] = 0;
                if (i) fv_add(&v, s, 1, -10.0f + (float)i);
            }
        }
    } else if (!strcmp(pre, "gemma4")) { /* SentencePiece-style BPE: U+2581, raw UTF-8, <0xXX> bytes */
        fv_add(&v, "<pad>", 3, 0), fv_add(&v, "<eos>", 3, 0), fv_add(&v, "<bos>", 3, 0);
        for (unsigned c = 0; c < 256; c++) snprintf(s, sizeof(s), "<0x%02X>", c), fv_add(&v, s, 6, 0);
        fv_add(&v, "\xE2\x96\x81", 1, 0), fv_add(&v, "\n", 1, 0), fv_add(&v, "\n\n", 1, 0), fv_add(&v, "\xC3\xA9", 1, 0);
        for (unsigned c = 0x21; c < 0x7F; c++) s[0] = (char)c, s[1] = 0, fv_add(&v, s, 1, 0);
        for (size_t w = 0; w < sizeof(FZ_WORDS) / sizeof(*FZ_WORDS); w++) {
            char prev[64] = "", one[8], m[140];
            for (const char *p = FZ_WORDS[w]; *p;) { /* merges build each word left to right */
                size_t cl = (unsigned char)*p >= 0xC0 ? 2 : 1;
                if (*p == ' ') strcpy(one, "\xE2\x96\x81");
                else memcpy(one, p, cl), one[cl] = 0;
                p += cl;
                if (!prev[0] || *one == '\n') {
                    if (!prev[0]) strcpy(prev, one);
                    continue;
                }
                snprintf(m, sizeof(m), "%s %s", prev, one);
                strcat(prev, one);
                if (fv_find(&v, prev) < 0) fv_add(&v, prev, 1, 0), v.merge[v.n_merges++] = strdup(m);
            }
        }
        fv_add(&v, "<turn|>", 3, 0), fv_add(&v, "<|tool_response>", 4, 0), fv_add(&v, "</s>", 4, 0);
    } else {
        for (unsigned c = 0; c < 256; c++) {
            s[fz_utf8(s, fz_byte_cp(c))] = 0;
            fv_add(&v, s, 1, 0);
        }
        for (size_t w = 0; w < sizeof(FZ_WORDS) / sizeof(*FZ_WORDS); w++) {
            /* merges build each word left to right: "t h", "th e", ... */
            char bl[64], prev[64], one[8], m[140];
            fz_bytelevel(bl, FZ_WORDS[w]);
            size_t k = 0, len = strlen(bl);
            prev[0] = 0;
            while (k < len) {
                size_t cl = ((unsigned char)bl[k] >= 0xC0) ? 2 : 1;
                memcpy(one, bl + k, cl), one[cl] = 0;
                k += cl;
                if (!prev[0]) {
                    strcpy(prev, one);
                    continue;
                }
                snprintf(m, sizeof(m), "%s %s", prev, one);
                strcat(prev, one);
                if (fv_find(&v, prev) < 0) {
                    fv_add(&v, prev, 1, 0);
                    v.merge[v.n_merges++] = strdup(m);
                }
            }
        }
        fv_add(&v, "<|endoftext|>", 3, 0);
    }
    for (size_t i = 0; i < sizeof(FZ_CONTROL) / sizeof(*FZ_CONTROL); i++) fv_add(&v, FZ_CONTROL[i], 3, 0);
    for (size_t i = 0; i < sizeof(FZ_USER) / sizeof(*FZ_USER); i++) fv_add(&v, FZ_USER[i], 4, 0);

    fbuf kv = {0};
    bool g4 = !spm && !strcmp(pre, "gemma4");
    fb_kv_str(&kv, "tokenizer.ggml.model", spm ? "llama" : g4 ? "gemma4" : "gpt2");
    if (!spm && !g4) fb_kv_str(&kv, "tokenizer.ggml.pre", pre);
    fb_kv_strs(&kv, "tokenizer.ggml.tokens", v.tok, v.n);
    fb_kv_i32s(&kv, "tokenizer.ggml.token_type", v.type, v.n);
    if (spm) fb_kv_f32s(&kv, "tokenizer.ggml.scores", v.score, v.n);
    else fb_kv_strs(&kv, "tokenizer.ggml.merges", v.merge, v.n_merges);
    if (!spm) {
        fb_kv_u32(&kv, "tokenizer.ggml.bos_token_id", (uint32_t)fv_find(&v, g4 ? "<bos>" : "<|endoftext|>"));
        fb_kv_u32(&kv, "tokenizer.ggml.eos_token_id", (uint32_t)fv_find(&v, g4 ? "<eos>" : "<|endoftext|>"));
        fb_kv_bool(&kv, "tokenizer.ggml.add_bos_token", true);
    }
    fb_put(&b, "GGUF", 4);
    fb_u32(&b, 3);
    fb_u64(&b, 0);
    fb_u64(&b, kv.n_kv);
    fb_put(&b, kv.p, kv.n);
    while (b.n % 32) fb_put(&b, "", 1);
    free(kv.p);
    fv_free(&v);
    *size = b.n;
    return b.p;
}

/* The tokenizer of fuzz_tiny_vocab_image; NULL (after a message) if it does not load. */
static inline tokenizer *fuzz_tiny_tokenizer(bool spm, const char *pre) {
    size_t n;
    uint8_t *img = fuzz_tiny_vocab_image(spm, pre, &n);
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    attnd_err err;
    if (gguf_open_memory(&f, img, n, &err) != ATTND_OK || tok_load(&t, f, &err) != ATTND_OK) {
        fprintf(stderr, "fuzz: tiny %s vocabulary does not load: %s\n", spm ? "llama" : pre, err.msg);
        t = NULL;
    }
    gguf_close(f);
    free(img);
    return t;
}

#endif
