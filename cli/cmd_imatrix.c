/*
 * cmd_imatrix.c — `attnd imatrix`: an importance matrix from a text, as llama.cpp's imatrix tool
 * computes it. The text is tokenized once and cut into chunks of --chunk tokens (BOS first when
 * the model adds one); each chunk is one fresh sequence, and the engine's matmul hook hands every
 * layer weight's input rows to imatrix_add (engine/imatrix.c). The perplexity of each chunk's
 * second half (llama.cpp's measure) is printed as it goes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/imatrix.h"
#include "attnd/kv.h"
#include "attnd/tokenizer.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd imatrix --model F.gguf --text FILE [-o imatrix.gguf] [--chunk 512] [--chunks N]\n"
    "\n"
    "Runs the text through the model in chunks and writes, for every layer weight, the sum of\n"
    "squared inputs of each column and the rows summed (per expert for MoE experts): llama.cpp's\n"
    "importance matrix, for `attnd quantize --imatrix`. Prints each chunk's perplexity.\n"
    "  --model PATH      the GGUF file (default: the shipped default model)\n"
    "  --text FILE       the calibration text (-f is an alias)\n"
    "  -o, --output F    the output (default imatrix.gguf); a name ending in .dat writes the legacy format\n"
    "  --chunk N         tokens per chunk (default 512; cut to the model's context)\n"
    "  --chunks N        at most N chunks (default: all the text holds)\n"
    "  --threads N       threads; 0 (the default) = the CPUs this process may use\n";

typedef struct imatrix_opts {
    cli_run_opts run;
    const char *text, *out;
    int chunk, chunks;
} imatrix_opts;

/* What the matmul hook adds into, and the first error it met. */
typedef struct collector {
    imatrix *im;
    int n_expert;
    attnd_status st;
    attnd_err err;
} collector;

static void on_matmul(void *user, const char *weight, int expert, const float *x, int n, int cols) {
    collector *c = user;
    if (c->st != ATTND_OK || strncmp(weight, "blk.", 4)) return; /* llama.cpp: the layers' weights only */
    c->st = imatrix_add(c->im, weight, expert, expert < 0 ? 1 : c->n_expert, x, n, cols, &c->err);
}

/* The whole file as tokens (no BOS), malloc'd into *ids. */
static attnd_status read_tokens(const char *path, const tokenizer *tok, int32_t **ids, size_t *n, attnd_err *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return attnd_fail(err, ATTND_ERR_IO, "cannot open %s", path);
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 65536 > cap) {
            char *t = realloc(text, cap = (len + 65536) * 2);
            if (!t) {
                free(text), fclose(fp);
                return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
            }
            text = t;
        }
        got = fread(text + len, 1, cap - len, fp);
        len += got;
    } while (got > 0);
    fclose(fp);
    attnd_status st = tok_encode(tok, text, len, false, false, ids, n, err);
    free(text);
    return st;
}

/* Evaluates chunk `ids` (n tokens) in a fresh sequence; adds the log-probabilities of the second
 * half's next tokens to *nll and their number to *n_scored. */
static attnd_status run_chunk(cli_seq *q, const int32_t *ids, int n, int max_batch, float *logits, int n_vocab,
                              double *nll, int *n_scored, attnd_err *err) {
    batch_entry b[512];
    kv_seq_truncate(q->s, 0);
    int first = n / 2;
    for (int done = 0; done < n;) {
        int c = n - done < max_batch ? n - done : max_batch;
        for (int i = 0; i < c; i++) b[i] = (batch_entry){q->s, ids[done + i], done + i, done + i >= first};
        attnd_status st = engine_eval(q->e, b, c, logits, err);
        if (st != ATTND_OK) return st;
        int w = 0;
        for (int i = 0; i < c; i++) {
            int pos = done + i;
            if (pos < first) continue;
            if (pos + 1 < n) {
                *nll -= cli_logprob_of(logits + (size_t)w * n_vocab, n_vocab, ids[pos + 1]);
                ++*n_scored;
            }
            w++;
        }
        done += c;
    }
    return ATTND_OK;
}

typedef struct imatrix_run {
    model *m;
    tokenizer *tok;
    cli_seq q;
    int32_t *ids, *chunk_ids;
    float *logits;
    collector col;
} imatrix_run;

/* Every chunk through the model, with progress on stderr. */
static attnd_status run_chunks(imatrix_run *r, int chunk, int n_chunks, attnd_err *err) {
    const model_info *mi = model_info_get(r->m);
    int max_batch = chunk < 512 ? chunk : 512;
    double nll = 0;
    int n_scored = 0;
    for (int c = 0; c < n_chunks; c++) {
        memcpy(r->chunk_ids, r->ids + (size_t)c * chunk, sizeof(int32_t) * (size_t)chunk);
        if (tok_add_bos(r->tok) && tok_bos(r->tok) >= 0) r->chunk_ids[0] = tok_bos(r->tok);
        attnd_status st =
            run_chunk(&r->q, r->chunk_ids, chunk, max_batch, r->logits, mi->n_vocab, &nll, &n_scored, err);
        if (st == ATTND_OK && r->col.st != ATTND_OK) {
            *err = r->col.err;
            st = r->col.st;
        }
        if (st != ATTND_OK) return st;
        r->col.im->chunk_count = (uint32_t)c + 1;
        fprintf(stderr, "attnd imatrix: chunk %d/%d  perplexity %.4f\n", c + 1, n_chunks,
                n_scored ? exp(nll / n_scored) : 0.0);
    }
    return ATTND_OK;
}

static attnd_status imatrix_run_all(imatrix_run *r, const imatrix_opts *o, attnd_err *err) {
    attnd_status st;
    if ((st = cli_model_load(&r->m, "imatrix", o->run.model, err)) || (st = tok_load(&r->tok, model_gguf(r->m), err)))
        return st;
    const model_info *mi = model_info_get(r->m);
    size_t n_ids;
    if ((st = read_tokens(o->text, r->tok, &r->ids, &n_ids, err))) return st;
    int chunk = o->chunk < mi->n_ctx ? o->chunk : mi->n_ctx;
    size_t avail = n_ids / (size_t)chunk;
    if (avail == 0)
        return attnd_fail(err, ATTND_ERR_INVALID, "%s holds %zu tokens; a chunk needs %d", o->text, n_ids, chunk);
    int n_chunks = o->chunks > 0 && (size_t)o->chunks < avail ? o->chunks : (int)avail;
    int max_batch = chunk < 512 ? chunk : 512;
    if ((st = cli_seq_open(&r->q, r->m, max_batch, &o->run, err))) return st;
    r->logits = malloc(sizeof(float) * (size_t)max_batch * mi->n_vocab); /* (max_batch, n_vocab) */
    r->chunk_ids = malloc(sizeof(int32_t) * (size_t)chunk);
    if (!r->logits || !r->chunk_ids || imatrix_create(&r->col.im))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    r->col.n_expert = mi->n_expert > 0 ? mi->n_expert : 1;
    r->col.im->chunk_size = (uint32_t)chunk;
    if (!(r->col.im->dataset = strdup(o->text))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    engine_set_attention_cb(r->q.e, NULL, &r->col);
    engine_set_matmul_cb(r->q.e, on_matmul);
    fprintf(stderr, "attnd imatrix: %zu tokens, %d chunks of %d\n", n_ids, n_chunks, chunk);
    if ((st = run_chunks(r, chunk, n_chunks, err))) return st;
    size_t ol = strlen(o->out);
    bool dat = ol > 4 && !strcmp(o->out + ol - 4, ".dat");
    st = dat ? imatrix_write_dat(r->col.im, o->out, err) : imatrix_write_gguf(r->col.im, o->out, err);
    if (st == ATTND_OK)
        fprintf(stderr, "attnd imatrix: wrote %s (%d weights, %u chunks)\n", o->out, r->col.im->n,
                r->col.im->chunk_count);
    return st;
}

int cmd_imatrix(int argc, char **argv) {
    imatrix_opts o = {.out = "imatrix.gguf", .chunk = 512};
    const cli_opt opts[] = {
        CLI_OPT_RUN(&o.run),
        CLI_OPT_STR("--text", &o.text),
        CLI_OPT_ALIAS("-f", "--text"),
        CLI_OPT_STR("--output", &o.out),
        CLI_OPT_ALIAS("-o", "--output"),
        CLI_OPT_INT("--chunk", &o.chunk, 2, 1 << 20),
        CLI_OPT_INT("--chunks", &o.chunks, 0, 1 << 30),
    };
    if (!cli_parse_opts("imatrix", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (!o.text) cli_usage_error("imatrix", "--text is required");
    imatrix_run r = {0};
    attnd_err err;
    attnd_status st = imatrix_run_all(&r, &o, &err);
    imatrix_destroy(r.col.im);
    free(r.ids), free(r.chunk_ids), free(r.logits);
    cli_seq_close(&r.q);
    tok_destroy(r.tok);
    model_destroy(r.m);
    return cli_exit("imatrix", st, &err);
}
