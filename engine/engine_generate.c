/*
 * engine_generate.c — engine_generate (attnd/engine.h): prefill, then decode one sequence to the
 * end, verifying speculative drafts (attnd/spec.h) when asked. Shared by `attnd generate`, the
 * benchmark and anything else that drives one sequence at a time; the server batches many
 * sequences itself with engine_eval, and turns logits into text with gen.c's pipeline.
 */
#include <stdlib.h>

#include "attnd/engine.h"
#include "attnd/sampler.h"
#include "attnd/spec.h"

/* The decode phase's state: the logits rows of the last batch (row 0: after the unevaluated
 * token; row r: after its r-th draft), and the drafts they verify. */
typedef struct gen_loop {
    engine *e;
    kv_seq *s;
    const engine_gen *g;
    int n_vocab, max_rows;
    float *logits;     /* (max_rows, n_vocab) */
    batch_entry *b;    /* (max_rows) */
    int32_t draft[SPEC_MAX_DRAFT];
    int n_draft;
} gen_loop;

/* Drafts continuing the history and evaluates id and them as one batch (one row each). A draft
 * that fails (the draft's KV budget) only turns speculation off for this step. */
static attnd_status eval_next(gen_loop *L, int32_t id, int room, engine_timings *tm, attnd_err *err) {
    L->n_draft = 0;
    int max = L->max_rows - 1 < room ? L->max_rows - 1 : room;
    if (L->g->spec && max > 0) {
        attnd_err ignored;
        if (spec_draft(L->g->spec, NULL, max, L->draft, &L->n_draft, &ignored) != ATTND_OK) L->n_draft = 0;
    }
    /* a recurrent state keeps its state after each drafted position, or nothing is drafted */
    if (L->n_draft && !kv_seq_keep_steps(L->s, L->n_draft)) L->n_draft = 0;
    int pos = kv_seq_len(L->s);
    L->b[0] = (batch_entry){L->s, id, pos, true};
    for (int i = 0; i < L->n_draft; i++) L->b[i + 1] = (batch_entry){L->s, L->draft[i], pos + 1 + i, true};
    tm->n_drafted += L->n_draft;
    double t0 = attnd_now_s();
    attnd_status st = engine_eval(L->e, L->b, L->n_draft + 1, L->logits, err);
    if (L->g->spec && st == ATTND_OK) spec_time(L->g->spec, L->n_draft + 1, (attnd_now_s() - t0) * 1e3);
    return st;
}

/* Picks from the rows in order while each pick equals the next draft; reports every pick. Sets
 * *stop when generation ends (on_token said so, or n_predict reached) and *last to the newest
 * pick; truncates the sequence to the positions kept. */
static attnd_status take_rows(gen_loop *L, int32_t *out, int *n_out, bool *stop, int32_t *last,
                              engine_timings *tm, attnd_err *err) {
    int pos0 = kv_seq_len(L->s) - L->n_draft - 1, r = 0;
    for (;; r++) {
        const float *row = L->logits + (size_t)r * L->n_vocab;
        int32_t id = L->g->pick ? L->g->pick(L->g->pick_user, row) : sampler_argmax(row, L->n_vocab);
        if (id < 0 || id >= L->n_vocab)
            return attnd_fail(err, ATTND_ERR_INVALID, "the sampler picked token %d, outside 0..%d", id, L->n_vocab - 1);
        if (out) out[*n_out] = id;
        (*n_out)++;
        *last = id;
        attnd_status st = L->g->spec ? spec_push(L->g->spec, &id, 1, err) : ATTND_OK;
        if (st != ATTND_OK) return st;
        bool agree = r < L->n_draft && id == L->draft[r];
        tm->n_accepted += agree;
        if ((L->g->on_token && !L->g->on_token(L->g->token_user, id)) || *n_out == L->g->n_predict) *stop = true;
        if (*stop || !agree) break;
    }
    if (L->g->spec) spec_count(L->g->spec, L->n_draft, r + (r < L->n_draft && *last == L->draft[r]));
    kv_seq_truncate(L->s, pos0 + r + 1); /* the evaluated token and the r drafts picked after it */
    if (kv_seq_len(L->s) != pos0 + r + 1)
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "the KV cache could not roll back a rejected draft");
    return ATTND_OK;
}

/* The decode phase: logits already hold the prompt's last row. */
static attnd_status decode(gen_loop *L, int32_t *out, int *n_out, engine_timings *tm, attnd_err *err) {
    int n_ctx = model_info_get(engine_model(L->e))->n_ctx;
    L->n_draft = 0;
    for (bool stop = false;;) {
        int32_t id = -1;
        attnd_status st = take_rows(L, out, n_out, &stop, &id, tm, err);
        if (st != ATTND_OK || stop || L->g->n_predict == 0) return st;
        /* drafts beyond the tokens still wanted, or past the context, are never useful */
        int room = L->g->n_predict - *n_out - 1, ctx_room = n_ctx - kv_seq_len(L->s) - 1;
        if ((st = eval_next(L, id, room < ctx_room ? room : ctx_room, tm, err))) return st;
    }
}

attnd_status engine_generate(engine *e, kv_seq *s, const int32_t *prompt, int n_prompt, const engine_gen *g,
                             int32_t *out, int *n_out, engine_timings *timings, attnd_err *err) {
    *n_out = 0;
    engine_timings tm = {0};
    if (timings) *timings = tm;
    if (n_prompt < 1 || !prompt)
        return attnd_fail(err, ATTND_ERR_INVALID, "generation needs at least one prompt token");
    if (g->n_predict < 0) return attnd_fail(err, ATTND_ERR_INVALID, "n_predict %d is negative", g->n_predict);
    engine_gen gg = *g;
    if (gg.spec && !spec_supported(engine_model(e))) gg.spec = NULL;
    int n_vocab = model_info_get(engine_model(e))->n_vocab;
    int max_batch = engine_max_batch(e);
    int rows = gg.spec ? (SPEC_MAX_DRAFT + 1 < max_batch ? SPEC_MAX_DRAFT + 1 : max_batch) : 1;
    int chunk_cap = n_prompt < max_batch ? n_prompt : max_batch;
    gen_loop L = {.e = e, .s = s, .g = &gg, .n_vocab = n_vocab, .max_rows = rows};
    L.b = malloc(sizeof(*L.b) * (size_t)(chunk_cap > rows ? chunk_cap : rows));
    L.logits = malloc(sizeof(float) * (size_t)n_vocab * (size_t)rows);
    attnd_status st = ATTND_OK;
    if (!L.b || !L.logits) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory starting generation");
        goto done;
    }
    if (gg.spec) {
        spec_reset(gg.spec);
        if ((st = spec_push(gg.spec, prompt, n_prompt, err))) goto done;
    }

    double t0 = attnd_now_s() * 1e3;
    for (int done = 0; done < n_prompt;) {
        int c = n_prompt - done < max_batch ? n_prompt - done : max_batch;
        int pos0 = kv_seq_len(s);
        for (int i = 0; i < c; i++)
            L.b[i] = (batch_entry){s, prompt[done + i], pos0 + i, done + i == n_prompt - 1};
        if ((st = engine_eval(e, L.b, c, L.logits, err))) goto done;
        done += c;
    }
    tm.prefill_ms = attnd_now_s() * 1e3 - t0;
    tm.n_prefill = n_prompt;

    t0 = attnd_now_s() * 1e3;
    if (g->n_predict > 0) st = decode(&L, out, n_out, &tm, err);
    tm.decode_ms = attnd_now_s() * 1e3 - t0;
    tm.n_decode = *n_out > 0 ? *n_out - 1 : 0;

done:
    if (gg.spec) kv_seq_keep_steps(s, 0); /* the room the verifies kept states in */
    if (timings) *timings = tm;
    free(L.b);
    free(L.logits);
    return st;
}
