/*
 * fuzz_wordpiece.c — (fuzzing only) the WordPiece ("bert") tokenizer on a real BERT vocabulary
 * (tests/data/tokenizers/bert-bge.gguf, 30522 pieces), loaded four times: as the file says
 * (lowercase, strip accents) and with the normaliser keys set to cased, lowercase-only and
 * strip-only.
 *
 * Input: byte 0 picks the vocabulary (bits 4-5), parse_special (bit 0), add_special (bit 1),
 * render_special (bit 2), and whether the rest is also read as a pair split at its middle
 * (bit 3); the rest is the text, and also little-endian 16-bit ids (some out of range when
 * bit 3) that are decoded and streamed.
 * Invariants beyond "no crash, no leak": ids are in the vocabulary, at most one per byte (plus
 * [CLS] and [SEP]); with add_special they are [CLS] ... [SEP]; the pair form is [CLS] a [SEP] b
 * [SEP] of the texts' own ids with segments 0 then 1; a stream equals the whole decode; and
 * where HF's decoder gives the words back (no [UNK], special text not parsed) re-encoding the
 * decoded text gives the same ids.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/tokenizer.h"
#include "fuzz_util.h"

#ifndef FUZZ_DATA_DIR
#error "FUZZ_DATA_DIR (tests/data) is set by tools/fuzz/CMakeLists.txt"
#endif

static tokenizer *g_tok[4];

/* The vocabulary of the file with normaliser keys lower/strip (-1: key left out). */
static tokenizer *load_variant(const gguf_file *g, int lower, int strip) {
    const gguf_array *toks, *types;
    attnd_err err;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, &err) != ATTND_OK ||
        gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_INT32, &types, &err) != ATTND_OK)
        return NULL;
    char **strs = malloc(toks->n * sizeof(*strs));
    for (uint64_t i = 0; i < toks->n; i++) strs[i] = strndup(toks->strings[i].str, toks->strings[i].len);
    fbuf kv = {0}, b = {0};
    fb_kv_str(&kv, "tokenizer.ggml.model", "bert");
    fb_kv_strs(&kv, "tokenizer.ggml.tokens", strs, toks->n);
    fb_kv_i32s(&kv, "tokenizer.ggml.token_type", types->data, types->n);
    if (lower >= 0) fb_kv_bool(&kv, "tokenizer.ggml.normalizer.lowercase", lower);
    if (strip >= 0) fb_kv_bool(&kv, "tokenizer.ggml.normalizer.strip_accents", strip);
    for (uint64_t i = 0; i < toks->n; i++) free(strs[i]);
    free(strs);
    fb_put(&b, "GGUF", 4), fb_u32(&b, 3), fb_u64(&b, 0), fb_u64(&b, kv.n_kv), fb_put(&b, kv.p, kv.n);
    while (b.n % 32) fb_put(&b, "", 1);
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    if (gguf_open_memory(&f, b.p, b.n, &err) != ATTND_OK || tok_load(&t, f, &err) != ATTND_OK) t = NULL;
    gguf_close(f);
    free(kv.p);
    free(b.p);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    gguf_file *g;
    attnd_err err;
    if (gguf_open(&g, FUZZ_DATA_DIR "/tokenizers/bert-bge.gguf", &err) != ATTND_OK) {
        fprintf(stderr, "fuzz_wordpiece: %s\n", err.msg);
        abort();
    }
    static const int LOWER[4] = {-1, 0, 1, 0}, STRIP[4] = {-1, 0, 0, 1};
    for (int i = 0; i < 4; i++)
        if (!(g_tok[i] = load_variant(g, LOWER[i], STRIP[i]))) abort();
    gguf_close(g);
    return 0;
}

/* Streams ids one at a time and checks the result equals the whole decode. */
static void check_stream(const tokenizer *t, const int32_t *ids, size_t n, bool render, const char *want,
                         size_t want_len) {
    tok_stream *s;
    if (tok_stream_create(&s, t, render) != ATTND_OK) return;
    size_t m = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t k = i < n ? tok_stream_push(s, ids[i], &piece) : tok_stream_flush(s, &piece);
        FUZZ_CHECK(m + k <= want_len && !memcmp(want + m, piece, k), "stream differs from decode at byte %zu", m);
        m += k;
    }
    FUZZ_CHECK(m == want_len, "stream gave %zu bytes, decode %zu", m, want_len);
    tok_stream_destroy(s);
}

/* Decoding plain ids gives text that encodes to the same ids (HF's decoder joins each word's
 * pieces back, and the normalised words are stable under normalisation). */
static void check_reencode(const tokenizer *t, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] == 100) return; /* [UNK]: the word is gone */
    char *dec;
    size_t dl, n2;
    int32_t *again;
    attnd_err err;
    FUZZ_CHECK(tok_decode(t, ids, n, false, &dec, &dl, &err) == ATTND_OK, "decode: %s", err.msg);
    FUZZ_CHECK(tok_encode(t, dec, dl, false, false, &again, &n2, &err) == ATTND_OK, "encode: %s", err.msg);
    FUZZ_CHECK(n2 == n && !memcmp(again, ids, n * sizeof(*ids)), "\"%.*s\" re-encodes to %zu ids, not %zu", (int)dl,
               dec, n2, n);
    free(again);
    free(dec);
}

/* The pair form: the two texts' own ids between [CLS], [SEP] and [SEP], segments 0 then 1. */
static void check_pair(const tokenizer *t, const char *text, size_t len) {
    size_t half = len / 2, n, na, nb;
    int32_t *ids, *segs, *a, *b;
    attnd_err err;
    FUZZ_CHECK(tok_encode_pair(t, text, half, text + half, len - half, &ids, &segs, &n, &err) == ATTND_OK, "%s",
               err.msg);
    FUZZ_CHECK(tok_encode(t, text, half, false, false, &a, &na, &err) == ATTND_OK, "%s", err.msg);
    FUZZ_CHECK(tok_encode(t, text + half, len - half, false, false, &b, &nb, &err) == ATTND_OK, "%s", err.msg);
    FUZZ_CHECK(n == na + nb + 3 && ids[0] == tok_bos(t) && ids[na + 1] == tok_sep(t) && ids[n - 1] == tok_sep(t),
               "pair layout");
    FUZZ_CHECK(!memcmp(ids + 1, a, na * sizeof(*a)) && !memcmp(ids + na + 2, b, nb * sizeof(*b)), "pair ids");
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(segs[i] == (i >= na + 2), "segment of token %zu", i);
    free(ids), free(segs), free(a), free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t opt = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const tokenizer *t = g_tok[(opt >> 4) & 3];
    bool parse_special = opt & 1, add_special = opt & 2, render = opt & 4;
    int nv = tok_n_vocab(t);

    int32_t *ids = NULL;
    size_t n = 0;
    attnd_err err;
    FUZZ_CHECK(tok_encode(t, text, len, add_special, parse_special, &ids, &n, &err) == ATTND_OK, "%s", err.msg);
    FUZZ_CHECK(n <= len + 2, "%zu ids for %zu bytes", n, len);
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv, "id %d out of range", ids[i]);
    if (add_special) FUZZ_CHECK(n >= 2 && ids[0] == tok_bos(t) && ids[n - 1] == tok_sep(t), "[CLS] ... [SEP]");
    char *dec;
    size_t dl;
    FUZZ_CHECK(tok_decode(t, ids, n, render, &dec, &dl, &err) == ATTND_OK, "%s", err.msg);
    check_stream(t, ids, n, render, dec, dl);
    free(dec);
    if (!add_special && !parse_special) check_reencode(t, ids, n);
    free(ids);
    if (opt & 8) check_pair(t, text, len);

    /* the same bytes as 16-bit ids, some outside the vocabulary when bit 3 is set */
    size_t n2 = len / 2;
    int32_t *raw = malloc((n2 ? n2 : 1) * sizeof(int32_t));
    for (size_t i = 0; i < n2; i++) {
        uint16_t v = (uint16_t)((uint8_t)text[2 * i] | (uint8_t)text[2 * i + 1] << 8);
        raw[i] = (opt & 8) ? (int32_t)(v % (unsigned)(nv + 2)) - 1 : (int32_t)(v % (unsigned)nv);
    }
    if (tok_decode(t, raw, n2, render, &dec, &dl, &err) == ATTND_OK) {
        check_stream(t, raw, n2, render, dec, dl);
        free(dec);
    } else {
        FUZZ_CHECK(opt & 8, "decode of in-range ids failed: %s", err.msg);
    }
    free(raw);
    return 0;
}
