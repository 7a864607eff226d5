/*
 * kv_state.c — checkpoints of a sequence's recurrent state (kv_layout.h; public part in kv.h).
 *
 * A Gated DeltaNet state holds every position up to the sequence's length and cannot be cut
 * back, so without checkpoints a truncation (an edited or regenerated last turn, a session
 * restored to an earlier point, another prompt sharing a prefix) recomputes from 0. With them it
 * goes back to the newest copy at or below its target and recomputes only the rest.
 *
 * Which lengths: the engine takes one per sequence per batch, inside the batch, when the batch
 * reaches a length asked for (kv_seq_checkpoint_at: the scheduler asks for a prompt's end) or,
 * else, a multiple of the interval; a caller may also copy the state at the sequence's length
 * (kv_seq_checkpoint: the end of a turn). How many: at most ckpt_max per sequence. When a new one
 * would pass that, one old one goes: the one whose removal leaves the smallest gap relative to its
 * distance from the new one, so recent checkpoints stay dense and older ones thin out roughly
 * geometrically (a truncation near the end, the usual case, loses little; one far back still
 * finds a checkpoint within a span proportional to how far back it goes).
 *
 * Memory: each checkpoint is state_bytes, charged to the pool's budget when taken (none is taken
 * when the budget has no room: checkpoints are best effort) and counted once however many forks
 * share it. kv_pool_bytes_for counts ckpt_max of them per sequence, so admission reserves them.
 */
#include "kv_layout.h"

#include <stdlib.h>
#include <string.h>

#include "deltanet.h"
#include "model_internal.h"

attnd_status kv_pool_set_checkpoints(kv_pool *p, int max, int interval, attnd_err *err) {
    if (max < 0 || max > KV_CKPT_MAX || interval < 0)
        return attnd_fail(err, ATTND_ERR_INVALID, "state checkpoints: %d per sequence (0..%d), interval %d (>= 0)", max,
                          KV_CKPT_MAX, interval);
    if (p->n_seqs) return attnd_fail(err, ATTND_ERR_INVALID, "state checkpoints are set before any sequence exists");
    p->ckpt_max = p->state_bytes ? max : 0;
    p->ckpt_interval = interval;
    return ATTND_OK;
}

int kv_pool_checkpoints(const kv_pool *p) { return p->ckpt_max; }

size_t kv_pool_checkpoint_bytes(const kv_pool *p) { return p->ckpt_bytes; }

/* Drops one holder of c (pool lock held); the last one uncharges it and hands it to *gone (freed
 * by the caller outside the lock). */
static void ckpt_unref_locked(kv_pool *p, kv_ckpt *c, kv_ckpt **gone, int *n_gone) {
    ATTND_ASSERT(c->refs > 0);
    if (--c->refs > 0) return;
    p->used -= p->state_bytes;
    p->ckpt_bytes -= p->state_bytes;
    gone[(*n_gone)++] = c;
}

static void ckpt_free_all(kv_ckpt **gone, int n) {
    for (int i = 0; i < n; i++) free(gone[i]->state), free(gone[i]);
}

/* Removes s->ckpts[i] (pool lock held). */
static void ckpt_remove_locked(kv_seq *s, int i, kv_ckpt **gone, int *n_gone) {
    ckpt_unref_locked(s->pool, s->ckpts[i], gone, n_gone);
    memmove(s->ckpts + i, s->ckpts + i + 1, sizeof(*s->ckpts) * (size_t)(s->n_ckpts - i - 1));
    s->n_ckpts--;
}

/* Which checkpoint goes when one at new_pos (past all of them) would exceed ckpt_max: the one
 * whose neighbours' gap, over its distance from new_pos, is smallest. */
static int ckpt_victim(const kv_seq *s, int new_pos) {
    int best = 0;
    double best_cost = 0;
    for (int i = 0; i < s->n_ckpts; i++) {
        int prev = i ? s->ckpts[i - 1]->pos : 0, next = i + 1 < s->n_ckpts ? s->ckpts[i + 1]->pos : new_pos;
        double cost = (double)(next - prev) / (new_pos - s->ckpts[i]->pos);
        if (i == 0 || cost < best_cost) best = i, best_cost = cost;
    }
    return best;
}

/* A new, uncommitted checkpoint of s at pos, charged to the budget, after making room for it
 * among s's (one old one dropped when s holds ckpt_max); NULL when out of budget or memory. */
static kv_ckpt *ckpt_take(kv_seq *s, int pos) {
    kv_pool *p = s->pool;
    kv_ckpt *gone[1];
    int n_gone = 0;
    pthread_mutex_lock(&p->lock);
    if (s->n_ckpts >= p->ckpt_max) ckpt_remove_locked(s, ckpt_victim(s, pos), gone, &n_gone);
    bool room = p->state_bytes <= p->budget - p->used;
    if (room) p->used += p->state_bytes, p->ckpt_bytes += p->state_bytes;
    pthread_mutex_unlock(&p->lock);
    ckpt_free_all(gone, n_gone);
    if (!room) return NULL;
    kv_ckpt *c = malloc(sizeof(*c));
    float *state = c ? malloc(p->state_bytes) : NULL;
    if (state) {
        *c = (kv_ckpt){.pos = pos, .refs = 1, .state = state};
        return c;
    }
    free(c);
    pthread_mutex_lock(&p->lock);
    p->used -= p->state_bytes, p->ckpt_bytes -= p->state_bytes;
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Puts c (taken by ckpt_take for s) after s's checkpoints. */
static void ckpt_append(kv_seq *s, kv_ckpt *c) {
    ATTND_ASSERT(s->n_ckpts < s->pool->ckpt_max);
    ATTND_ASSERT(!s->n_ckpts || s->ckpts[s->n_ckpts - 1]->pos < c->pos);
    s->ckpts[s->n_ckpts++] = c;
}

static void ckpt_discard(kv_pool *p, kv_ckpt *c) {
    kv_ckpt *gone[1];
    int n_gone = 0;
    pthread_mutex_lock(&p->lock);
    ckpt_unref_locked(p, c, gone, &n_gone);
    pthread_mutex_unlock(&p->lock);
    ckpt_free_all(gone, n_gone);
}

/* Whether s would take a checkpoint at pos: checkpoints on, a state, and none there yet. */
static bool ckpt_wanted(const kv_seq *s, int pos) {
    return s->pool->ckpt_max && s->state && pos > 0 && (!s->n_ckpts || s->ckpts[s->n_ckpts - 1]->pos < pos);
}

int kv_ckpt_begin(kv_seq *s) {
    const kv_pool *p = s->pool;
    s->ckpt_new = NULL;
    int lo = s->len, hi = s->len + s->pending, at = 0;
    if (s->ckpt_want > lo && s->ckpt_want <= hi) at = s->ckpt_want;
    else if (p->ckpt_interval && hi / p->ckpt_interval * p->ckpt_interval > lo) at = hi / p->ckpt_interval * p->ckpt_interval;
    if (!at || !ckpt_wanted(s, at)) return -1;
    s->ckpt_new = ckpt_take(s, at);
    return s->ckpt_new ? at - 1 - lo : -1;
}

void kv_ckpt_commit(kv_seq *s, bool done) {
    if (done && s->ckpt_want && s->ckpt_want <= s->len) s->ckpt_want = 0;
    kv_ckpt *c = s->ckpt_new;
    s->ckpt_new = NULL;
    if (!done) s->steps_n = 0; /* the states kept were of a batch given up */
    if (!c) return;
    if (done) ckpt_append(s, c);
    else ckpt_discard(s->pool, c);
}

bool kv_seq_checkpoint(kv_seq *s) {
    if (!ckpt_wanted(s, s->len)) return false;
    kv_ckpt *c = ckpt_take(s, s->len);
    if (!c) return false;
    memcpy(c->state, s->state, s->pool->state_bytes);
    ckpt_append(s, c);
    return true;
}

void kv_seq_checkpoint_at(kv_seq *s, int pos) { s->ckpt_want = pos > s->len ? pos : 0; }

int kv_seq_checkpoints(const kv_seq *s, int *pos, int max) {
    for (int i = 0; i < s->n_ckpts && i < max; i++) pos[i] = s->ckpts[i]->pos;
    return s->n_ckpts;
}

int kv_state_rewind(kv_seq *s, int n) {
    kv_pool *p = s->pool;
    kv_ckpt *gone[KV_CKPT_MAX];
    int n_gone = 0;
    pthread_mutex_lock(&p->lock);
    while (s->n_ckpts && s->ckpts[s->n_ckpts - 1]->pos > n) ckpt_remove_locked(s, s->n_ckpts - 1, gone, &n_gone);
    pthread_mutex_unlock(&p->lock);
    ckpt_free_all(gone, n_gone);
    bool kept = s->steps_n && n > s->steps_from && n <= s->steps_from + s->steps_n;
    const dn_dims *d = &p->m->dn;
    size_t floats = p->state_bytes / sizeof(float);
    for (int l = 0; kept && l < p->m->n_dn_layers; l++) /* the state before the verify, then its steps */
        dn_replay(d, s->state + (size_t)l * p->state_layer_floats, s->steps + (size_t)l * p->state_layer_floats,
                  s->steps + floats + (size_t)l * p->log_layer_floats, p->steps_log_floats, n - s->steps_from);
    s->steps_n = 0;
    if (kept) return n;
    if (!s->state) return 0;
    if (!s->n_ckpts) {
        memset(s->state, 0, p->state_bytes);
        return 0;
    }
    const kv_ckpt *c = s->ckpts[s->n_ckpts - 1];
    memcpy(s->state, c->state, p->state_bytes);
    return c->pos;
}

void kv_ckpt_share_locked(kv_seq *child, const kv_seq *parent) {
    for (int i = 0; i < parent->n_ckpts; i++) {
        child->ckpts[i] = parent->ckpts[i];
        child->ckpts[i]->refs++;
    }
    child->n_ckpts = parent->n_ckpts;
}

void kv_ckpt_release(kv_seq *s) {
    if (!s->n_ckpts) return;
    kv_ckpt *gone[KV_CKPT_MAX];
    int n_gone = 0;
    pthread_mutex_lock(&s->pool->lock);
    while (s->n_ckpts) ckpt_remove_locked(s, s->n_ckpts - 1, gone, &n_gone);
    pthread_mutex_unlock(&s->pool->lock);
    ckpt_free_all(gone, n_gone);
}

size_t kv_ckpt_held_bytes(const kv_seq *s) {
    return (size_t)s->n_ckpts * s->pool->state_bytes + kv_pool_steps_bytes(s->pool, s->steps_cap);
}

// ---- speculative steps ----------------------------------------------------------------------
/*
 * A rejected draft must leave no trace in the state. The verify batch (the token, then the
 * drafts) keeps what rebuilds the state after each of its entries but the last, in one buffer of
 * the sequence that stays allocated for the next verify (charged to the budget while held): the
 * state before the batch, copied as the recurrence first reads it, and per entry the conv tail
 * and each head's decay, u and k (deltanet.h, dn_steps). A truncation back into the batch replays
 * the kept steps on that state, one pass over it with the recurrence's own roundings (exact).
 * The whole state copied after each entry, as before, cost a state's bytes per draft: on the
 * bench_mtp shape (6 DeltaNet layers, 6.3 MB of state) a verify of 3 drafts wrote 18.9 MB of
 * copies; with the log it writes 6.3 MB and 3 x 0.39 MB, and a rollback reads and writes one
 * state, as the copy back did (docs/performance.md).
 */

size_t kv_pool_steps_bytes(const kv_pool *p, int n) {
    return p->state_bytes && n > 0 ? p->state_bytes + (size_t)n * p->steps_log_floats * sizeof(float) : 0;
}

bool kv_seq_keep_steps(kv_seq *s, int n) {
    if (!kv_seq_keep_room(s, n)) return false;
    s->steps_want = s->pool->state_bytes && n > 0 ? n : 0;
    return true;
}

bool kv_seq_keep_room(kv_seq *s, int n) {
    kv_pool *p = s->pool;
    if (!p->state_bytes) return true; /* the blocks roll back exactly */
    if (n <= 0) {
        pthread_mutex_lock(&p->lock);
        p->used -= kv_pool_steps_bytes(p, s->steps_cap);
        pthread_mutex_unlock(&p->lock);
        free(s->steps);
        s->steps = NULL, s->steps_cap = s->steps_want = s->steps_n = 0;
        return true;
    }
    if (n > s->steps_cap) {
        size_t more = kv_pool_steps_bytes(p, n) - kv_pool_steps_bytes(p, s->steps_cap);
        pthread_mutex_lock(&p->lock);
        bool room = more <= p->budget - p->used;
        if (room) p->used += more;
        pthread_mutex_unlock(&p->lock);
        float *b = room ? realloc(s->steps, kv_pool_steps_bytes(p, n)) : NULL;
        if (!b) {
            if (room) {
                pthread_mutex_lock(&p->lock);
                p->used -= more;
                pthread_mutex_unlock(&p->lock);
            }
            return false;
        }
        s->steps = b, s->steps_cap = n;
    }
    return true;
}

/*
 * The yield of a running step (engine_set_yield) gives up a batch after some layers: the K/V rows
 * written are simply written again, but the DeltaNet layers already run have moved the state on.
 * So a batch that may be given up first copies each DeltaNet layer's state into the sequence's
 * room for steps (kv_seq_keep_room: one state) just before that layer runs, and giving up copies
 * the layers already run back: one state copy per step, the price of the yield.
 */
bool kv_state_can_back_up(const kv_seq *s) { return s->steps_cap >= 1 && s->steps_n == 0; }

void kv_state_back_up(kv_seq *s, int slot) {
    size_t n = s->pool->state_layer_floats;
    memcpy(s->steps + (size_t)slot * n, kv_dn_state(s, slot), sizeof(float) * n);
}

void kv_state_restore_layer(kv_seq *s, int slot) {
    size_t n = s->pool->state_layer_floats;
    memcpy(kv_dn_state(s, slot), s->steps + (size_t)slot * n, sizeof(float) * n);
}

int kv_steps_begin(kv_seq *s) {
    int n = s->steps_want < s->pending - 1 ? s->steps_want : s->pending - 1;
    s->steps_want = 0;
    s->steps_n = n > 0 && s->steps ? n : 0;
    s->steps_from = s->len;
    return s->steps_n;
}
