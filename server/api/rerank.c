/*
 * rerank.c — the rerank request's body, pair prompts and answer (see rerank.h).
 */
#include "rerank.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "oai_field.h"

void rerank_request_free(rerank_request *r) {
    if (!r) return;
    free(r->docs);
    r->docs = NULL;
    r->n_docs = 0;
}

static attnd_status parse_docs(const json_t *docs, const char *name, int max_docs, rerank_request *out,
                               const char **param, attnd_err *err) {
    if (!json_is_array(docs) || json_array_size(docs) == 0)
        return oai_bad(param, name, err, "'%s' must be a non-empty array of strings or {\"text\": ...} objects", name);
    size_t n = json_array_size(docs);
    if (n > (size_t)max_docs)
        return oai_bad(param, name, err, "'%s' holds %zu documents; this server takes at most %d per request (embed_max_inputs)",
                       name, n, max_docs);
    out->docs = calloc(n, sizeof(*out->docs));
    if (!out->docs) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    out->n_docs = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *d = json_array_get(docs, i);
        if (json_is_object(d)) d = json_object_get(d, "text");
        if (!json_is_string(d)) return oai_bad(param, name, err, "'%s'[%zu] must be a string or an object with a \"text\" string", name, i);
        out->docs[i] = (rerank_doc){json_string_value(d), json_string_length(d)};
    }
    return ATTND_OK;
}

attnd_status rerank_parse(const json_t *body, int max_docs, rerank_request *out, const char **param, attnd_err *err) {
    *out = (rerank_request){.model = ""};
    *param = NULL;
    if (!json_is_object(body)) return oai_bad(param, "body", err, "the body must be a JSON object");
    attnd_status st = oai_get_string(body, "model", &out->model, param, err);
    if (st != ATTND_OK) return st;
    const json_t *q = oai_field(body, "query");
    if (!json_is_string(q)) return oai_bad(param, "query", err, "'query' must be a string");
    out->query = json_string_value(q);
    out->query_len = json_string_length(q);
    const json_t *docs = oai_field(body, "documents");
    const char *name = "documents";
    if (!docs && oai_field(body, "texts")) docs = oai_field(body, "texts"), name = "texts";
    if ((st = parse_docs(docs, name, max_docs, out, param, err)) != ATTND_OK) return st;
    out->top_n = out->n_docs;
    const json_t *top = oai_field(body, "top_n");
    if (top) {
        if (!json_is_integer(top) || json_integer_value(top) < 0) return oai_bad(param, "top_n", err, "'top_n' must be a non-negative integer");
        if (json_integer_value(top) > 0 && json_integer_value(top) < out->n_docs) out->top_n = (int)json_integer_value(top);
    }
    if ((st = oai_get_bool(body, "return_documents", &out->return_documents, param, err)) != ATTND_OK) return st;
    return oai_get_bool(body, "truncate", &out->truncate, param, err);
}

// ---- pair prompts -------------------------------------------------------------------------------

/* tmpl with every {query} and {document} replaced (into b); false when out of memory. */
static bool fill_template(buf *b, const char *tmpl, const char *q, size_t q_len, const char *d, size_t d_len) {
    bool ok = buf_reserve(b, 1);
    for (const char *p = tmpl; ok && *p;) {
        const char *next = strchr(p, '{');
        if (!next) next = p + strlen(p);
        if (next > p) {
            ok = buf_append(b, p, (size_t)(next - p));
            p = next;
        } else if (!strncmp(p, "{query}", 7)) {
            ok = buf_append(b, q, q_len);
            p += 7;
        } else if (!strncmp(p, "{document}", 10)) {
            ok = buf_append(b, d, d_len);
            p += 10;
        } else {
            ok = buf_append(b, p++, 1);
        }
    }
    return ok;
}

attnd_status rerank_pair_tokens(const tokenizer *t, const char *tmpl, const char *q, size_t q_len, const char *d,
                                size_t d_len, int32_t **ids, size_t *n_ids, attnd_err *err) {
    *ids = NULL;
    *n_ids = 0;
    if (tmpl) {
        buf b;
        buf_init(&b);
        if (!fill_template(&b, tmpl, q, q_len, d, d_len)) {
            buf_free(&b);
            return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        }
        attnd_status st = tok_encode(t, b.p, b.len, false, true, ids, n_ids, err);
        buf_free(&b);
        return st;
    }
    return tok_encode_pair(t, q, q_len, d, d_len, ids, NULL, n_ids, err); /* [CLS] q [SEP] d [SEP], or BOS q EOS SEP d EOS */
}

// ---- the answer ---------------------------------------------------------------------------------

typedef struct ranked {
    float score;
    int index;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

json_t *rerank_answer(const rerank_request *r, const float *scores, long n_tokens, const char *model) {
    ranked *rk = malloc((size_t)r->n_docs * sizeof(*rk));
    json_t *results = json_array();
    if (!rk || !results) {
        free(rk);
        json_decref(results);
        return NULL;
    }
    for (int i = 0; i < r->n_docs; i++) rk[i] = (ranked){scores[i], i};
    qsort(rk, (size_t)r->n_docs, sizeof(*rk), by_score);
    for (int k = 0; k < r->top_n; k++) {
        json_t *e = json_pack("{s:i, s:f}", "index", rk[k].index, "relevance_score", (double)rk[k].score);
        const rerank_doc *d = &r->docs[rk[k].index];
        if (e && r->return_documents) json_object_set_new(e, "document", json_pack("{s:s%}", "text", d->text, d->len));
        if (!e || json_array_append_new(results, e)) {
            free(rk);
            json_decref(results);
            return NULL;
        }
    }
    free(rk);
    const char *name = r->model && r->model[0] ? r->model : model;
    return json_pack("{s:s, s:s, s:o, s:{s:I, s:I}}", "object", "list", "model", name, "results", results, "usage",
                     "prompt_tokens", (json_int_t)n_tokens, "total_tokens", (json_int_t)n_tokens);
}
