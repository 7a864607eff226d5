/*
 * sess.c — the session store (see sess.h for the model and the on-disk format).
 *
 * Sessions live in one singly linked list under one mutex: the counts are small (max_sessions,
 * default 1024) and every operation is O(n) at worst, far below the cost of one decode step.
 */
#include "sess.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "slog.h"

struct sess_store {
    pthread_mutex_t mu;
    sess *head;
    int n_named, n_anon;
    int max_sessions;
    char *dir;       /* NULL = no persistence */
    char *model_tag;
    int64_t ttl_ms;  /* idle named sessions older than this are removed; 0 = never */
    bool evict_lru;  /* at max_sessions, sess_create removes the least recently used idle one */
    void (*kv_sink)(void *user, struct kv_seq *kv); /* takes the KV of removed sessions */
    void *kv_sink_user;
};

bool sess_id_valid(const char *id) {
    if (!id || !*id || *id == '.') return false;
    size_t n = 0;
    for (const char *p = id; *p; p++, n++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    }
    return n <= SESS_ID_MAX;
}

int sess_common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static const char *own(const char *owner) { return owner ? owner : ""; }

bool sess_owner_valid(const char *owner) {
    if (!owner) return true;
    size_t n = strlen(owner);
    for (size_t i = 0; i < n; i++)
        if (!((owner[i] >= '0' && owner[i] <= '9') || (owner[i] >= 'a' && owner[i] <= 'f'))) return false;
    return n <= SESS_OWNER_MAX;
}

static sess *find_named(sess_store *st, const char *owner, const char *id) {
    for (sess *s = st->head; s; s = s->next)
        if (!s->anon && !strcmp(s->id, id) && !strcmp(s->owner, own(owner))) return s;
    return NULL;
}

static void sess_free(sess *s) {
    if (!s) return;
    free(s->tokens);
    free(s);
}

static attnd_status set_tokens(sess *s, const int32_t *tokens, int n) {
    if (n > s->cap_tokens) {
        int cap = s->cap_tokens ? s->cap_tokens : 64;
        while (cap < n) cap *= 2;
        int32_t *g = realloc(s->tokens, (size_t)cap * sizeof(*g));
        if (!g) return ATTND_ERR_NOMEM;
        s->tokens = g;
        s->cap_tokens = cap;
    }
    if (n) memmove(s->tokens, tokens, (size_t)n * sizeof(*tokens));
    s->n_tokens = n;
    return ATTND_OK;
}

/* <dir>/<id><suffix>, or <dir>/<owner>~<id><suffix> for a session made with an API key among
 * several ('~' is never part of an id). */
static char *path_of(const sess_store *st, const char *owner, const char *id, const char *suffix) {
    owner = own(owner);
    size_t n = strlen(st->dir) + strlen(owner) + strlen(id) + strlen(suffix) + 3;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s%s%s%s", st->dir, owner, *owner ? "~" : "", id, suffix);
    return p;
}

// ---- loading ------------------------------------------------------------------------------

/* Loads one <id>.session.json; silently skips other models' files, warns on damaged ones. */
static void load_one(sess_store *st, const char *fname) {
    static const char SUFFIX[] = ".session.json";
    size_t fl = strlen(fname), sl = strlen(SUFFIX);
    if (fl <= sl || strcmp(fname + fl - sl, SUFFIX) != 0) return;
    char owner[SESS_OWNER_MAX + 1] = "", id[SESS_ID_MAX + 1];
    const char *tilde = memchr(fname, '~', fl - sl), *idp = tilde ? tilde + 1 : fname;
    if (tilde) {
        if ((size_t)(tilde - fname) > SESS_OWNER_MAX) return;
        memcpy(owner, fname, (size_t)(tilde - fname));
        owner[tilde - fname] = '\0';
        if (!*owner || !sess_owner_valid(owner)) return;
    }
    if ((size_t)(fname + fl - sl - idp) > SESS_ID_MAX) return;
    memcpy(id, idp, (size_t)(fname + fl - sl - idp));
    id[fname + fl - sl - idp] = '\0';
    if (!sess_id_valid(id)) return;
    char *path = path_of(st, owner, id, SUFFIX);
    if (!path) return;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    sess *s = NULL;
    const char *why = NULL;
    if (!root) {
        why = je.text;
        goto done;
    }
    json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
    json_t *model = json_object_get(root, "model"), *toks = json_object_get(root, "tokens");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "attnd-session") || !json_is_integer(ver) ||
        json_integer_value(ver) != 1 || !json_is_array(toks)) {
        why = "not an attnd-session v1 file";
        goto done;
    }
    if (!json_is_string(model) || strcmp(json_string_value(model), st->model_tag)) goto done; /* other model */
    if (st->n_named >= st->max_sessions) {
        why = "max_sessions reached";
        goto done;
    }
    s = calloc(1, sizeof(*s));
    if (!s) goto done;
    size_t n = json_array_size(toks);
    if (n > (size_t)1 << 24) {
        why = "too many tokens";
        goto done;
    }
    int32_t *tmp = malloc((n ? n : 1) * sizeof(*tmp));
    if (!tmp) goto done;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            free(tmp);
            why = "a token is not a non-negative integer";
            goto done;
        }
        tmp[i] = (int32_t)json_integer_value(t);
    }
    attnd_status rc = set_tokens(s, tmp, (int)n);
    free(tmp);
    if (rc != ATTND_OK) goto done;
    snprintf(s->id, sizeof(s->id), "%s", id);
    snprintf(s->owner, sizeof(s->owner), "%s", owner);
    json_t *c = json_object_get(root, "created"), *u = json_object_get(root, "last_used");
    s->created_ms = json_is_integer(c) ? json_integer_value(c) : (int64_t)attnd_unix_ms();
    s->last_use_ms = json_is_integer(u) ? json_integer_value(u) : s->created_ms;
    s->next = st->head;
    st->head = s;
    st->n_named++;
    s = NULL;
done:
    if (why) slog_warn("session file %s skipped: %s", path, why);
    sess_free(s);
    json_decref(root);
    free(path);
}

/* A temporary file a crash left behind mid-write: never renamed, so never acknowledged. */
static void remove_stale_tmp(const sess_store *st, const char *fname) {
    char *p = path_of(st, "", fname, "");
    if (p && unlink(p) == 0) slog_info("removed %s, left by an interrupted write", p);
    free(p);
}

/* Creates and removes a file in dir, so an unwritable state directory is refused at start-up
 * instead of failing every later save (in the log only). */
static attnd_status check_writable(const char *dir, attnd_err *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/.attnd-write-test-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) return attnd_fail(err, ATTND_ERR_IO, "state directory %s is not writable: %s", dir, strerror(errno));
    close(fd);
    unlink(path);
    return ATTND_OK;
}

attnd_status sess_state_dir_scan(const char *dir, void (*each)(void *user, const char *name), void *user,
                                 attnd_err *err) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return attnd_fail(err, ATTND_ERR_IO, "cannot create state directory %s: %s", dir, strerror(errno));
    attnd_status rc = check_writable(dir, err);
    if (rc != ATTND_OK) return rc;
    DIR *d = opendir(dir);
    if (!d) return attnd_fail(err, ATTND_ERR_IO, "cannot read state directory %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) each(user, e->d_name);
    closedir(d);
    return ATTND_OK;
}

/* A state directory entry: a session file of this model is loaded, an interrupted write removed. */
static void load_entry(void *user, const char *name) {
    if (strstr(name, ".session.json.tmp.")) remove_stale_tmp(user, name);
    else load_one(user, name);
}

attnd_status sess_store_create(sess_store **out, const char *state_dir, const char *model_tag, int max_sessions,
                               attnd_err *err) {
    *out = NULL;
    sess_store *st = calloc(1, sizeof(*st));
    if (!st) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&st->mu, NULL);
    st->max_sessions = max_sessions > 0 ? max_sessions : 1;
    attnd_status rc = ATTND_ERR_NOMEM;
    st->model_tag = strdup(model_tag ? model_tag : "");
    if (!st->model_tag) goto fail;
    if (state_dir && *state_dir) {
        st->dir = strdup(state_dir);
        if (!st->dir) goto fail;
        if ((rc = sess_state_dir_scan(state_dir, load_entry, st, err)) != ATTND_OK) goto fail;
    }
    *out = st;
    return ATTND_OK;
fail:
    if (rc == ATTND_ERR_NOMEM) attnd_fail(err, rc, "out of memory");
    sess_store_destroy(st);
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
    free(st->dir);
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

/* Unlinks an idle named session from the list, removes its file and frees it (caller holds the
 * lock); returns its KV handle for give_kv. */
static struct kv_seq *remove_locked(sess_store *st, sess *victim) {
    sess **pp = &st->head;
    while (*pp != victim) pp = &(*pp)->next;
    *pp = victim->next;
    st->n_named--;
    struct kv_seq *kv = victim->kv;
    if (st->dir) {
        char *p = path_of(st, victim->owner, victim->id, ".session.json");
        if (p && unlink(p) != 0 && errno != ENOENT) slog_warn("cannot remove %s: %s", p, strerror(errno));
        free(p);
    }
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
    if (!st->dir) return false;
    char *path = path_of(st, owner, id, ".session.json");
    struct stat sb;
    bool yes = !path || lstat(path, &sb) == 0; /* out of memory: refuse rather than risk it */
    free(path);
    return yes;
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
    pthread_mutex_lock(&st->mu);
    attnd_status rc = ATTND_OK;
    struct kv_seq *evicted_kv = NULL;
    sess *victim = NULL;
    if (!find_named(st, owner, id) && st->n_named >= st->max_sessions && st->evict_lru) {
        for (sess *s = st->head; s; s = s->next)
            if (!s->anon && !s->busy && (!victim || s->last_use_ms < victim->last_use_ms)) victim = s;
        if (victim) {
            slog_info("session limit (%d) reached: evicting '%s', the least recently used", st->max_sessions, victim->id);
            evicted_kv = remove_locked(st, victim);
        }
    }
    if (find_named(st, owner, id)) {
        rc = attnd_fail(err, ATTND_ERR_BUSY, "session '%s' already exists", id);
    } else if (file_exists(st, owner, id)) { /* another model's (or a damaged) file: never overwritten */
        rc = attnd_fail(err, ATTND_ERR_BUSY, "session id '%s' is taken by a saved session this server did not load", id);
    } else if (st->n_named >= st->max_sessions) {
        rc = attnd_fail(err, ATTND_ERR_NOMEM, "session limit reached (%d); delete a session first", st->max_sessions);
    } else {
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

attnd_status sess_delete(sess_store *st, const char *owner, const char *id, struct kv_seq **kv, attnd_err *err) {
    *kv = NULL;
    pthread_mutex_lock(&st->mu);
    attnd_status rc = ATTND_OK;
    sess **pp = &st->head;
    while (*pp && ((*pp)->anon || strcmp((*pp)->id, id) || strcmp((*pp)->owner, own(owner)))) pp = &(*pp)->next;
    sess *s = *pp;
    if (!s) rc = attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found", id);
    else if (s->busy) rc = attnd_fail(err, ATTND_ERR_BUSY, "session '%s' is busy with another request", id);
    else {
        *pp = s->next;
        st->n_named--;
        *kv = s->kv;
        if (st->dir) {
            char *p = path_of(st, s->owner, s->id, ".session.json");
            if (p && unlink(p) != 0 && errno != ENOENT) slog_warn("cannot remove %s: %s", p, strerror(errno));
            free(p);
        }
        sess_free(s);
    }
    pthread_mutex_unlock(&st->mu);
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

/* Writes text to a new temporary file next to path and fsyncs it; *tmp_out (owned by the
 * caller) names it. */
static attnd_status write_tmp(const char *path, const char *text, char **tmp_out, attnd_err *err) {
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    *tmp_out = NULL;
    if (!tmp) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    static unsigned long counter;
    snprintf(tmp, n, "%s.tmp.%ld.%lu", path, (long)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        attnd_status rc = attnd_fail(err, ATTND_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    bool ok = off == len && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok) {
        attnd_status rc = attnd_fail(err, ATTND_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
    }
    *tmp_out = tmp;
    return ATTND_OK;
}

/* Makes renames in path's directory durable (the new directory entry itself is on disk). */
static attnd_status sync_dir_of(const char *path, attnd_err *err) {
    char *dir = strdup(path);
    if (!dir) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    int fd = open(slash ? (*dir ? dir : "/") : ".", O_RDONLY | O_DIRECTORY);
    attnd_status rc = ATTND_OK;
    if (fd < 0 || fsync(fd) != 0) rc = attnd_fail(err, ATTND_ERR_IO, "cannot sync directory of %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return rc;
}

attnd_status sess_write_atomic(const char *path, const char *text, attnd_err *err) {
    char *tmp;
    attnd_status rc = write_tmp(path, text, &tmp, err);
    if (rc != ATTND_OK) return rc;
    if (rename(tmp, path) != 0) {
        rc = attnd_fail(err, ATTND_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    } else {
        rc = sync_dir_of(path, err);
    }
    free(tmp);
    return rc;
}

/* The session's file contents (new string, NULL when out of memory; caller holds the lock). */
static char *snapshot_locked(const sess_store *st, const sess *s) {
    json_t *root = json_object(), *toks = json_array();
    json_object_set_new(root, "format", json_string("attnd-session"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "id", json_string(s->id));
    json_object_set_new(root, "model", json_string(st->model_tag));
    if (*s->owner) json_object_set_new(root, "owner", json_string(s->owner));
    json_object_set_new(root, "created", json_integer(s->created_ms));
    json_object_set_new(root, "last_used", json_integer(s->last_use_ms));
    for (int i = 0; i < s->n_tokens; i++) json_array_append_new(toks, json_integer(s->tokens[i]));
    json_object_set_new(root, "tokens", toks);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

/*
 * Snapshot under the lock, write and fsync the temporary file outside it, then rename under the
 * lock only when the snapshot is newer than what is on disk (a slower writer of an older
 * version must not win), and fsync the directory. Returns once the current version is durable.
 */
attnd_status sess_persist(sess_store *st, const char *owner, const char *id, attnd_err *err) {
    if (!st->dir) return ATTND_OK;
    pthread_mutex_lock(&st->mu);
    sess *s = find_named(st, owner, id);
    if (!s || s->version == s->persisted_version) {
        pthread_mutex_unlock(&st->mu);
        return ATTND_OK;
    }
    char *text = snapshot_locked(st, s);
    uint64_t version = s->version;
    char *path = path_of(st, s->owner, s->id, ".session.json");
    pthread_mutex_unlock(&st->mu);

    char *tmp = NULL;
    attnd_status rc = (!text || !path) ? attnd_fail(err, ATTND_ERR_NOMEM, "out of memory")
                                       : write_tmp(path, text, &tmp, err);
    free(text);
    if (rc == ATTND_OK) {
        pthread_mutex_lock(&st->mu);
        /* deleted meanwhile, or a newer version already renamed: this snapshot is dropped */
        sess *again = find_named(st, owner, id);
        bool newer = again && again->persisted_version < version;
        if (!newer) unlink(tmp);
        else if (rename(tmp, path) != 0) {
            rc = attnd_fail(err, ATTND_ERR_IO, "cannot write %s: %s", path, strerror(errno));
            unlink(tmp);
        } else {
            again->persisted_version = version;
        }
        pthread_mutex_unlock(&st->mu);
        /* also when a newer writer renamed: its directory entry may not be synced yet */
        if (rc == ATTND_OK && again) rc = sync_dir_of(path, err);
    }
    free(tmp);
    free(path);
    return rc;
}

int sess_persist_all(sess_store *st) {
    if (!st->dir) return 0;
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
        if (sess_persist(st, owners[i], ids[i], &e) != ATTND_OK) {
            slog_error("%s", e.msg);
            fails++;
        }
    }
    free(ids);
    free(owners);
    return fails;
}

// ---- JSON views ---------------------------------------------------------------------------

static json_t *info_locked(const sess *s) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(s->id));
    json_object_set_new(o, "object", json_string("session"));
    json_object_set_new(o, "tokens", json_integer(s->n_tokens));
    json_object_set_new(o, "kv_tokens", json_integer(s->kv ? s->kv_len : 0));
    json_object_set_new(o, "kv_bytes", json_integer((json_int_t)s->kv_bytes));
    json_object_set_new(o, "busy", json_boolean(s->busy));
    json_object_set_new(o, "created", json_integer(s->created_ms / 1000));
    json_object_set_new(o, "last_used", json_integer(s->last_use_ms / 1000));
    return o;
}

json_t *sess_info_json(sess_store *st, const char *owner, const char *id) {
    pthread_mutex_lock(&st->mu);
    sess *s = find_named(st, owner, id);
    json_t *o = s ? info_locked(s) : NULL;
    pthread_mutex_unlock(&st->mu);
    return o;
}

json_t *sess_list_json(sess_store *st, const char *owner) {
    json_t *root = json_object(), *arr = json_array();
    pthread_mutex_lock(&st->mu);
    for (sess *s = st->head; s; s = s->next)
        if (!s->anon && !strcmp(s->owner, own(owner))) json_array_append_new(arr, info_locked(s));
    pthread_mutex_unlock(&st->mu);
    json_object_set_new(root, "object", json_string("list"));
    json_object_set_new(root, "data", arr);
    return root;
}

int sess_count(sess_store *st) {
    pthread_mutex_lock(&st->mu);
    int n = st->n_named;
    pthread_mutex_unlock(&st->mu);
    return n;
}
