/*
 * rerank.h — the rerank request as pure functions (server-private): the body of POST /v1/rerank
 * and /rerank (the shape llama-server, Jina and Cohere clients send), the prompt of one
 * (query, document) pair, and the answer: results sorted by relevance_score. embed_http.c runs
 * the pairs through the scheduler; `attnd rerank` uses the same pair prompts.
 *
 *   query            a string (required)
 *   documents        strings, or objects with a "text" string (Cohere's and Jina's); TEI's
 *                    "texts" is read as documents
 *   top_n            the best n results (absent or 0: all)
 *   return_documents each result carries "document": {"text": ...} (default false)
 *   truncate         an over-long pair is cut (its document's end) rather than refused
 *   model            accepted (the served model answers)
 *
 * Pair prompts, as llama-server makes them: a GGUF with tokenizer.chat_template.rerank
 * (Qwen3-Reranker's) has {query} and {document} replaced in it, and the result is tokenized with
 * special tokens parsed and none added; otherwise tok_encode_pair's layout: WordPiece's
 * [CLS] q [SEP] d [SEP], else llama.cpp's BOS q EOS SEP d EOS (each special as the vocabulary
 * has it and asks for it). Token types are left 0, as llama.cpp evaluates them.
 */
#ifndef ATTND_SERVER_RERANK_H
#define ATTND_SERVER_RERANK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/tokenizer.h"

typedef struct rerank_doc {
    const char *text;     /* borrowed from the body */
    size_t len;
} rerank_doc;

typedef struct rerank_request {
    const char *query;    /* borrowed from the body */
    size_t query_len;
    rerank_doc *docs;     /* (n_docs) owned array */
    int n_docs;
    int top_n;            /* 1..n_docs */
    bool return_documents;
    bool truncate;
    const char *model;    /* borrowed; "" when not given */
} rerank_request;

/* Validates a body; max_docs caps the documents (embed_max_inputs). Errors as embreq_parse.
 * out is freed with rerank_request_free whatever the status. */
attnd_status rerank_parse(const json_t *body, int max_docs, rerank_request *out, const char **param, attnd_err *err);
void rerank_request_free(rerank_request *r); /* accepts a zeroed request */

/* The tokens of one pair (see above): tmpl is the GGUF's rerank template or NULL. *ids is
 * malloc'd (caller frees). Errors: ATTND_ERR_NOMEM, the tokenizer's. */
attnd_status rerank_pair_tokens(const tokenizer *t, const char *tmpl, const char *q, size_t q_len, const char *d,
                                size_t d_len, int32_t **ids, size_t *n_ids, attnd_err *err);

/* The answer (new reference, NULL when out of memory): scores[i] is document i's; results sorted
 * by score, best first (ties by index), the top_n of them; n_tokens the pairs' tokens (usage);
 * model the name when the request gave none. */
json_t *rerank_answer(const rerank_request *r, const float *scores, long n_tokens, const char *model);

#endif
