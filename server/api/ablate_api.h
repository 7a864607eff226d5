/*
 * ablate_api.h — the "ablate" request field (POST /v1/completions, /v1/chat/completions,
 * /v1/attention): which attention heads to switch off or scale while this request's sequence is
 * evaluated (engine_seq_ablate, attnd/engine.h). Pure JSON, no HTTP; fuzzed by
 * tools/fuzz/fuzz_ablate.c.
 *
 *   "ablate": [{"layer": L, "head": H, "mode": "zero" | "mean", "scale": S}, ...]
 *
 * mode (default "zero"): the head's output before W_O becomes base + S (o - base), base 0 or the
 * head's causal mean output over the sequence; scale S (default 0, |S| <= 1e6) removes the head
 * at 0 and leaves it alone at 1. null or [] = no ablation. Each (layer, head) at most once.
 */
#ifndef ATTND_SERVER_ABLATE_API_H
#define ATTND_SERVER_ABLATE_API_H

#include <jansson.h>

#include "attnd/ablate_sweep.h"
#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"

#define ABLATE_API_MAX 8192 /* entries one request may list */

/*
 * Reads body's "ablate" (borrowed) into *heads (malloc'd, *n entries; NULL and 0 when absent,
 * null or empty). Types, modes, scales and repeats are checked here; ranges against a model by
 * ablate_api_check. ATTND_ERR_INVALID with *param = "ablate" and a message naming the entry and
 * its key ("ablate[2].mode ..."); ATTND_ERR_NOMEM. Nothing to free after an error.
 */
attnd_status ablate_api_parse(const json_t *body, engine_ablation_head **heads, int *n, const char **param,
                              attnd_err *err);

/* Layers and heads of heads[0..n) against the model (engine_ablation_check): ATTND_ERR_INVALID
 * naming the entry and the model's range. */
attnd_status ablate_api_check(const model_info *mi, const engine_ablation_head *heads, int n, attnd_err *err);

/* [{"layer", "head", "mode", "scale"}, ...] of heads[0..n), as the response echoes them (new
 * reference; NULL when out of memory). */
json_t *ablate_api_json(const engine_ablation_head *heads, int n);

// ---- "measure": "ablation" on /v1/attention (attnd/ablate_sweep.h) ------------------------

/*
 * Fields: "measure": "ablation"; "target_position": p (1..n_prompt-1: prompt token p, as
 * predicted after position p - 1; later positions are not evaluated) or "target_token": an id
 * or a string: the token spelled exactly so (" States"), else the text if it encodes to one
 * token (predicted after the whole prompt); neither = the model's own
 * most probable next token. "ablate_from": the first ablated position (0 = every position;
 * default the measured one), "ablate_mode": "zero" | "mean", "ablate_scale" (default 0).
 */
typedef struct ablate_measure {
    bool on;                   /* "measure": "ablation" */
    int target_position;       /* -1 = none */
    const json_t *target_token; /* borrowed from the body; NULL = none */
    int from;                  /* -1 = the measured position */
    engine_ablate_mode mode;
    float scale;
} ablate_measure;

/* Reads the fields above from body (borrowed); out->on false when "measure" is absent (then any
 * other of these fields is a 400 naming it). ATTND_ERR_INVALID with *param = the field. */
attnd_status ablate_api_parse_measure(const json_t *body, ablate_measure *out, const char **param, attnd_err *err);

/*
 * The sweep's parameters for the prompt ids[0..n): the tokens evaluated (n, or target_position),
 * the target (target_token encoded with tok). ATTND_ERR_INVALID with *param
 * ("target_position", "target_token", "ablate_from").
 */
attnd_status ablate_api_sweep_params(const ablate_measure *m, const tokenizer *tok, const int32_t *ids, int n,
                                     ablate_sweep_params *p, const char **param, attnd_err *err);

/* The answer: {"object": "attention.ablation", "model", "n_layer", "n_head", "n_prompt",
 * "tokens" (the evaluated ones), "target": {"position" (null after the prompt), "id", "text",
 * "logprob"}, "predicted": {"id", "text"}, "ablate_from", "ablate_mode", "ablate_scale",
 * "heads": [{"layer", "head", "delta_logprob", "kl", "top": {"id", "text"}}, ...],
 * "cost": {"wall_ms", "sequences", "batch_size", "batches", "tokens_evaluated"}} (new
 * reference; NULL when out of memory). */
json_t *ablate_api_sweep_json(const char *model_name, const tokenizer *tok, const ablate_sweep_params *p,
                              int n_prompt, int target_position, const ablate_sweep_result *r);

#endif
