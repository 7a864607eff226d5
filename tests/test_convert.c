/*
 * test_convert.c — the GGUF writer round-trips through the reader, and `attnd convert-llama2c`
 * turns llama2.c's stories260K checkpoint into a file whose tensors and metadata equal the
 * independently written tests/data/models/stories260K.gguf. Malformed inputs are refused.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"

static void tmp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/attnd-test-%s-%d.gguf", tag, (int)getpid());
}

Test(gguf_writer, written_files_read_back_identically) {
    char path[256];
    tmp_path(path, sizeof(path), "writer");
    gguf_writer *w;
    cr_assert_eq(gguf_writer_create(&w), ATTND_OK);
    float data_a[6] = {1, 2, 3, 4, 5, 6};
    uint8_t data_b[34] = {0};
    data_b[33] = 7;
    const char *strs[3] = {"x", "", "\xe2\x96\x81hello"};
    float fl[2] = {0.5f, -2};
    int32_t in[2] = {3, -4};
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "n", 42);
    gguf_writer_add_f32(w, "f", 1.25f);
    gguf_writer_add_bool(w, "b", true);
    gguf_writer_add_arr_str(w, "s", strs, 3);
    gguf_writer_add_arr_f32(w, "af", fl, 2);
    gguf_writer_add_arr_i32(w, "ai", in, 2);
    gguf_writer_add_tensor(w, "a", GGUF_TYPE_F32, 2, (uint64_t[]){3, 2}, data_a);
    gguf_writer_add_tensor(w, "b", GGUF_TYPE_Q8_0, 1, (uint64_t[]){32}, data_b);
    attnd_err err;
    cr_assert_eq(gguf_writer_write(w, path, &err), ATTND_OK, "%s", err.msg);
    gguf_writer_destroy(w);

    gguf_file *f;
    cr_assert_eq(gguf_open(&f, path, &err), ATTND_OK, "%s", err.msg);
    uint32_t n;
    float fv;
    bool b;
    const gguf_array *arr;
    cr_assert_eq(gguf_get_u32(f, "n", &n, NULL), ATTND_OK);
    cr_assert_eq(n, 42);
    cr_assert_eq(gguf_get_f32(f, "f", &fv, NULL), ATTND_OK);
    cr_assert_float_eq(fv, 1.25f, 0);
    cr_assert_eq(gguf_get_bool(f, "b", &b, NULL), ATTND_OK);
    cr_assert(b);
    cr_assert_eq(gguf_get_arr(f, "s", GGUF_VT_STRING, &arr, NULL), ATTND_OK);
    cr_assert_eq(arr->n, 3);
    cr_assert_str_eq(arr->strings[2].str, "\xe2\x96\x81hello");
    cr_assert_eq(gguf_get_arr(f, "ai", GGUF_VT_INT32, &arr, NULL), ATTND_OK);
    cr_assert_eq(((const int32_t *)arr->data)[1], -4);
    const gguf_tensor *t = gguf_find_tensor(f, "a");
    cr_assert_not_null(t);
    cr_assert_eq(memcmp(t->data, data_a, sizeof(data_a)), 0);
    t = gguf_find_tensor(f, "b");
    cr_assert_eq(t->n_bytes, 34);
    cr_assert_eq(((const uint8_t *)t->data)[33], 7);
    cr_assert_eq(t->offset % 32, 0);
    gguf_close(f);
    unlink(path);
}

Test(gguf_writer, bad_shapes_are_reported_at_write_time) {
    gguf_writer *w;
    cr_assert_eq(gguf_writer_create(&w), ATTND_OK);
    uint8_t d[64] = {0};
    gguf_writer_add_tensor(w, "bad", GGUF_TYPE_Q8_0, 1, (uint64_t[]){33}, d);
    attnd_err err;
    cr_assert_eq(gguf_writer_write(w, "/tmp/never-written.gguf", &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "bad"), "%s", err.msg);
    cr_assert_neq(access("/tmp/never-written.gguf", F_OK), 0);
    gguf_writer_destroy(w);
}

static int run(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' convert-llama2c %s >/dev/null 2>&1", ATTND_BINARY, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The "tokens" array of a greedy `attnd generate` run, as text. */
static void generate_greedy(const char *model, char *buf, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' generate --model '%s' --tokens 1,415,461 --n 48 --temp 0 --ignore-eos --json",
             ATTND_BINARY, model);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t len = fread(buf, 1, n - 1, p);
    buf[len] = '\0';
    cr_assert_eq(pclose(p), 0, "%s failed", cmd);
    char *t = strstr(buf, "\"tokens\":[");
    cr_assert(t, "%s", buf);
    char *end = strchr(t, ']');
    cr_assert(end);
    end[1] = '\0';
    memmove(buf, t, strlen(t) + 1);
}

Test(convert_llama2c, stories260K_matches_the_reference_gguf_tensor_for_tensor) {
    char out[256], args[1024];
    tmp_path(out, sizeof(out), "stories");
    snprintf(args, sizeof(args), "'%s/models/stories260K.bin' '%s/models/tok512.bin' '%s' --name stories260K",
             ATTND_DATA_DIR, ATTND_DATA_DIR, out);
    cr_assert_eq(run(args), 0);
    gguf_file *got, *want;
    attnd_err err;
    cr_assert_eq(gguf_open(&got, out, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(gguf_open(&want, ATTND_DATA_DIR "/models/stories260K.gguf", &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(gguf_tensor_count(got), gguf_tensor_count(want));
    for (uint64_t i = 0; i < gguf_tensor_count(want); i++) {
        const gguf_tensor *w = gguf_tensor_at(want, i), *g = gguf_find_tensor(got, w->name);
        cr_assert_not_null(g, "missing tensor %s", w->name);
        cr_assert_eq(g->type, w->type, "%s", w->name);
        cr_assert_eq(g->n_dims, w->n_dims, "%s", w->name);
        for (int d = 0; d < 4; d++) cr_assert_eq(g->ne[d], w->ne[d], "%s dim %d", w->name, d);
        cr_assert_eq(memcmp(g->data, w->data, w->n_bytes), 0, "tensor %s differs", w->name);
    }
    /* the tokenizer metadata must match too, or tokenization would differ */
    const char *arrays[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"};
    for (int k = 0; k < 3; k++) {
        const gguf_array *a, *b;
        cr_assert_eq(gguf_get_arr(got, arrays[k], -1, &a, NULL), ATTND_OK);
        cr_assert_eq(gguf_get_arr(want, arrays[k], -1, &b, NULL), ATTND_OK);
        cr_assert_eq(a->n, b->n);
        cr_assert_eq(a->type, b->type);
        for (uint64_t i = 0; i < a->n; i++) {
            if (a->type == GGUF_VT_STRING) cr_assert_str_eq(a->strings[i].str, b->strings[i].str, "%s[%llu]", arrays[k], (unsigned long long)i);
            else cr_assert_eq(((const int32_t *)a->data)[i], ((const int32_t *)b->data)[i], "%s[%llu]", arrays[k], (unsigned long long)i);
        }
    }
    gguf_close(got);
    gguf_close(want);

    /* and the converted model generates what the reference file generates (greedy) */
    char g1[8192], g2[8192];
    generate_greedy(out, g1, sizeof(g1));
    generate_greedy(ATTND_DATA_DIR "/models/stories260K.gguf", g2, sizeof(g2));
    cr_assert(strstr(g1, "\"tokens\":["), "no tokens in: %s", g1);
    cr_assert_str_eq(g1, g2);
    unlink(out);
}

Test(convert_llama2c, truncated_or_mismatched_inputs_are_refused) {
    char cut[256], out[256], args[1024], cmd[1024];
    snprintf(cut, sizeof(cut), "/tmp/attnd-test-cut-%d.bin", (int)getpid());
    tmp_path(out, sizeof(out), "cut");
    snprintf(cmd, sizeof(cmd), "head -c 100000 '%s/models/stories260K.bin' > '%s'", ATTND_DATA_DIR, cut);
    cr_assert_eq(system(cmd), 0);
    snprintf(args, sizeof(args), "'%s' '%s/models/tok512.bin' '%s'", cut, ATTND_DATA_DIR, out);
    cr_assert_eq(run(args), 1, "a truncated checkpoint must be refused");
    /* tokenizer and checkpoint swapped: the header is nonsense */
    snprintf(args, sizeof(args), "'%s/models/tok512.bin' '%s/models/tok512.bin' '%s'", ATTND_DATA_DIR, ATTND_DATA_DIR, out);
    cr_assert_eq(run(args), 1);
    /* truncated tokenizer */
    snprintf(cmd, sizeof(cmd), "head -c 3000 '%s/models/tok512.bin' > '%s'", ATTND_DATA_DIR, cut);
    cr_assert_eq(system(cmd), 0);
    snprintf(args, sizeof(args), "'%s/models/stories260K.bin' '%s' '%s'", ATTND_DATA_DIR, cut, out);
    cr_assert_eq(run(args), 1);
    cr_assert_neq(access(out, F_OK), 0, "no output file may be left behind");
    cr_assert_eq(run("only-one-arg"), 2);
    unlink(cut);
}
