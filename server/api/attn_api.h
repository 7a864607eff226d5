/*
 * attn_api.h — the JSON shapes of attention inspection (`POST /v1/attention`, and
 * `attnd attention --json`): reading the selection fields of a request and building the response
 * from an attn_capture. Pure functions of JSON and the model's sizes (no HTTP), unit-tested.
 *
 * Request fields read here: "layers" and "heads" (lists of indices, or one index; absent or null =
 * all), "top_k" (0 or absent = whole rows), "weights" ("attention", the default, or "norm":
 * α_ij ‖W_O^h v_j‖ normalised over j), "logit_lens" (k > 0: the k most probable tokens of each
 * selected layer's residual stream at each position; 0 or absent = none), "experts" (true: on a
 * Mixture-of-Experts model, the experts each selected layer routed each position to and their
 * weights; a dense model refuses it). The prompt, max_tokens and the sampling fields are
 * read by oai_parse as for completions ("top_k" means the attention cut on this endpoint, not
 * top-k sampling).
 *
 * Response:
 *   {"object": "attention", "model": NAME, "n_layer", "n_head" (the model's), "n_prompt": N,
 *    "first_row": F, "weights": "attention" | "norm", "causal": true | false,
 *    "tokens": [{"id", "text"}, ...],                      every position, prompt then generated
 *    "inputs": [{"first", "n_tokens"}, ...],               an encoder's only (causal false): each
 *                                                          input's span of tokens
 *    "logit_lens": [{"layer", "top": [[[id, p], ...], ...]}, ...],   only when asked: row i of
 *                                                          top is position F + i, most probable first
 *    "experts": [{"layer", "routes": [[[expert, weight], ...], ...]}, ...],   only when asked: row i
 *                                                          of routes is position F + i, the
 *                                                          n_expert_used experts by weight
 *    "attention": [{"layer", "head", "weights": [row, ...]}, ...]}
 * where row i of weights belongs to position F + i and holds its weights over positions
 * 0..F+i (summing to 1), or with top_k the [position, weight] pairs of the k largest, heaviest
 * first. F > 0 only when a session's cached KV was reused (those positions were not evaluated).
 * An encoder's capture (attn_capture_params.inputs): row p holds its weights over its own input's
 * tokens only (first..first+n_tokens-1), not padded; top_k positions index tokens.
 * The last generated token is never fed back into the model, so it has no row.
 * A hybrid model (Gated DeltaNet layers, attn_capture.h) adds "n_value_heads" and
 * "full_attention_interval" to the head and "kind" to every entry: "attention" (softmax rows, as
 * above) or "deltanet" with "effective": true and "from": J, whose rows are the signed effective
 * weights w_tj (o_t = sum_j w_tj v_j exactly; they may be negative and do not sum to 1; top_k
 * picks the largest |w|), one entry per value head; positions before J (a reused prefix) weigh 0.
 */
#ifndef ATTND_SERVER_ATTN_API_H
#define ATTND_SERVER_ATTN_API_H

#include <jansson.h>
#include <stdint.h>

#include "attnd/attn_capture.h"
#include "attnd/common.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"

/* Significant digits of the weights in JSON text: float32 weights carry about 7; 6 keeps
 * responses small and is far inside the 1e-3 the weights are promised to. */
#define ATTN_API_DIGITS 6

typedef struct attn_api_request {
    int *layers; /* (n_layers) owned; NULL = every layer */
    int n_layers;
    int *heads;  /* (n_heads) owned; NULL = every head */
    int n_heads;
    int top_k;   /* 0 = whole rows */
    attn_weights weights;
    int lens_k;  /* 0 = no logit lens */
    bool experts; /* the experts of each selected layer and position */
} attn_api_request;

/*
 * Reads layers, heads, top_k, weights, logit_lens and experts from body (borrowed). Types only: ranges are checked by
 * attn_api_check against the model. ATTND_ERR_INVALID with *param = the field; out must be freed
 * with attn_api_request_free, also after an error.
 */
attnd_status attn_api_parse(const json_t *body, attn_api_request *out, const char **param, attnd_err *err);
void attn_api_request_free(attn_api_request *r);

/* The capture parameters of r for n_positions positions (arrays borrowed from r). */
attn_capture_params attn_api_params(const attn_api_request *r, int n_positions);

/*
 * Checks p against the model (layer or head out of range: the message names the field and the
 * model's range), against max_bytes, the most bytes one answer may take (attn_api_bytes; 0 = no
 * cap; the message names attention_max_bytes), and against max_values, the most weights one
 * response may carry (0 = no cap): a larger ask is refused with a message giving the count, the
 * cap and how to narrow it; max_values also bounds attn_capture_dn_weights (a DeltaNet layer's
 * rows are made whole before top_k picks).
 * ATTND_ERR_INVALID with *param = "layers", "heads", "top_k", "logit_lens", "experts" (a dense
 * model), or "max_tokens"/"prompt" when
 * the context is exceeded.
 */
attnd_status attn_api_check(const model_info *mi, const attn_capture_params *p, uint64_t max_values,
                            uint64_t max_bytes, const char **param, attnd_err *err);
/* The most bytes of JSON text the answer for p can take (weights at their longest, rows, heads
 * and the token list): what max_bytes is checked against. */
uint64_t attn_api_bytes(const model_info *mi, const attn_capture_params *p);

/* [{"id", "text"}, ...] for ids[0..n): text is the token's own bytes (control tokens rendered,
 * invalid UTF-8 as U+FFFD). New reference; NULL when out of memory. */
json_t *attn_api_tokens(const tokenizer *tok, const int32_t *ids, int n);

/*
 * The response object described above (new reference; NULL when out of memory): ids[0..n_ids)
 * are every position (prompt then generated), c the capture filled while they were evaluated.
 * The caller may add fields (generated text, usage) before sending it.
 */
json_t *attn_api_response(const char *model_name, const model_info *mi, const tokenizer *tok, const int32_t *ids,
                          int n_ids, int n_prompt, const attn_capture *c);

/* body as compact JSON text with ATTN_API_DIGITS digits per weight (malloc'd; NULL when out of
 * memory). */
char *attn_api_dump(const json_t *body);

/* attn_api_response's object without "attention" (new reference; NULL when out of memory), for
 * attn_api_dump_with. */
json_t *attn_api_head(const char *model_name, const model_info *mi, const tokenizer *tok, const int32_t *ids,
                      int n_ids, int n_prompt, const attn_capture *c);
/* The text of head (borrowed; the caller may have added fields) with "attention" written last,
 * straight from the capture: the same JSON as attn_api_dump of attn_api_response, without a
 * JSON node per weight (a million weights as nodes took ~100 MB, the text ~10). malloc'd, *len
 * bytes; NULL when out of memory. */
char *attn_api_dump_with(const json_t *head, const attn_capture *c, size_t *len);

#endif
