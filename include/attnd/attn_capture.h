/*
 * attn_capture.h — recording the attention weights of one sequence as the engine computes them,
 * for inspection (`POST /v1/attention`, `attnd attention`).
 *
 * A capture holds, for the layers and heads asked for, one row per position p of its sequence:
 * the softmax weights of p's query over positions 0..p (the causal mask), or only the top_k
 * largest as (position, weight) pairs, heaviest first. The weights are the engine's own: it
 * scores each query against the sequence's KV cache with the kernels evaluation uses
 * (engine_set_attention_cb), so an F16 cache gives F16-rounded keys' weights.
 *
 * An encoder's capture (params.inputs) records the rows of one engine_embed call instead: every
 * token of an input attends to every token of the same input (and, on gemma-embedding's local
 * layers, the keys outside the symmetric window get weight 0), several inputs side by side.
 *
 * Cost: nothing while no capture is hooked. While one is, only the selected (entry, layer, head)
 * triples of captured sequences are computed (engine_set_attention_filter), serially, after each
 * layer's attention; other sequences in the same batch pay nothing for them.
 *
 *     int layer = 2;
 *     attn_capture_params p = {.layers = &layer, .n_layers = 1, .n_positions = n_prompt};
 *     attn_capture *c;
 *     attn_capture_create(&c, m, &p, &err);          // every head of layer 2, whole rows
 *     attn_capture_bind(c, seq);
 *     attn_hook h;
 *     attn_hook_install(&h, e, c, NULL, 0);          // every entry is c's sequence
 *     engine_generate(e, seq, prompt, n_prompt, &g, NULL, &n_out, NULL, &err);
 *     attn_hook_remove(&h);
 *     const float *w;
 *     int n = attn_capture_row(c, 0, 1, 5, &w, NULL); // head 1, position 5: w[0..n), n = 6
 *
 * A hybrid model's Gated DeltaNet layers (params.deltanet) mix positions by a recurrence, not a
 * softmax. Its output for value head h at position t is exactly o_t = sum_j w_tj v_j with
 *     w_tj = beta_j k_j . (A_{j+1} A_{j+2} ... A_t q_t) / sqrt(d_k),  A_i = e^{g_i} (I - beta_i k_i k_i^T)
 * (q, k L2-normalised after the conv, the state zero before position 0; A_i is symmetric). Those
 * rows are recorded for DeltaNet layers, one per value head: signed effective weights that do not
 * sum to 1, computed in double on the recording thread (O(p d_k) for row p) from each position's
 * k, beta and g kept in the capture. o_t is the recurrence's output before the gated RMSNorm.
 * Positions before the first one the capture saw (a session's reused prefix) are in the state,
 * not attributed: their weights are 0 (attn_capture_layer_from).
 *
 * Thread-safety: a capture is filled by the thread that runs engine_eval and must not be read
 * while a hook that names it is installed.
 */
#ifndef ATTND_ATTN_CAPTURE_H
#define ATTND_ATTN_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/model.h"

/* What a row holds: the softmax weights α_ij, or the norm-weighted ones, α_ij ‖W_O^h v_j‖
 * normalised over j (the size of what position j's value adds to the head's output, not only
 * where the head looks). */
typedef enum attn_weights {
    ATTN_WEIGHTS_ATTENTION = 0,
    ATTN_WEIGHTS_NORM = 1,
} attn_weights;

typedef struct attn_capture_params {
    const int *layers; /* (n_layers) layer indices, borrowed during the call; NULL or 0 = every layer */
    int n_layers;
    const int *heads;  /* (n_heads) query-head indices; NULL or 0 = every head */
    int n_heads;
    int top_k;         /* 0 = whole rows; k > 0 = the k largest weights of each row */
    int n_positions;   /* rows are kept for positions 0..n_positions-1 (prompt + generated) */
    attn_weights weights; /* what the rows hold (top_k selects among those) */
    int lens_k;        /* > 0: also the logit lens, the lens_k most probable tokens of each selected
                          layer's residual stream at each position, read through the final norm
                          and the output head; 0 = none */
    bool experts;      /* Mixture-of-Experts models: also the experts each selected layer routed
                          each position to, and their weights (engine_set_expert_cb) */
    const int *inputs; /* (n_inputs) an encoder's evaluation: engine_embed of n_inputs inputs of
                          inputs[i] tokens, in that order (borrowed during the call), hooked with
                          entries = NULL. Positions are the inputs' tokens one after another
                          (n_positions = their sum); row p holds p's weights over every token of
                          its own input (attention both ways), none of another's. Only weights
                          "attention", no logit lens, no experts. NULL = a decoder's one causal
                          sequence */
    int n_inputs;
    bool deltanet;     /* a hybrid model's DeltaNet layers: their effective rows (above), one per
                          value head; "heads" then index value heads on them. false: a hybrid
                          model is refused (ATTND_ERR_UNSUPPORTED) */
} attn_capture_params;

/*
 * Checks p against the model: layers and heads in range and not repeated, top_k >= 0,
 * 1 <= n_positions <= n_ctx, weights known, 0 <= lens_k <= n_vocab, experts only on a model that
 * has them; with inputs, each input 1..n_ctx tokens, n_positions their sum, and neither "norm"
 * weights nor the logit lens nor experts (ATTND_ERR_UNSUPPORTED: an encoder keeps no values to
 * weigh, and has no output head to read through). ATTND_ERR_INVALID with a message; *field (may
 * be NULL) names the parameter at fault ("layers", "heads", "top_k", "n_positions", "weights",
 * "logit_lens", "experts", "inputs"). On a hybrid model (params.deltanet), "heads" must be in
 * range for every selected layer (attention heads, DeltaNet value heads), and "norm" weights are
 * refused when a DeltaNet layer is selected (ATTND_ERR_UNSUPPORTED: such a layer caches no values).
 */
attnd_status attn_capture_check(const model_info *mi, const attn_capture_params *p, const char **field,
                                attnd_err *err);

/* How many weights a capture of p returns when every one of its n_positions rows is recorded
 * (each top_k pair counts as one): selected layers × heads × sum over rows of min(p + 1, k)
 * (with inputs: sum over inputs of n_i × min(n_i, k)). */
uint64_t attn_capture_count(const model_info *mi, const attn_capture_params *p);

/* The selected (layer, head) pairs: layers × heads, each DeltaNet layer with its value heads when
 * no heads are listed. */
uint64_t attn_capture_blocks(const model_info *mi, const attn_capture_params *p);

/* The weights a capture of p computes for its DeltaNet layers (whole rows, also with top_k: each
 * row is made whole before top_k picks from it), 0 without them: what bounds its time and the
 * keys it keeps. */
uint64_t attn_capture_dn_weights(const model_info *mi, const attn_capture_params *p);

typedef struct attn_capture attn_capture;

/* Checks p (as attn_capture_check) and allocates every row up front. ATTND_ERR_INVALID,
 * ATTND_ERR_NOMEM. */
attnd_status attn_capture_create(attn_capture **out, const model *m, const attn_capture_params *p, attnd_err *err);
void attn_capture_destroy(attn_capture *c); /* accepts NULL */

/* The sequence whose rows are recorded (borrowed; compared by address only). */
void attn_capture_bind(attn_capture *c, const kv_seq *seq);

int attn_capture_n_layers(const attn_capture *c); /* selected layers, in the order asked */
int attn_capture_layer(const attn_capture *c, int li); /* model layer index of the li-th */
int attn_capture_n_heads(const attn_capture *c); /* the most any selected layer has */
int attn_capture_head(const attn_capture *c, int hi);
/* The li-th selected layer's heads: hi = 0 .. attn_capture_layer_heads - 1 (all of
 * attn_capture_n_heads unless a hybrid model's layers differ and no heads were listed). */
int attn_capture_layer_heads(const attn_capture *c, int li);
/* Whether the li-th selected layer is a DeltaNet one (its rows effective weights), and the first
 * position whose contribution its rows attribute (0 unless a session's prefix was reused). */
bool attn_capture_layer_deltanet(const attn_capture *c, int li);
int attn_capture_layer_from(const attn_capture *c, int li);
bool attn_capture_hybrid(const attn_capture *c); /* the model has DeltaNet layers */
int attn_capture_top_k(const attn_capture *c);
attn_weights attn_capture_weights(const attn_capture *c);
int attn_capture_lens_k(const attn_capture *c); /* 0 = no logit lens */
int attn_capture_n_experts(const attn_capture *c); /* experts kept per row; 0 = none */
/* An encoder's capture (params.inputs): its number of inputs, 0 for a causal one; input i's
 * first position in *first, returning its token count. */
int attn_capture_n_inputs(const attn_capture *c);
int attn_capture_input(const attn_capture *c, int i, int *first);

/* The keys row pos is over: positions [*first, *first + n), returning n. Causal: 0..pos;
 * an encoder's: every token of pos's input. */
int attn_capture_keys(const attn_capture *c, int pos, int *first);

/* The recorded rows: positions [*first, *first + n) (every selected layer and head recorded for
 * each). Returns n; 0 (and *first = 0) when none. Positions before *first are those whose KV a
 * session reused: they were not evaluated, so they have no row. */
int attn_capture_rows(const attn_capture *c, int *first);

/* Row of position pos for the li-th selected layer and hi-th selected head (pos among the
 * recorded rows). Whole rows: *w = weights over the row's keys (attn_capture_keys: positions
 * 0..pos, or an encoder's input), returns their number, *ix = NULL.
 * top_k: *w the weights and *ix (may be NULL) their positions (absolute, as the keys'),
 * heaviest first (ties: lower position first; a DeltaNet layer's: the largest |w| first), returns
 * min(keys, k). Borrowed, valid until attn_capture_destroy. */
int attn_capture_row(const attn_capture *c, int li, int hi, int pos, const float **w, const int32_t **ix);

/* Logit lens of the li-th selected layer at position pos (among the recorded rows): *p the
 * probabilities of the most probable tokens, *ids (may be NULL) their ids, most probable first
 * (ties: lower id first). Returns min(lens_k, n_vocab); borrowed, valid until destroy. */
int attn_capture_lens(const attn_capture *c, int li, int pos, const float **p, const int32_t **ids);

/* The experts of the li-th selected layer at position pos (among the recorded rows), when the
 * capture has them (attn_capture_params.experts): *ids the n_expert_used experts, most probable
 * first, *w (may be NULL) their weights in the layer's sum. Returns n_expert_used, 0 without
 * experts; borrowed, valid until destroy. */
int attn_capture_experts(const attn_capture *c, int li, int pos, const int32_t **ids, const float **w);

/*
 * Captures form a list (a capture is in at most one), for a caller that runs several sequences:
 * link binds c to seq and adds it; unlink removes it (no-op when c is not in the list).
 */
void attn_capture_link(attn_capture **list, attn_capture *c, const kv_seq *seq);
void attn_capture_unlink(attn_capture **list, attn_capture *c);

/*
 * Hooking captures into an engine: the next engine_eval calls record into the captures of list.
 * entries/n: the batch those calls evaluate, so that each entry goes to the capture bound to its
 * sequence (entries of other sequences cost nothing). entries = NULL when every entry belongs to
 * list itself (one capture), as around engine_generate. h is caller storage; list and entries
 * are borrowed until attn_hook_remove, which clears the engine's callback.
 */
typedef struct attn_hook {
    engine *e;
    attn_capture *list;
    const batch_entry *entries;
    int n;
} attn_hook;

void attn_hook_install(attn_hook *h, engine *e, attn_capture *list, const batch_entry *entries, int n);
void attn_hook_remove(attn_hook *h); /* no-op on a zeroed hook */

/* engine_eval(e, entries, n, logits, err), with list hooked for this call when one of the
 * entries belongs to a capture of list; a plain engine_eval otherwise (list may be NULL). */
attnd_status attn_capture_eval(attn_capture *list, engine *e, const batch_entry *entries, int n, float *logits,
                               attnd_err *err);

#endif /* ATTND_ATTN_CAPTURE_H */
