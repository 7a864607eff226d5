/*
 * generate_loop.c — the single-sequence generation loop (engine_generate, engine_argmax in
 * attnd/engine.h): prefill, then decode one sequence to the end. Not to be confused with gen.c,
 * the per-token pipeline (logits -> token -> text). Shared by `attnd generate`, the benchmark and
 * anything else that drives one sequence at a time; the server batches many sequences itself with
 * engine_eval.
 */
#include <stdlib.h>

#include "attnd/engine.h"

int32_t engine_argmax(const float *logits, int n_vocab) {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i; /* strict: ties keep the lower id */
    return best;
}

attnd_status engine_generate(engine *e, kv_seq *s, const int32_t *prompt, int n_prompt, const engine_gen *g,
                             int32_t *out, int *n_out, engine_timings *timings, attnd_err *err) {
    *n_out = 0;
    engine_timings tm = {0};
    if (timings) *timings = tm;
    if (n_prompt < 1 || !prompt)
        return attnd_fail(err, ATTND_ERR_INVALID, "generation needs at least one prompt token");
    if (g->n_predict < 0) return attnd_fail(err, ATTND_ERR_INVALID, "n_predict %d is negative", g->n_predict);
    int n_vocab = model_info_get(engine_model(e))->n_vocab;
    int max_batch = engine_max_batch(e);
    int chunk_cap = n_prompt < max_batch ? n_prompt : max_batch;
    batch_entry *b = malloc(sizeof(*b) * (size_t)chunk_cap);
    float *logits = malloc(sizeof(float) * (size_t)n_vocab); /* (n_vocab) of the newest position */
    attnd_status st = ATTND_OK;
    if (!b || !logits) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory starting generation");
        goto done;
    }

    double t0 = attnd_now_s() * 1e3;
    for (int done = 0; done < n_prompt;) {
        int c = n_prompt - done < max_batch ? n_prompt - done : max_batch;
        int pos0 = kv_seq_len(s);
        for (int i = 0; i < c; i++)
            b[i] = (batch_entry){s, prompt[done + i], pos0 + i, done + i == n_prompt - 1};
        if ((st = engine_eval(e, b, c, logits, err))) goto done;
        done += c;
    }
    tm.prefill_ms = attnd_now_s() * 1e3 - t0;
    tm.n_prefill = n_prompt;

    t0 = attnd_now_s() * 1e3;
    for (int i = 0; i < g->n_predict; i++) {
        int32_t id = g->pick ? g->pick(g->pick_user, logits) : engine_argmax(logits, n_vocab);
        if (id < 0 || id >= n_vocab) {
            st = attnd_fail(err, ATTND_ERR_INVALID, "the sampler picked token %d, outside 0..%d", id, n_vocab - 1);
            goto done;
        }
        if (out) out[i] = id;
        *n_out = i + 1;
        if (g->on_token && !g->on_token(g->token_user, id)) break;
        if (i + 1 == g->n_predict) break; /* the last token's logits are never needed */
        b[0] = (batch_entry){s, id, kv_seq_len(s), true};
        if ((st = engine_eval(e, b, 1, logits, err))) goto done;
        tm.n_decode++;
    }
    tm.decode_ms = attnd_now_s() * 1e3 - t0;

done:
    if (timings) *timings = tm;
    free(b);
    free(logits);
    return st;
}
