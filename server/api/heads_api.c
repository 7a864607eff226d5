/*
 * heads_api.c — head roles as JSON (see heads_api.h).
 */
#include "heads_api.h"

#include <stdlib.h>

bool heads_api_params(const tokenizer *tok, head_roles_params *p, int32_t **cand) {
    int V = tok_n_vocab(tok), n = 0;
    *cand = malloc(sizeof(int32_t) * (size_t)(V > 0 ? V : 1));
    if (!*cand) return false;
    for (int32_t v = 0; v < V; v++)
        if (!tok_is_control(tok, v)) (*cand)[n++] = v;
    *p = (head_roles_params){.candidates = *cand, .n_candidates = n, .bos = tok_add_bos(tok) ? tok_bos(tok) : -1,
                             .seed = HEADS_API_SEED};
    return true;
}

/* One head's object. */
static json_t *head_json(const head_roles *hr, int c) {
    const head_scores *s = &hr->scores[c];
    const char *lab[4];
    int n = head_roles_labels(s, lab);
    json_t *labels = json_array();
    for (int i = 0; labels && i < n; i++)
        if (json_array_append_new(labels, json_string(lab[i]))) json_decref(labels), labels = NULL;
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:o}", "layer", (json_int_t)(c / hr->n_head), "head",
                     (json_int_t)(c % hr->n_head), "previous_token", s->previous_token, "induction", s->induction,
                     "sink", s->sink, "local", s->local, "labels", labels);
}

json_t *heads_api_json(const char *model_name, const head_roles *hr, const head_roles_params *p) {
    json_t *heads = json_array();
    for (int c = 0; heads && c < hr->n_layer * hr->n_head; c++) /* a hybrid model: its attention layers' */
        if (head_roles_scored(hr, c / hr->n_head) && json_array_append_new(heads, head_json(hr, c)))
            json_decref(heads), heads = NULL;
    json_t *probe = json_pack("{s:i, s:i, s:i, s:I}", "length", (json_int_t)hr->length, "probes",
                              (json_int_t)hr->n_probes, "window", (json_int_t)hr->window, "seed", (json_int_t)p->seed);
    json_t *thr = json_pack("{s:f, s:f, s:f, s:f}", "previous_token", HEAD_ROLE_PREVIOUS, "induction",
                            HEAD_ROLE_INDUCTION, "sink", HEAD_ROLE_SINK, "local", HEAD_ROLE_LOCAL);
    return json_pack("{s:s, s:s, s:i, s:i, s:o, s:o, s:o, s:f}", "object", "heads", "model",
                     model_name ? model_name : "", "n_layer", (json_int_t)hr->n_layer, "n_head",
                     (json_int_t)hr->n_head, "probe", probe, "thresholds", thr, "heads", heads, "wall_ms", hr->wall_ms);
}
