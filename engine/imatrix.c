/*
 * imatrix.c — importance matrices: the sums of squared matmul inputs per weight column, and
 * llama.cpp's two file formats for them (GGUF, and the legacy .dat). See attnd/imatrix.h.
 * The reader takes untrusted files (fuzzed by tools/fuzz/fuzz_imatrix.c): every count and size is
 * checked against what remains before it is used.
 */
#include "attnd/imatrix.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/buf.h"
#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"

attnd_status imatrix_create(imatrix **out) {
    *out = calloc(1, sizeof(imatrix));
    return *out ? ATTND_OK : ATTND_ERR_NOMEM;
}

void imatrix_destroy(imatrix *im) {
    if (!im) return;
    for (int i = 0; i < im->n; i++) {
        free(im->entries[i].name);
        free(im->entries[i].sum2);
        free(im->entries[i].count);
    }
    free(im->entries);
    free(im->dataset);
    free(im->file);
    free(im);
}

const imatrix_entry *imatrix_find(const imatrix *im, const char *name) {
    for (int i = 0; i < im->n; i++)
        if (!strcmp(im->entries[i].name, name)) return &im->entries[i];
    return NULL;
}

/* A new zeroed entry of (n_mat, cols) named `name`, or NULL when out of memory. */
static imatrix_entry *entry_new(imatrix *im, const char *name, size_t name_len, int n_mat, int cols) {
    if (im->n == im->cap) {
        int cap = im->cap ? im->cap * 2 : 16;
        imatrix_entry *e = realloc(im->entries, sizeof(*e) * (size_t)cap);
        if (!e) return NULL;
        im->entries = e;
        im->cap = cap;
    }
    imatrix_entry *e = &im->entries[im->n];
    *e = (imatrix_entry){.n_mat = n_mat, .cols = cols};
    e->name = malloc(name_len + 1);
    e->sum2 = calloc((size_t)n_mat * (size_t)cols, sizeof(double));
    e->count = calloc((size_t)n_mat, sizeof(double));
    if (!e->name || !e->sum2 || !e->count) {
        free(e->name), free(e->sum2), free(e->count);
        return NULL;
    }
    memcpy(e->name, name, name_len);
    e->name[name_len] = '\0';
    im->n++;
    return e;
}

attnd_status imatrix_add(imatrix *im, const char *name, int expert, int n_mat, const float *x, int n, int cols,
                         attnd_err *err) {
    imatrix_entry *e = (imatrix_entry *)imatrix_find(im, name);
    if (!e && !(e = entry_new(im, name, strlen(name), n_mat, cols)))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    int mat = expert < 0 ? 0 : expert;
    if (e->n_mat != n_mat || e->cols != cols || mat >= n_mat)
        return attnd_fail(err, ATTND_ERR_INVALID, "%s: input of %d x %d (matrix %d) where %d x %d was seen", name,
                          n_mat, cols, mat, e->n_mat, e->cols);
    double *acc = e->sum2 + (size_t)mat * cols;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * cols;
        for (int j = 0; j < cols; j++) acc[j] += (double)xr[j] * xr[j];
    }
    for (int j = 0; j < cols; j++)
        if (!isfinite(acc[j])) return attnd_fail(err, ATTND_ERR_INVALID, "%s: a sum of squares is not finite", name);
    e->count[mat] += n;
    return ATTND_OK;
}

void imatrix_importance(const imatrix_entry *e, int mat, float *out) {
    const double *s = e->sum2 + (size_t)mat * e->cols;
    double c = e->count[mat];
    for (int j = 0; j < e->cols; j++) out[j] = c > 0 ? (float)(s[j] / c) : 1.0f;
}

// ---- writing ---------------------------------------------------------------------------------

static int by_name(const void *a, const void *b) {
    return strcmp((*(const imatrix_entry *const *)a)->name, (*(const imatrix_entry *const *)b)->name);
}

/* The entries sorted by name (llama.cpp writes them so), malloc'd; NULL when out of memory. */
static const imatrix_entry **sorted_entries(const imatrix *im) {
    const imatrix_entry **s = malloc(sizeof(*s) * (size_t)(im->n ? im->n : 1));
    if (!s) return NULL;
    for (int i = 0; i < im->n; i++) s[i] = &im->entries[i];
    qsort(s, (size_t)im->n, sizeof(*s), by_name);
    return s;
}

/* Both tensors of one entry, as F32, appended to w; their bytes live in *data (n_mat (cols + 1)). */
static attnd_status add_entry_tensors(gguf_writer *w, const imatrix_entry *e, float *data) {
    size_t nv = (size_t)e->n_mat * e->cols;
    for (size_t i = 0; i < nv; i++) data[i] = (float)e->sum2[i];
    for (int m = 0; m < e->n_mat; m++) data[nv + m] = (float)e->count[m];
    char name[512];
    if (snprintf(name, sizeof(name), "%s.in_sum2", e->name) >= (int)sizeof(name)) return ATTND_ERR_INVALID;
    gguf_writer_add_tensor(w, name, GGUF_TYPE_F32, 2, (uint64_t[]){(uint64_t)e->cols, (uint64_t)e->n_mat}, data);
    snprintf(name, sizeof(name), "%s.counts", e->name);
    gguf_writer_add_tensor(w, name, GGUF_TYPE_F32, 2, (uint64_t[]){1, (uint64_t)e->n_mat}, data + nv);
    return ATTND_OK;
}

attnd_status imatrix_write_gguf(const imatrix *im, const char *path, attnd_err *err) {
    gguf_writer *w = NULL;
    const imatrix_entry **s = sorted_entries(im);
    float **data = calloc((size_t)(im->n ? im->n : 1), sizeof(float *));
    attnd_status st = ATTND_OK;
    if (!s || !data || gguf_writer_create(&w) != ATTND_OK) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto out;
    }
    gguf_writer_add_str(w, "general.type", "imatrix");
    const char *ds = im->dataset ? im->dataset : "";
    gguf_writer_add_arr_str(w, "imatrix.datasets", &ds, im->dataset ? 1 : 0);
    gguf_writer_add_u32(w, "imatrix.chunk_count", im->chunk_count);
    gguf_writer_add_u32(w, "imatrix.chunk_size", im->chunk_size);
    for (int i = 0; i < im->n; i++) {
        data[i] = malloc(sizeof(float) * (size_t)s[i]->n_mat * ((size_t)s[i]->cols + 1));
        if (!data[i]) {
            st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (add_entry_tensors(w, s[i], data[i]) != ATTND_OK) {
            st = attnd_fail(err, ATTND_ERR_INVALID, "tensor name too long: %s", s[i]->name);
            goto out;
        }
    }
    st = gguf_writer_write(w, path, err);
out:
    gguf_writer_destroy(w);
    for (int i = 0; data && i < im->n; i++) free(data[i]);
    free(data);
    free(s);
    return st;
}

static bool put_i32(buf *b, int32_t v) { return buf_append(b, &v, 4); }

/* One legacy entry: name, ncall, nval, then each value as sum / count * ncall (1 where nothing
 * was summed). chunk is the tokens per chunk ncall is counted in. */
static bool put_dat_entry(buf *b, const imatrix_entry *e, double chunk) {
    double max_count = 0;
    for (int m = 0; m < e->n_mat; m++) max_count = e->count[m] > max_count ? e->count[m] : max_count;
    int32_t ncall = (int32_t)ceil(max_count / chunk);
    bool ok = put_i32(b, (int32_t)strlen(e->name)) && buf_puts(b, e->name) && put_i32(b, ncall) &&
              put_i32(b, e->n_mat * e->cols);
    for (int m = 0; ok && m < e->n_mat; m++)
        for (int j = 0; ok && j < e->cols; j++) {
            double c = e->count[m];
            float v = c > 0 ? (float)(e->sum2[(size_t)m * e->cols + j] / c * ncall) : 1.0f * ncall;
            ok = buf_append(b, &v, 4);
        }
    return ok;
}

/* Writes b to path through a temporary file and a rename. */
static attnd_status write_atomic(const buf *b, const char *path, attnd_err *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
        return attnd_fail(err, ATTND_ERR_IO, "%s: path too long", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", tmp, strerror(errno));
    bool ok = fwrite(b->p, 1, b->len, fp) == b->len;
    ok = fclose(fp) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return attnd_fail(err, ATTND_ERR_IO, "%s: %s", path, strerror(errno));
    }
    return ATTND_OK;
}

attnd_status imatrix_write_dat(const imatrix *im, const char *path, attnd_err *err) {
    buf b;
    buf_init(&b);
    const imatrix_entry **s = sorted_entries(im);
    double chunk = im->chunk_size ? im->chunk_size : 1;
    bool ok = s && put_i32(&b, im->n);
    for (int i = 0; ok && i < im->n; i++) ok = put_dat_entry(&b, s[i], chunk);
    const char *ds = im->dataset ? im->dataset : "";
    ok = ok && put_i32(&b, (int32_t)im->chunk_count) && put_i32(&b, (int32_t)strlen(ds)) && buf_puts(&b, ds);
    attnd_status st = ok ? write_atomic(&b, path, err) : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    buf_free(&b);
    free(s);
    return st;
}

// ---- reading ---------------------------------------------------------------------------------

typedef struct cursor {
    const uint8_t *p;
    size_t n;
} cursor;

static bool take(cursor *c, void *dst, size_t n) {
    if (c->n < n) return false;
    memcpy(dst, c->p, n);
    c->p += n;
    c->n -= n;
    return true;
}

/* One legacy entry into im. */
static attnd_status read_dat_entry(imatrix *im, cursor *c, int i, attnd_err *err) {
    int32_t len, ncall, nval;
    if (!take(c, &len, 4) || len < 1 || (size_t)len > c->n || len > 4096)
        return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix entry %d: bad or truncated name", i);
    const char *name = (const char *)c->p;
    c->p += len, c->n -= (size_t)len;
    if (memchr(name, '\0', (size_t)len)) return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix entry %d: NUL in name", i);
    if (!take(c, &ncall, 4) || !take(c, &nval, 4) || nval < 1 || (size_t)nval > c->n / 4)
        return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix entry %d (%.*s): bad or truncated values", i, (int)len, name);
    if (ncall < 0) return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix entry %d: negative call count", i);
    for (int k = 0; k < im->n; k++)
        if (strlen(im->entries[k].name) == (size_t)len && !memcmp(im->entries[k].name, name, (size_t)len))
            return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix entry %d (%.*s) repeats a name", i, (int)len, name);
    imatrix_entry *e = entry_new(im, name, (size_t)len, 1, nval);
    if (!e) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (int j = 0; j < nval; j++) {
        float v = 0;
        take(c, &v, 4); /* cannot fail: nval values remain */
        e->sum2[j] = v;
    }
    e->count[0] = ncall;
    return ATTND_OK;
}

static attnd_status read_dat(imatrix *im, cursor c, attnd_err *err) {
    int32_t n;
    if (!take(&c, &n, 4) || n < 1) return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix: no entries");
    for (int i = 0; i < n; i++) {
        attnd_status st = read_dat_entry(im, &c, i, err);
        if (st) return st;
    }
    int32_t chunks, len; /* optional trailer: chunk count, then the dataset's name */
    if (take(&c, &chunks, 4) && chunks >= 0) im->chunk_count = (uint32_t)chunks;
    if (take(&c, &len, 4) && len > 0 && (size_t)len <= c.n) {
        im->dataset = strndup((const char *)c.p, (size_t)len);
        if (!im->dataset) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    return ATTND_OK;
}

/* The entry of an in_sum2 tensor t (name without the suffix, nl bytes), with its counts. */
static attnd_status read_gguf_entry(imatrix *im, const gguf_file *f, const gguf_tensor *t, size_t nl, attnd_err *err) {
    char cname[600];
    if (nl > 512) return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix: tensor name too long");
    snprintf(cname, sizeof(cname), "%.*s.counts", (int)nl, t->name);
    const gguf_tensor *ct = gguf_find_tensor(f, cname);
    if (!ct) return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix: %s has no %s", t->name, cname);
    if (t->type != GGUF_TYPE_F32 || ct->type != GGUF_TYPE_F32)
        return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix: sums and counts of %.*s must be F32", (int)nl, t->name);
    uint64_t n_mat = ct->n_elems;
    if (n_mat < 1 || t->n_elems % n_mat || t->n_elems / n_mat > INT32_MAX || n_mat > INT32_MAX)
        return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix: %.*s has %llu sums for %llu counts", (int)nl, t->name,
                          (unsigned long long)t->n_elems, (unsigned long long)n_mat);
    imatrix_entry *e = entry_new(im, t->name, nl, (int)n_mat, (int)(t->n_elems / n_mat));
    if (!e) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    const float *s = t->data, *cnt = ct->data;
    for (uint64_t i = 0; i < t->n_elems; i++) e->sum2[i] = s[i];
    for (uint64_t m = 0; m < n_mat; m++) e->count[m] = cnt[m] > 0 ? nearbyint(cnt[m]) : 0;
    return ATTND_OK;
}

static attnd_status read_gguf(imatrix *im, const gguf_file *f, attnd_err *err) {
    attnd_err ignore;
    const gguf_array *ds;
    if (gguf_get_arr(f, "imatrix.datasets", GGUF_VT_STRING, &ds, &ignore) == ATTND_OK && ds->n > 0 &&
        !(im->dataset = strdup(ds->strings[ds->n - 1].str)))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    if (gguf_get_u32(f, "imatrix.chunk_count", &im->chunk_count, &ignore)) im->chunk_count = 0;
    if (gguf_get_u32(f, "imatrix.chunk_size", &im->chunk_size, &ignore)) im->chunk_size = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        size_t len = strlen(t->name), sl = strlen(".in_sum2");
        if (len <= sl || strcmp(t->name + len - sl, ".in_sum2")) continue;
        attnd_status st = read_gguf_entry(im, f, t, len - sl, err);
        if (st) return st;
    }
    if (im->n == 0) return attnd_fail(err, ATTND_ERR_FORMAT, "imatrix: the GGUF file holds no .in_sum2 tensors");
    return ATTND_OK;
}

attnd_status imatrix_load_memory(imatrix **out, const void *data, size_t size, attnd_err *err) {
    *out = NULL;
    imatrix *im;
    if (imatrix_create(&im)) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    attnd_status st;
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        gguf_file *f = NULL;
        st = gguf_open_memory(&f, data, size, err);
        if (st == ATTND_OK) st = read_gguf(im, f, err);
        gguf_close(f);
    } else {
        st = read_dat(im, (cursor){data, size}, err);
    }
    if (st != ATTND_OK) {
        imatrix_destroy(im);
        return st;
    }
    *out = im;
    return ATTND_OK;
}

attnd_status imatrix_load(imatrix **out, const char *path, attnd_err *err) {
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", path, strerror(errno));
    buf b;
    buf_init(&b);
    char chunk[65536];
    size_t got;
    bool ok = true;
    while (ok && (got = fread(chunk, 1, sizeof(chunk), fp)) > 0) ok = buf_append(&b, chunk, got);
    bool io = ferror(fp);
    fclose(fp);
    attnd_status st = !ok  ? attnd_fail(err, ATTND_ERR_NOMEM, "out of memory")
                      : io ? attnd_fail(err, ATTND_ERR_IO, "%s: read error", path)
                           : imatrix_load_memory(out, b.p ? b.p : "", b.len, err);
    if (st != ATTND_OK && st != ATTND_ERR_NOMEM) {
        attnd_err inner = *err;
        attnd_fail(err, st, "%s: %s", path, inner.msg);
    }
    if (st == ATTND_OK && !((*out)->file = strdup(path))) {
        imatrix_destroy(*out);
        *out = NULL;
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    buf_free(&b);
    return st;
}
