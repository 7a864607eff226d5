/*
 * test_default_model.c — the model shipped in models/ loads, generates, and the engine reproduces
 * the training pipeline's held-out perplexity: the 2010–2016 speeches (tests/data/sotu-heldout)
 * scored in context-length windows exactly as tools/train/evaluate.py defines it, within 2 %.
 *
 * Window definition (from models/attnd-sotu.eval.json): ids = [BOS] + tokenize(text); window k =
 * ids[k*(ctx-1) : k*(ctx-1)+ctx], each evaluated from position 0, token j predicted from the
 * window's tokens < j — every token but the leading BOS is predicted exactly once.
 * Under the sanitizers (ATTND_SANITIZED=1), where the engine runs ~10x slower, only the eval file's
 * "subset" (the first windows of the first file) is scored.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/engine.h"
#include "attnd/tokenizer.h"
#include "test_files.h"

#define MODEL ATTND_SOURCE_DIR "/models/attnd-sotu.gguf"
#define EVAL ATTND_SOURCE_DIR "/models/attnd-sotu.eval.json"
#define HELDOUT ATTND_SOURCE_DIR "/tests/data/sotu-heldout"

typedef struct scorer {
    model *m;
    tokenizer *tok;
    kv_pool *pool;
    engine *e;
    kv_seq *seq;
    int ctx, n_vocab;
    batch_entry *batch; /* (ctx) */
    float *logits;      /* (ctx, n_vocab) */
} scorer;

static void scorer_init(scorer *s) {
    attnd_err err;
    memset(s, 0, sizeof(*s));
    cr_assert_eq(model_load(&s->m, MODEL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&s->tok, model_gguf(s->m), &err), ATTND_OK, "%s", err.msg);
    const model_info *mi = model_info_get(s->m);
    s->ctx = mi->n_ctx;
    s->n_vocab = mi->n_vocab;
    cr_assert_eq(kv_pool_create(&s->pool, s->m, (size_t)256 << 20, KV_F32, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(&s->e, s->m, s->ctx, 0, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_seq_create(&s->seq, s->pool, &err), ATTND_OK, "%s", err.msg);
    s->batch = calloc((size_t)s->ctx, sizeof(*s->batch));
    s->logits = malloc(sizeof(float) * (size_t)s->ctx * (size_t)s->n_vocab);
    cr_assert(s->batch && s->logits);
}

static void scorer_free(scorer *s) {
    free(s->batch);
    free(s->logits);
    kv_seq_destroy(s->seq);
    engine_destroy(s->e);
    kv_pool_destroy(s->pool);
    tok_destroy(s->tok);
    model_destroy(s->m);
}

/* Negative log-likelihood (nats) of ids[1..n) given ids[0..n-1), one fresh window. */
static double score_window(scorer *s, const int32_t *ids, int n) {
    attnd_err err;
    kv_seq_truncate(s->seq, 0);
    for (int j = 0; j < n; j++)
        s->batch[j] = (batch_entry){.seq = s->seq, .token = ids[j], .pos = j, .want_logits = j + 1 < n};
    cr_assert_eq(engine_eval(s->e, s->batch, n, s->logits, &err), ATTND_OK, "%s", err.msg);
    double nats = 0;
    for (int j = 0; j + 1 < n; j++) {
        const float *row = s->logits + (size_t)j * s->n_vocab;
        double mx = row[0], sum = 0;
        for (int v = 1; v < s->n_vocab; v++) mx = fmax(mx, row[v]);
        for (int v = 0; v < s->n_vocab; v++) sum += exp(row[v] - mx);
        nats += -(row[ids[j + 1]] - mx - log(sum));
    }
    return nats;
}

/* Scores one file; with max_windows > 0 only its first windows. Adds to *nats and *count. */
static void score_file(scorer *s, const char *name, int max_windows, double *nats, long *count, long *bytes) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", HELDOUT, name);
    size_t len;
    char *text = test_read_file(path, &len);
    int32_t *ids;
    size_t n_ids;
    attnd_err err;
    cr_assert_eq(tok_encode(s->tok, text, len, true, false, &ids, &n_ids, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(ids[0], tok_bos(s->tok));
    int w = 0;
    for (size_t k = 0; k * (size_t)(s->ctx - 1) < n_ids - 1; k++, w++) {
        if (max_windows > 0 && w == max_windows) break;
        size_t start = k * (size_t)(s->ctx - 1);
        int n = (int)((n_ids - start) < (size_t)s->ctx ? n_ids - start : (size_t)s->ctx);
        *nats += score_window(s, ids + start, n);
        *count += n - 1;
    }
    *bytes += (long)len;
    free(ids);
    free(text);
}

static json_t *load_eval(void) {
    json_error_t je;
    json_t *j = json_load_file(EVAL, 0, &je);
    cr_assert(j, "%s: %s", EVAL, je.text);
    return j;
}

Test(default_model, loads_and_describes_itself) {
    model *m;
    attnd_err err;
    cr_assert_eq(model_load(&m, MODEL, &err), ATTND_OK, "the shipped model must load: %s", err.msg);
    const model_info *mi = model_info_get(m);
    cr_assert_str_eq(mi->arch, "llama");
    cr_assert_gt(mi->n_vocab, 1000);
    const char *desc;
    cr_assert_eq(gguf_get_str(model_gguf(m), "general.description", &desc, &err), ATTND_OK, "%s", err.msg);
    cr_assert(strstr(desc, "State of the Union"), "%s", desc);
    const char *license;
    cr_assert_eq(gguf_get_str(model_gguf(m), "general.license", &license, &err), ATTND_OK, "%s", err.msg);
    model_destroy(m);
}

/* Model v2 (issue 17): a 512-token context, ChatML stored as its template, and <|im_end|> a control
 * token that ends generation (so an assistant turn stops there, in attnd as in llama.cpp). */
Test(default_model, is_a_chatml_model_with_a_512_token_context) {
    model *m;
    tokenizer *t;
    attnd_err err;
    cr_assert_eq(model_load(&m, MODEL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&t, model_gguf(m), &err), ATTND_OK, "%s", err.msg);
    cr_assert_geq(model_info_get(m)->n_ctx, 512);
    const char *tmpl;
    cr_assert_eq(gguf_get_str(model_gguf(m), "tokenizer.chat_template", &tmpl, &err), ATTND_OK, "%s", err.msg);
    cr_assert(strstr(tmpl, "<|im_start|>") && strstr(tmpl, "<|im_end|>"), "%s", tmpl);
    const char *marks[] = {"<|im_start|>", "<|im_end|>"};
    for (int k = 0; k < 2; k++) {
        int32_t *ids;
        size_t n;
        cr_assert_eq(tok_encode(t, marks[k], strlen(marks[k]), false, true, &ids, &n, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(n, 1, "%s is one token, not %zu", marks[k], n);
        cr_assert_str_eq(tok_piece(t, ids[0]), marks[k]);
        cr_assert(tok_is_control(t, ids[0]), "%s is a control token", marks[k]);
        cr_assert_eq(tok_is_eog(t, ids[0]), k == 1, "only <|im_end|> ends generation");
        free(ids);
    }
    json_t *ev = load_eval();
    double bpb = json_real_value(json_object_get(json_object_get(ev, "total"), "bits_per_byte"));
    cr_assert_leq(bpb, 1.45, "issue 17's held-out target: %.4f bits/byte", bpb);
    json_decref(ev);
    tok_destroy(t);
    model_destroy(m);
}

Test(default_model, held_out_perplexity_matches_the_training_figure, .timeout = 900) {
    json_t *ev = load_eval();
    scorer s;
    scorer_init(&s);
    cr_assert_eq(json_integer_value(json_object_get(ev, "ctx")), s.ctx, "eval file and model disagree on ctx");
    double nats = 0;
    long count = 0, bytes = 0;
    const char *which;
    json_t *want;
    const char *san = getenv("ATTND_SANITIZED");
    if (san && *san == '1') {
        which = "subset";
        want = json_object_get(ev, "subset");
        score_file(&s, json_string_value(json_object_get(want, "file")),
                   (int)json_integer_value(json_object_get(want, "windows")), &nats, &count, &bytes);
    } else {
        which = "total";
        want = json_object_get(ev, "total");
        json_t *files = json_object_get(ev, "files");
        for (size_t i = 0; i < json_array_size(files); i++)
            score_file(&s, json_string_value(json_array_get(files, i)), 0, &nats, &count, &bytes);
        cr_assert_eq(bytes, json_integer_value(json_object_get(want, "utf8_bytes")));
        double bpb = nats / log(2) / (double)bytes;
        cr_log_info("held-out: %.4f bits per byte (training pipeline: %.4f)", bpb,
                    json_real_value(json_object_get(want, "bits_per_byte")));
    }
    cr_assert_eq(count, json_integer_value(json_object_get(want, "predicted_tokens")),
                 "tokenization differs from the pipeline's: %ld predicted tokens, expected %lld", count,
                 (long long)json_integer_value(json_object_get(want, "predicted_tokens")));
    double got = nats / (double)count, expect = json_real_value(json_object_get(want, "nats_per_token"));
    double ppl = exp(got), ppl_expect = exp(expect);
    fprintf(stderr, "default model, %s: engine %.4f nats/token (ppl %.2f), pipeline %.4f (ppl %.2f), %+.2f %%\n",
            which, got, ppl, expect, ppl_expect, 100.0 * (ppl - ppl_expect) / ppl_expect);
    cr_assert_lt(fabs(ppl - ppl_expect) / ppl_expect, 0.02, "perplexity %.3f vs %.3f", ppl, ppl_expect);
    scorer_free(&s);
    json_decref(ev);
}

// ---- finding the default model ------------------------------------------------------------------

/* Runs `cmd` and returns its output (stdout + stderr, first 4 KB) in buf. */
static int run_capture(const char *cmd, char *buf, size_t cap) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "%s", cmd);
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = '\0';
    return pclose(p);
}

/* A binary outside its build folder (as `cmake -B /elsewhere` leaves it: no models/ next to it)
 * still finds the default model of the source tree it was built from. */
Test(default_model, a_binary_in_any_folder_finds_the_source_trees_model) {
    char top[128], dir[256], cmd[2048], out[4096];
    snprintf(top, sizeof top, "/tmp/attnd-test-anywhere-%d", (int)getpid());
    snprintf(dir, sizeof dir, "%s/bin", top);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/attnd'", dir, ATTND_BINARY, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "cd / && env -u ATTND_MODEL '%s/attnd' info 2>&1", dir);
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, MODEL), "the source tree's model, not: %s", out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    cr_assert_eq(system(cmd), 0);
}

Test(default_model, attnd_model_in_the_environment_comes_first) {
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "ATTND_MODEL='%s/models/stories260K.gguf' '%s' info 2>&1", ATTND_DATA_DIR, ATTND_BINARY);
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "stories260K.gguf"), "%s", out);
    snprintf(cmd, sizeof cmd, "ATTND_MODEL=/nonexistent.gguf '%s' info 2>&1", ATTND_BINARY);
    cr_expect_neq(run_capture(cmd, out, sizeof out), 0, "a missing $ATTND_MODEL is an error, not a fallback");
    cr_expect(strstr(out, "/nonexistent.gguf"), "the error names the file: %s", out);
}
