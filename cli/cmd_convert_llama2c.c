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

int cmd_convert_llama2c(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    const char *name = NULL;
    for (int i = 1; i < argc;) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (cli_flag_value("convert-llama2c", argc, argv, &i, "--name", &v)) {
            name = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_usage_error("convert-llama2c", "unknown option '%s'", argv[i]);
        } else {
            if (n_pos == 3) cli_usage_error("convert-llama2c", "too many arguments");
            pos[n_pos++] = argv[i++];
        }
    }
    if (n_pos != 3) cli_usage_error("convert-llama2c", "expected CHECKPOINT.bin TOKENIZER.bin OUT.gguf");

    mapped ck = {0}, tk = {0};
    if (map_file(pos[0], &ck) || map_file(pos[1], &tk)) return 1;
    int rc = 1;
    char **pieces = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    gguf_writer *w = NULL;

    int32_t h[7];
    if (ck.n < sizeof(h)) {
        fprintf(stderr, "attnd convert-llama2c: %s: too short for a llama2.c header\n", pos[0]);
        goto done;
    }
    memcpy(h, ck.p, sizeof(h));
    int dim = h[0], hidden = h[1], n_layers = h[2], n_heads = h[3], n_kv_heads = h[4], seq_len = h[6];
    bool shared = h[5] > 0;
    int vocab = shared ? h[5] : -h[5];
    if (dim <= 0 || hidden <= 0 || n_layers <= 0 || n_heads <= 0 || n_kv_heads <= 0 || vocab <= 0 || seq_len <= 0 ||
        dim % n_heads || n_heads % n_kv_heads || dim > (1 << 16) || hidden > (1 << 18) || n_layers > 1024 ||
        vocab > (1 << 22) || seq_len > (1 << 24)) {
        fprintf(stderr, "attnd convert-llama2c: %s: implausible header (dim %d, hidden %d, layers %d, heads %d/%d, vocab %d, seq %d)\n",
                pos[0], dim, hidden, n_layers, n_heads, n_kv_heads, h[5], seq_len);
        goto done;
    }
    uint64_t head = (uint64_t)dim / n_heads, kv_dim = head * n_kv_heads, L = (uint64_t)n_layers;
    uint64_t need = (uint64_t)vocab * dim + L * dim + L * dim * dim + 2 * L * kv_dim * dim + L * dim * dim +
                    L * dim + 3 * L * hidden * dim + dim + (uint64_t)seq_len * head + (shared ? 0 : (uint64_t)vocab * dim);
    if (ck.n != sizeof(h) + need * 4) {
        fprintf(stderr, "attnd convert-llama2c: %s: size %zu does not match the header (expected %llu bytes)\n",
                pos[0], ck.n, (unsigned long long)(sizeof(h) + need * 4));
        goto done;
    }
    const float *f = (const float *)(ck.p + sizeof(h));
    const float *emb = f;
    f += (uint64_t)vocab * dim;
    const float *rms_att = f; f += L * dim;
    const float *wq = f; f += L * dim * dim;
    const float *wk = f; f += L * kv_dim * dim;
    const float *wv = f; f += L * kv_dim * dim;
    const float *wo = f; f += L * dim * dim;
    const float *rms_ffn = f; f += L * dim;
    const float *w1 = f; f += L * hidden * dim;
    const float *w2 = f; f += L * dim * hidden;
    const float *w3 = f; f += L * hidden * dim;
    const float *rms_final = f; f += dim;
    f += (uint64_t)seq_len * head; /* freq_cis_real + freq_cis_imag */
    const float *wcls = shared ? NULL : f;

    /* Tokenizer. */
    pieces = calloc(vocab, sizeof(*pieces));
    scores = calloc(vocab, sizeof(*scores));
    types = calloc(vocab, sizeof(*types));
    if (!pieces || !scores || !types) goto oom;
    size_t off = 4;
    for (int i = 0; i < vocab; i++) {
        int32_t len;
        if (tk.n - off < 8) goto bad_tok;
        memcpy(&scores[i], tk.p + off, 4);
        memcpy(&len, tk.p + off + 4, 4);
        off += 8;
        if (len < 0 || (size_t)len > tk.n - off) goto bad_tok;
        if (!(pieces[i] = spm_piece(tk.p + off, (size_t)len))) goto oom;
        off += (size_t)len;
        types[i] = token_type(i, pieces[i]);
    }

    if (gguf_writer_create(&w)) goto oom;
    gguf_writer_add_str(w, "general.architecture", "llama");
    if (!name) {
        const char *base = strrchr(pos[0], '/');
        base = base ? base + 1 : pos[0];
        static char buf[256];
        snprintf(buf, sizeof(buf), "%s", base);
        char *dot = strrchr(buf, '.');
        if (dot) *dot = '\0';
        name = buf;
    }
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_u32(w, "general.alignment", 32);
    gguf_writer_add_u32(w, "llama.context_length", (uint32_t)seq_len);
    gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)dim);
    gguf_writer_add_u32(w, "llama.block_count", (uint32_t)n_layers);
    gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)hidden);
    gguf_writer_add_u32(w, "llama.rope.dimension_count", (uint32_t)head);
    gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t)n_heads);
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", (uint32_t)n_kv_heads);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
    gguf_writer_add_u32(w, "llama.vocab_size", (uint32_t)vocab);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, (uint64_t)vocab);
    gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)vocab);
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)vocab);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);

    uint64_t d = (uint64_t)dim;
    gguf_writer_add_tensor(w, "token_embd.weight", GGUF_TYPE_F32, 2, (uint64_t[]){d, (uint64_t)vocab}, emb);
    for (uint64_t l = 0; l < L; l++) {
        add_layer_tensor(w, l, "attn_norm", d, 0, rms_att + l * d);
        add_layer_tensor(w, l, "attn_q", d, d, wq + l * d * d);
        add_layer_tensor(w, l, "attn_k", d, kv_dim, wk + l * kv_dim * d);
        add_layer_tensor(w, l, "attn_v", d, kv_dim, wv + l * kv_dim * d);
        add_layer_tensor(w, l, "attn_output", d, d, wo + l * d * d);
        add_layer_tensor(w, l, "ffn_gate", d, (uint64_t)hidden, w1 + l * hidden * d);
        add_layer_tensor(w, l, "ffn_down", (uint64_t)hidden, d, w2 + l * d * hidden);
        add_layer_tensor(w, l, "ffn_up", d, (uint64_t)hidden, w3 + l * hidden * d);
        add_layer_tensor(w, l, "ffn_norm", d, 0, rms_ffn + l * d);
    }
    gguf_writer_add_tensor(w, "output_norm.weight", GGUF_TYPE_F32, 1, (uint64_t[]){d}, rms_final);
    if (wcls) gguf_writer_add_tensor(w, "output.weight", GGUF_TYPE_F32, 2, (uint64_t[]){d, (uint64_t)vocab}, wcls);

    attnd_err err;
    if (gguf_writer_write(w, pos[2], &err) != ATTND_OK) {
        fprintf(stderr, "attnd convert-llama2c: %s\n", err.msg);
        goto done;
    }
    printf("wrote %s: dim %d, %d layers, %d/%d heads, vocab %d, context %d\n", pos[2], dim, n_layers, n_heads,
           n_kv_heads, vocab, seq_len);
    rc = 0;
    goto done;
bad_tok:
    fprintf(stderr, "attnd convert-llama2c: %s: truncated or malformed tokenizer (expected %d tokens)\n", pos[1], vocab);
    goto done;
oom:
    fprintf(stderr, "attnd convert-llama2c: out of memory\n");
done:
    gguf_writer_destroy(w);
    if (pieces)
        for (int i = 0; i < vocab; i++) free(pieces[i]);
    free(pieces);
    free(scores);
    free(types);
    if (ck.p) munmap((void *)ck.p, ck.n);
    if (tk.p) munmap((void *)tk.p, tk.n);
    return rc;
}
