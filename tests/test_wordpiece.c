/*
 * test_wordpiece.c — the WordPiece ("bert") tokenizer against Hugging Face's tokenizers on a
 * real BERT vocabulary (bge-small-en-v1.5 = bert-base-uncased's pieces, llama.cpp's
 * models/ggml-vocab-bert-bge.gguf), against llama.cpp's own reference cases for that file, the
 * pair form of cross-encoders, the normaliser's flags, and hostile input.
 *
 * References: tests/data/tokenizers/bert-bge.jsonl and bert-bge-pairs.jsonl, made by
 * regenerate-bert.sh with HF's Rust tokenizers (npm tokenizers@0.23.2); bert-bge.gguf.inp/.out,
 * copied from llama.cpp's models/ (made there with HF's AutoTokenizer).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attnd/tokenizer.h"
#include "gguf_builder.h"

#define VOCAB "tokenizers/bert-bge.gguf"

// ---- helpers ----------------------------------------------------------------------------------

static char *data_path(const char *rel) {
    static char buf[2][1024];
    static int k;
    char *p = buf[k++ % 2];
    snprintf(p, 1024, "%s/%s", ATTND_DATA_DIR, rel);
    return p;
}

static tokenizer *load_file(const char *rel) {
    gguf_file *g;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open(&g, data_path(rel), &err), ATTND_OK, "%s: %s", rel, err.msg);
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

static int32_t *ids_of(json_t *arr, size_t *n) {
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n + 1) * sizeof(int32_t));
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

/* Does decode(ids) equal want, and does streaming the ids one by one give the same bytes? */
static bool decodes_to(const tokenizer *t, json_t *ids_json, bool render, const char *want) {
    size_t n, len, m = 0;
    int32_t *ids = ids_of(ids_json, &n);
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

/* The bge vocabulary rebuilt in memory with extra boolean keys (NULL-terminated name/value
 * lists), to load it with other normaliser settings. */
static tokenizer *load_variant(const char *const *keys, const bool *values) {
    gguf_file *g;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open(&g, data_path(VOCAB), &err), ATTND_OK, "%s", err.msg);
    const gguf_array *toks, *types;
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, &err), ATTND_OK);
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_INT32, &types, &err), ATTND_OK);
    char **strs = malloc(toks->n * sizeof(*strs));
    for (uint64_t i = 0; i < toks->n; i++) strs[i] = strndup(toks->strings[i].str, toks->strings[i].len);
    gbuf kv = {0};
    gb_kv_str(&kv, "tokenizer.ggml.model", "bert");
    gb_kv_arr_str(&kv, "tokenizer.ggml.tokens", (const char *const *)strs, toks->n);
    gb_kv_arr_i32(&kv, "tokenizer.ggml.token_type", types->data, types->n);
    for (size_t k = 0; keys[k]; k++) gb_kv_bool(&kv, keys[k], values[k]);
    for (uint64_t i = 0; i < toks->n; i++) free(strs[i]);
    free(strs);
    gguf_close(g);
    gbuf file = {0};
    gb_header(&file, 3, 0, kv.n_kv);
    gb_bytes(&file, kv.p, kv.n);
    gb_align(&file, 32);
    cr_assert_eq(gguf_open_memory(&g, file.p, file.n, &err), ATTND_OK, "%s", err.msg);
    tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, g, &err), ATTND_OK, "%s", err.msg);
    gguf_close(g);
    free(file.p);
    free(kv.p);
    return t;
}

/* Reads the whole of a file under tests/data (malloc'd, NUL-terminated). */
static char *slurp(const char *rel, size_t *len) {
    FILE *f = fopen(data_path(rel), "rb");
    cr_assert(f, "cannot open %s", rel);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

// ---- reference conformance --------------------------------------------------------------------

/* llama.cpp's own cases for this vocabulary: texts separated by "\n__ggml_vocab_test__\n", one
 * line of ids per text (made with HF's AutoTokenizer, no special tokens). */
Test(wordpiece, matches_llamacpp_reference_cases_with_and_without_specials) {
    tokenizer *t = load_file(VOCAB);
    size_t in_len, out_len;
    char *in = slurp(VOCAB ".inp", &in_len), *out = slurp(VOCAB ".out", &out_len);
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    char *text = in, *line = out;
    int n_cases = 0, bad = 0;
    while (text < in + in_len) {
        char *end = strstr(text, SEP), *eol = strchr(line, '\n');
        cr_assert(end && eol, "case %d: .inp and .out disagree on the number of cases", n_cases + 1);
        int32_t want[512];
        size_t n_want = 0;
        for (char *p = line; p < eol;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p) break;
            want[n_want++] = (int32_t)v, p = q;
        }
        size_t n, n2;
        int32_t *ids = encode(t, text, (size_t)(end - text), false, false, &n);
        int32_t *ids2 = encode(t, text, (size_t)(end - text), true, true, &n2);
        bool ok = n == n_want && !memcmp(ids, want, n * sizeof(*ids));
        ok = ok && n2 == n + 2 && ids2[0] == 101 && ids2[n + 1] == 102 && !memcmp(ids2 + 1, want, n * sizeof(*ids));
        if (!ok) cr_log_error("case %d (\"%.*s\") differs", n_cases + 1, (int)(end - text), text), bad++;
        free(ids);
        free(ids2);
        n_cases++;
        text = end + sizeof(SEP) - 1, line = eol + 1;
    }
    cr_expect_eq(n_cases, 46);
    cr_expect_eq(bad, 0, "%d of %d llama.cpp cases differ", bad, n_cases);
    free(in);
    free(out);
    tok_destroy(t);
}

/* Every case of bert-bge.jsonl: ids, ids_with_special, both decodes (and their streams), and the
 * three other normaliser settings on vocabularies that only differ by their keys. */
Test(wordpiece, matches_hf_tokenizers_on_every_case) {
    static const char *const keys[] = {"tokenizer.ggml.normalizer.lowercase", "tokenizer.ggml.normalizer.strip_accents",
                                       NULL};
    static const bool cased_v[] = {false, false}, lower_v[] = {true, false}, strip_v[] = {false, true};
    tokenizer *t = load_file(VOCAB);
    tokenizer *var[3] = {load_variant(keys, cased_v), load_variant(keys, lower_v), load_variant(keys, strip_v)};
    static const char *const var_field[3] = {"ids_cased", "ids_lower", "ids_strip"};
    FILE *f = fopen(data_path("tokenizers/bert-bge.jsonl"), "rb");
    cr_assert(f);
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, bad[5] = {0}, bad_var[3] = {0};
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
        for (int v = 0; v < 3; v++) {
            ids = encode(var[v], text, len, false, false, &n);
            if (!ids_equal(ids, n, json_object_get(c, var_field[v])))
                bad_var[v]++, cr_log_error("line %d: %s", lineno, var_field[v]);
            free(ids);
        }
        json_decref(c);
    }
    free(line);
    fclose(f);
    cr_assert_geq(lineno, 350);
    cr_expect_eq(bad[0] + bad[1] + bad[2] + bad[3], 0,
                 "of %d cases: %d ids, %d ids_with_special, %d decoded, %d decoded_special differ", lineno, bad[0],
                 bad[1], bad[2], bad[3]);
    cr_expect_eq(bad_var[0] + bad_var[1] + bad_var[2], 0,
                 "of %d cases: %d cased, %d lowercase-only, %d strip-only differ",
                 lineno, bad_var[0], bad_var[1], bad_var[2]);
    for (int v = 0; v < 3; v++) tok_destroy(var[v]);
    tok_destroy(t);
}

Test(wordpiece, pairs_are_cls_a_sep_b_sep_with_segment_ids_as_hf) {
    tokenizer *t = load_file(VOCAB);
    FILE *f = fopen(data_path("tokenizers/bert-bge-pairs.jsonl"), "rb");
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
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode_pair(t, "a", 1, "b", 1, &ids, NULL, &n, NULL), ATTND_OK, "segments are optional");
    cr_expect_eq(n, 5);
    free(ids);
    tok_destroy(t);
}

// ---- metadata and rules -----------------------------------------------------------------------

Test(wordpiece, cls_sep_unk_and_flags_come_from_the_file_or_bert_defaults) {
    tokenizer *t = load_file(VOCAB);
    cr_expect_eq(tok_bos(t), 101, "[CLS] from cls_token_id");
    cr_expect_eq(tok_sep(t), 102);
    cr_expect_eq(tok_eos(t), -1);
    cr_expect(tok_add_bos(t));
    cr_expect_str_eq(tok_piece(t, 100), "[UNK]");
    size_t n;
    int32_t *ids = encode(t, "", 0, true, true, &n);
    cr_expect(n == 2 && ids[0] == 101 && ids[1] == 102, "an empty text is [CLS] [SEP]");
    free(ids);
    tok_destroy(t);
}

/* A tiny vocabulary: word-initial pieces with U+2581, continuations bare. */
static tokenizer *tiny(void) {
#define U2581 "\xE2\x96\x81"
    static const char *toks[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", U2581 "un", U2581 "unaff", "able",
                                 "ff", U2581 "ab", U2581 "a", "bc", U2581 ".", U2581 "x"};
    static const int32_t types[] = {3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    gbuf kv = {0};
    gb_kv_str(&kv, "tokenizer.ggml.model", "bert");
    gb_kv_arr_str(&kv, "tokenizer.ggml.tokens", toks, 13);
    gb_kv_arr_i32(&kv, "tokenizer.ggml.token_type", types, 13);
    gb_kv_u32(&kv, "tokenizer.ggml.unknown_token_id", 1);
    gb_kv_u32(&kv, "tokenizer.ggml.bos_token_id", 2);
    gb_kv_u32(&kv, "tokenizer.ggml.seperator_token_id", 3);
    gbuf file = {0};
    gb_header(&file, 3, 0, kv.n_kv);
    gb_bytes(&file, kv.p, kv.n);
    gb_align(&file, 32);
    gguf_file *g;
    attnd_err err;
    cr_assert_eq(gguf_open_memory(&g, file.p, file.n, &err), ATTND_OK, "%s", err.msg);
    tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, g, &err), ATTND_OK, "%s", err.msg);
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

Test(wordpiece, longest_piece_first_and_a_word_without_a_full_cut_is_unknown) {
    tokenizer *t = tiny();
    expect_ids(t, "unaffable", (int32_t[]){5, 6}, 2);       /* unaff + ##able, not un + ##... */
    expect_ids(t, "UNAFF.x", (int32_t[]){5, 11, 12}, 3);    /* lowercased; '.' is a word of its own */
    /* greedy: "ab" is taken first and "c" is no piece, so the word is [UNK] although a + ##bc exists */
    expect_ids(t, "abc", (int32_t[]){1}, 1);
    expect_ids(t, "x abc x", (int32_t[]){12, 1, 12}, 3);
    char *dec;
    size_t len;
    cr_assert_eq(tok_decode(t, (int32_t[]){2, 5, 6, 11, 12, 3}, 6, true, &dec, &len, NULL), ATTND_OK);
    cr_expect_str_eq(dec, "[CLS] unaffable. x [SEP]", "continuations glued, ' .' cleaned up");
    free(dec);
    tok_destroy(t);
}

/* HF's decoder keeps the "##" of a continuation piece only when it comes first (the expected
 * strings are HF tokenizers 0.23.2's decode of the same ids). */
Test(wordpiece, a_continuation_piece_decodes_with_its_hashes_only_when_first) {
    tokenizer *t = load_file(VOCAB);
    static const struct {
        int32_t ids[3];
        size_t n;
        bool render;
        const char *want;
    } cases[] = {
        {{2094}, 1, false, "##d"},           {{2094, 7592}, 2, false, "##d hello"}, {{7592, 2094}, 2, false, "hellod"},
        {{101, 2094, 102}, 3, false, "##d"}, {{101, 2094, 102}, 3, true, "[CLS]d [SEP]"},
        {{100, 2094}, 2, true, "[UNK]d"},    {{1012, 2094}, 2, false, ".d"},        {{2094, 1012}, 2, false, "##d."},
    };
    for (size_t i = 0; i < ATTND_ARRAY_LEN(cases); i++) {
        json_t *ids = json_array();
        for (size_t k = 0; k < cases[i].n; k++) json_array_append_new(ids, json_integer(cases[i].ids[k]));
        cr_expect(decodes_to(t, ids, cases[i].render, cases[i].want), "case %zu: want \"%s\"", i, cases[i].want);
        json_decref(ids);
    }
    const char *b;
    size_t len;
    cr_assert(tok_token_bytes(t, 2094, false, &b, &len));
    cr_expect(len == 1 && b[0] == 'd', "a continuation on its own is its text");
    tok_destroy(t);
}

Test(wordpiece, words_over_100_characters_are_one_unknown_token) {
    tokenizer *t = load_file(VOCAB);
    char word[203];
    memset(word, 'a', sizeof(word));
    size_t n100, n101;
    int32_t *ids100 = encode(t, word, 100, false, false, &n100);
    int32_t *ids101 = encode(t, word, 101, false, false, &n101);
    cr_expect_gt(n100, 1, "100 characters are cut into pieces");
    cr_expect(n101 == 1 && ids101[0] == 100, "101 characters are [UNK]");
    free(ids100);
    free(ids101);
    /* characters, not bytes: 100 two-byte characters are still a word */
    for (int i = 0; i < 100; i++) memcpy(word + 2 * i, "\xC3\xA9", 2);
    int32_t *ids = encode(t, word, 200, false, false, &n100);
    cr_expect(n100 > 1 && ids[0] != 100, "100 x U+00E9 (200 bytes) is not [UNK]");
    free(ids);
    tok_destroy(t);
}

Test(wordpiece, invalid_utf8_and_controls_are_dropped_as_hf_drops_u_fffd) {
    tokenizer *t = load_file(VOCAB);
    size_t n1, n2;
    int32_t *a = encode(t, "he\xFF" "ll\x01" "o w\xC3" "orld\x00", 15, false, false, &n1);
    int32_t *b = encode(t, "hello world", 11, false, false, &n2);
    cr_expect(n1 == n2 && !memcmp(a, b, n1 * sizeof(*a)), "stray bytes, controls and NUL vanish");
    free(a);
    free(b);
    tok_destroy(t);
}

// ---- hostile input ----------------------------------------------------------------------------

/* Random bytes, one huge word and a million spaces: ids in range, and every text whose ids have
 * no [UNK] re-encodes from its decoding to the same ids (decode gives the normalised words back). */
Test(wordpiece, hostile_input_encodes_in_range_and_round_trips) {
    tokenizer *t = load_file(VOCAB);
    size_t len = 1 << 20;
    char *text = malloc(len);
    uint64_t rng = 7;
    const char *inputs[3];
    for (size_t i = 0; i < len; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        text[i] = (char)(rng >> 32);
    }
    char *word = malloc(len), *spaces = malloc(len);
    memset(word, 'q', len);
    memset(spaces, ' ', len);
    inputs[0] = text, inputs[1] = word, inputs[2] = spaces;
    for (int k = 0; k < 3; k++) {
        size_t n, n2, dl;
        int32_t *ids = encode(t, inputs[k], len, false, false, &n);
        for (size_t i = 0; i < n; i++) cr_assert(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
        cr_expect_leq(n, len);
        char *dec;
        cr_assert_eq(tok_decode(t, ids, n, false, &dec, &dl, NULL), ATTND_OK);
        int32_t *again = encode(t, dec, dl, false, false, &n2);
        bool unk = false;
        for (size_t i = 0; i < n; i++) unk |= ids[i] == 100;
        if (k == 1) cr_expect(n == 1 && unk, "a 1 MB word is [UNK]");
        if (k == 2) cr_expect_eq(n, 0);
        if (!unk) cr_expect(n2 == n && !memcmp(again, ids, n * sizeof(*ids)), "input %d: re-encoding differs", k);
        free(again);
        free(dec);
        free(ids);
    }
    free(text);
    free(word);
    free(spaces);
    tok_destroy(t);
}
