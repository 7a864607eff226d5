/*
 * embed_http.c — the embedding endpoints (see endpoints.h): OpenAI's POST /v1/embeddings,
 * POST /v1/rerank and /rerank (llama-server's, Jina's and Cohere's shape), Ollama's POST
 * /api/embed and /api/embeddings.
 *
 * A request: the body (embreq.h, rerank.h) → token lists (text encoded with the model's special
 * tokens; a rerank pair as rerank.h says) checked against the per-input cap (cut when the
 * request asks to truncate) → the scheduler (sched_embed.h: turns between generation steps,
 * charged to the tenant) → vectors cut to `dimensions` and normalised → the API's answer. The
 * route table checks the model's role first (http.c): these routes carry ROUTE_EMBED or
 * ROUTE_RANK. The model and the scheduler are found in one place (embed_target).
 */
#include <stdlib.h>
#include <string.h>

#include "attnd/embed.h"
#include "attnd/gguf.h"
#include "attnd/tokenizer.h"
#include "embreq.h"
#include "endpoints.h"
#include "models_http.h"
#include "ollama.h"
#include "rerank.h"
#include "sched_embed.h"

/* What an embedding request runs on: the one place that finds the model and its scheduler
 * (a server of several models: the one the body's "model" names, held until target_put). */
typedef struct embed_target {
    sched *sch;
    const model *m;
    const tokenizer *tok;
    const server_settings *cfg;
    const char *name;     /* the model's id */
    int n_vocab;
    int max_tokens;       /* tokens per input: embed_max_tokens, max_batch, the context */
    mreg_ref ref;         /* several models: the model in use */
} embed_target;

/* false: the answer is queued (*ret). */
static bool target_get(req *r, json_t *body, embed_target *tg, http_result *ret) {
    const struct server *s = r->srv;
    genreq_env env = {.cfg = &s->cfg, .m = s->m, .tok = s->tok, .sch = s->sch, .n_ctx = s->n_ctx, .model_id = s->model_id,
                      .n_vocab = s->n_vocab};
    *tg = (embed_target){0};
    if (s->models && !models_http_route(r, body, &env, &tg->ref, ret)) return false; /* it checked the role */
    int cap = env.cfg->embed_max_tokens;
    if (env.cfg->max_batch < cap) cap = env.cfg->max_batch;
    if (env.n_ctx > 0 && env.n_ctx < cap) cap = env.n_ctx;
    tg->sch = env.sch, tg->m = env.m, tg->tok = env.tok, tg->cfg = env.cfg, tg->name = env.model_id;
    tg->n_vocab = env.n_vocab, tg->max_tokens = cap;
    return true;
}

static void target_put(req *r, embed_target *tg) {
    if (r->srv->models && tg->ref.inst) mreg_release(r->srv->models, &tg->ref);
}

/* The token lists of a request, owned. */
typedef struct embed_batch {
    embed_input *in;      /* (n) tokens owned (cast away from const to free) */
    int n;
    long n_tokens;        /* all inputs' tokens (usage) */
} embed_batch;

static void batch_free(embed_batch *b) {
    for (int i = 0; b->in && i < b->n; i++) free((int32_t *)b->in[i].tokens);
    free(b->in);
    *b = (embed_batch){0};
}

/* Cuts ids to cap tokens, keeping a special token that closes the input ([SEP], EOS: the one
 * last-token pooling reads). */
static int cut_to(const tokenizer *t, int32_t *ids, int n, int cap) {
    if (n <= cap) return n;
    if (cap > 1 && tok_is_control(t, ids[n - 1])) ids[cap - 1] = ids[n - 1];
    return cap;
}

/* Checks input i's length against the cap: cut when truncate, else the 400's message. */
static bool fit(const embed_target *tg, int32_t *ids, int *n, bool truncate, int i, char *why, size_t cap) {
    if (*n == 0) {
        snprintf(why, cap, "input %d is empty (no tokens)", i);
        return false;
    }
    if (*n <= tg->max_tokens) return true;
    if (truncate) {
        *n = cut_to(tg->tok, ids, *n, tg->max_tokens);
        return true;
    }
    snprintf(why, cap, "input %d has %d tokens; this server takes at most %d per input (embed_max_tokens, max_batch, "
             "ctx_size); set \"truncate\": true to cut it", i, *n, tg->max_tokens);
    return false;
}

/* The request's inputs as token lists; false: an error is queued in *ret. */
static bool tokenize_items(req *r, const embed_target *tg, const embreq *rq, embed_batch *b, http_result *ret) {
    char why[300];
    b->in = calloc((size_t)rq->n_items + 1, sizeof(*b->in));
    if (!b->in) return *ret = http_respond_error(r, 503, "out of memory", NULL), false;
    for (int i = 0; i < rq->n_items; i++) {
        const embreq_item *it = &rq->items[i];
        int32_t *ids = NULL;
        size_t n = 0;
        attnd_err err;
        if (it->text) {
            if (tok_encode(tg->tok, it->text, it->len, true, false, &ids, &n, &err) != ATTND_OK)
                return *ret = http_respond_error(r, 400, err.msg, "input"), false;
        } else if ((ids = malloc((size_t)it->n_ids * sizeof(*ids)))) {
            memcpy(ids, it->ids, (size_t)it->n_ids * sizeof(*ids));
            n = (size_t)it->n_ids;
        } else {
            return *ret = http_respond_error(r, 503, "out of memory", NULL), false;
        }
        int k = n > (size_t)1 << 30 ? 1 << 30 : (int)n;
        b->in[b->n++] = (embed_input){.tokens = ids, .n_tokens = k};
        if (!fit(tg, ids, &b->in[i].n_tokens, rq->truncate, i, why, sizeof(why)))
            return *ret = http_respond_error(r, 400, why, "input"), false;
        b->n_tokens += b->in[i].n_tokens;
    }
    return true;
}

/* Runs the batch on the scheduler into out (b->n, dim); false: an error is queued in *ret. */
static bool run_batch(req *r, const embed_target *tg, const embed_batch *b, model_pooling pool, int dim, float *out,
                      http_result *ret) {
    char tenant[SCHED_TENANT_MAX + 1];
    http_tenant(r, tenant, sizeof(tenant));
    attnd_err err;
    attnd_status st = sched_embed(tg->sch, &(sched_embed_spec){b->in, b->n, pool, dim, tenant}, out, &err);
    r->n_prompt = (int)(b->n_tokens > 1 << 30 ? 1 << 30 : b->n_tokens);
    if (st == ATTND_OK) return true;
    int code = st == ATTND_ERR_INVALID ? 400 : st == ATTND_ERR_NOMEM || st == ATTND_ERR_BUSY ? 503 : 500;
    *ret = http_respond_error(r, code, err.msg, NULL);
    return false;
}

// ---- embeddings -------------------------------------------------------------------------------

/* How the model pools for embeddings: the file's (a decoder's default is its last token). */
static model_pooling embed_pooling(const model *m) {
    model_pooling p = model_pooling_type(m);
    if (p == POOL_RANK) p = model_is_encoder(m) ? POOL_CLS : POOL_LAST;
    return p;
}

static http_result embeddings(req *r, embreq_api api) {
    http_result ret = HTTP_NO;
    json_t *body = http_work_body(r, &ret);
    embed_target tg;
    if (!body || !target_get(r, body, &tg, &ret)) {
        json_decref(body);
        return ret;
    }
    embreq rq;
    embed_batch b = {0};
    float *raw = NULL, *vecs = NULL;
    const char *param = NULL;
    attnd_err err;
    model_pooling pool = embed_pooling(tg.m);
    int dim = model_pool_dim(tg.m, pool);
    attnd_status st = embreq_parse(body, api, tg.cfg->embed_max_inputs, tg.n_vocab, &rq, &param, &err);
    if (st != ATTND_OK) {
        ret = http_respond_error(r, st == ATTND_ERR_INVALID ? 400 : 503, err.msg, param);
    } else if (api != EMBREQ_OPENAI && !ollama_model_matches(tg.name, rq.model)) {
        snprintf(err.msg, sizeof(err.msg), "model '%.200s' not found", rq.model);
        ret = http_respond_error(r, 404, err.msg, "model");
    } else if (dim <= 0) {
        ret = http_respond_error(r, 400, "the model's pooling type is 'none': it gives no vector per input", NULL);
    } else if (rq.dimensions > dim) {
        snprintf(err.msg, sizeof(err.msg), "'dimensions' is %d; the model's vectors have %d", rq.dimensions, dim);
        ret = http_respond_error(r, 400, err.msg, "dimensions");
    } else if (tokenize_items(r, &tg, &rq, &b, &ret)) {
        int out_dim = rq.dimensions > 0 ? rq.dimensions : dim;
        raw = malloc(((size_t)b.n + 1) * (size_t)dim * sizeof(float));
        vecs = malloc(((size_t)b.n + 1) * (size_t)out_dim * sizeof(float));
        if (!raw || !vecs) {
            ret = http_respond_error(r, 503, "out of memory", NULL);
        } else if (run_batch(r, &tg, &b, pool, dim, raw, &ret)) {
            for (int i = 0; i < b.n; i++) embreq_finish(raw + (size_t)i * dim, dim, out_dim, rq.norm, vecs + (size_t)i * out_dim);
            json_t *a = embreq_answer(&rq, vecs, out_dim, b.n_tokens, tg.name, (long long)((attnd_now_s() - r->t0) * 1e9));
            ret = a ? http_respond_json(r, 200, a) : http_respond_error(r, 503, "out of memory", NULL);
        }
    }
    free(raw);
    free(vecs);
    batch_free(&b);
    embreq_free(&rq);
    target_put(r, &tg);
    json_decref(body);
    return ret;
}

http_result ep_embeddings(req *r) { return embeddings(r, EMBREQ_OPENAI); }
http_result ep_ollama_embed(req *r) { return embeddings(r, EMBREQ_OLLAMA); }
http_result ep_ollama_embeddings(req *r) { return embeddings(r, EMBREQ_OLLAMA_LEGACY); }

// ---- rerank -------------------------------------------------------------------------------------

/* Pair i's tokens within the cap: with truncate, the document is shortened (by bytes, on a
 * UTF-8 boundary) until the pair fits. */
static bool pair_tokens(req *r, const embed_target *tg, const char *tmpl, const rerank_request *rq, int i,
                        embed_input *out, http_result *ret) {
    size_t d_len = rq->docs[i].len;
    const char *d = rq->docs[i].text;
    for (int tries = 0;; tries++) {
        int32_t *ids;
        size_t n;
        attnd_err err;
        if (rerank_pair_tokens(tg->tok, tmpl, rq->query, rq->query_len, d, d_len, &ids, &n, &err) != ATTND_OK)
            return *ret = http_respond_error(r, 400, err.msg, "documents"), false;
        if (n <= (size_t)tg->max_tokens && n > 0) {
            *out = (embed_input){.tokens = ids, .n_tokens = (int)n};
            return true;
        }
        free(ids);
        if (n > 0 && rq->truncate && d_len > 0 && tries < 16) {
            d_len = (size_t)((double)d_len * tg->max_tokens / (double)n * 0.9);
            while (d_len > 0 && ((unsigned char)d[d_len] & 0xC0) == 0x80) d_len--;
            continue;
        }
        char why[300];
        snprintf(why, sizeof(why), n == 0 ? "document %d gives an empty pair" : "the query and document %d take %zu tokens; "
                 "this server takes at most %d per pair (embed_max_tokens, max_batch, ctx_size); set \"truncate\": true "
                 "to cut the document", i, n, tg->max_tokens);
        return *ret = http_respond_error(r, 400, why, "documents"), false;
    }
}

http_result ep_rerank(req *r) {
    http_result ret = HTTP_NO;
    json_t *body = http_work_body(r, &ret);
    embed_target tg;
    if (!body || !target_get(r, body, &tg, &ret)) {
        json_decref(body);
        return ret;
    }
    rerank_request rq;
    embed_batch b = {0};
    float *raw = NULL, *scores = NULL;
    const char *param = NULL, *tmpl = NULL;
    attnd_err err;
    int dim = model_pool_dim(tg.m, POOL_RANK);
    gguf_get_str(model_gguf(tg.m), "tokenizer.chat_template.rerank", &tmpl, NULL);
    attnd_status st = rerank_parse(body, tg.cfg->embed_max_inputs, &rq, &param, &err);
    if (st != ATTND_OK) {
        ret = http_respond_error(r, st == ATTND_ERR_INVALID ? 400 : 503, err.msg, param);
    } else if (!(b.in = calloc((size_t)rq.n_docs, sizeof(*b.in))) || !(raw = malloc((size_t)rq.n_docs * (size_t)dim * sizeof(float))) ||
               !(scores = malloc((size_t)rq.n_docs * sizeof(float)))) {
        ret = http_respond_error(r, 503, "out of memory", NULL);
    } else {
        bool ok = true;
        for (int i = 0; ok && i < rq.n_docs; i++) {
            ok = pair_tokens(r, &tg, tmpl, &rq, i, &b.in[i], &ret);
            if (ok) b.n_tokens += b.in[b.n++].n_tokens;
        }
        if (ok && run_batch(r, &tg, &b, POOL_RANK, dim, raw, &ret)) {
            for (int i = 0; i < rq.n_docs; i++) scores[i] = raw[(size_t)i * dim];
            json_t *a = rerank_answer(&rq, scores, b.n_tokens, tg.name);
            ret = a ? http_respond_json(r, 200, a) : http_respond_error(r, 503, "out of memory", NULL);
        }
    }
    free(raw);
    free(scores);
    batch_free(&b);
    rerank_request_free(&rq);
    target_put(r, &tg);
    json_decref(body);
    return ret;
}
