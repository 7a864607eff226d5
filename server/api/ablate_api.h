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

#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/model.h"

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

#endif
