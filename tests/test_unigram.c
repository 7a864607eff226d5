/*
 * test_unigram.c — the unigram ("t5") tokenizer against Hugging Face's tokenizers on a real
 * XLM-RoBERTa vocabulary (250048 pieces with its precompiled character map: llama.cpp's
 * models/ggml-vocab-nomic-bert-moe.gguf, the vocabulary of bge-m3, bge-reranker-v2-m3 and
 * multilingual-e5), the pair form of rerankers, the Viterbi rules on a tiny vocabulary, a
 * malformed character map, and hostile input.
 *
 * References: tests/data/tokenizers/xlmr-ugm.jsonl and xlmr-ugm-pairs.jsonl, made by
 * regenerate-xlmr.sh with HF's Rust tokenizers (npm tokenizers@0.23.2).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attnd/tokenizer.h"
#include "gguf_builder.h"

#define VOCAB "tokenizers/xlmr-ugm.gguf"
#define U2581 "\xE2\x96\x81"

// ---- helpers ----------------------------------------------------------------------------------

static tokenizer *load_file(const char *rel) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", ATTND_DATA_DIR, rel);
    gguf_file *g;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open(&g, path, &err), ATTND_OK, "%s: %s", rel, err.msg);
    tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, g, &err), ATTND_OK, "%s: %s", rel, err.msg);
    gguf_close(g);
    return t;
}

static int32_t *encode(const tokenizer *t, const char *text, size_t len, bool add, bool parse, size_t *n) {
    int32_t *ids;
    attnd_err err = {{0}};
    cr_assert_eq(tok_encode(t, text, len, add, parse, &ids, n, &err), ATTND_OK, "%s", err.msg);
    return ids;
}

static bool ids_equal(const int32_t *a, size_t na, json_t *b) {
    if (na != json_array_size(b)) return false;
    for (size_t i = 0; i < na; i++)
        if (a[i] != json_integer_value(json_array_get(b, i))) return false;
    return true;
}

/* Does decode(ids) equal want, and does streaming the ids one by one give the same bytes? */
static bool decodes_to(const tokenizer *t, json_t *ids_json, bool render, const char *want) {
    size_t n = json_array_size(ids_json), len, m = 0;
    int32_t *ids = malloc((n + 1) * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(ids_json, i));
    char *dec;
    attnd_err err;
    cr_assert_eq(tok_decode(t, ids, n, render, &dec, &len, &err), ATTND_OK, "%s", err.msg);
    bool ok = len == strlen(want) && !memcmp(dec, want, len);
    tok_stream *s;
    cr_assert_eq(tok_stream_create(&s, t, render), ATTND_OK);
    for (size_t i = 0; i <= n && ok; i++) {
        const char *piece;
        size_t k = i < n ? tok_stream_push(s, ids[i], &piece) : tok_stream_flush(s, &piece);
        ok = m + k <= len && !memcmp(dec + m, piece, k);
        m += k;
    }
    ok = ok && m == len;
    tok_stream_destroy(s);
    free(dec);
    free(ids);
    return ok;
}

// ---- reference conformance --------------------------------------------------------------------

Test(unigram, matches_hf_tokenizers_on_every_case) {
    tokenizer *t = load_file(VOCAB);
    FILE *f = fopen(ATTND_DATA_DIR "/tokenizers/xlmr-ugm.jsonl", "rb");
    cr_assert(f);
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, bad[4] = {0};
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        json_error_t jerr;
        json_t *c = json_loads(line, JSON_ALLOW_NUL, &jerr);
        cr_assert(c, "line %d: %s", lineno, jerr.text);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text")), n;
        int32_t *ids = encode(t, text, len, false, false, &n);
        if (!ids_equal(ids, n, json_object_get(c, "ids"))) bad[0]++, cr_log_error("line %d: ids", lineno);
        free(ids);
        ids = encode(t, text, len, true, true, &n);
        if (!ids_equal(ids, n, json_object_get(c, "ids_with_special")))
            bad[1]++, cr_log_error("line %d: ids_with_special", lineno);
        free(ids);
        if (!decodes_to(t, json_object_get(c, "ids"), false, json_string_value(json_object_get(c, "decoded"))))
            bad[2]++, cr_log_error("line %d: decoded", lineno);
        if (!decodes_to(t, json_object_get(c, "ids_with_special"), true,
                        json_string_value(json_object_get(c, "decoded_special"))))
            bad[3]++, cr_log_error("line %d: decoded_special", lineno);
        json_decref(c);
    }
    free(line);
    fclose(f);
    cr_assert_geq(lineno, 344);
    cr_expect_eq(bad[0] + bad[1] + bad[2] + bad[3], 0,
                 "of %d cases: %d ids, %d ids_with_special, %d decoded, %d decoded_special differ", lineno, bad[0],
                 bad[1], bad[2], bad[3]);
    tok_destroy(t);
}

Test(unigram, pairs_are_s_a_eos_eos_b_eos_with_one_segment_as_hf) {
    tokenizer *t = load_file(VOCAB);
    FILE *f = fopen(ATTND_DATA_DIR "/tokenizers/xlmr-ugm-pairs.jsonl", "rb");
    cr_assert(f);
    char *line = NULL;
    size_t cap = 0;
    int n_pairs = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *c = json_loads(line, 0, NULL);
        cr_assert(c);
        json_t *a = json_object_get(c, "a"), *b = json_object_get(c, "b");
        int32_t *ids, *segs;
        size_t n;
        attnd_err err;
        cr_assert_eq(tok_encode_pair(t, json_string_value(a), json_string_length(a), json_string_value(b),
                                     json_string_length(b), &ids, &segs, &n, &err), ATTND_OK, "%s", err.msg);
        cr_expect(ids_equal(ids, n, json_object_get(c, "ids")), "pair %d: ids", n_pairs + 1);
        cr_expect(ids_equal(segs, n, json_object_get(c, "type_ids")), "pair %d: segment ids", n_pairs + 1);
        free(ids);
        free(segs);
        json_decref(c);
        n_pairs++;
    }
    cr_expect_geq(n_pairs, 7);
    free(line);
    fclose(f);
    tok_destroy(t);
}

Test(unigram, specials_and_flags_come_from_the_file) {
    tokenizer *t = load_file(VOCAB);
    cr_expect_eq(tok_bos(t), 0);
    cr_expect_eq(tok_eos(t), 2);
    cr_expect(tok_add_bos(t));
    size_t n;
    int32_t *ids = encode(t, "Hello world", 11, true, true, &n); /* XLM-R's best-known ids */
    cr_expect(n == 4 && ids[0] == 0 && ids[1] == 35378 && ids[2] == 8999 && ids[3] == 2);
    free(ids);
    ids = encode(t, "", 0, true, true, &n);
    cr_expect(n == 2 && ids[0] == 0 && ids[1] == 2, "an empty text is <s> </s>");
    free(ids);
    tok_destroy(t);
}

// ---- the rules on a tiny vocabulary -----------------------------------------------------------

/* <unk> <s> </s>, then pieces with scores; extra_key (if any) set to extra_val. */
static tokenizer *tiny(const char *extra_key, bool extra_val, const uint8_t *charsmap, size_t n_map,
                       attnd_err *err, attnd_status want) {
    static const char *toks[] = {"<unk>", "<s>", "</s>", U2581 "ab", U2581 "a", "b", "c", U2581, "x", "<u>", "d"};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 4, 1};
    static const float scores[] = {0, 0, 0, -10, -1, -2, -3, -4, -5, -100, -50};
    gbuf kv = {0};
    gb_kv_str(&kv, "tokenizer.ggml.model", "t5");
    gb_kv_arr_str(&kv, "tokenizer.ggml.tokens", toks, 11);
    gb_kv_arr_i32(&kv, "tokenizer.ggml.token_type", types, 11);
    gb_kv_arr_f32(&kv, "tokenizer.ggml.scores", scores, 11);
    gb_kv_u32(&kv, "tokenizer.ggml.unknown_token_id", 0);
    gb_kv_u32(&kv, "tokenizer.ggml.bos_token_id", 1);
    gb_kv_u32(&kv, "tokenizer.ggml.eos_token_id", 2);
    gb_kv_u32(&kv, "tokenizer.ggml.seperator_token_id", 2);
    gb_kv_bool(&kv, "tokenizer.ggml.add_bos_token", true);
    gb_kv_bool(&kv, "tokenizer.ggml.add_eos_token", true);
    if (!extra_key || strcmp(extra_key, "tokenizer.ggml.remove_extra_whitespaces"))
        gb_kv_bool(&kv, "tokenizer.ggml.remove_extra_whitespaces", true);
    if (extra_key) gb_kv_bool(&kv, extra_key, extra_val);
    if (charsmap) {
        gb_key(&kv, "tokenizer.ggml.precompiled_charsmap", 9);
        gb_u32(&kv, 0);
        gb_u64(&kv, n_map);
        gb_bytes(&kv, charsmap, n_map);
    }
    gbuf file = {0};
    gb_header(&file, 3, 0, kv.n_kv);
    gb_bytes(&file, kv.p, kv.n);
    gb_align(&file, 32);
    gguf_file *g;
    cr_assert_eq(gguf_open_memory(&g, file.p, file.n, err), ATTND_OK, "%s", err->msg);
    tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, g, err), want, "%s", err->msg);
    gguf_close(g);
    free(file.p);
    free(kv.p);
    return t;
}

static void expect_ids(const tokenizer *t, const char *text, const int32_t *want, size_t n_want) {
    size_t n;
    int32_t *ids = encode(t, text, strlen(text), false, false, &n);
    cr_expect_eq(n, n_want, "\"%s\": %zu ids, want %zu", text, n, n_want);
    for (size_t i = 0; i < n && i < n_want; i++) cr_expect_eq(ids[i], want[i], "\"%s\": id %zu", text, i);
    free(ids);
}

Test(unigram, the_best_score_wins_not_the_longest_piece) {
    attnd_err err = {{0}};
    tokenizer *t = tiny(NULL, false, NULL, 0, &err, ATTND_OK);
    expect_ids(t, "ab", (int32_t[]){4, 5}, 2);          /* ▁a b = -3 beats ▁ab = -10 */
    expect_ids(t, "  ab   c ", (int32_t[]){4, 5, 7, 6}, 4); /* extra spaces gone, ▁ before each word */
    expect_ids(t, "xd", (int32_t[]){7, 8, 10}, 3);      /* ▁ x d: every character has a piece */
    tok_destroy(t);
}

Test(unigram, uncovered_characters_are_one_fused_unknown_token) {
    attnd_err err = {{0}};
    tokenizer *t = tiny(NULL, false, NULL, 0, &err, ATTND_OK);
    /* q, é and z have no piece: each is <unk> at (lowest normal score - 10) = -110, and adjacent
     * ones fuse; "d" at -50 still beats an unknown character */
    expect_ids(t, "aqzé c", (int32_t[]){4, 0, 7, 6}, 4);
    expect_ids(t, "qd", (int32_t[]){7, 0, 10}, 3);
    char *dec;
    size_t len;
    cr_assert_eq(tok_decode(t, (int32_t[]){4, 0, 7, 6}, 4, false, &dec, &len, NULL), ATTND_OK);
    cr_expect(len == 3 && !memcmp(dec, "a c", 3), "<unk> decodes to nothing, the first space is dropped");
    free(dec);
    tok_destroy(t);
}

Test(unigram, user_defined_tokens_are_cut_out_and_the_space_flags_apply) {
    attnd_err err = {{0}};
    tokenizer *t = tiny(NULL, false, NULL, 0, &err, ATTND_OK);
    expect_ids(t, "a<u>b", (int32_t[]){4, 9, 7, 5}, 4); /* each fragment gets its ▁ */
    tok_destroy(t);
    t = tiny("tokenizer.ggml.remove_extra_whitespaces", false, NULL, 0, &err, ATTND_OK);
    expect_ids(t, "a  b", (int32_t[]){4, 7, 7, 5}, 4); /* spaces kept, each one ▁ */
    tok_destroy(t);
    t = tiny("tokenizer.ggml.add_space_prefix", false, NULL, 0, &err, ATTND_OK);
    expect_ids(t, "b", (int32_t[]){7, 5}, 2); /* with remove_extra_whitespaces every word gets ▁ */
    tok_destroy(t);
}

/* Converted XLM-R rerankers (bge-reranker-v2-m3) carry add_sep_token true, read from the pair
 * template <s> A </s> </s> B </s>: a single text still ends in one </s> (llama.cpp appends sep
 * only for WordPiece), and the pair is unchanged. */
Test(unigram, add_sep_token_adds_no_second_eos_to_one_text) {
    attnd_err err = {{0}};
    tokenizer *t = tiny("tokenizer.ggml.add_sep_token", true, NULL, 0, &err, ATTND_OK);
    size_t n;
    int32_t *ids = encode(t, "ab", 2, true, false, &n), *segs;
    cr_expect(n == 4 && ids[0] == 1 && ids[1] == 4 && ids[2] == 5 && ids[3] == 2, "<s> ▁a b </s>: %zu ids", n);
    free(ids);
    cr_assert_eq(tok_encode_pair(t, "a", 1, "b", 1, &ids, &segs, &n, &err), ATTND_OK, "%s", err.msg);
    cr_expect(n == 7 && ids[0] == 1 && ids[1] == 4 && ids[2] == 2 && ids[3] == 2 && ids[5] == 5 && ids[6] == 2,
              "<s> ▁a </s> </s> ▁ b </s>: %zu ids", n);
    free(ids), free(segs);
    tok_destroy(t);
}

Test(unigram, a_malformed_character_map_is_refused_or_harmless) {
    attnd_err err = {{0}};
    static const uint8_t short_map[3] = {1, 2, 3};
    static const uint8_t big_trie[8] = {0xFF, 0, 0, 0, 0, 0, 0, 0};
    tiny(NULL, false, short_map, sizeof(short_map), &err, ATTND_ERR_FORMAT);
    tiny(NULL, false, big_trie, sizeof(big_trie), &err, ATTND_ERR_FORMAT);
    cr_expect(strstr(err.msg, "precompiled_charsmap"), "%s", err.msg);
    /* framing fine, nodes pointing anywhere: no entry ever matches out of bounds */
    static const uint8_t wild[16] = {8, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x61, 0xFD, 0xFF, 0xFF, 'z', 0, 'y', 0};
    tokenizer *t = tiny(NULL, false, wild, sizeof(wild), &err, ATTND_OK);
    expect_ids(t, "ab", (int32_t[]){4, 5}, 2);
    tok_destroy(t);
}

// ---- hostile input ----------------------------------------------------------------------------

/* Random bytes, one long word and many spaces: ids in range, at most one per byte, and a text
 * without <unk> re-encodes from its decoding to the same ids. */
Test(unigram, hostile_input_encodes_in_range_and_round_trips) {
    tokenizer *t = load_file(VOCAB);
    size_t len = 1 << 16;
    char *inputs[3] = {malloc(len), malloc(len), malloc(len)};
    uint64_t rng = 7;
    for (size_t i = 0; i < len; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        inputs[0][i] = (char)(rng >> 32);
        inputs[1][i] = (char)('a' + (rng >> 40) % 26);
    }
    memset(inputs[2], ' ', len);
    for (int k = 0; k < 3; k++) {
        size_t n, n2, dl;
        int32_t *ids = encode(t, inputs[k], len, false, false, &n);
        bool unk = false;
        for (size_t i = 0; i < n; i++) {
            cr_assert(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
            unk |= ids[i] == 3;
        }
        cr_expect_leq(n, len);
        if (k == 2) cr_expect_eq(n, 0, "spaces alone are no word");
        char *dec;
        cr_assert_eq(tok_decode(t, ids, n, false, &dec, &dl, NULL), ATTND_OK);
        int32_t *again = encode(t, dec, dl, false, false, &n2);
        if (!unk && k != 0) cr_expect(n2 == n && !memcmp(again, ids, n * sizeof(*ids)), "input %d re-encodes", k);
        free(again);
        free(dec);
        free(ids);
        free(inputs[k]);
    }
    tok_destroy(t);
}
