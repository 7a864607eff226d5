/*
 * test_gguf.c — the GGUF reader: well-formed files parse with the right values, every class of
 * malformed file is refused with a message naming the problem (and never crashes, which the
 * ASan/UBSan build checks), and every real fixture (tests/data, models/) opens.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"
#include "gguf_builder.h"

// ---- a valid file with one of everything ------------------------------------------------------

/* Builds: 3 metadata entries of assorted types + arrays, and two F32/Q8_0 tensors. */
static gbuf valid_file(void) {
    gbuf b = {0};
    gb_header(&b, 3, 2, 6);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.block_count", 5);
    gb_kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gb_key(&b, "tokenizer.ggml.tokens", 9); /* array of strings */
    gb_u32(&b, 8);
    gb_u64(&b, 3);
    gb_str(&b, "<unk>");
    gb_str(&b, "<s>");
    gb_str(&b, "");
    gb_key(&b, "tokenizer.ggml.scores", 9); /* array of f32 */
    gb_u32(&b, 6);
    gb_u64(&b, 3);
    gb_f32(&b, 0.f);
    gb_f32(&b, -1.5f);
    gb_f32(&b, 2.25f);
    gb_key(&b, "tokenizer.ggml.add_bos_token", 7);
    gb_u8(&b, 1);
    uint64_t ne_a[2] = {4, 2}, ne_b[1] = {32};
    gb_tensor(&b, "a.weight", 2, ne_a, 0 /* F32 */, 0);
    gb_tensor(&b, "b.weight", 1, ne_b, 8 /* Q8_0 */, 32);
    gb_align(&b, 32);
    for (int i = 0; i < 8; i++) gb_f32(&b, (float)i);
    gb_align(&b, 32);
    for (int i = 0; i < 34; i++) gb_u8(&b, (uint8_t)i);
    return b;
}

/* The header of a version-3 file with no tensors and one metadata entry, then that entry's key
 * and value type (the value is the caller's to write). */
static void one_entry(gbuf *b, const char *key, uint32_t type) {
    gb_header(b, 3, 0, 1);
    gb_key(b, key, type);
}

/* A file whose only metadata entry is an array of n elements of elem_type; the elements follow. */
static void one_array(gbuf *b, const char *key, uint32_t elem_type, uint64_t n) {
    gb_header(b, 3, 0, 1);
    gb_arr_head(b, key, elem_type, n);
}

Test(gguf, valid_file_parses_with_values_and_tensors) {
    gbuf b = valid_file();
    gguf_file *f;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open_memory(&f, b.p, b.n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(gguf_version(f), 3);
    cr_assert_eq(gguf_kv_count(f), 6);
    const char *s;
    cr_assert_eq(gguf_get_str(f, "general.architecture", &s, &err), ATTND_OK);
    cr_assert_str_eq(s, "llama");
    uint32_t u;
    cr_assert_eq(gguf_get_u32(f, "llama.block_count", &u, &err), ATTND_OK);
    cr_assert_eq(u, 5);
    float eps;
    cr_assert_eq(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, &err), ATTND_OK);
    cr_assert_float_eq(eps, 1e-5f, 1e-12);
    bool add_bos = false;
    cr_assert_eq(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos, &err), ATTND_OK);
    cr_assert(add_bos);
    const gguf_array *toks, *scores;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, &err), ATTND_OK);
    cr_assert_eq(toks->n, 3);
    cr_assert_str_eq(toks->strings[1].str, "<s>");
    cr_assert_eq(toks->strings[2].len, 0);
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, &scores, &err), ATTND_OK);
    cr_assert_float_eq(((const float *)scores->data)[1], -1.5f, 0);
    cr_assert_float_eq(((const float *)scores->data)[2], 2.25f, 0);

    cr_assert_eq(gguf_tensor_count(f), 2);
    const gguf_tensor *a = gguf_find_tensor(f, "a.weight");
    cr_assert_not_null(a);
    cr_assert_eq(a->ne[0], 4);
    cr_assert_eq(a->ne[1], 2);
    cr_assert_eq(a->n_elems, 8);
    cr_assert_eq(a->n_bytes, 32);
    cr_assert_float_eq(((const float *)a->data)[7], 7.f, 0);
    const gguf_tensor *q = gguf_find_tensor(f, "b.weight");
    cr_assert_not_null(q);
    cr_assert_eq(q->n_bytes, 34);
    cr_assert_eq(((const uint8_t *)q->data)[33], 33);
    cr_assert_null(gguf_find_tensor(f, "c.weight"));
    gguf_close(f);
    free(b.p);
}

Test(gguf, getters_name_the_key_on_missing_or_wrong_type) {
    gbuf b = valid_file();
    gguf_file *f;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open_memory(&f, b.p, b.n, &err), ATTND_OK);
    uint32_t u;
    cr_assert_eq(gguf_get_u32(f, "llama.context_length", &u, &err), ATTND_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "llama.context_length"), "%s", err.msg);
    cr_assert_eq(gguf_get_u32(f, "general.architecture", &u, &err), ATTND_ERR_FORMAT);
    cr_assert(strstr(err.msg, "general.architecture") && strstr(err.msg, "string"), "%s", err.msg);
    const gguf_array *arr;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_VT_INT32, &arr, &err), ATTND_ERR_FORMAT);
    cr_assert(strstr(err.msg, "f32"), "%s", err.msg);
    gguf_close(f);
    free(b.p);
}

Test(gguf, every_truncation_of_a_valid_file_is_refused) {
    gbuf b = valid_file();
    for (size_t n = 0; n < b.n; n++) {
        /* copy into an exact-size heap block so ASan sees any read past the end */
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, b.p, n);
        gguf_file *f = NULL;
        attnd_err err = {{0}};
        attnd_status st = gguf_open_memory(&f, cut, n, &err);
        cr_assert_neq(st, ATTND_OK, "a file cut to %zu of %zu bytes was accepted", n, b.n);
        cr_assert_null(f);
        cr_assert(err.msg[0] != '\0', "no message for a cut at %zu", n);
        free(cut);
    }
    free(b.p);
}

/* Parses an image and expects ATTND_ERR_FORMAT with `needle` in the message. */
static void expect_refused(gbuf *b, const char *needle) {
    gguf_file *f = NULL;
    attnd_err err = {{0}};
    attnd_status st = gguf_open_memory(&f, b->p, b->n, &err);
    cr_assert_eq(st, ATTND_ERR_FORMAT, "expected a format error mentioning '%s', got %d (%s)", needle, st,
                 err.msg);
    cr_assert(strstr(err.msg, needle), "message '%s' does not mention '%s'", err.msg, needle);
    cr_assert_null(f);
    free(b->p);
}

Test(gguf, wrong_magic_and_versions_are_refused) {
    gbuf b = {0};
    gb_bytes(&b, "GGML", 4);
    gb_u32(&b, 3);
    gb_u64(&b, 0);
    gb_u64(&b, 0);
    expect_refused(&b, "magic");
    for (uint32_t v = 0; v < 6; v++) {
        if (v == 2 || v == 3) continue;
        gbuf c = {0};
        gb_header(&c, v, 0, 0);
        expect_refused(&c, "version");
    }
    gbuf ok = {0};
    gb_header(&ok, 2, 0, 0);
    gguf_file *f;
    cr_assert_eq(gguf_open_memory(&f, ok.p, ok.n, NULL), ATTND_OK, "an empty v2 file is valid");
    gguf_close(f);
    free(ok.p);
}

Test(gguf, counts_larger_than_the_file_are_refused) {
    gbuf b = {0};
    gb_header(&b, 3, 0, UINT64_MAX);
    expect_refused(&b, "metadata count");
    gbuf c = {0};
    gb_header(&c, 3, (uint64_t)1 << 60, 0);
    expect_refused(&c, "tensor count");
}

Test(gguf, oversized_string_and_array_lengths_are_refused) {
    gbuf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, UINT64_MAX); /* key length */
    gb_bytes(&b, "abcdefghijklmnop", 16);
    expect_refused(&b, "length");

    gbuf c = {0};
    one_entry(&c, "k", 8);
    gb_u64(&c, (uint64_t)1 << 62);
    gb_bytes(&c, "abcdefghijklmnop", 16);
    expect_refused(&c, "length");

    gbuf d = {0};
    one_entry(&d, "arr", 9);
    gb_u32(&d, 6);
    gb_u64(&d, (uint64_t)1 << 61); /* * 4 bytes overflows size_t arithmetic if unchecked */
    gb_bytes(&d, "abcdefghijklmnop", 16);
    expect_refused(&d, "past end of file");

    gbuf e = {0};
    one_entry(&e, "arr", 9);
    gb_u32(&e, 8);
    gb_u64(&e, UINT64_MAX / 2);
    gb_bytes(&e, "abcdefghijklmnop", 16);
    expect_refused(&e, "cannot fit");

    gbuf g = {0}; /* a string inside a string array whose length runs past the end */
    one_array(&g, "arr", 8, 2);
    gb_str(&g, "ok");
    gb_u64(&g, 1000);
    gb_bytes(&g, "short", 5);
    expect_refused(&g, "past end of file");
}

Test(gguf, unknown_and_nested_value_types_are_refused) {
    gbuf b = {0};
    one_entry(&b, "k", 13);
    gb_u64(&b, 0);
    expect_refused(&b, "unknown value type 13");

    gbuf c = {0};
    one_array(&c, "k", 9, 1);
    gb_u32(&c, 4);
    gb_u64(&c, 1);
    gb_u32(&c, 7);
    expect_refused(&c, "nested");

    gbuf d = {0};
    one_array(&d, "k", 77, 1);
    gb_u64(&d, 0);
    expect_refused(&d, "unknown array element type");

    gbuf e = {0};
    one_entry(&e, "flag", 7);
    gb_u8(&e, 2);
    expect_refused(&e, "bool");
}

Test(gguf, duplicate_keys_and_tensor_names_are_refused) {
    gbuf b = {0};
    gb_header(&b, 3, 0, 3);
    gb_kv_u32(&b, "a", 1);
    gb_kv_u32(&b, "b", 2);
    gb_kv_u32(&b, "a", 3);
    expect_refused(&b, "duplicate key 'a'");

    gbuf c = {0};
    uint64_t ne[1] = {8};
    gb_header(&c, 3, 2, 0);
    gb_tensor(&c, "t", 1, ne, 0, 0);
    gb_tensor(&c, "t", 1, ne, 0, 32);
    gb_align(&c, 32);
    for (int i = 0; i < 64; i++) gb_u8(&c, 0);
    expect_refused(&c, "duplicate tensor name 't'");
}

Test(gguf, bad_alignment_values_are_refused) {
    uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gbuf b = {0};
        gb_header(&b, 3, 0, 1);
        gb_kv_u32(&b, "general.alignment", bad[i]);
        expect_refused(&b, "power of two");
    }
    gbuf c = {0};
    gb_header(&c, 3, 0, 1);
    gb_kv_str(&c, "general.alignment", "32");
    expect_refused(&c, "must be u32");

    gbuf ok = {0}; /* a custom alignment is honoured */
    uint64_t ne[1] = {4};
    gb_header(&ok, 3, 1, 1);
    gb_kv_u32(&ok, "general.alignment", 64);
    gb_tensor(&ok, "t", 1, ne, 0, 0);
    gb_align(&ok, 64);
    size_t data_at = ok.n;
    for (int i = 0; i < 4; i++) gb_f32(&ok, 1.f);
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open_memory(&f, ok.p, ok.n, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(gguf_alignment(f), 64);
    cr_assert_eq(gguf_data_offset(f), data_at);
    gguf_close(f);
    free(ok.p);
}

/* One tensor with the given shape/type/offset and `data_bytes` bytes of data. */
static gbuf one_tensor(uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    gbuf b = {0};
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "blk.3.attn_q.weight", n_dims, ne, type, offset);
    gb_align(&b, 32);
    for (size_t i = 0; i < data_bytes; i++) gb_u8(&b, 0);
    return b;
}

Test(gguf, bad_tensor_shapes_are_refused) {
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    gbuf b = one_tensor(0, ne, 0, 0, 256);
    expect_refused(&b, "n_dims 0");
    b = one_tensor(5, ne, 0, 0, 256);
    expect_refused(&b, "n_dims 5");
    uint64_t zero[2] = {32, 0};
    b = one_tensor(2, zero, 0, 0, 256);
    expect_refused(&b, "dimension 1 is zero");
    uint64_t huge[4] = {1u << 31, 1u << 31, 1u << 31, 4};
    b = one_tensor(4, huge, 0, 0, 256);
    expect_refused(&b, "overflows");
    uint64_t big[2] = {(uint64_t)1 << 40, (uint64_t)1 << 20}; /* elements fit, bytes do not */
    b = one_tensor(2, big, 0, 0, 256);
    expect_refused(&b, "past end of file");
    uint64_t rows[2] = {33, 2}; /* Q8_0 rows must be multiples of 32 */
    b = one_tensor(2, rows, 8, 0, 256);
    expect_refused(&b, "block size");
    b = one_tensor(2, ne, 99, 0, 256);
    expect_refused(&b, "unknown tensor type 99");
}

Test(gguf, misaligned_or_out_of_file_tensor_data_is_refused) {
    uint64_t ne[1] = {8}; /* 32 bytes of F32 */
    gbuf b = one_tensor(1, ne, 0, 4, 64);
    expect_refused(&b, "not a multiple of the alignment");
    b = one_tensor(1, ne, 0, 0, 31);
    expect_refused(&b, "blk.3.attn_q.weight': data extends past end of file");
    b = one_tensor(1, ne, 0, (uint64_t)-32, 64);
    expect_refused(&b, "past end of file");
    b = one_tensor(1, ne, 0, 0, 32);
    gguf_file *f;
    cr_assert_eq(gguf_open_memory(&f, b.p, b.n, NULL), ATTND_OK, "exactly enough data is fine");
    gguf_close(f);
    free(b.p);
}

Test(gguf, random_byte_corruption_never_crashes) {
    gbuf b = valid_file();
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int iter = 0; iter < 20000; iter++) {
        uint8_t *copy = malloc(b.n);
        memcpy(copy, b.p, b.n);
        for (int k = 0; k < 3; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            copy[rng % b.n] = (uint8_t)(rng >> 32);
        }
        gguf_file *f = NULL;
        if (gguf_open_memory(&f, copy, b.n, NULL) == ATTND_OK) {
            for (uint64_t i = 0; i < gguf_tensor_count(f); i++) { /* touch all data: must be in bounds */
                const gguf_tensor *t = gguf_tensor_at(f, i);
                volatile uint8_t sink = ((const uint8_t *)t->data)[t->n_bytes - 1];
                (void)sink;
            }
            gguf_close(f);
        }
        free(copy);
    }
    free(b.p);
}

Test(gguf, open_reports_missing_files_and_non_gguf_files) {
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, "/nonexistent/model.gguf", &err), ATTND_ERR_IO);
    cr_assert(strstr(err.msg, "/nonexistent/model.gguf"), "%s", err.msg);
    cr_assert_eq(gguf_open(&f, "/etc/hostname", &err), ATTND_ERR_FORMAT);
    cr_assert(strstr(err.msg, "magic") || strstr(err.msg, "truncated"), "%s", err.msg);
    cr_assert_eq(gguf_open(&f, "/tmp", &err), ATTND_ERR_IO);
}

// ---- split sets ----------------------------------------------------------------------------------

/* dir/name of the split set files; *f the valid file written to dir/m.gguf, then split in n. */
static void write_split_set(char dir[64], gguf_file **f, int n) {
    strcpy(dir, "/tmp/attnd-split-XXXXXX");
    cr_assert(mkdtemp(dir));
    char path[128], prefix[96];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    gbuf b = valid_file();
    FILE *fp = fopen(path, "wb");
    cr_assert(fp && fwrite(b.p, 1, b.n, fp) == b.n);
    fclose(fp);
    free(b.p);
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open(f, path, &err), ATTND_OK, "%s", err.msg);
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    cr_assert_eq(gguf_split_write(*f, prefix, n, &err), ATTND_OK, "%s", err.msg);
}

static void remove_dir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(gguf, a_split_set_opens_from_its_first_file_with_every_tensor) {
    char dir[64], path[128];
    gguf_file *f, *g;
    write_split_set(dir, &f, 2);
    attnd_err err = {{0}};
    snprintf(path, sizeof path, "%s/m-00001-of-00002.gguf", dir);
    cr_assert_eq(gguf_open(&g, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(gguf_file_count(g), 2);
    cr_assert_eq(gguf_tensor_count(g), 2);
    for (int i = 0; i < 2; i++) {
        const gguf_tensor *a = gguf_tensor_at(f, (uint64_t)i), *t = gguf_find_tensor(g, a->name);
        cr_assert(t, "%s missing", a->name);
        cr_expect_eq(t->n_bytes, a->n_bytes);
        cr_expect_eq(memcmp(t->data, a->data, a->n_bytes), 0, "%s", a->name);
    }
    uint32_t v = 0;
    cr_expect_eq(gguf_get_u32(g, "llama.block_count", &v, &err), ATTND_OK);
    cr_expect_eq(v, 5);
    cr_expect_eq(gguf_get_u32(g, "split.count", &v, &err), ATTND_OK);
    cr_expect_eq(v, 2);
    cr_expect_gt(gguf_file_size(g), gguf_file_size(f));
    gguf_close(g);
    gguf_close(f);
    remove_dir(dir);
}

Test(gguf, a_split_set_refuses_a_later_file_a_missing_file_and_a_renamed_first) {
    char dir[64], path[128], other[128];
    gguf_file *f, *g = NULL;
    write_split_set(dir, &f, 2);
    gguf_close(f);
    attnd_err err = {{0}};
    snprintf(path, sizeof path, "%s/m-00002-of-00002.gguf", dir);
    cr_expect_eq(gguf_open(&g, path, &err), ATTND_ERR_FORMAT);
    cr_expect(strstr(err.msg, "file 2 of a 2-file split set") && strstr(err.msg, "00001-of-00002"), "%s", err.msg);
    snprintf(path, sizeof path, "%s/m-00001-of-00002.gguf", dir);
    snprintf(other, sizeof other, "%s/renamed.gguf", dir);
    cr_assert_eq(rename(path, other), 0);
    cr_expect_eq(gguf_open(&g, other, &err), ATTND_ERR_FORMAT);
    cr_expect(strstr(err.msg, "not named"), "%s", err.msg);
    cr_assert_eq(rename(other, path), 0);
    snprintf(other, sizeof other, "%s/m-00002-of-00002.gguf", dir);
    cr_assert_eq(unlink(other), 0);
    cr_expect_eq(gguf_open(&g, path, &err), ATTND_ERR_IO);
    cr_expect(strstr(err.msg, "m-00002-of-00002.gguf"), "%s", err.msg);
    cr_expect_null(g);
    remove_dir(dir);
}

Test(gguf, a_split_set_with_a_wrong_count_or_a_tensor_twice_is_refused) {
    /* hand-made shards: the first names 3 tensors but the two files hold 2; then a duplicate */
    for (int dup = 0; dup < 2; dup++) {
        char dir[64] = "/tmp/attnd-split-XXXXXX", path[128];
        cr_assert(mkdtemp(dir));
        for (int no = 0; no < 2; no++) {
            gbuf b = {0};
            gb_header(&b, 3, 1, 3);
            gb_key(&b, "split.no", 2 /* u16 */);
            uint16_t v = (uint16_t)no;
            gb_bytes(&b, &v, 2);
            gb_key(&b, "split.count", 2);
            v = 2;
            gb_bytes(&b, &v, 2);
            gb_key(&b, "split.tensors.count", 5 /* i32 */);
            gb_u32(&b, dup ? 2 : 3);
            uint64_t ne = 8;
            gb_tensor(&b, dup || no == 0 ? "a.weight" : "b.weight", 1, &ne, 0, 0);
            gb_align(&b, 32);
            for (int i = 0; i < 8; i++) gb_f32(&b, (float)i);
            snprintf(path, sizeof path, "%s/x-%05d-of-00002.gguf", dir, no + 1);
            FILE *fp = fopen(path, "wb");
            cr_assert(fp && fwrite(b.p, 1, b.n, fp) == b.n);
            fclose(fp);
            free(b.p);
        }
        gguf_file *g = NULL;
        attnd_err err = {{0}};
        snprintf(path, sizeof path, "%s/x-00001-of-00002.gguf", dir);
        cr_expect_eq(gguf_open(&g, path, &err), ATTND_ERR_FORMAT);
        cr_expect(strstr(err.msg, dup ? "duplicate tensor name 'a.weight'" : "split.tensors.count is 3"), "%s",
                  err.msg);
        remove_dir(dir);
    }
}

// ---- dropping the pages of a copied tensor ------------------------------------------------------

/* The resident kilobytes of the mapping of this process that holds p (/proc/self/smaps), or -1. */
static long mapping_rss_kb(const void *p) {
    FILE *fp = fopen("/proc/self/smaps", "r");
    cr_assert(fp);
    char line[512];
    bool inside = false;
    long kb = -1;
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && sscanf(line, "Rss: %ld kB", &kb) == 1) break;
    }
    fclose(fp);
    return kb;
}

/* A file with one F32 tensor of n values i * 0.5, aligned to 4096 so its pages are its own. */
static gbuf big_tensor_file(uint64_t n) {
    gbuf b = {0};
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 4096);
    gb_tensor(&b, "t", 1, &n, 0 /* F32 */, 0);
    gb_align(&b, 4096);
    for (uint64_t i = 0; i < n; i++) gb_f32(&b, (float)i * 0.5f);
    return b;
}

Test(gguf, dropped_pages_leave_resident_memory_and_read_back_the_same) {
    enum { N = 1 << 20 }; /* 4 MiB of data */
    gbuf b = big_tensor_file(N);
    char path[] = "/tmp/attnd-test-gguf-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, path, &err), ATTND_OK, "%s", err.msg);
    const gguf_tensor *t = gguf_find_tensor(f, "t");
    const float *v = t->data;
    double sum = 0;
    for (int i = 0; i < N; i++) sum += v[i]; /* every page resident */
    cr_assert_eq(sum, 0.5 * N * (N - 1.0) / 2);
    long before = mapping_rss_kb(v);
    cr_assert_geq(before, (long)N * 4 / 1024, "%ld kB resident", before);
    gguf_drop_pages(f, t->data, t->n_bytes);
    long after = mapping_rss_kb(v);
    cr_assert_leq(after, before - (long)N * 4 / 1024 + 8, "%ld kB before, %ld kB after", before, after);
    for (int i = 0; i < N; i++) cr_assert_eq(v[i], (float)i * 0.5f, "value %d read back from the file", i);
    gguf_close(f);
    unlink(path);
    /* opened from memory: nothing to drop, the bytes stay */
    cr_assert_eq(gguf_open_memory(&f, b.p, b.n, &err), ATTND_OK, "%s", err.msg);
    t = gguf_find_tensor(f, "t");
    gguf_drop_pages(f, t->data, t->n_bytes);
    v = t->data;
    for (int i = 0; i < N; i += 997) cr_assert_eq(v[i], (float)i * 0.5f);
    gguf_close(f);
    free(b.p);
}

// ---- the real fixtures ------------------------------------------------------------------------

/* tests/data and the default model's folder; ../shared's fixtures too when that folder exists */
static int for_each_fixture(void (*fn)(const char *path)) {
    static const char *dirs[] = {ATTND_DATA_DIR "/models", ATTND_DATA_DIR "/tokenizers", ATTND_SOURCE_DIR "/models",
                                 ATTND_SHARED_DIR "/models", ATTND_SHARED_DIR "/tokenizers"};
    int n = 0;
    for (size_t d = 0; d < ATTND_ARRAY_LEN(dirs); d++) {
        DIR *dir = opendir(dirs[d]);
        if (!dir) continue;
        struct dirent *e;
        while ((e = readdir(dir))) {
            size_t len = strlen(e->d_name);
            if (len < 5 || strcmp(e->d_name + len - 5, ".gguf")) continue;
            char path[1024];
            snprintf(path, sizeof(path), "%s/%s", dirs[d], e->d_name);
            fn(path);
            n++;
        }
        closedir(dir);
    }
    return n;
}

static void check_fixture(const char *path) {
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, path, &err), ATTND_OK, "%s", err.msg);
    const char *arch;
    cr_assert_eq(gguf_get_str(f, "general.architecture", &arch, &err), ATTND_OK, "%s: %s", path, err.msg);
    const gguf_array *toks;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, &err), ATTND_OK, "%s", err.msg);
    cr_assert_gt(toks->n, 0);
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++)
        cr_assert(gguf_type_computable(gguf_tensor_at(f, i)->type), "%s: %s", path, gguf_tensor_at(f, i)->name);
    gguf_close(f);
}

Test(gguf, every_fixture_opens) {
    int n = for_each_fixture(check_fixture);
    cr_assert_geq(n, 6, "found only %d fixtures", n);
}

/* attnd info reads the file, and its exit status says what "runs" says: 0 runs, 1 does not. */
static void check_info_cli(const char *path) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' info --json --model '%s' 2>/dev/null", ATTND_BINARY, path);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "%s", cmd);
    json_error_t je;
    json_t *j = json_loadf(p, JSON_DISABLE_EOF_CHECK, &je);
    int rc = pclose(p);
    cr_assert(j, "attnd info --json on %s: not JSON (%s)", path, je.text);
    json_t *runs = json_object_get(j, "runs");
    cr_assert(json_is_boolean(runs), "%s: no \"runs\"", path);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == (json_is_true(runs) ? 0 : 1), "attnd info on %s: exit %d, runs %s",
              path, WEXITSTATUS(rc), json_is_true(runs) ? "true" : "false");
    json_decref(j);
}

Test(gguf, attnd_info_reads_every_fixture) {
    cr_assert_geq(for_each_fixture(check_info_cli), 6);
}

Test(gguf, attnd_info_refuses_a_broken_file_with_a_message) {
    char path[] = "/tmp/attnd-test-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    gbuf b = one_tensor(1, (uint64_t[]){8}, 0, 0, 16);
    cr_assert_eq(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    free(b.p);
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' info --model '%s' 2>&1", ATTND_BINARY, path);
    FILE *p = popen(cmd, "r");
    char out[1024] = {0};
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    int rc = pclose(p);
    unlink(path);
    cr_assert(n > 0);
    cr_assert_eq(WEXITSTATUS(rc), 1);
    cr_assert(strstr(out, "data extends past end of file"), "%s", out);
}

Test(gguf, unknown_subcommands_and_flags_exit_2) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' frobnicate >/dev/null 2>&1", ATTND_BINARY);
    cr_assert_eq(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof(cmd), "'%s' info --bogus >/dev/null 2>&1", ATTND_BINARY);
    cr_assert_eq(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof(cmd), "'%s' --help >/dev/null 2>&1", ATTND_BINARY);
    cr_assert_eq(WEXITSTATUS(system(cmd)), 0);
}
