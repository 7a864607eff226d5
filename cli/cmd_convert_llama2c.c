/*
 * cmd_convert_llama2c.c — `attnd convert-llama2c CHECKPOINT.bin TOKENIZER.bin OUT.gguf`:
 * turns a llama2.c checkpoint (karpathy/llama2.c's run.c format) and its tokenizer.bin into a
 * GGUF file of the `llama` architecture with F32 tensors, so stories15M/42M/110M run here.
 *
 * llama2.c checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
 * seq_len; a negative vocab_size means the classifier is not shared with the embedding), then
 * float32 arrays: token embedding (vocab, dim), rms_att (L, dim), wq (L, dim, dim),
 * wk (L, kv_dim, dim), wv (L, kv_dim, dim), wo (L, dim, dim), rms_ffn (L, dim), w1 (L, hidden, dim),
 * w2 (L, dim, hidden), w3 (L, hidden, dim), rms_final (dim), two RoPE tables (seq_len, head/2)
 * that GGUF does not need, then wcls (vocab, dim) when unshared. Every matrix is row-major
 * (out, in), which is GGUF's layout with ne = {in, out}; run.c rotates adjacent pairs, as
 * llama.cpp's `llama` architecture does, so no permutation is needed.
 *
 * tokenizer.bin: int32 max_token_length, then per token: float score, int32 length, bytes. Its
 * pieces use ' ' where SentencePiece uses U+2581, and BOS/EOS are stored as "\n<s>\n".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd convert-llama2c CHECKPOINT.bin TOKENIZER.bin OUT.gguf [--name NAME]\n"
    "\n"
    "Converts a llama2.c checkpoint and its tokenizer.bin to a GGUF model (F32 tensors).\n";

enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_BYTE = 6 };

typedef struct mapped {
    const uint8_t *p;
    size_t n;
} mapped;

static int map_file(const char *path, mapped *m) {
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size == 0) {
        fprintf(stderr, "attnd convert-llama2c: %s: %s\n", path, fd < 0 ? strerror(errno) : "empty or unreadable");
        if (fd >= 0) close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        fprintf(stderr, "attnd convert-llama2c: %s: mmap: %s\n", path, strerror(errno));
        return -1;
    }
    m->p = p;
    m->n = (size_t)sb.st_size;
    return 0;
}

/* Replaces ' ' by U+2581 and strips llama2.c's "\n<s>\n" decoration; returns a malloc'd string. */
static char *spm_piece(const uint8_t *s, size_t len) {
    if (len >= 2 && s[0] == '\n' && s[len - 1] == '\n') {
        s++;
        len -= 2;
    }
    char *out = malloc(len * 3 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') {
            memcpy(o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            *o++ = (char)s[i];
        }
    }
    *o = '\0';
    return out;
}

static int token_type(int id, const char *piece) {
    if (id == 0) return TOKEN_UNKNOWN;
    if (id == 1 || id == 2) return TOKEN_CONTROL;
    unsigned byte;
    char tail;
    if (strlen(piece) == 6 && sscanf(piece, "<0x%2X%c", &byte, &tail) == 2 && tail == '>') return TOKEN_BYTE;
    return TOKEN_NORMAL;
}

/* Adds F32 tensor blk.<l>.<what>.weight of ne {ne0, ne1} (ne1 == 0: one dimension). */
static void add_layer_tensor(gguf_writer *w, uint64_t l, const char *what, uint64_t ne0, uint64_t ne1,
                             const float *data) {
    char name[96];
    snprintf(name, sizeof(name), "blk.%llu.%s.weight", (unsigned long long)l, what);
    uint64_t ne[2] = {ne0, ne1};
    gguf_writer_add_tensor(w, name, GGUF_TYPE_F32, ne1 ? 2 : 1, ne, data);
}

/* The checkpoint's shape and where its arrays start (pointers into the mapping). */
typedef struct l2c {
    int dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    uint64_t head, kv_dim;
    const float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls; /* wcls NULL: shared */
} l2c;

/* Reads and checks the header against the file's size, then lays out the arrays. */
static bool read_checkpoint(const mapped *ck, const char *path, l2c *c) {
    int32_t h[7];
    if (ck->n < sizeof(h)) {
        fprintf(stderr, "attnd convert-llama2c: %s: too short for a llama2.c header\n", path);
        return false;
    }
    memcpy(h, ck->p, sizeof(h));
    *c = (l2c){.dim = h[0], .hidden = h[1], .n_layers = h[2], .n_heads = h[3], .n_kv_heads = h[4],
               .vocab = h[5] > 0 ? h[5] : -h[5], .seq_len = h[6]};
    bool shared = h[5] > 0;
    if (c->dim <= 0 || c->hidden <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 || c->vocab <= 0 ||
        c->seq_len <= 0 || c->dim % c->n_heads || c->n_heads % c->n_kv_heads || c->dim > (1 << 16) ||
        c->hidden > (1 << 18) || c->n_layers > 1024 || c->vocab > (1 << 22) || c->seq_len > (1 << 24)) {
        fprintf(stderr, "attnd convert-llama2c: %s: implausible header (dim %d, hidden %d, layers %d, heads %d/%d, vocab %d, seq %d)\n",
                path, c->dim, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, h[5], c->seq_len);
        return false;
    }
    uint64_t dim = (uint64_t)c->dim, hidden = (uint64_t)c->hidden, L = (uint64_t)c->n_layers;
    c->head = dim / (uint64_t)c->n_heads;
    c->kv_dim = c->head * (uint64_t)c->n_kv_heads;
    uint64_t need = (uint64_t)c->vocab * dim + L * dim + L * dim * dim + 2 * L * c->kv_dim * dim + L * dim * dim +
                    L * dim + 3 * L * hidden * dim + dim + (uint64_t)c->seq_len * c->head +
                    (shared ? 0 : (uint64_t)c->vocab * dim);
    if (ck->n != sizeof(h) + need * 4) {
        fprintf(stderr, "attnd convert-llama2c: %s: size %zu does not match the header (expected %llu bytes)\n",
                path, ck->n, (unsigned long long)(sizeof(h) + need * 4));
        return false;
    }
    const float *f = (const float *)(ck->p + sizeof(h));
    c->emb = f; f += (uint64_t)c->vocab * dim;
    c->rms_att = f; f += L * dim;
    c->wq = f; f += L * dim * dim;
    c->wk = f; f += L * c->kv_dim * dim;
    c->wv = f; f += L * c->kv_dim * dim;
    c->wo = f; f += L * dim * dim;
    c->rms_ffn = f; f += L * dim;
    c->w1 = f; f += L * hidden * dim;
    c->w2 = f; f += L * dim * hidden;
    c->w3 = f; f += L * hidden * dim;
    c->rms_final = f; f += dim;
    f += (uint64_t)c->seq_len * c->head; /* freq_cis_real + freq_cis_imag */
    c->wcls = shared ? NULL : f;
    return true;
}

/* The vocabulary of tokenizer.bin as GGUF arrays (owned; free with vocab_free). */
typedef struct l2c_vocab {
    int n;
    char **pieces;
    float *scores;
    int32_t *types;
} l2c_vocab;

static void vocab_free(l2c_vocab *v) {
    for (int i = 0; v->pieces && i < v->n; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->scores);
    free(v->types);
}

/* 0: read; 1: truncated or malformed; 2: out of memory. */
static int read_vocab(const mapped *tk, int n, l2c_vocab *v) {
    v->n = n;
    v->pieces = calloc((size_t)n, sizeof(*v->pieces));
    v->scores = calloc((size_t)n, sizeof(*v->scores));
    v->types = calloc((size_t)n, sizeof(*v->types));
    if (!v->pieces || !v->scores || !v->types) return 2;
    size_t off = 4;
    for (int i = 0; i < n; i++) {
        int32_t len;
        if (tk->n - off < 8) return 1;
        memcpy(&v->scores[i], tk->p + off, 4);
        memcpy(&len, tk->p + off + 4, 4);
        off += 8;
        if (len < 0 || (size_t)len > tk->n - off) return 1;
        if (!(v->pieces[i] = spm_piece(tk->p + off, (size_t)len))) return 2;
        off += (size_t)len;
        v->types[i] = token_type(i, v->pieces[i]);
    }
    return 0;
}

/* The model's key/values: hyper-parameters (llama2.c's fixed epsilon and RoPE base) and the
 * SentencePiece vocabulary. */
static void write_kv(gguf_writer *w, const l2c *c, const l2c_vocab *v, const char *name) {
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_u32(w, "general.alignment", 32);
    gguf_writer_add_u32(w, "llama.context_length", (uint32_t)c->seq_len);
    gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    gguf_writer_add_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden);
    gguf_writer_add_u32(w, "llama.rope.dimension_count", (uint32_t)c->head);
    gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
    gguf_writer_add_u32(w, "llama.vocab_size", (uint32_t)c->vocab);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->pieces, (uint64_t)v->n);
    gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", v->scores, (uint64_t)v->n);
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", v->types, (uint64_t)v->n);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
}

static void write_tensors(gguf_writer *w, const l2c *c) {
    uint64_t d = (uint64_t)c->dim, hidden = (uint64_t)c->hidden, kv_dim = c->kv_dim;
    gguf_writer_add_tensor(w, "token_embd.weight", GGUF_TYPE_F32, 2, (uint64_t[]){d, (uint64_t)c->vocab}, c->emb);
    for (uint64_t l = 0; l < (uint64_t)c->n_layers; l++) {
        add_layer_tensor(w, l, "attn_norm", d, 0, c->rms_att + l * d);
        add_layer_tensor(w, l, "attn_q", d, d, c->wq + l * d * d);
        add_layer_tensor(w, l, "attn_k", d, kv_dim, c->wk + l * kv_dim * d);
        add_layer_tensor(w, l, "attn_v", d, kv_dim, c->wv + l * kv_dim * d);
        add_layer_tensor(w, l, "attn_output", d, d, c->wo + l * d * d);
        add_layer_tensor(w, l, "ffn_gate", d, hidden, c->w1 + l * hidden * d);
        add_layer_tensor(w, l, "ffn_down", hidden, d, c->w2 + l * d * hidden);
        add_layer_tensor(w, l, "ffn_up", d, hidden, c->w3 + l * hidden * d);
        add_layer_tensor(w, l, "ffn_norm", d, 0, c->rms_ffn + l * d);
    }
    gguf_writer_add_tensor(w, "output_norm.weight", GGUF_TYPE_F32, 1, (uint64_t[]){d}, c->rms_final);
    if (c->wcls)
        gguf_writer_add_tensor(w, "output.weight", GGUF_TYPE_F32, 2, (uint64_t[]){d, (uint64_t)c->vocab}, c->wcls);
}

/* The three positional arguments and --name; false when --help was printed. */
static bool parse_args(int argc, char **argv, const char *pos[3], const char **name) {
    cli_args args = {pos, 0, 3};
    *name = NULL;
    const cli_opt opts[] = {CLI_OPT_STR("--name", name), CLI_OPT_ARGS(&args)};
    if (!cli_parse_opts("convert-llama2c", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return false;
    if (args.n != 3) cli_usage_error("convert-llama2c", "expected CHECKPOINT.bin TOKENIZER.bin OUT.gguf");
    return true;
}

int cmd_convert_llama2c(int argc, char **argv) {
    const char *pos[3], *name;
    if (!parse_args(argc, argv, pos, &name)) return 0;
    mapped ck = {0}, tk = {0};
    if (map_file(pos[0], &ck) || map_file(pos[1], &tk)) return 1;
    int rc = 1;
    l2c c;
    l2c_vocab v = {0};
    gguf_writer *w = NULL;
    if (!read_checkpoint(&ck, pos[0], &c)) goto done;
    int vr = read_vocab(&tk, c.vocab, &v);
    if (vr == 1) {
        fprintf(stderr, "attnd convert-llama2c: %s: truncated or malformed tokenizer (expected %d tokens)\n", pos[1],
                c.vocab);
        goto done;
    }
    if (vr == 2 || gguf_writer_create(&w)) {
        fprintf(stderr, "attnd convert-llama2c: out of memory\n");
        goto done;
    }
    char buf[256];
    if (!name) { /* the checkpoint's file name without its extension */
        const char *base = strrchr(pos[0], '/');
        snprintf(buf, sizeof(buf), "%s", base ? base + 1 : pos[0]);
        char *dot = strrchr(buf, '.');
        if (dot) *dot = '\0';
        name = buf;
    }
    write_kv(w, &c, &v, name);
    write_tensors(w, &c);
    attnd_err err;
    if (gguf_writer_write(w, pos[2], &err) != ATTND_OK) {
        fprintf(stderr, "attnd convert-llama2c: %s\n", err.msg);
        goto done;
    }
    printf("wrote %s: dim %d, %d layers, %d/%d heads, vocab %d, context %d\n", pos[2], c.dim, c.n_layers, c.n_heads,
           c.n_kv_heads, c.vocab, c.seq_len);
    rc = 0;
done:
    gguf_writer_destroy(w);
    vocab_free(&v);
    if (ck.p) munmap((void *)ck.p, ck.n);
    if (tk.p) munmap((void *)tk.p, tk.n);
    return rc;
}
