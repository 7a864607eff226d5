/*
 * fuzz_unigram.c — (fuzzing only) the unigram ("t5") tokenizer: the real XLM-RoBERTa vocabulary
 * with its character map (tests/data/tokenizers/xlmr-ugm.gguf), and a tiny vocabulary whose
 * precompiled character map is taken from the input (the part of a file this tokenizer parses).
 *
 * Input: byte 0 sets parse_special (bit 0), add_special (bit 1), render_special (bit 2), the
 * pair check (bit 3), the tiny vocabulary (bit 4) with remove_extra_whitespaces (bit 5) and
 * add_space_prefix (bit 6); for the tiny one, byte 1 is the length of the character map that
 * follows. The rest is the text, and also little-endian 16-bit ids that are decoded and streamed.
 * Invariants beyond "no crash, no leak": a malformed map is refused with a message or read
 * without going out of bounds; ids are in the vocabulary; with add_special they are <s> ... </s>;
 * the pair form is <s> a </s> </s> b </s> of the texts' own ids, all in segment 0; a stream
 * equals the whole decode.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/tokenizer.h"
#include "fuzz_util.h"

#ifndef FUZZ_DATA_DIR
#error "FUZZ_DATA_DIR (tests/data) is set by tools/fuzz/CMakeLists.txt"
#endif

static tokenizer *g_xlmr;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    gguf_file *g;
    attnd_err err;
    if (gguf_open(&g, FUZZ_DATA_DIR "/tokenizers/xlmr-ugm.gguf", &err) != ATTND_OK ||
        tok_load(&g_xlmr, g, &err) != ATTND_OK) {
        fprintf(stderr, "fuzz_unigram: %s\n", err.msg);
        abort();
    }
    gguf_close(g);
    return 0;
}

/* A 12-token vocabulary with map[0..n) as its character map (NULL: none). */
static tokenizer *tiny(const uint8_t *map, size_t n, bool remove_ws, bool prefix) {
    static char *toks[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "\xE2\x96\x81" "a", "a", "b", "ab", "\xC3\xA9",
                           "<u>", "x", "\xE2\x96\x81" "ab"};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 4, 1, 1};
    static const float scores[] = {0, 0, 0, -1, -2, -3, -3, -4, -5, -1, -6, -2};
    fbuf kv = {0}, b = {0};
    fb_kv_str(&kv, "tokenizer.ggml.model", "t5");
    fb_kv_strs(&kv, "tokenizer.ggml.tokens", toks, 12);
    fb_kv_i32s(&kv, "tokenizer.ggml.token_type", types, 12);
    fb_kv_f32s(&kv, "tokenizer.ggml.scores", scores, 12);
    fb_kv_u32(&kv, "tokenizer.ggml.unknown_token_id", 0);
    fb_kv_u32(&kv, "tokenizer.ggml.bos_token_id", 1);
    fb_kv_u32(&kv, "tokenizer.ggml.eos_token_id", 2);
    fb_kv_bool(&kv, "tokenizer.ggml.add_bos_token", true);
    fb_kv_bool(&kv, "tokenizer.ggml.add_eos_token", true);
    fb_kv_bool(&kv, "tokenizer.ggml.remove_extra_whitespaces", remove_ws);
    fb_kv_bool(&kv, "tokenizer.ggml.add_space_prefix", prefix);
    if (map) {
        fb_str(&kv, "tokenizer.ggml.precompiled_charsmap"), fb_u32(&kv, GGUF_VT_ARRAY), fb_u32(&kv, GGUF_VT_UINT8);
        fb_u64(&kv, n), fb_put(&kv, map, n), kv.n_kv++;
    }
    fb_put(&b, "GGUF", 4), fb_u32(&b, 3), fb_u64(&b, 0), fb_u64(&b, kv.n_kv), fb_put(&b, kv.p, kv.n);
    while (b.n % 32) fb_put(&b, "", 1);
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    attnd_err err = {{0}};
    if (gguf_open_memory(&f, b.p, b.n, &err) != ATTND_OK) abort();
    if (tok_load(&t, f, &err) != ATTND_OK) {
        FUZZ_CHECK(err.msg[0], "refused without a message");
        t = NULL;
    }
    gguf_close(f);
    free(kv.p);
    free(b.p);
    return t;
}

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

/* The pair form: <s> a </s> </s> b </s>, one segment. */
static void check_pair(const tokenizer *t, const char *text, size_t len) {
    size_t half = len / 2, n, na, nb;
    int32_t *ids, *segs, *a, *b, s = tok_bos(t), e = tok_eos(t);
    attnd_err err;
    FUZZ_CHECK(tok_encode_pair(t, text, half, text + half, len - half, &ids, &segs, &n, &err) == ATTND_OK, "%s",
               err.msg);
    FUZZ_CHECK(tok_encode(t, text, half, false, false, &a, &na, &err) == ATTND_OK, "%s", err.msg);
    FUZZ_CHECK(tok_encode(t, text + half, len - half, false, false, &b, &nb, &err) == ATTND_OK, "%s", err.msg);
    FUZZ_CHECK(n == na + nb + 4 && ids[0] == s && ids[na + 1] == e && ids[na + 2] == e && ids[n - 1] == e,
               "pair layout");
    FUZZ_CHECK(!memcmp(ids + 1, a, na * sizeof(*a)) && !memcmp(ids + na + 3, b, nb * sizeof(*b)), "pair ids");
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(segs[i] == 0, "segment of token %zu", i);
    free(ids), free(segs), free(a), free(b);
}

static void run(const tokenizer *t, uint8_t opt, const char *text, size_t len) {
    bool parse_special = opt & 1, add_special = opt & 2, render = opt & 4;
    int nv = tok_n_vocab(t);
    int32_t *ids = NULL;
    size_t n = 0;
    attnd_err err;
    FUZZ_CHECK(tok_encode(t, text, len, add_special, parse_special, &ids, &n, &err) == ATTND_OK, "%s", err.msg);
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv, "id %d out of range", ids[i]);
    if (add_special) FUZZ_CHECK(n >= 2 && ids[0] == tok_bos(t) && ids[n - 1] == tok_eos(t), "<s> ... </s>");
    char *dec;
    size_t dl;
    FUZZ_CHECK(tok_decode(t, ids, n, render, &dec, &dl, &err) == ATTND_OK, "%s", err.msg);
    check_stream(t, ids, n, render, dec, dl);
    free(dec);
    free(ids);
    if (opt & 8) check_pair(t, text, len);
    size_t n2 = len / 2;
    int32_t *raw = malloc((n2 ? n2 : 1) * sizeof(int32_t));
    for (size_t i = 0; i < n2; i++)
        raw[i] = (int32_t)(((uint8_t)text[2 * i] | (uint8_t)text[2 * i + 1] << 8) % (unsigned)nv);
    FUZZ_CHECK(tok_decode(t, raw, n2, render, &dec, &dl, &err) == ATTND_OK, "%s", err.msg);
    check_stream(t, raw, n2, render, dec, dl);
    free(dec);
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t opt = data[0];
    if (!(opt & 16)) {
        run(g_xlmr, opt, (const char *)data + 1, size - 1);
        return 0;
    }
    size_t k = size >= 2 ? data[1] : 0;
    if (size < 2 + k) return 0;
    tokenizer *t = tiny(k ? data + 2 : NULL, k, opt & 32, opt & 64);
    if (t) run(t, opt, (const char *)data + 2 + k, size - 2 - k);
    tok_destroy(t);
    return 0;
}
