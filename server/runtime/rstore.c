/*
 * rstore.c — stored responses (see rstore.h for the model and the file format).
 *
 * Entries live in one singly linked list under one mutex, like the session store: counts are
 * bounded by max_entries and every operation is far cheaper than generating the response.
 * Durability follows the session store's rule: nothing is in memory that a restart would not
 * load, and a write or removal that could not be made durable is reported, never swallowed.
 */
#include "rstore.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slog.h"
#include "statedir.h"

typedef struct entry {
    char id[SESS_ID_MAX + 1];
    char owner[SESS_OWNER_MAX + 1]; /* "" = none */
    char session[SESS_ID_MAX + 1];
    json_t *response, *conversation; /* owned */
    int64_t stored_ms;               /* when it was stored (unix ms): the TTL counts from it */
    size_t bytes;                    /* its file's size (the JSON text), for the byte quota */
    struct entry *next;
} entry;

struct rstore {
    pthread_mutex_t mu;
    entry *head;
    int n, max;
    rstore_limits lim; /* per owner; zeros = none */
    statedir *sd;      /* NULL = memory only */
    char *model_tag;
    pthread_t sweeper; /* removes expired responses on time (started with a TTL) */
    bool sweeping, stop;
    pthread_cond_t wake; /* the sweeper's: stop, a new TTL, or a first entry */
};

/* The longest the sweeper sleeps: the bound on a wall-clock jump's delay. */
#define SWEEP_MAX_MS 60000

static const char SUFFIX[] = ".response.json";

static void entry_free(entry *e) {
    if (!e) return;
    json_decref(e->response);
    json_decref(e->conversation);
    free(e);
}

static const char *owner_of(const char *owner) { return owner ? owner : ""; }

static entry **find(rstore *s, const char *owner, const char *id) {
    entry **p = &s->head;
    while (*p && (strcmp((*p)->id, id) || strcmp((*p)->owner, owner_of(owner)))) p = &(*p)->next;
    return p;
}

/* An entry from a parsed file or a put: validates the pieces and copies them. */
static entry *entry_make(const char *owner, const json_t *response, const json_t *conversation, const char *session,
                         int64_t stored_ms) {
    const json_t *id = json_object_get(response, "id");
    if (!json_is_string(id) || !statedir_id_valid(json_string_value(id)) || !json_is_array(conversation) || !session ||
        !statedir_id_valid(session) || !statedir_owner_valid(owner))
        return NULL;
    entry *e = calloc(1, sizeof(*e));
    if (!e) return NULL;
    snprintf(e->id, sizeof(e->id), "%s", json_string_value(id));
    snprintf(e->owner, sizeof(e->owner), "%s", owner_of(owner));
    snprintf(e->session, sizeof(e->session), "%s", session);
    e->stored_ms = stored_ms;
    e->response = json_deep_copy(response);
    e->conversation = json_deep_copy(conversation);
    if (!e->response || !e->conversation) {
        entry_free(e);
        return NULL;
    }
    return e;
}

// ---- loading ------------------------------------------------------------------------------

/* When a loaded file's response was stored: its "stored" field, else (older files) the
 * response's created_at, else now. */
static int64_t stored_at(const json_t *root) {
    const json_t *st = json_object_get(root, "stored"),
                 *ca = json_object_get(json_object_get(root, "response"), "created_at");
    if (json_is_integer(st) && json_integer_value(st) > 0) return (int64_t)json_integer_value(st);
    if (json_is_integer(ca) && json_integer_value(ca) > 0 && json_integer_value(ca) < INT64_MAX / 1000)
        return (int64_t)json_integer_value(ca) * 1000;
    return (int64_t)attnd_unix_ms();
}

/* A state directory entry (statedir_scan): a response file of this model is loaded. */
static void load_one(void *user, const char *owner, const char *id) {
    rstore *s = user;
    char *path = statedir_path(s->sd, owner, id, SUFFIX);
    if (!path) return;
    char *text = NULL;
    size_t len = 0;
    attnd_err re;
    json_error_t je;
    const char *why = NULL;
    json_t *root = NULL;
    bool read = statedir_read(s->sd, owner, id, SUFFIX, SIZE_MAX, &text, &len, NULL, &re) == ATTND_OK;
    if (read) root = json_loadb(text, len, 0, &je);
    free(text);
    entry *e = NULL;
    json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version"),
           *model = json_object_get(root, "model"), *sess = json_object_get(root, "session");
    if (!read) why = re.msg;
    else if (!root) why = je.text;
    else if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "attnd-response") || !json_is_integer(ver) ||
             json_integer_value(ver) != 1)
        why = "not an attnd-response v1 file";
    else if (!json_is_string(model) || strcmp(json_string_value(model), s->model_tag))
        ; /* another model's: not ours to load */
    else if (s->n >= s->max)
        why = "the stored response limit is reached";
    else if (!(e = entry_make(owner, json_object_get(root, "response"), json_object_get(root, "conversation"),
                              json_string_value(sess), stored_at(root))) ||
             strcmp(e->id, id) || strcmp(owner, owner_of(json_string_value(json_object_get(root, "owner")))))
        why = "damaged (id, owner, session or conversation missing)";
    if (e && !why) {
        e->bytes = len;
        e->next = s->head;
        s->head = e;
        s->n++;
        e = NULL;
    }
    if (why) slog_warn("response file %s skipped: %s", path, why);
    entry_free(e);
    json_decref(root);
    free(path);
}

attnd_status rstore_create(rstore **out, const char *dir, const char *model_tag, int max_entries, attnd_err *err) {
    *out = NULL;
    rstore *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->max = max_entries > 0 ? max_entries : 1;
    if (!(s->model_tag = strdup(model_tag ? model_tag : ""))) {
        rstore_destroy(s);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    attnd_status rc = statedir_load(&s->sd, dir, SUFFIX, load_one, s, err); /* loads every response */
    if (rc != ATTND_OK) {
        rstore_destroy(s);
        return rc;
    }
    *out = s;
    return ATTND_OK;
}

void rstore_destroy(rstore *s) {
    if (!s) return;
    if (s->sweeping) attnd_thread_stop(s->sweeper, &s->mu, &s->wake, &s->stop);
    pthread_cond_destroy(&s->wake);
    for (entry *e = s->head, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&s->mu);
    statedir_close(s->sd);
    free(s->model_tag);
    free(s);
}

// ---- limits and expiry --------------------------------------------------------------------

static void *sweep_main(void *arg);

void rstore_set_limits(rstore *s, const rstore_limits *lim) {
    pthread_mutex_lock(&s->mu);
    s->lim = *lim;
    if (s->lim.per_owner < 0) s->lim.per_owner = 0;
    if (s->lim.ttl_ms < 0) s->lim.ttl_ms = 0;
    if (s->lim.ttl_ms && !s->sweeping) {
        s->sweeping = pthread_create(&s->sweeper, NULL, sweep_main, s) == 0;
        if (!s->sweeping) slog_warn("no thread for response expiry: expired responses go when the store is next used");
    }
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    rstore_count(s); /* expires what a restart loaded past the TTL */
}

/* Removes the responses past the TTL, files first (caller holds the lock). One whose file cannot
 * be removed stays, as on disk, and is tried again next time. */
static void expire_locked(rstore *s) {
    if (!s->lim.ttl_ms) return;
    int64_t now = (int64_t)attnd_unix_ms();
    for (entry **p = &s->head; *p;) {
        entry *e = *p;
        attnd_err re;
        if (now - e->stored_ms <= s->lim.ttl_ms) {
            p = &e->next;
        } else if (s->sd && statedir_remove(s->sd, e->owner, e->id, SUFFIX, NULL, &re) != ATTND_OK) {
            slog_warn("expired response %s stays: %s", e->id, re.msg);
            p = &e->next;
        } else {
            slog_info("response %s expired (stored more than %lld s ago)", e->id, (long long)(s->lim.ttl_ms / 1000));
            *p = e->next;
            s->n--;
            entry_free(e);
        }
    }
}

/* Milliseconds until the first entry expires (caller holds the lock), at most SWEEP_MAX_MS; a
 * second for one already due (expire_locked could not remove its file). */
static int64_t next_expiry_ms_locked(const rstore *s) {
    if (!s->lim.ttl_ms) return SWEEP_MAX_MS;
    int64_t now = (int64_t)attnd_unix_ms(), wait = SWEEP_MAX_MS;
    for (const entry *e = s->head; e; e = e->next) {
        int64_t left = e->stored_ms + s->lim.ttl_ms + 1 - now;
        if (left <= 0) left = 1000; /* due and still here: its file could not be removed; retry */
        if (left < wait) wait = left;
    }
    return wait;
}

/* The sweeper: sleeps until the first entry is due, then expires what is due, so a response's
 * file leaves the disk at its TTL without any request touching the store. A put into an empty
 * store, a new TTL and destroy wake it (the entries it waits for only ever get younger). */
static void *sweep_main(void *arg) {
    rstore *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        expire_locked(s);
        struct timespec until;
        attnd_deadline(&until, (int)next_expiry_ms_locked(s));
        pthread_cond_timedwait(&s->wake, &s->mu, &until);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Whether owner may hold one more entry of bytes bytes (replacing old, NULL = none) (caller holds
 * the lock): OK, or BUSY naming the full quota. */
static attnd_status admit_locked(rstore *s, const char *owner, const entry *old, size_t bytes, attnd_err *err) {
    int n = 0;
    size_t used = 0;
    for (const entry *e = s->head; e; e = e->next)
        if (!strcmp(e->owner, owner_of(owner)) && e != old) n++, used += e->bytes;
    if (!old && s->n >= s->max)
        return attnd_fail(err, ATTND_ERR_BUSY,
                          "%d responses are stored, the most this server keeps (max_sessions); delete some", s->max);
    if (s->lim.per_owner && n >= s->lim.per_owner)
        return attnd_fail(err, ATTND_ERR_BUSY,
                          "this API key has %d stored responses, its quota (max_responses_per_key); delete some or "
                          "let them expire (response_ttl_s)", n);
    if (s->lim.per_owner_bytes && (used + bytes > s->lim.per_owner_bytes || (!bytes && used >= s->lim.per_owner_bytes)))
        return attnd_fail(err, ATTND_ERR_BUSY,
                          "this API key's stored responses take %zu bytes; %zu more would pass its quota of %zu "
                          "(response_bytes_per_key); delete some", used, bytes, s->lim.per_owner_bytes);
    return ATTND_OK;
}

attnd_status rstore_admit(rstore *s, const char *owner, attnd_err *err) {
    pthread_mutex_lock(&s->mu);
    expire_locked(s);
    attnd_status rc = admit_locked(s, owner, NULL, 0, err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

// ---- entries ------------------------------------------------------------------------------

/* The file's text of e (new string; NULL when out of memory). */
static char *file_text(const rstore *s, const entry *e) {
    json_t *root = json_pack("{s:s,s:i,s:s,s:s,s:s,s:I,s:O,s:O}", "format", "attnd-response", "version", 1, "model",
                             s->model_tag, "owner", e->owner, "session", e->session, "stored", (json_int_t)e->stored_ms,
                             "response", e->response, "conversation", e->conversation);
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return text;
}

/* Writes text as e's file: stage, commit, directory sync. *renamed: the file now holds text
 * (also when only the sync failed after it). */
static attnd_status persist(rstore *s, const entry *e, const char *text, bool *renamed, int *sys_errno,
                            attnd_err *err) {
    *renamed = false;
    if (!s->sd) return ATTND_OK;
    statedir_staged *staged = NULL;
    attnd_status rc = statedir_stage(s->sd, e->owner, e->id, SUFFIX, text, strlen(text), &staged, sys_errno, err);
    if (rc == ATTND_OK) rc = statedir_commit(s->sd, staged, sys_errno, err);
    if (rc == ATTND_OK) {
        *renamed = true;
        rc = statedir_sync(s->sd, sys_errno, err);
    }
    return rc;
}

/* e takes the place of *at (an entry of the same id, or the end of the list). */
static void insert_locked(rstore *s, entry **at, entry *e) {
    if (*at) {
        e->next = (*at)->next;
        entry_free(*at);
    } else {
        e->next = NULL;
        if (s->n++ == 0) pthread_cond_signal(&s->wake); /* the sweeper may wait for nothing */
    }
    *at = e;
}

attnd_status rstore_put(rstore *s, const char *owner, const json_t *response, const json_t *conversation,
                        const char *session, int *sys_errno, attnd_err *err) {
    if (sys_errno) *sys_errno = 0;
    entry *e = entry_make(owner, response, conversation, session, (int64_t)attnd_unix_ms());
    if (!e)
        return attnd_fail(err, ATTND_ERR_INVALID, "a stored response needs a valid id, owner, session and conversation");
    char *text = file_text(s, e);
    if (!text) {
        entry_free(e);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    e->bytes = strlen(text);
    pthread_mutex_lock(&s->mu);
    expire_locked(s);
    entry **at = find(s, e->owner, e->id);
    bool renamed = false;
    attnd_status rc = admit_locked(s, e->owner, *at, e->bytes, err);
    if (rc == ATTND_OK) rc = persist(s, e, text, &renamed, sys_errno, err); /* under the lock: no delete races it */
    if (rc == ATTND_OK || renamed) { /* memory holds what the directory holds */
        insert_locked(s, at, e);
        e = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(text);
    entry_free(e);
    return rc;
}

attnd_status rstore_get(rstore *s, const char *owner, const char *id, json_t **response, json_t **conversation,
                        char session[SESS_ID_MAX + 1], attnd_err *err) {
    if (response) *response = NULL;
    if (conversation) *conversation = NULL;
    pthread_mutex_lock(&s->mu);
    expire_locked(s);
    entry *e = id ? *find(s, owner, id) : NULL;
    if (e) {
        if (response) *response = json_deep_copy(e->response);
        if (conversation) *conversation = json_deep_copy(e->conversation);
        if (session) snprintf(session, SESS_ID_MAX + 1, "%s", e->session);
    }
    pthread_mutex_unlock(&s->mu);
    if (!e) return attnd_fail(err, ATTND_ERR_NOT_FOUND, "no stored response with id '%.64s'", id ? id : "");
    if ((response && !*response) || (conversation && !*conversation)) {
        if (response) json_decref(*response), *response = NULL;
        if (conversation) json_decref(*conversation), *conversation = NULL;
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    return ATTND_OK;
}

attnd_status rstore_delete(rstore *s, const char *owner, const char *id, char orphan[SESS_ID_MAX + 1],
                           int *sys_errno, attnd_err *err) {
    if (orphan) orphan[0] = '\0';
    if (sys_errno) *sys_errno = 0;
    pthread_mutex_lock(&s->mu);
    expire_locked(s);
    entry **at = find(s, owner, id), *e = *at;
    attnd_status rc = e ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOT_FOUND, "no stored response with id '%.64s'", id);
    /* the file first: a response whose file stays stays too, as a restart would find it; one whose
     * file went but whose directory sync failed goes (memory = disk), the answer still an error */
    bool gone = true;
    if (e && s->sd && (rc = statedir_remove(s->sd, e->owner, id, SUFFIX, sys_errno, err)) != ATTND_OK) {
        gone = !statedir_exists(s->sd, e->owner, id, SUFFIX);
        slog_error("response %s %s: %s", id, gone ? "deleted, but not durably" : "not deleted", err ? err->msg : "I/O error");
    }
    if (e && gone) {
        *at = e->next;
        s->n--;
        bool shared = false;
        for (entry *o = s->head; o && !shared; o = o->next)
            shared = !strcmp(o->session, e->session) && !strcmp(o->owner, e->owner);
        if (!shared && orphan) snprintf(orphan, SESS_ID_MAX + 1, "%s", e->session);
        entry_free(e);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int rstore_count(rstore *s) {
    pthread_mutex_lock(&s->mu);
    expire_locked(s);
    int n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}
