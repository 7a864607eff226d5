/*
 * heads_api.h — the JSON of head roles (GET /v1/heads, `attnd heads --json`) and the probe
 * parameters both use (attnd/head_roles.h). Pure functions of the tokenizer and the scores.
 *
 * Answer: {"object": "heads", "model", "n_layer", "n_head",
 *          "probe": {"length", "probes", "window", "seed"},
 *          "thresholds": {"previous_token", "induction", "sink", "local"},
 *          "heads": [{"layer", "head", "previous_token", "induction", "sink", "local",
 *                     "labels": [...]}, ...], "wall_ms"}
 */
#ifndef ATTND_SERVER_HEADS_API_H
#define ATTND_SERVER_HEADS_API_H

#include <jansson.h>

#include "attnd/head_roles.h"
#include "attnd/tokenizer.h"

#define HEADS_API_SEED 20240601u /* the probes are the same for every run on one model file */

/* The probe parameters for tok's model: candidates = every token that is not a control token
 * (malloc'd into *cand, the caller frees), BOS as the model asks. false: out of memory. */
bool heads_api_params(const tokenizer *tok, head_roles_params *p, int32_t **cand);

/* The answer above (new reference; NULL when out of memory). */
json_t *heads_api_json(const char *model_name, const head_roles *hr, const head_roles_params *p);

#endif
