/*
 * gguf_writer.c — GGUF v3 writer (see attnd/gguf_writer.h). Metadata is serialised as it is
 * added into one growing buffer; tensors are laid out at write time, each at the next multiple
 * of the 32-byte alignment, which is also what readers assume when general.alignment is absent.
 * The last tensor is padded too, as llama.cpp's writer does: its reader, when it loads the data
 * (no_alloc false: llama-imatrix and llama-quantize reading an importance matrix), reads the
 * padded size of every tensor and rejects a file that ends short.
 */
#include "attnd/gguf_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/gguf.h"

#define ALIGNMENT 32

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    uint64_t n_bytes;
    const void *data;
} wtensor;

struct gguf_writer {
    uint8_t *kv; /* serialised metadata */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    bool failed; /* an allocation or argument failed earlier */
    char fail_msg[256];
};

attnd_status gguf_writer_create(gguf_writer **out) {
    *out = calloc(1, sizeof(**out));
    return *out ? ATTND_OK : ATTND_ERR_NOMEM;
}

void gguf_writer_destroy(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv);
    free(w);
}

static void put(gguf_writer *w, const void *p, size_t n) {
    if (w->failed) return;
    if (!attnd_grow(&w->kv, &w->kv_cap, w->kv_len + n, 1, 256)) {
        w->failed = true;
        snprintf(w->fail_msg, sizeof(w->fail_msg), "out of memory");
        return;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}
static void put_u32(gguf_writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(gguf_writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(gguf_writer *w, const char *s) {
    put_u64(w, strlen(s));
    put(w, s, strlen(s));
}
static void put_key(gguf_writer *w, const char *key, uint32_t type) {
    put_str(w, key);
    put_u32(w, type);
    w->n_kv++;
}

void gguf_writer_add_str(gguf_writer *w, const char *key, const char *value) {
    put_key(w, key, GGUF_VT_STRING);
    put_str(w, value);
}
void gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t value) {
    put_key(w, key, GGUF_VT_UINT32);
    put_u32(w, value);
}
void gguf_writer_add_f32(gguf_writer *w, const char *key, float value) {
    put_key(w, key, GGUF_VT_FLOAT32);
    put(w, &value, 4);
}
void gguf_writer_add_bool(gguf_writer *w, const char *key, bool value) {
    uint8_t b = value;
    put_key(w, key, GGUF_VT_BOOL);
    put(w, &b, 1);
}
void gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *values, uint64_t n) {
    put_key(w, key, GGUF_VT_ARRAY);
    put_u32(w, GGUF_VT_STRING);
    put_u64(w, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, values[i]);
}
void gguf_writer_add_arr_f32(gguf_writer *w, const char *key, const float *values, uint64_t n) {
    put_key(w, key, GGUF_VT_ARRAY);
    put_u32(w, GGUF_VT_FLOAT32);
    put_u64(w, n);
    put(w, values, n * sizeof(float));
}
void gguf_writer_add_arr_i32(gguf_writer *w, const char *key, const int32_t *values, uint64_t n) {
    put_key(w, key, GGUF_VT_ARRAY);
    put_u32(w, GGUF_VT_INT32);
    put_u64(w, n);
    put(w, values, n * sizeof(int32_t));
}

/* A scalar gguf_value back in its file width (little-endian, as every supported host is). */
static void put_scalar(gguf_writer *w, const gguf_value *v) {
    uint8_t b[8];
    size_t n = gguf_vtype_size(v->type);
    if (v->type == GGUF_VT_FLOAT32) {
        float f = (float)v->v.f64;
        memcpy(b, &f, 4);
    } else if (v->type == GGUF_VT_FLOAT64) {
        memcpy(b, &v->v.f64, 8);
    } else if (v->type == GGUF_VT_BOOL) {
        b[0] = v->v.b;
    } else if (v->type == GGUF_VT_INT8 || v->type == GGUF_VT_INT16 || v->type == GGUF_VT_INT32 ||
               v->type == GGUF_VT_INT64) {
        memcpy(b, &v->v.i64, 8); /* low bytes first: truncation keeps the value */
    } else {
        memcpy(b, &v->v.u64, 8);
    }
    put(w, b, n);
}

void gguf_writer_add_kv(gguf_writer *w, const gguf_kv *kv) {
    const gguf_value *v = &kv->value;
    put_key(w, kv->key, v->type);
    if (v->type == GGUF_VT_STRING) {
        put_u64(w, v->v.str.len);
        put(w, v->v.str.str, (size_t)v->v.str.len);
    } else if (v->type == GGUF_VT_ARRAY) {
        const gguf_array *a = &v->v.arr;
        put_u32(w, a->type);
        put_u64(w, a->n);
        if (a->type == GGUF_VT_STRING) {
            for (uint64_t i = 0; i < a->n; i++) {
                put_u64(w, a->strings[i].len);
                put(w, a->strings[i].str, (size_t)a->strings[i].len);
            }
        } else {
            put(w, a->data, (size_t)(a->n * gguf_vtype_size(a->type)));
        }
    } else {
        put_scalar(w, v);
    }
}

void gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                            const void *data) {
    if (w->failed) return;
    uint32_t be = gguf_type_block_elems(type), bb = gguf_type_block_bytes(type);
    if (!be || n_dims < 1 || n_dims > 4 || ne[0] % be) {
        w->failed = true;
        snprintf(w->fail_msg, sizeof(w->fail_msg), "tensor '%.200s': bad type or shape", name);
        return;
    }
    if (!attnd_grow(&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof(*w->tensors), 32)) {
        w->failed = true;
        snprintf(w->fail_msg, sizeof(w->fail_msg), "out of memory");
        return;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name) {
        w->failed = true;
        snprintf(w->fail_msg, sizeof(w->fail_msg), "out of memory");
        return;
    }
    t->type = type;
    t->n_dims = n_dims;
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        t->ne[d] = ne[d];
        n *= ne[d];
    }
    t->n_bytes = n / be * bb;
    t->data = data;
    w->n_tensors++;
}

static uint64_t align_up(uint64_t x) { return (x + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT; }

static bool write_all(FILE *fp, const void *p, size_t n) { return fwrite(p, 1, n, fp) == n; }

static bool write_zeros(FILE *fp, uint64_t n) {
    static const uint8_t zeros[ALIGNMENT] = {0};
    return n == 0 || write_all(fp, zeros, (size_t)n);
}

attnd_status gguf_writer_write(gguf_writer *w, const char *path, attnd_err *err) {
    if (w->failed) return attnd_fail(err, ATTND_ERR_INVALID, "%s: %s", path, w->fail_msg);
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
        return attnd_fail(err, ATTND_ERR_INVALID, "path too long");
    FILE *fp = fopen(tmp, "wb");
    if (!fp) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", tmp, strerror(errno));

    /* Header and metadata. */
    uint32_t version = 3;
    uint64_t nt = w->n_tensors;
    bool ok = write_all(fp, "GGUF", 4) && write_all(fp, &version, 4) && write_all(fp, &nt, 8) &&
              write_all(fp, &w->n_kv, 8) && write_all(fp, w->kv, w->kv_len);
    uint64_t pos = 24 + w->kv_len, offset = 0;
    /* Tensor infos, with offsets relative to the data section. */
    for (size_t i = 0; ok && i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        uint64_t len = strlen(t->name);
        ok = write_all(fp, &len, 8) && write_all(fp, t->name, len) && write_all(fp, &t->n_dims, 4) &&
             write_all(fp, t->ne, 8 * t->n_dims) && write_all(fp, &t->type, 4) && write_all(fp, &offset, 8);
        pos += 8 + len + 4 + 8 * t->n_dims + 4 + 8;
        offset = align_up(offset + t->n_bytes);
    }
    ok = ok && write_zeros(fp, align_up(pos) - pos);
    for (size_t i = 0; ok && i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        ok = write_all(fp, t->data, (size_t)t->n_bytes) && write_zeros(fp, align_up(t->n_bytes) - t->n_bytes);
    }
    if (fclose(fp) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return attnd_fail(err, ATTND_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    return ATTND_OK;
}

// ---------------------------------------------------------------------------------------------
// Split sets

/* part[i]: which of the n files tensor i goes to. Runs of tensors in file order, a new file
 * starting where the bytes before a tensor pass the next multiple of total / n; every file gets
 * one tensor at least (n <= the tensor count). */
static void split_plan(const gguf_file *f, int n, int *part) {
    uint64_t nt = gguf_tensor_count(f), total = 0, before = 0;
    for (uint64_t i = 0; i < nt; i++) total += gguf_tensor_at(f, i)->n_bytes;
    int prev = -1;
    for (uint64_t i = 0; i < nt; i++) {
        int p = total ? (int)(before * (uint64_t)n / total) : 0;
        int rest = n - (int)(nt - i); /* the files after this one each need a tensor of those left */
        if (p < rest) p = rest;
        if (p > prev + 1) p = prev + 1; /* no file left empty */
        if (p < prev) p = prev;
        part[i] = prev = p;
        before += gguf_tensor_at(f, i)->n_bytes;
    }
}

static void add_split_keys(gguf_writer *w, int no, int n, uint64_t n_tensors) {
    /* the widths llama.cpp's gguf-split writes, which its loader reads exactly */
    gguf_kv kv = {.key = "split.no", .value = {.type = GGUF_VT_UINT16, .v.u64 = (uint64_t)no}};
    gguf_writer_add_kv(w, &kv);
    kv = (gguf_kv){.key = "split.count", .value = {.type = GGUF_VT_UINT16, .v.u64 = (uint64_t)n}};
    gguf_writer_add_kv(w, &kv);
    kv = (gguf_kv){.key = "split.tensors.count", .value = {.type = GGUF_VT_INT32, .v.i64 = (int64_t)n_tensors}};
    gguf_writer_add_kv(w, &kv);
}

attnd_status gguf_split_write(const gguf_file *f, const char *prefix, int n, attnd_err *err) {
    uint64_t nt = gguf_tensor_count(f);
    if (n < 2 || n > 9999 || (uint64_t)n > nt)
        return attnd_fail(err, ATTND_ERR_INVALID, "a split set of %d files from %llu tensors: 2..9999 files, at "
                          "most one per tensor", n, (unsigned long long)nt);
    int *part = malloc(sizeof(int) * (size_t)nt);
    if (!part) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    split_plan(f, n, part);
    attnd_status st = ATTND_OK;
    uint64_t i = 0;
    for (int no = 0; no < n && !st; no++) {
        gguf_writer *w = NULL;
        if ((st = gguf_writer_create(&w))) {
            st = attnd_fail(err, st, "out of memory");
            break;
        }
        add_split_keys(w, no, n, nt);
        for (uint64_t k = 0; no == 0 && k < gguf_kv_count(f); k++) {
            const gguf_kv *kv = gguf_kv_at(f, k);
            /* the writer aligns to 32 (no alignment key); the split keys are this set's */
            if (strcmp(kv->key, "general.alignment") && strncmp(kv->key, "split.", 6)) gguf_writer_add_kv(w, kv);
        }
        for (; i < nt && part[i] == no; i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
        }
        char path[4096];
        if (snprintf(path, sizeof(path), "%s-%05d-of-%05d.gguf", prefix, no + 1, n) >= (int)sizeof(path))
            st = attnd_fail(err, ATTND_ERR_INVALID, "path too long");
        else
            st = gguf_writer_write(w, path, err);
        gguf_writer_destroy(w);
    }
    free(part);
    return st;
}
