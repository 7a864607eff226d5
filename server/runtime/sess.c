/*
 * sess.c — the session store (see sess.h for the model and the on-disk format).
 *
 * Sessions live in one singly linked list under one mutex: the counts are small (max_sessions,
 * default 1024) and every operation is O(n) at worst, far below the cost of one decode step.
 */
#include "sess.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sess_file.h"
#include "sess_redis.h"
#include "slog.h"
#include "statedir.h"

_Static_assert(SESS_ID_MAX == STATEDIR_ID_MAX && SESS_OWNER_MAX == STATEDIR_OWNER_MAX, "one id rule for every file");

struct sess_store {
    pthread_mutex_t mu;
    sess *head;
    int n_named, n_anon;
    int max_sessions;
    int per_owner;   /* named sessions one owner may keep (sess_store_set_quota); 0 = no own cap */
    statedir *sd;    /* NULL = no persistence */
    char *model_tag;
    int64_t ttl_ms;  /* idle named sessions older than this are removed; 0 = never */
    bool evict_lru;  /* at max_sessions, sess_create removes the least recently used idle one */
    void (*kv_sink)(void *user, struct kv_seq *kv); /* takes the KV of removed sessions */
    void *kv_sink_user;
    sess_redis *shared; /* shared mode (sess_store_share): the records live there; NULL = local */
};

/* shared mode (the end of this file) */
static attnd_status shared_create(sess_store *st, const char *owner, const char *id, attnd_err *err);
static attnd_status shared_acquire(sess_store *st, const char *owner, const char *id, sess **out, attnd_err *err);
static attnd_status shared_delete(sess_store *st, const char *owner, const char *id, struct kv_seq **kv,
                                  attnd_err *err);
static attnd_status shared_persist(sess_store *st, const char *owner, const char *id, uint64_t turn, attnd_err *err);
static attnd_status shared_get_info(sess_store *st, const char *owner, const char *id, sess_info *out,
                                    attnd_err *err);
static int shared_list_info(sess_store *st, const char *owner, sess_info **out);

bool sess_id_valid(const char *id) { return statedir_id_valid(id); }

int sess_common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static const char *own(const char *owner) { return owner ? owner : ""; }

bool sess_owner_valid(const char *owner) { return statedir_owner_valid(owner); }

static sess *find_named(sess_store *st, const char *owner, const char *id) {
    for (sess *s = st->head; s; s = s->next)
        if (!s->anon && !strcmp(s->id, id) && !strcmp(s->owner, own(owner))) return s;
    return NULL;
}

static void sess_free(sess *s) {
    if (!s) return;
    free(s->tokens);
    free(s->disk);
    free(s);
}

static attnd_status set_tokens(sess *s, const int32_t *tokens, int n) {
    if (!attnd_grow(&s->tokens, &s->cap_tokens, (size_t)n, sizeof(*s->tokens), 64)) return ATTND_ERR_NOMEM;
    if (n) memmove(s->tokens, tokens, (size_t)n * sizeof(*tokens));
    s->n_tokens = n;
    return ATTND_OK;
}

// ---- loading ------------------------------------------------------------------------------

/* Loads one [<owner>~]<id>.session.json (statedir_scan); silently skips other models' files,
 * warns on damaged ones. */
static void load_one(void *user, const char *owner, const char *id) {
    sess_store *st = user;
    char *text = NULL, *path = statedir_path(st->sd, owner, id, SESS_FILE_SUFFIX);
    size_t len;
    attnd_err e;
    sess_file f = {0};
    sess *s = NULL;
    const char *why = NULL;
    if (!path) return;
    if (statedir_read(st->sd, owner, id, SESS_FILE_SUFFIX, SIZE_MAX, &text, &len, NULL, &e) != ATTND_OK) {
        why = e.msg;
        goto done;
    }
    sess_file_result r = sess_file_decode(text, len, st->model_tag, &f);
    if (r == SESS_FILE_OTHER_MODEL) goto done;
    if (r == SESS_FILE_DAMAGED) {
        why = f.why;
        goto done;
    }
    if (st->n_named >= st->max_sessions) {
        why = "max_sessions reached";
        goto done;
    }
    s = calloc(1, sizeof(*s));
    if (!s || set_tokens(s, f.tokens, f.n_tokens) != ATTND_OK) goto done;
    s->disk = f.tokens; /* what the file holds */
    s->n_disk = f.n_tokens;
    s->on_disk = true;
    f.tokens = NULL;
    snprintf(s->id, sizeof(s->id), "%s", id);
    snprintf(s->owner, sizeof(s->owner), "%s", owner);
    s->created_ms = f.created_ms;
    s->last_use_ms = f.last_use_ms;
    s->next = st->head;
    st->head = s;
    st->n_named++;
    s = NULL;
done:
    if (why) slog_warn("session file %s skipped: %s", path, why);
    sess_free(s);
    free(f.tokens);
    free(text);
    free(path);
}

attnd_status sess_store_create(sess_store **out, const char *state_dir, const char *model_tag, int max_sessions,
                               attnd_err *err) {
    *out = NULL;
    sess_store *st = calloc(1, sizeof(*st));
    if (!st) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&st->mu, NULL);
    st->max_sessions = max_sessions > 0 ? max_sessions : 1;
    st->model_tag = strdup(model_tag ? model_tag : "");
    /* the scan loads the sessions: the store is complete before it */
    attnd_status rc = !st->model_tag ? attnd_fail(err, ATTND_ERR_NOMEM, "out of memory")
                                     : statedir_load(&st->sd, state_dir, SESS_FILE_SUFFIX, load_one, st, err);
    if (rc == ATTND_OK) *out = st;
    else sess_store_destroy(st);
    return rc;
}

void sess_store_destroy(sess_store *st) {
    if (!st) return;
    for (sess *s = st->head, *n; s; s = n) {
        n = s->next;
        ATTND_ASSERT(s->kv == NULL);
        sess_free(s);
    }
    pthread_mutex_destroy(&st->mu);
    statedir_close(st->sd);
    sess_redis_destroy(st->shared);
    free(st->model_tag);
    free(st);
}

// ---- lifecycle ----------------------------------------------------------------------------

void sess_store_set_lifetime(sess_store *st, int64_t ttl_ms, bool evict_lru) {
    pthread_mutex_lock(&st->mu);
    st->ttl_ms = ttl_ms > 0 ? ttl_ms : 0;
    st->evict_lru = evict_lru;
    pthread_mutex_unlock(&st->mu);
}

void sess_store_set_kv_sink(sess_store *st, void (*fn)(void *user, struct kv_seq *kv), void *user) {
    pthread_mutex_lock(&st->mu);
    st->kv_sink = fn;
    st->kv_sink_user = user;
    pthread_mutex_unlock(&st->mu);
}

/* Hands a removed session's KV to the sink (outside the lock: the sink takes its own). */
static void give_kv(sess_store *st, struct kv_seq *kv) {
    if (!kv) return;
    pthread_mutex_lock(&st->mu);
    void (*fn)(void *, struct kv_seq *) = st->kv_sink;
    void *user = st->kv_sink_user;
    pthread_mutex_unlock(&st->mu);
    ATTND_ASSERT(fn != NULL); /* a KV handle exists only where a scheduler set the sink */
    fn(user, kv);
}

/* Removes a named session's file (logged when that fails: a session the store removes itself,
 * by TTL or LRU, is gone from memory either way; its file's last use lets the TTL take it again
 * after a restart). */
static void remove_file(sess_store *st, const sess *s) {
    attnd_err e;
    if (st->sd && s->on_disk && statedir_remove(st->sd, s->owner, s->id, SESS_FILE_SUFFIX, NULL, &e) != ATTND_OK)
        slog_warn("%s", e.msg);
}

/* Unlinks an idle named session from the list, removes its file and frees it (caller holds the
 * lock); returns its KV handle for give_kv. */
static struct kv_seq *remove_locked(sess_store *st, sess *victim) {
    sess **pp = &st->head;
    while (*pp != victim) pp = &(*pp)->next;
    *pp = victim->next;
    st->n_named--;
    struct kv_seq *kv = victim->kv;
    remove_file(st, victim);
    sess_free(victim);
    return kv;
}

int sess_expire(sess_store *st) {
    int n = 0;
    for (;;) {
        pthread_mutex_lock(&st->mu);
        sess *victim = NULL;
        int64_t now = (int64_t)attnd_unix_ms();
        for (sess *s = st->head; s && st->ttl_ms && !victim; s = s->next)
            if (!s->anon && !s->busy && now - s->last_use_ms > st->ttl_ms) victim = s;
        if (victim) slog_info("session '%s' expired (unused for more than %lld s)", victim->id, (long long)(st->ttl_ms / 1000));
        struct kv_seq *kv = victim ? remove_locked(st, victim) : NULL;
        pthread_mutex_unlock(&st->mu);
        give_kv(st, kv);
        if (!victim) return n;
        n++;
    }
}

/* True when <state_dir>/<id>.session.json exists: a file load_one skipped (another model's, or
 * damaged) whose id must not be reused, or persisting would replace it. */
static bool file_exists(const sess_store *st, const char *owner, const char *id) {
    return st->sd && statedir_exists(st->sd, owner, id, SESS_FILE_SUFFIX);
}

void sess_store_set_quota(sess_store *st, int per_owner) {
    pthread_mutex_lock(&st->mu);
    st->per_owner = per_owner > 0 ? per_owner : 0;
    pthread_mutex_unlock(&st->mu);
    if (st->shared) sess_redis_set_quota(st->shared, per_owner); /* the shared store counts there */
}

/* owner's named sessions, and the least recently used idle one among them (caller holds the lock). */
static int owned_locked(sess_store *st, const char *owner, sess **lru_idle) {
    int n = 0;
    *lru_idle = NULL;
    for (sess *s = st->head; s; s = s->next) {
        if (s->anon || strcmp(s->owner, own(owner))) continue;
        n++;
        if (!s->busy && (!*lru_idle || s->last_use_ms < (*lru_idle)->last_use_ms)) *lru_idle = s;
    }
    return n;
}

/* Whether owner may make one more named session (caller holds the lock; create and fork). When
 * owner's quota or the store is full, evict_lru removes owner's own least recently used idle
 * session (*kv gets its KV for give_kv), never another owner's; else NOMEM names the limit. */
static attnd_status admit_locked(sess_store *st, const char *owner, struct kv_seq **kv, attnd_err *err) {
    sess *victim;
    int n = owned_locked(st, owner, &victim);
    bool own_full = st->per_owner && n >= st->per_owner, all_full = st->n_named >= st->max_sessions;
    if ((own_full || all_full) && st->evict_lru && victim) {
        slog_info("session limit reached (%s): evicting '%s', the least recently used of its key",
                  own_full ? "max_sessions_per_key" : "max_sessions", victim->id);
        *kv = remove_locked(st, victim);
        return ATTND_OK;
    }
    if (own_full)
        return attnd_fail(err, ATTND_ERR_NOMEM,
                          "this API key holds %d sessions, its quota (max_sessions_per_key)%s; delete one first", n,
                          st->evict_lru ? ", all of them busy" : "");
    if (all_full)
        return attnd_fail(err, ATTND_ERR_NOMEM,
                          "session limit reached (%d sessions in all, max_sessions); delete a session first",
                          st->max_sessions);
    return ATTND_OK;
}

attnd_status sess_quota_check(sess_store *st, const char *owner, attnd_err *err) {
    if (st->shared) return ATTND_OK; /* the shared store's records have no quota here */
    pthread_mutex_lock(&st->mu);
    sess *victim;
    int n = owned_locked(st, owner, &victim);
    bool room = (!st->per_owner || n < st->per_owner) && st->n_named < st->max_sessions;
    bool evictable = st->evict_lru && victim;
    int max = st->max_sessions, quota = st->per_owner;
    pthread_mutex_unlock(&st->mu);
    if (room || evictable) return ATTND_OK;
    if (quota && n >= quota)
        return attnd_fail(err, ATTND_ERR_NOMEM, "this API key holds %d sessions, its quota (max_sessions_per_key); delete one first", n);
    return attnd_fail(err, ATTND_ERR_NOMEM, "session limit reached (%d sessions in all, max_sessions); delete a session first", max);
}

attnd_status sess_create(sess_store *st, const char *owner, const char *id, char out_id[SESS_ID_MAX + 1],
                         attnd_err *err) {
    if (!sess_owner_valid(owner)) return attnd_fail(err, ATTND_ERR_INVALID, "bad session owner tag");
    char gen[SESS_ID_MAX + 1];
    if (!id) {
        attnd_random_id(gen, sizeof(gen), "sess-");
        id = gen;
    } else if (!sess_id_valid(id)) {
        return attnd_fail(err, ATTND_ERR_INVALID, "session id must be 1..64 characters of A-Z a-z 0-9 . _ - (not starting with '.')");
    }
    if (st->shared) {
        attnd_status src = shared_create(st, owner, id, err);
        if (src == ATTND_OK) snprintf(out_id, SESS_ID_MAX + 1, "%s", id);
        return src;
    }
    pthread_mutex_lock(&st->mu);
    struct kv_seq *evicted_kv = NULL;
    attnd_status rc = ATTND_OK;
    if (find_named(st, owner, id)) {
        rc = attnd_fail(err, ATTND_ERR_BUSY, "session '%s' already exists", id);
    } else if (file_exists(st, owner, id)) { /* another model's (or a damaged) file: never overwritten */
        rc = attnd_fail(err, ATTND_ERR_BUSY, "session id '%s' is taken by a saved session this server did not load", id);
    } else if ((rc = admit_locked(st, owner, &evicted_kv, err)) == ATTND_OK) {
        sess *s = calloc(1, sizeof(*s));
        if (!s) {
            rc = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        } else {
            snprintf(s->id, sizeof(s->id), "%s", id);
            snprintf(s->owner, sizeof(s->owner), "%s", own(owner));
            s->created_ms = s->last_use_ms = (int64_t)attnd_unix_ms();
            s->version = 1; /* an empty session is persisted too, so it survives a restart */
            s->next = st->head;
            st->head = s;
            st->n_named++;
            snprintf(out_id, SESS_ID_MAX + 1, "%s", id);
        }
    }
    pthread_mutex_unlock(&st->mu);
    give_kv(st, evicted_kv);
    return rc;
}

attnd_status sess_acquire(sess_store *st, const char *owner, const char *id, sess **out, attnd_err *err) {
    *out = NULL;
    if (st->shared && id) return shared_acquire(st, owner, id, out, err);
    pthread_mutex_lock(&st->mu);
    attnd_status rc = ATTND_OK;
    sess *s = id ? find_named(st, owner, id) : NULL;
    if (!s) rc = attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found", id ? id : "");
    else if (s->busy) rc = attnd_fail(err, ATTND_ERR_BUSY, "session '%s' is busy with another request", id);
    else {
        s->busy = true;
        *out = s;
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

sess *sess_acquire_anon(sess_store *st, const char *owner, const int32_t *tokens, int n, int max_anon) {
    pthread_mutex_lock(&st->mu);
    sess *best = NULL, *lru = NULL;
    int best_len = 0;
    for (sess *s = st->head; s; s = s->next) {
        if (!s->anon || s->busy) continue;
        /* another owner's cache is never matched: its prefix would tell what they asked */
        int l = strcmp(s->owner, own(owner)) ? 0 : sess_common_prefix(s->tokens, s->kv ? s->kv_len : 0, tokens, n);
        if (l > best_len) best_len = l, best = s;
        if (!lru || s->last_use_ms < lru->last_use_ms) lru = s;
    }
    /* reuse an entry only when the request keeps at least half of its cache; otherwise keep
     * it for the conversation it belongs to and start a new one while there is room */
    sess *pick = best && best_len * 2 >= best->kv_len ? best : NULL;
    if (!pick && st->n_anon < max_anon) {
        pick = calloc(1, sizeof(*pick));
        if (pick) {
            pick->anon = true;
            pick->created_ms = pick->last_use_ms = (int64_t)attnd_unix_ms();
            pick->next = st->head;
            st->head = pick;
            st->n_anon++;
        }
    }
    if (!pick) pick = best ? best : lru;
    if (pick && strcmp(pick->owner, own(owner))) { /* taken over: nothing of the old owner's is kept */
        pick->n_tokens = 0;
        pick->kv_len = 0;
        snprintf(pick->owner, sizeof(pick->owner), "%s", own(owner));
    }
    if (pick) pick->busy = pick->running = true; /* the scheduler acquires these for a slot */
    pthread_mutex_unlock(&st->mu);
    return pick;
}

attnd_status sess_release(sess_store *st, sess *s, const int32_t *tokens, int n, attnd_err *err) {
    pthread_mutex_lock(&st->mu);
    attnd_status rc = set_tokens(s, tokens, n);
    if (rc == ATTND_OK) s->version++;
    s->released_turn = s->turn; /* shared mode: this history is the turn's to save */
    s->busy = false;
    s->running = false;
    s->last_use_ms = (int64_t)attnd_unix_ms();
    pthread_mutex_unlock(&st->mu);
    return rc == ATTND_OK ? ATTND_OK : attnd_fail(err, rc, "out of memory saving the session history");
}

void sess_set_kv(sess_store *st, sess *s, struct kv_seq *kv, int kv_len, size_t kv_bytes) {
    pthread_mutex_lock(&st->mu);
    s->kv = kv;
    s->kv_len = kv ? kv_len : 0;
    s->kv_bytes = kv ? kv_bytes : 0;
    pthread_mutex_unlock(&st->mu);
}

struct kv_seq *sess_evict_lru(sess_store *st) {
    pthread_mutex_lock(&st->mu);
    sess *pick = NULL;
    for (sess *s = st->head; s; s = s->next) {
        if (s->running || !s->kv) continue;
        if (!pick || (pick->busy && !s->busy) ||
            (pick->busy == s->busy && (s->last_use_ms < pick->last_use_ms ||
                                       (s->last_use_ms == pick->last_use_ms && s->anon))))
            pick = s;
    }
    struct kv_seq *kv = NULL;
    if (pick) {
        kv = pick->kv;
        pick->kv = NULL;
        pick->kv_len = 0;
        pick->kv_bytes = 0;
    }
    pthread_mutex_unlock(&st->mu);
    return kv;
}

void sess_set_running(sess_store *st, sess *s, bool running) {
    pthread_mutex_lock(&st->mu);
    s->running = running;
    pthread_mutex_unlock(&st->mu);
}

void sess_abandon(sess_store *st, sess *s) {
    pthread_mutex_lock(&st->mu);
    s->busy = false;
    s->running = false;
    pthread_mutex_unlock(&st->mu);
}

attnd_status sess_delete(sess_store *st, const char *owner, const char *id, struct kv_seq **kv, int *sys_errno,
                         attnd_err *err) {
    if (sys_errno) *sys_errno = 0;
    *kv = NULL;
    if (st->shared) return shared_delete(st, owner, id, kv, err);
    pthread_mutex_lock(&st->mu);
    attnd_status rc = ATTND_OK;
    struct kv_seq *stray = NULL;
    sess **pp = &st->head;
    while (*pp && ((*pp)->anon || strcmp((*pp)->id, id) || strcmp((*pp)->owner, own(owner)))) pp = &(*pp)->next;
    sess *s = *pp;
    if (!s) rc = attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found", id);
    else if (s->busy) rc = attnd_fail(err, ATTND_ERR_BUSY, "session '%s' is busy with another request", id);
    else if (st->sd && s->on_disk && (rc = statedir_remove(st->sd, s->owner, s->id, SESS_FILE_SUFFIX, sys_errno, err)) &&
             statedir_exists(st->sd, s->owner, s->id, SESS_FILE_SUFFIX))
        slog_error("session '%s' not deleted: %s", id, err ? err->msg : "I/O error"); /* it stays, as on disk */
    else { /* removed; when only the directory sync failed (rc IO), not durably: memory = disk */
        *pp = s->next;
        st->n_named--;
        stray = s->kv;
        sess_free(s);
    }
    pthread_mutex_unlock(&st->mu);
    if (rc == ATTND_OK) *kv = stray;
    else give_kv(st, stray); /* a caller that sees the error frees nothing */
    return rc;
}

void sess_take_all_kv(sess_store *st, void (*fn)(struct kv_seq *kv)) {
    pthread_mutex_lock(&st->mu);
    for (sess *s = st->head; s; s = s->next)
        if (s->kv) {
            fn(s->kv);
            s->kv = NULL;
            s->kv_len = 0;
            s->kv_bytes = 0;
        }
    pthread_mutex_unlock(&st->mu);
}

// ---- persistence --------------------------------------------------------------------------

/* The session's file contents (new string, NULL when out of memory; caller holds the lock). */
static char *snapshot_locked(const sess_store *st, const sess *s) {
    return sess_file_encode(s->id, s->owner, st->model_tag, s->created_ms, s->last_use_ms, s->tokens, s->n_tokens);
}

/*
 * Snapshot under the lock, write and fsync the temporary file outside it, then rename under the
 * lock only when the snapshot is newer than what is on disk (a slower writer of an older
 * version must not win), and fsync the directory. Returns once the current version is durable.
 */
/* A write of version failed: memory goes back to what the file holds (caller holds the lock);
 * returns the KV of a session removed because it never reached its file, for give_kv. */
static struct kv_seq *revert_locked(sess_store *st, sess *s, uint64_t version) {
    if (s->busy || s->version != version) return NULL; /* a newer turn's write decides */
    if (!s->on_disk) {
        slog_error("session '%s' removed: it could not be saved", s->id);
        return remove_locked(st, s);
    }
    int keep = sess_common_prefix(s->tokens, s->kv_len, s->disk, s->n_disk);
    if (set_tokens(s, s->disk, s->n_disk) != ATTND_OK) return NULL; /* cannot shrink: never fails */
    s->kv_len = keep;
    s->version = s->persisted_version;
    slog_error("session '%s' put back to its saved history (%d tokens): the turn could not be saved", s->id,
               s->n_disk);
    return NULL;
}

/* The snapshot committed: the file now holds snap (stolen). */
static void on_disk_locked(sess *s, uint64_t version, int32_t *snap, int n_snap) {
    s->persisted_version = version;
    free(s->disk);
    s->disk = snap;
    s->n_disk = n_snap;
    s->on_disk = true;
}

/*
 * Snapshot under the lock, write and fsync the temporary file outside it, then rename under the
 * lock only when the snapshot is newer than what is on disk (a slower writer of an older
 * version must not win), and fsync the directory. Returns once the current version is durable.
 */
attnd_status sess_persist(sess_store *st, const char *owner, const char *id, int *sys_errno, attnd_err *err) {
    if (sys_errno) *sys_errno = 0;
    if (st->shared) return shared_persist(st, owner, id, 0, err);
    if (!st->sd) return ATTND_OK;
    pthread_mutex_lock(&st->mu);
    sess *s = find_named(st, owner, id);
    if (!s || s->version == s->persisted_version) {
        pthread_mutex_unlock(&st->mu);
        return ATTND_OK;
    }
    char *text = snapshot_locked(st, s);
    uint64_t version = s->version;
    int n_snap = s->n_tokens;
    int32_t *snap = malloc((size_t)(n_snap ? n_snap : 1) * sizeof(int32_t));
    if (snap && n_snap) memcpy(snap, s->tokens, (size_t)n_snap * sizeof(int32_t)); /* an empty one may have no array */
    char file_owner[SESS_OWNER_MAX + 1], file_id[SESS_ID_MAX + 1];
    snprintf(file_owner, sizeof(file_owner), "%s", s->owner);
    snprintf(file_id, sizeof(file_id), "%s", s->id);
    pthread_mutex_unlock(&st->mu);

    statedir_staged *staged = NULL;
    attnd_status rc = !text || !snap ? attnd_fail(err, ATTND_ERR_NOMEM, "out of memory")
                                     : statedir_stage(st->sd, file_owner, file_id, SESS_FILE_SUFFIX, text,
                                                      strlen(text), &staged, sys_errno, err);
    free(text);
    pthread_mutex_lock(&st->mu);
    /* deleted meanwhile, or a newer version already renamed: this snapshot is dropped */
    sess *again = find_named(st, owner, id);
    bool newer = again && again->persisted_version < version;
    attnd_err discard_err;
    struct kv_seq *dropped = NULL;
    if (rc != ATTND_OK) {
        if (again) dropped = revert_locked(st, again, version);
    } else if (!newer) {
        if (statedir_discard(st->sd, staged, NULL, &discard_err) != ATTND_OK) slog_warn("%s", discard_err.msg);
    } else if ((rc = statedir_commit(st->sd, staged, sys_errno, err)) == ATTND_OK) {
        on_disk_locked(again, version, snap, n_snap);
        snap = NULL;
    } else {
        dropped = revert_locked(st, again, version);
    }
    pthread_mutex_unlock(&st->mu);
    free(snap);
    give_kv(st, dropped);
    /* also when a newer writer renamed: its directory entry may not be synced yet; a failed
     * sync leaves the new file in place (memory matches it) but the turn unacknowledged */
    if (rc == ATTND_OK && again) rc = statedir_sync(st->sd, sys_errno, err);
    return rc;
}

attnd_status sess_persist_turn(sess_store *st, const char *owner, const char *id, uint64_t turn, int *sys_errno,
                               attnd_err *err) {
    if (sys_errno) *sys_errno = 0;
    return st->shared ? shared_persist(st, owner, id, turn, err) : sess_persist(st, owner, id, sys_errno, err);
}

int sess_persist_all(sess_store *st) {
    if (!st->sd) return 0; /* shared mode too: a turn not saved yet was never acknowledged */
    /* collect ids first: persisting takes the lock itself */
    pthread_mutex_lock(&st->mu);
    int n = 0;
    for (sess *s = st->head; s; s = s->next) n += !s->anon && s->version != s->persisted_version;
    char (*ids)[SESS_ID_MAX + 1] = calloc(n ? n : 1, sizeof(*ids));
    char (*owners)[SESS_OWNER_MAX + 1] = calloc(n ? n : 1, sizeof(*owners));
    int k = 0;
    for (sess *s = st->head; s && ids && owners; s = s->next)
        if (!s->anon && s->version != s->persisted_version) {
            snprintf(owners[k], sizeof(owners[0]), "%s", s->owner);
            snprintf(ids[k++], sizeof(ids[0]), "%s", s->id);
        }
    pthread_mutex_unlock(&st->mu);
    if (!ids || !owners) {
        free(ids);
        free(owners);
        return n;
    }
    int fails = 0;
    for (int i = 0; i < k; i++) {
        attnd_err e;
        if (sess_persist(st, owners[i], ids[i], NULL, &e) != ATTND_OK) {
            slog_error("%s", e.msg);
            fails++;
        }
    }
    free(ids);
    free(owners);
    return fails;
}

// ---- views --------------------------------------------------------------------------------

static void info_locked(const sess *s, sess_info *out) {
    snprintf(out->id, sizeof(out->id), "%s", s->id);
    out->n_tokens = s->n_tokens;
    out->kv_tokens = s->kv ? s->kv_len : 0;
    out->kv_bytes = s->kv_bytes;
    out->busy = s->busy;
    out->created_ms = s->created_ms;
    out->last_use_ms = s->last_use_ms;
}

attnd_status sess_lookup_info(sess_store *st, const char *owner, const char *id, sess_info *out, attnd_err *err) {
    if (st->shared) return shared_get_info(st, owner, id, out, err);
    pthread_mutex_lock(&st->mu);
    sess *s = find_named(st, owner, id);
    if (s) info_locked(s, out);
    pthread_mutex_unlock(&st->mu);
    return s ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found", id);
}

bool sess_get_info(sess_store *st, const char *owner, const char *id, sess_info *out) {
    attnd_err e;
    attnd_status rc = sess_lookup_info(st, owner, id, out, &e);
    if (rc != ATTND_OK && rc != ATTND_ERR_NOT_FOUND) slog_warn("%s", e.msg);
    return rc == ATTND_OK;
}

int sess_list_info(sess_store *st, const char *owner, sess_info **out) {
    *out = NULL;
    if (st->shared) return shared_list_info(st, owner, out);
    pthread_mutex_lock(&st->mu);
    int n = 0, k = 0;
    for (sess *s = st->head; s; s = s->next) n += !s->anon && !strcmp(s->owner, own(owner));
    sess_info *v = calloc(n ? (size_t)n : 1, sizeof(*v));
    for (sess *s = st->head; s && v; s = s->next)
        if (!s->anon && !strcmp(s->owner, own(owner))) info_locked(s, &v[k++]);
    pthread_mutex_unlock(&st->mu);
    *out = v;
    return v ? k : -1;
}

int sess_count(sess_store *st) {
    pthread_mutex_lock(&st->mu);
    int n = st->n_named;
    pthread_mutex_unlock(&st->mu);
    return n;
}

// ---- shared mode: the records live in the shared store, the entries here cache them --------

void sess_store_share(sess_store *st, sess_redis *shared) {
    ATTND_ASSERT(st->sd == NULL && st->shared == NULL); /* one source of truth per session */
    st->shared = shared;
    sess_redis_set_quota(shared, st->per_owner);
}

/* A turn released its history and has not saved it yet (sess_persist_turn will). */
static bool unsaved(const sess *s) { return s->turn && s->released_turn == s->turn && s->saved_turn != s->turn; }

static attnd_status shared_create(sess_store *st, const char *owner, const char *id, attnd_err *err) {
    int64_t now = (int64_t)attnd_unix_ms();
    sess_redis_rec rec = {.version = 1, .created_ms = now, .last_use_ms = now};
    return sess_redis_put(st->shared, own(owner), id, 0, &rec, err);
}

/* Room for one more local copy: at max_sessions the least recently used idle one with nothing
 * left to save goes (its record stays). false when every copy is in use. Caller holds the lock. */
static bool make_room_locked(sess_store *st, struct kv_seq **kv) {
    if (st->n_named < st->max_sessions) return true;
    sess *victim = NULL;
    for (sess *s = st->head; s; s = s->next)
        if (!s->anon && !s->busy && !unsaved(s) && (!victim || s->last_use_ms < victim->last_use_ms)) victim = s;
    if (victim) *kv = remove_locked(st, victim);
    return victim != NULL;
}

/* The local copy of the record, made busy for a new turn (caller holds the lock): its KV keeps
 * the prefix its old history shares with the record's (a history saved by another instance, or
 * one this copy failed to save, differs past it). */
static attnd_status take_copy_locked(sess_store *st, const char *owner, const char *id, const sess_redis_rec *rec,
                                     sess **out, struct kv_seq **kv, attnd_err *err) {
    sess *s = find_named(st, owner, id);
    if (s && s->busy) return attnd_fail(err, ATTND_ERR_BUSY, "session '%s' is busy with another request", id);
    if (!s) {
        if (!make_room_locked(st, kv))
            return attnd_fail(err, ATTND_ERR_NOMEM, "all %d sessions of this instance are in use", st->max_sessions);
        if (!(s = calloc(1, sizeof(*s)))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        snprintf(s->id, sizeof(s->id), "%s", id);
        snprintf(s->owner, sizeof(s->owner), "%s", own(owner));
        s->next = st->head;
        st->head = s;
        st->n_named++;
    }
    int keep = s->kv ? sess_common_prefix(s->tokens, s->kv_len, rec->tokens, rec->n_tokens) : 0;
    if (set_tokens(s, rec->tokens, rec->n_tokens) != ATTND_OK) {
        s->kv_len = s->n_tokens = 0; /* consistent: the next acquire loads it again */
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading session '%s'", id);
    }
    s->kv_len = keep;
    s->rversion = rec->version;
    s->created_ms = rec->created_ms;
    s->last_use_ms = rec->last_use_ms;
    s->version = s->persisted_version; /* nothing for the state directory: there is none */
    s->turn++;
    s->busy = true;
    *out = s;
    return ATTND_OK;
}

static attnd_status shared_acquire(sess_store *st, const char *owner, const char *id, sess **out, attnd_err *err) {
    sess_redis_rec rec;
    attnd_status rc = sess_redis_get(st->shared, own(owner), id, &rec, err);
    if (rc == ATTND_ERR_FORMAT) { /* as a damaged file: not loaded, its id not reusable */
        slog_warn("session '%s': its record in the shared store is damaged", id);
        rc = attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found (its record is damaged)", id);
    }
    struct kv_seq *kv = NULL;
    pthread_mutex_lock(&st->mu);
    if (rc == ATTND_ERR_NOT_FOUND) { /* deleted or expired elsewhere: the local copy goes too */
        sess *s = find_named(st, owner, id);
        if (s && !s->busy) kv = remove_locked(st, s);
    } else if (rc == ATTND_OK) {
        rc = take_copy_locked(st, owner, id, &rec, out, &kv, err);
    }
    pthread_mutex_unlock(&st->mu);
    give_kv(st, kv);
    sess_redis_rec_free(&rec);
    return rc;
}

/* Writes the history turn released, if this copy was not acquired again since (caller: the
 * request that ran the turn, before its response completes). */
static attnd_status shared_persist(sess_store *st, const char *owner, const char *id, uint64_t turn, attnd_err *err) {
    pthread_mutex_lock(&st->mu);
    sess *s = find_named(st, owner, id);
    attnd_status rc = ATTND_OK;
    bool nothing = false;
    if (s && !turn) turn = s->turn;
    if (!s) {
        if (turn) rc = attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' was removed before this turn was saved", id);
        nothing = true;
    } else if (s->turn != turn) {
        rc = attnd_fail(err, ATTND_ERR_BUSY, "session '%s' was used by another request before this turn was saved", id);
    } else if (s->released_turn != turn || s->saved_turn == turn || !s->rversion) {
        nothing = true; /* no new history (the turn failed early), or saved already */
    }
    sess_redis_rec rec = {0};
    uint64_t expect = s ? s->rversion : 0;
    if (rc == ATTND_OK && !nothing) {
        rec = (sess_redis_rec){.version = expect + 1, .created_ms = s->created_ms, .last_use_ms = s->last_use_ms,
                              .n_tokens = s->n_tokens};
        rec.tokens = malloc((size_t)(s->n_tokens ? s->n_tokens : 1) * sizeof(int32_t));
        if (rec.tokens && s->n_tokens) memcpy(rec.tokens, s->tokens, (size_t)s->n_tokens * sizeof(int32_t));
    }
    pthread_mutex_unlock(&st->mu);
    if (rc != ATTND_OK || nothing) return rc;
    rc = rec.tokens ? sess_redis_put(st->shared, own(owner), id, expect, &rec, err)
                    : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&st->mu);
    if ((s = find_named(st, owner, id)) && s->turn == turn) {
        s->saved_turn = turn; /* failed too: the next acquire loads the stored history again */
        if (rc == ATTND_OK) s->rversion = rec.version;
    }
    pthread_mutex_unlock(&st->mu);
    sess_redis_rec_free(&rec);
    return rc;
}

static attnd_status shared_delete(sess_store *st, const char *owner, const char *id, struct kv_seq **kv,
                                  attnd_err *err) {
    pthread_mutex_lock(&st->mu);
    sess *s = find_named(st, owner, id);
    bool busy = s && s->busy;
    pthread_mutex_unlock(&st->mu);
    if (busy) return attnd_fail(err, ATTND_ERR_BUSY, "session '%s' is busy with another request", id);
    attnd_status rc = sess_redis_delete(st->shared, own(owner), id, err);
    if (rc != ATTND_OK && rc != ATTND_ERR_NOT_FOUND) return rc;
    pthread_mutex_lock(&st->mu);
    if ((s = find_named(st, owner, id)) && !s->busy) *kv = remove_locked(st, s);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* The record's view, with the local copy's KV and busy state when there is one (caller holds
 * the lock). */
static void shared_info_locked(sess_store *st, const char *owner, const char *id, const sess_redis_rec *rec,
                               sess_info *out) {
    *out = (sess_info){.n_tokens = rec->n_tokens, .created_ms = rec->created_ms, .last_use_ms = rec->last_use_ms};
    snprintf(out->id, sizeof(out->id), "%s", id);
    sess *s = find_named(st, owner, id);
    if (!s) return;
    out->busy = s->busy;
    out->kv_tokens = s->kv ? sess_common_prefix(s->tokens, s->kv_len, rec->tokens, rec->n_tokens) : 0;
    out->kv_bytes = s->kv ? s->kv_bytes : 0;
}

static attnd_status shared_get_info(sess_store *st, const char *owner, const char *id, sess_info *out,
                                    attnd_err *err) {
    sess_redis_rec rec;
    attnd_status rc = sess_redis_get(st->shared, own(owner), id, &rec, err);
    if (rc == ATTND_ERR_FORMAT) rc = attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found (its record is damaged)", id);
    if (rc != ATTND_OK) return rc;
    pthread_mutex_lock(&st->mu);
    shared_info_locked(st, owner, id, &rec, out);
    pthread_mutex_unlock(&st->mu);
    sess_redis_rec_free(&rec);
    return ATTND_OK;
}

typedef struct list_acc {
    sess_store *st;
    const char *owner;
    sess_info *v;
    size_t n, cap;
    bool oom;
} list_acc;

static void list_one(void *user, const char *id, const sess_redis_rec *rec) {
    list_acc *a = user;
    if (a->oom || !attnd_grow(&a->v, &a->cap, a->n + 1, sizeof(*a->v), 16)) {
        a->oom = true;
        return;
    }
    pthread_mutex_lock(&a->st->mu);
    shared_info_locked(a->st, a->owner, id, rec, &a->v[a->n++]);
    pthread_mutex_unlock(&a->st->mu);
}

static int newest_first(const void *a, const void *b) {
    int64_t x = ((const sess_info *)a)->created_ms, y = ((const sess_info *)b)->created_ms;
    return x < y ? 1 : x > y ? -1 : strcmp(((const sess_info *)a)->id, ((const sess_info *)b)->id);
}

static int shared_list_info(sess_store *st, const char *owner, sess_info **out) {
    list_acc a = {.st = st, .owner = owner};
    attnd_err e;
    int n = sess_redis_list(st->shared, own(owner), list_one, &a, &e);
    if (n < 0 || a.oom) {
        if (n < 0) slog_warn("%s", e.msg);
        free(a.v);
        return -1;
    }
    if (a.n) qsort(a.v, a.n, sizeof(*a.v), newest_first);
    *out = a.v ? a.v : calloc(1, sizeof(sess_info));
    return *out ? (int)a.n : -1;
}
