/*
 * fuzz_gguf.c — (fuzzing only) the GGUF reader and model loading on arbitrary bytes.
 *
 * Every input is parsed from memory (gguf_open_memory) and, through a memfd, from a path as the
 * commands do (model_load, which also validates the tokenizer metadata), and the tokenizer is
 * loaded from whatever parsed. Whatever loads is walked: every key, every tensor's bytes inside
 * the file, and a short encode/decode when a tokenizer loaded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"
#include "fuzz_util.h"

static void walk(const gguf_file *f, size_t size) {
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        sink += strlen(kv->key);
        if (kv->value.type == GGUF_VT_STRING) sink += kv->value.v.str.len ? (uint8_t)kv->value.v.str.str[0] : 0;
        if (kv->value.type == GGUF_VT_ARRAY && kv->value.v.arr.type == GGUF_VT_STRING)
            for (uint64_t k = 0; k < kv->value.v.arr.n; k++) sink += kv->value.v.arr.strings[k].len;
        FUZZ_CHECK(gguf_find_kv(f, kv->key) != NULL, "key '%s' not found by name", kv->key);
    }
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        FUZZ_CHECK(gguf_data_offset(f) + t->offset + t->n_bytes <= size, "tensor '%s' past the end", t->name);
        if (t->n_bytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->n_bytes - 1];
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    attnd_err err;
    if (gguf_open_memory(&f, data, size, &err) == ATTND_OK) {
        walk(f, size);
        tokenizer *t = NULL;
        if (tok_load(&t, f, &err) == ATTND_OK) {
            int32_t *ids;
            size_t n;
            static const char TEXT[] = "Hello <s> world</s> \xC3\xA9\xE2\x96\x81x\xFF";
            if (tok_encode(t, TEXT, sizeof(TEXT) - 1, true, true, &ids, &n, &err) == ATTND_OK) {
                for (size_t i = 0; i < n; i++)
                    FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t), "id %d out of range", ids[i]);
                char *text;
                size_t len;
                if (tok_decode(t, ids, n, true, &text, &len, &err) == ATTND_OK) free(text);
                free(ids);
            }
            tok_destroy(t);
        }
        gguf_close(f);
    }
    char path[64];
    int fd = fuzz_memfd(data, size, path);
    if (fd < 0) return 0;
    model *m = NULL;
    if (model_load(&m, path, &err) == ATTND_OK) {
        const model_info *mi = model_info_get(m);
        FUZZ_CHECK(mi->n_vocab > 0 && mi->n_embd > 0 && mi->n_layer > 0, "a loaded model has a zero size");
        model_destroy(m);
    }
    close(fd);
    return 0;
}
