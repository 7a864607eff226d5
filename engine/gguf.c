/*
 * gguf.c — GGUF v2/v3 parser over a read-only mapping (see attnd/gguf.h).
 *
 * The parser is a bounds-checked cursor: every read asks the cursor for n bytes and fails
 * with a message when fewer remain, and every count is compared with the bytes left before
 * anything is allocated for it, so a hostile header cannot make us allocate more memory than
 * the file could describe. Keys and tensor names are checked for duplicates by sorting.
 */
#include "attnd/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

// ---------------------------------------------------------------------------------------------
// Type tables

typedef struct type_info {
    uint32_t id;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} type_info;

/* Every type id a file may carry (names and block geometry). Which of them the engine computes is
 * engine/kernels/quant_types.h's list: gguf_type_computable lives with it, in quant_format.c. */
static const type_info TYPES[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},    {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292}, {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74}, {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18}, {21, "IQ3_S", 256, 110}, {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},     {25, "I16", 1, 2},
    {26, "I32", 1, 4},      {27, "I64", 1, 8},      {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56}, {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66}, {39, "MXFP4", 32, 17},  {40, "NVFP4", 64, 36},
};

static const type_info *type_lookup(uint32_t id) {
    for (size_t i = 0; i < ATTND_ARRAY_LEN(TYPES); i++)
        if (TYPES[i].id == id) return &TYPES[i];
    return NULL;
}

const char *gguf_type_name(uint32_t type) {
    const type_info *t = type_lookup(type);
    return t ? t->name : NULL;
}

uint32_t gguf_type_block_elems(uint32_t type) {
    const type_info *t = type_lookup(type);
    return t ? t->block_elems : 0;
}

uint32_t gguf_type_block_bytes(uint32_t type) {
    const type_info *t = type_lookup(type);
    return t ? t->block_bytes : 0;
}

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < ATTND_ARRAY_LEN(names) ? names[t] : "?";
}

size_t gguf_vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

// ---------------------------------------------------------------------------------------------
// The file object

struct gguf_file {
    const uint8_t *base;
    size_t size;
    bool mapped; /* base came from mmap and is unmapped on close */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;

    uint64_t n_kv;
    gguf_kv *kvs;
    uint64_t *kv_sorted; /* indices into kvs, sorted by key, for lookup */

    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t *tensor_sorted;

    /* Every heap block the metadata owns (key copies, strings, arrays), freed on close. */
    void **allocs;
    size_t n_allocs, cap_allocs;

    /* A split set's other files (shards 2..n), opened with the first and closed with it: their
     * tensors are in `tensors`, their data in their own mappings. */
    gguf_file **shards;
    int n_shards;
};

static void *file_alloc(gguf_file *f, size_t n) {
    if (!attnd_grow(&f->allocs, &f->cap_allocs, f->n_allocs + 1, sizeof(*f->allocs), 64)) return NULL;
    void *p = malloc(n ? n : 1);
    if (p) f->allocs[f->n_allocs++] = p;
    return p;
}

// ---------------------------------------------------------------------------------------------
// Bounds-checked cursor

typedef struct cursor {
    gguf_file *f;
    size_t pos;
    attnd_err *err;
    char where[320]; /* what is being parsed, for messages: "header", "key 'x'", "tensor 'y'" */
} cursor;

static attnd_status cur_fail(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static attnd_status cur_fail(cursor *c, const char *fmt, ...) {
    if (c->err) {
        int n = snprintf(c->err->msg, sizeof(c->err->msg), "%s: ", c->where);
        if (n < 0 || (size_t)n >= sizeof(c->err->msg)) n = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err->msg + n, sizeof(c->err->msg) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return ATTND_ERR_FORMAT;
}

static size_t cur_left(const cursor *c) { return c->f->size - c->pos; }

static attnd_status cur_read(cursor *c, void *out, size_t n, const char *what) {
    if (cur_left(c) < n)
        return cur_fail(c, "truncated file: %s needs %zu bytes at offset %zu, %zu left", what, n,
                        c->pos, cur_left(c));
    memcpy(out, c->f->base + c->pos, n);
    c->pos += n;
    return ATTND_OK;
}

static attnd_status cur_u32(cursor *c, uint32_t *v, const char *what) { return cur_read(c, v, 4, what); }
static attnd_status cur_u64(cursor *c, uint64_t *v, const char *what) { return cur_read(c, v, 8, what); }

/* Reads a GGUF string (u64 length + bytes) into a NUL-terminated heap copy. */
static attnd_status cur_string(cursor *c, gguf_string *out, const char *what) {
    uint64_t len = 0;
    attnd_status st = cur_u64(c, &len, what);
    if (st) return st;
    if (len > cur_left(c))
        return cur_fail(c, "%s length %llu exceeds the %zu bytes left in the file", what,
                        (unsigned long long)len, cur_left(c));
    char *s = file_alloc(c->f, (size_t)len + 1);
    if (!s) return attnd_fail(c->err, ATTND_ERR_NOMEM, "%s: out of memory", c->where);
    memcpy(s, c->f->base + c->pos, (size_t)len);
    s[len] = '\0';
    c->pos += (size_t)len;
    out->str = s;
    out->len = len;
    return ATTND_OK;
}

static attnd_status read_scalar(cursor *c, uint32_t type, gguf_value *out) {
    uint8_t raw[8] = {0};
    size_t n = gguf_vtype_size(type);
    attnd_status st = cur_read(c, raw, n, "value");
    if (st) return st;
    out->type = (gguf_vtype)type;
    switch (type) {
    case GGUF_VT_UINT8: out->v.u64 = raw[0]; break;
    case GGUF_VT_INT8: out->v.i64 = (int8_t)raw[0]; break;
    case GGUF_VT_BOOL:
        if (raw[0] > 1) return cur_fail(c, "bool value %u is neither 0 nor 1", raw[0]);
        out->v.b = raw[0];
        break;
    case GGUF_VT_UINT16: { uint16_t v; memcpy(&v, raw, 2); out->v.u64 = v; break; }
    case GGUF_VT_INT16: { int16_t v; memcpy(&v, raw, 2); out->v.i64 = v; break; }
    case GGUF_VT_UINT32: { uint32_t v; memcpy(&v, raw, 4); out->v.u64 = v; break; }
    case GGUF_VT_INT32: { int32_t v; memcpy(&v, raw, 4); out->v.i64 = v; break; }
    case GGUF_VT_FLOAT32: { float v; memcpy(&v, raw, 4); out->v.f64 = v; break; }
    case GGUF_VT_UINT64: memcpy(&out->v.u64, raw, 8); break;
    case GGUF_VT_INT64: memcpy(&out->v.i64, raw, 8); break;
    case GGUF_VT_FLOAT64: memcpy(&out->v.f64, raw, 8); break;
    default: ATTND_ASSERT(0);
    }
    return ATTND_OK;
}

static attnd_status read_array(cursor *c, gguf_array *arr) {
    uint32_t et = 0;
    uint64_t n = 0;
    attnd_status st = cur_u32(c, &et, "array element type");
    if (!st) st = cur_u64(c, &n, "array length");
    if (st) return st;
    if (et == GGUF_VT_ARRAY) return cur_fail(c, "nested arrays are not supported");
    arr->type = (gguf_vtype)et;
    arr->n = n;
    arr->data = NULL;
    arr->strings = NULL;
    if (et == GGUF_VT_STRING) {
        /* every string needs at least its 8-byte length */
        if (n > cur_left(c) / 8)
            return cur_fail(c, "array of %llu strings cannot fit in the %zu bytes left",
                            (unsigned long long)n, cur_left(c));
        gguf_string *strs = file_alloc(c->f, (size_t)n * sizeof(*strs));
        if (!strs) return attnd_fail(c->err, ATTND_ERR_NOMEM, "%s: out of memory", c->where);
        /* One block for all characters: measure first, then copy. */
        size_t save = c->pos, total = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len = 0;
            if ((st = cur_u64(c, &len, "array string length"))) return st;
            if (len > cur_left(c))
                return cur_fail(c, "string %llu of the array has length %llu, past end of file",
                                (unsigned long long)i, (unsigned long long)len);
            c->pos += (size_t)len;
            total += (size_t)len + 1;
        }
        c->pos = save;
        char *chars = file_alloc(c->f, total);
        if (!chars) return attnd_fail(c->err, ATTND_ERR_NOMEM, "%s: out of memory", c->where);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len = 0;
            memcpy(&len, c->f->base + c->pos, 8);
            c->pos += 8;
            memcpy(chars, c->f->base + c->pos, (size_t)len);
            chars[len] = '\0';
            strs[i].str = chars;
            strs[i].len = len;
            chars += len + 1;
            c->pos += (size_t)len;
        }
        arr->strings = strs;
        return ATTND_OK;
    }
    size_t es = gguf_vtype_size(et);
    if (es == 0) return cur_fail(c, "unknown array element type %u", et);
    if (n > cur_left(c) / es)
        return cur_fail(c, "array of %llu %s elements extends past end of file",
                        (unsigned long long)n, gguf_vtype_name((gguf_vtype)et));
    void *data = file_alloc(c->f, (size_t)n * es); /* malloc alignment suits every scalar */
    if (!data) return attnd_fail(c->err, ATTND_ERR_NOMEM, "%s: out of memory", c->where);
    memcpy(data, c->f->base + c->pos, (size_t)n * es);
    c->pos += (size_t)n * es;
    arr->data = data;
    return ATTND_OK;
}

static attnd_status read_value(cursor *c, uint32_t type, gguf_value *out) {
    out->type = (gguf_vtype)type;
    if (type == GGUF_VT_STRING) return cur_string(c, &out->v.str, "string value");
    if (type == GGUF_VT_ARRAY) return read_array(c, &out->v.arr);
    if (gguf_vtype_size(type) == 0) return cur_fail(c, "unknown value type %u", type);
    return read_scalar(c, type, out);
}

// ---------------------------------------------------------------------------------------------
// Sorting for lookup and duplicate detection


/* Merge sort over indices, keyed by the name returned for each index. */
typedef const char *(*name_of_fn)(const gguf_file *f, uint64_t i);
static const char *kv_name(const gguf_file *f, uint64_t i) { return f->kvs[i].key; }
static const char *tensor_name(const gguf_file *f, uint64_t i) { return f->tensors[i].name; }

static void merge_sort(const gguf_file *f, uint64_t *idx, uint64_t *tmp, uint64_t n, name_of_fn name) {
    if (n < 2) return;
    uint64_t h = n / 2;
    merge_sort(f, idx, tmp, h, name);
    merge_sort(f, idx + h, tmp, n - h, name);
    uint64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = strcmp(name(f, idx[i]), name(f, idx[j])) <= 0 ? idx[i++] : idx[j++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(*idx));
}

/* Builds the sorted index *out of the n names (for lookup by name) and refuses a name twice.
 * kind names the table in the errors ("<kind>: out of memory"), what its entries ("duplicate
 * <what> '<name>'"). */
static attnd_status index_names(cursor *c, uint64_t n, uint64_t **out, name_of_fn name, const char *kind,
                                const char *what) {
    gguf_file *f = c->f;
    snprintf(c->where, sizeof(c->where), "%s", kind);
    uint64_t *idx = file_alloc(f, n * sizeof(*idx));
    uint64_t *tmp = malloc(n ? n * sizeof(*tmp) : 1);
    if (!idx || !tmp) {
        free(tmp);
        return attnd_fail(c->err, ATTND_ERR_NOMEM, "%s: out of memory", c->where);
    }
    for (uint64_t i = 0; i < n; i++) idx[i] = i;
    merge_sort(f, idx, tmp, n, name);
    free(tmp);
    *out = idx;
    for (uint64_t i = 1; i < n; i++)
        if (strcmp(name(f, idx[i - 1]), name(f, idx[i])) == 0)
            return cur_fail(c, "duplicate %s '%.200s'", what, name(f, idx[i]));
    return ATTND_OK;
}

// ---------------------------------------------------------------------------------------------
// Parsing

/* Reads the name (`what`) of entry i: errors say "<entry> i: ..." until it is read, then
 * "<named> '<name>': ...". An empty name (unless allowed) and an embedded NUL are refused. */
static attnd_status read_name(cursor *c, const char *entry, uint64_t i, const char *what, const char *named,
                              bool allow_empty, const char **out) {
    gguf_string name = {0};
    attnd_status st;
    snprintf(c->where, sizeof(c->where), "%s %llu", entry, (unsigned long long)i);
    if ((st = cur_string(c, &name, what))) return st;
    if (name.len == 0 && !allow_empty) return cur_fail(c, "empty %s", what);
    if (strlen(name.str) != name.len) return cur_fail(c, "%s contains a NUL byte", what);
    snprintf(c->where, sizeof(c->where), "%s '%.200s'", named, name.str);
    *out = name.str;
    return ATTND_OK;
}

static attnd_status parse_kvs(cursor *c) {
    gguf_file *f = c->f;
    attnd_status st;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        if ((st = read_name(c, "metadata entry", i, "key", "key", false, &kv->key))) return st;
        uint32_t type = 0;
        if ((st = cur_u32(c, &type, "value type"))) return st;
        if ((st = read_value(c, type, &kv->value))) return st;
    }
    if ((st = index_names(c, f->n_kv, &f->kv_sorted, kv_name, "metadata", "key"))) return st;

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        snprintf(c->where, sizeof(c->where), "key 'general.alignment'");
        if (al->value.type != GGUF_VT_UINT32)
            return cur_fail(c, "must be u32, found %s", gguf_vtype_name(al->value.type));
        uint64_t a = al->value.v.u64;
        if (a == 0 || (a & (a - 1)) != 0)
            return cur_fail(c, "alignment %llu is not a non-zero power of two", (unsigned long long)a);
        f->alignment = (uint32_t)a;
    }
    return ATTND_OK;
}

/* Reads tensor i's info (name, dimensions, type, offset) into t and checks that its size can be
 * computed: the type is known, whole blocks make each row, and nothing overflows. */
static attnd_status parse_tensor_info(cursor *c, uint64_t i, gguf_tensor *t) {
    attnd_status st;
    if ((st = read_name(c, "tensor", i, "tensor name", "tensor", true, &t->name))) return st;
    if ((st = cur_u32(c, &t->n_dims, "n_dims"))) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return cur_fail(c, "n_dims %u is outside 1..%d", t->n_dims, GGUF_MAX_DIMS);
    uint64_t n = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((st = cur_u64(c, &t->ne[d], "dimension"))) return st;
        if (t->ne[d] == 0) return cur_fail(c, "dimension %u is zero", d);
        if (t->ne[d] > (uint64_t)INT64_MAX / n)
            return cur_fail(c, "element count overflows (dimension %u is %llu)", d,
                            (unsigned long long)t->ne[d]);
        n *= t->ne[d];
    }
    t->n_elems = n;
    if ((st = cur_u32(c, &t->type, "type"))) return st;
    const type_info *ti = type_lookup(t->type);
    if (!ti) return cur_fail(c, "unknown tensor type %u", t->type);
    if (t->ne[0] % ti->block_elems != 0)
        return cur_fail(c, "row length %llu is not a multiple of the %s block size %u",
                        (unsigned long long)t->ne[0], ti->name, ti->block_elems);
    uint64_t blocks = n / ti->block_elems;
    if (blocks > UINT64_MAX / ti->block_bytes) return cur_fail(c, "byte size overflows");
    t->n_bytes = blocks * ti->block_bytes;
    return cur_u64(c, &t->offset, "offset");
}

static attnd_status parse_tensor_infos(cursor *c) {
    gguf_file *f = c->f;
    attnd_status st;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((st = parse_tensor_info(c, i, &f->tensors[i]))) return st;
    return index_names(c, f->n_tensors, &f->tensor_sorted, tensor_name, "tensors", "tensor name");
}

static attnd_status parse(gguf_file *f, attnd_err *err) {
    cursor c = {.f = f, .pos = 0, .err = err};
    snprintf(c.where, sizeof(c.where), "header");
    char magic[4];
    attnd_status st = cur_read(&c, magic, 4, "magic");
    if (st) return st;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0) return cur_fail(&c, "bad magic: not a GGUF file");
    if ((st = cur_u32(&c, &f->version, "version"))) return st;
    if (f->version != 2 && f->version != 3)
        return cur_fail(&c, "unsupported GGUF version %u (2 and 3 are supported)", f->version);
    if ((st = cur_u64(&c, &f->n_tensors, "tensor count"))) return st;
    if ((st = cur_u64(&c, &f->n_kv, "metadata count"))) return st;
    /* A key-value pair takes at least 8 (key length) + 1 (key) + 4 (type) + 1 bytes; a tensor
     * info at least 8 + 1 + 4 + 8 + 4 + 8. Refuse counts the rest of the file cannot hold. */
    if (f->n_kv > cur_left(&c) / 14)
        return cur_fail(&c, "metadata count %llu cannot fit in a %zu-byte file",
                        (unsigned long long)f->n_kv, f->size);
    if (f->n_tensors > cur_left(&c) / 33)
        return cur_fail(&c, "tensor count %llu cannot fit in a %zu-byte file",
                        (unsigned long long)f->n_tensors, f->size);
    f->kvs = file_alloc(f, (size_t)f->n_kv * sizeof(*f->kvs));
    f->tensors = file_alloc(f, (size_t)f->n_tensors * sizeof(*f->tensors));
    if (!f->kvs || !f->tensors) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    memset(f->kvs, 0, (size_t)f->n_kv * sizeof(*f->kvs));
    memset(f->tensors, 0, (size_t)f->n_tensors * sizeof(*f->tensors));

    if ((st = parse_kvs(&c))) return st;
    if ((st = parse_tensor_infos(&c))) return st;

    uint64_t data = ((uint64_t)c.pos + f->alignment - 1) / f->alignment * f->alignment;
    f->data_offset = data;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        snprintf(c.where, sizeof(c.where), "tensor '%.200s'", t->name);
        if (t->offset % f->alignment != 0)
            return cur_fail(&c, "data offset %llu is not a multiple of the alignment %u",
                            (unsigned long long)t->offset, f->alignment);
        if (data > f->size || t->offset > f->size - data || t->n_bytes > f->size - data - t->offset)
            return cur_fail(&c, "data extends past end of file (offset %llu + %llu bytes, file %zu)",
                            (unsigned long long)(data + t->offset), (unsigned long long)t->n_bytes,
                            f->size);
        t->data = f->base + data + t->offset;
    }
    return ATTND_OK;
}

static attnd_status open_common(gguf_file *f, attnd_err *err) {
    if (sizeof(void *) < 8) return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "a 64-bit host is required");
    return parse(f, err);
}

attnd_status gguf_open_memory(gguf_file **out, const void *data, size_t size, attnd_err *err) {
    *out = NULL;
    gguf_file *f = calloc(1, sizeof(*f));
    if (!f) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    f->base = data;
    f->size = size;
    attnd_status st = open_common(f, err);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return ATTND_OK;
}

/* One file, mapped and parsed; a split set's shards are joined by gguf_open. */
static attnd_status open_one(gguf_file **out, const char *path, attnd_err *err) {
    *out = NULL;
    gguf_file *f = NULL;
    attnd_status st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = attnd_fail(err, ATTND_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = attnd_fail(err, ATTND_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    if (sb.st_size == 0) {
        st = attnd_fail(err, ATTND_ERR_FORMAT, "%s: empty file", path);
        goto fail;
    }
    f = calloc(1, sizeof(*f));
    if (!f) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto fail;
    }
    f->size = (size_t)sb.st_size;
    void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        st = attnd_fail(err, ATTND_ERR_IO, "%s: mmap: %s", path, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    f->base = map;
    f->mapped = true;
    st = open_common(f, err);
    if (st) {
        if (err) { /* prefix the path */
            char tmp[sizeof(err->msg)];
            memcpy(tmp, err->msg, sizeof(tmp));
            if (snprintf(err->msg, sizeof(err->msg), "%s: %s", path, tmp) < 0) err->msg[0] = '\0';
        }
        goto fail;
    }
    *out = f;
    return ATTND_OK;
fail:
    if (fd >= 0) close(fd);
    gguf_close(f);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Split sets: NAME-00001-of-0000N.gguf ... NAME-0000N-of-0000N.gguf, as llama.cpp's gguf-split
// writes them. Every shard carries split.no (0-based) and split.count; the first also carries the
// model's metadata and split.tensors.count. Opening the first opens the rest and lists every
// shard's tensors as the set's.

/* The path of shard `no` (0-based) of n beside `first`, the set's first file; false when `first`
 * is not named NAME-00001-of-NNNNN.gguf with n = NNNNN. */
static bool shard_path(char *out, size_t cap, const char *first, int no, int n) {
    char tail[64];
    snprintf(tail, sizeof(tail), "-%05d-of-%05d.gguf", 1, n);
    size_t lf = strlen(first), lt = strlen(tail);
    if (lf <= lt || strcmp(first + lf - lt, tail) != 0) return false;
    return snprintf(out, cap, "%.*s-%05d-of-%05d.gguf", (int)(lf - lt), first, no + 1, n) < (int)cap;
}

/* split.no and split.count of f (0 and 1 when f is not a shard). */
static attnd_status split_keys(const gguf_file *f, uint32_t *no, uint32_t *count, attnd_err *err) {
    *no = 0, *count = 1;
    attnd_status st;
    if (!gguf_find_kv(f, "split.count")) return gguf_find_kv(f, "split.no") ? attnd_fail(err, ATTND_ERR_FORMAT,
        "split.no without split.count") : ATTND_OK;
    if ((st = gguf_get_u32(f, "split.count", count, err)) || (st = gguf_get_u32(f, "split.no", no, err))) return st;
    if (*count < 1 || *count > 9999 || *no >= *count)
        return attnd_fail(err, ATTND_ERR_FORMAT, "split.no %u of split.count %u is out of range", *no, *count);
    return ATTND_OK;
}

/* Appends shard s's tensors to f's and keeps s (owned by f from here). */
static attnd_status add_shard(gguf_file *f, gguf_file *s, attnd_err *err) {
    gguf_file **sh = realloc(f->shards, sizeof(*sh) * (size_t)(f->n_shards + 1));
    if (!sh) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    f->shards = sh;
    f->shards[f->n_shards++] = s;
    gguf_tensor *t = file_alloc(f, (size_t)(f->n_tensors + s->n_tensors) * sizeof(*t));
    if (!t) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    memcpy(t, f->tensors, (size_t)f->n_tensors * sizeof(*t));
    memcpy(t + f->n_tensors, s->tensors, (size_t)s->n_tensors * sizeof(*t));
    f->tensors = t;
    f->n_tensors += s->n_tensors;
    return ATTND_OK;
}

/* f is shard 1 of a set of n, opened from `path`: opens shards 2..n and joins their tensors. */
static attnd_status join_shards(gguf_file *f, const char *path, uint32_t n, attnd_err *err) {
    char sp[4096];
    attnd_status st;
    for (uint32_t no = 1; no < n; no++) {
        if (!shard_path(sp, sizeof(sp), path, (int)no, (int)n))
            return attnd_fail(err, ATTND_ERR_FORMAT, "%s: shard 1 of a %u-file split set, but not named "
                              "NAME-00001-of-%05u.gguf, so the other files cannot be found", path, n, n);
        gguf_file *s = NULL;
        uint32_t s_no, s_n;
        if ((st = open_one(&s, sp, err))) return st;
        if ((st = split_keys(s, &s_no, &s_n, err)) || (s_no != no || s_n != n)) {
            gguf_close(s);
            return st ? st : attnd_fail(err, ATTND_ERR_FORMAT, "%s: split.no %u of %u, expected shard %u of %u",
                                        sp, s_no, s_n, no, n);
        }
        if ((st = add_shard(f, s, err))) {
            gguf_close(s);
            return st;
        }
    }
    uint32_t want = (uint32_t)f->n_tensors;
    if (gguf_find_kv(f, "split.tensors.count") && (st = gguf_get_u32(f, "split.tensors.count", &want, err)))
        return st;
    if (want != f->n_tensors)
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s: split.tensors.count is %u but the %u files hold %llu tensors",
                          path, want, n, (unsigned long long)f->n_tensors);
    cursor c = {.f = f, .err = err};
    return index_names(&c, f->n_tensors, &f->tensor_sorted, tensor_name, "split set", "tensor name");
}

attnd_status gguf_open(gguf_file **out, const char *path, attnd_err *err) {
    attnd_status st = open_one(out, path, err);
    uint32_t no, n;
    if (st || (st = split_keys(*out, &no, &n, err)) == ATTND_OK) {
        if (st || n == 1) return st;
        if (no != 0)
            st = attnd_fail(err, ATTND_ERR_FORMAT, "%s is file %u of a %u-file split set: open the first "
                            "(NAME-00001-of-%05u.gguf), which brings the others", path, no + 1, n, n);
        else
            st = join_shards(*out, path, n, err);
    }
    if (st) {
        gguf_close(*out);
        *out = NULL;
    }
    return st;
}

void gguf_drop_pages(const gguf_file *f, const void *p, size_t n) {
    uintptr_t base = (uintptr_t)f->base, lo = (uintptr_t)p, hi = lo + n;
    for (int i = 0; (lo < base || hi > base + f->size) && i < f->n_shards; i++) /* in another file? */
        if (lo >= (uintptr_t)f->shards[i]->base && hi <= (uintptr_t)f->shards[i]->base + f->shards[i]->size)
            return gguf_drop_pages(f->shards[i], p, n);
    if (!f->mapped || lo < base || hi > base + f->size) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    lo = (lo + page - 1) & ~(page - 1); /* whole pages only: a neighbour's bytes stay */
    hi &= ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: failure changes nothing */
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_shards; i++) gguf_close(f->shards[i]);
    free(f->shards);
    for (size_t i = 0; i < f->n_allocs; i++) free(f->allocs[i]);
    free(f->allocs);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f);
}

// ---------------------------------------------------------------------------------------------
// Accessors

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_file_size(const gguf_file *f) {
    uint64_t n = f->size;
    for (int i = 0; i < f->n_shards; i++) n += f->shards[i]->size;
    return n;
}
int gguf_file_count(const gguf_file *f) { return 1 + f->n_shards; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
uint64_t gguf_kv_count(const gguf_file *f) { return f->n_kv; }
uint64_t gguf_tensor_count(const gguf_file *f) { return f->n_tensors; }

const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i) { return i < f->n_kv ? &f->kvs[i] : NULL; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

/* Binary search over a sorted index; -1 when absent. */
static int64_t find_sorted(const gguf_file *f, const uint64_t *idx, uint64_t n, name_of_fn name,
                           const char *want) {
    if (!idx) return -1;
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name(f, idx[mid]), want);
        if (c == 0) return (int64_t)idx[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    int64_t i = find_sorted(f, f->kv_sorted, f->n_kv, kv_name, key);
    return i < 0 ? NULL : &f->kvs[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = find_sorted(f, f->tensor_sorted, f->n_tensors, tensor_name, name);
    return i < 0 ? NULL : &f->tensors[i];
}

static attnd_status need_kv(const gguf_file *f, const char *key, const gguf_kv **kv, attnd_err *err) {
    *kv = gguf_find_kv(f, key);
    if (!*kv) return attnd_fail(err, ATTND_ERR_NOT_FOUND, "missing metadata key '%s'", key);
    return ATTND_OK;
}

static bool is_unsigned(gguf_vtype t) {
    return t == GGUF_VT_UINT8 || t == GGUF_VT_UINT16 || t == GGUF_VT_UINT32 || t == GGUF_VT_UINT64;
}
static bool is_signed(gguf_vtype t) {
    return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}

static attnd_status wrong_type(const gguf_kv *kv, const char *want, attnd_err *err) {
    return attnd_fail(err, ATTND_ERR_FORMAT, "metadata key '%s' has type %s, expected %s", kv->key,
                      gguf_vtype_name(kv->value.type), want);
}

attnd_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, attnd_err *err) {
    const gguf_kv *kv;
    attnd_status st = need_kv(f, key, &kv, err);
    if (st) return st;
    if (is_signed(kv->value.type)) {
        *out = kv->value.v.i64;
    } else if (is_unsigned(kv->value.type)) {
        if (kv->value.v.u64 > (uint64_t)INT64_MAX)
            return attnd_fail(err, ATTND_ERR_FORMAT, "metadata key '%s': value too large", key);
        *out = (int64_t)kv->value.v.u64;
    } else {
        return wrong_type(kv, "an integer", err);
    }
    return ATTND_OK;
}

attnd_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, attnd_err *err) {
    int64_t v;
    attnd_status st = gguf_get_i64(f, key, &v, err);
    if (st) return st;
    if (v < 0 || v > (int64_t)UINT32_MAX)
        return attnd_fail(err, ATTND_ERR_FORMAT, "metadata key '%s': value %lld is out of range", key,
                          (long long)v);
    *out = (uint32_t)v;
    return ATTND_OK;
}

attnd_status gguf_get_f32(const gguf_file *f, const char *key, float *out, attnd_err *err) {
    const gguf_kv *kv;
    attnd_status st = need_kv(f, key, &kv, err);
    if (st) return st;
    if (kv->value.type != GGUF_VT_FLOAT32 && kv->value.type != GGUF_VT_FLOAT64)
        return wrong_type(kv, "f32", err);
    *out = (float)kv->value.v.f64;
    return ATTND_OK;
}

attnd_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, attnd_err *err) {
    const gguf_kv *kv;
    attnd_status st = need_kv(f, key, &kv, err);
    if (st) return st;
    if (kv->value.type != GGUF_VT_BOOL) return wrong_type(kv, "bool", err);
    *out = kv->value.v.b;
    return ATTND_OK;
}

attnd_status gguf_get_str(const gguf_file *f, const char *key, const char **out, attnd_err *err) {
    const gguf_kv *kv;
    attnd_status st = need_kv(f, key, &kv, err);
    if (st) return st;
    if (kv->value.type != GGUF_VT_STRING) return wrong_type(kv, "string", err);
    *out = kv->value.v.str.str;
    return ATTND_OK;
}

attnd_status gguf_get_arr(const gguf_file *f, const char *key, int elem_type, const gguf_array **out,
                          attnd_err *err) {
    const gguf_kv *kv;
    attnd_status st = need_kv(f, key, &kv, err);
    if (st) return st;
    if (kv->value.type != GGUF_VT_ARRAY) return wrong_type(kv, "array", err);
    if (elem_type >= 0 && kv->value.v.arr.type != (gguf_vtype)elem_type)
        return attnd_fail(err, ATTND_ERR_FORMAT, "metadata key '%s' is an array of %s, expected %s", key,
                          gguf_vtype_name(kv->value.v.arr.type), gguf_vtype_name((gguf_vtype)elem_type));
    *out = &kv->value.v.arr;
    return ATTND_OK;
}
