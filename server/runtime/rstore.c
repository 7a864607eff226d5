/*
 * rstore.c — stored responses (see rstore.h for the model and the file format).
 *
 * Entries live in one singly linked list under one mutex, like the session store: counts are
 * bounded by max_entries and every operation is far cheaper than generating the response.
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
    struct entry *next;
} entry;

struct rstore {
    pthread_mutex_t mu;
    entry *head;
    int n, max;
    statedir *sd;    /* NULL = memory only */
    char *model_tag;
};

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
static entry *entry_make(const char *owner, const json_t *response, const json_t *conversation, const char *session) {
    const json_t *id = json_object_get(response, "id");
    if (!json_is_string(id) || !statedir_id_valid(json_string_value(id)) || !json_is_array(conversation) || !session ||
        !statedir_id_valid(session) || !statedir_owner_valid(owner))
        return NULL;
    entry *e = calloc(1, sizeof(*e));
    if (!e) return NULL;
    snprintf(e->id, sizeof(e->id), "%s", json_string_value(id));
    snprintf(e->owner, sizeof(e->owner), "%s", owner_of(owner));
    snprintf(e->session, sizeof(e->session), "%s", session);
    e->response = json_deep_copy(response);
    e->conversation = json_deep_copy(conversation);
    if (!e->response || !e->conversation) {
        entry_free(e);
        return NULL;
    }
    return e;
}

// ---- loading ------------------------------------------------------------------------------

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
                              json_string_value(sess))) ||
             strcmp(e->id, id) || strcmp(owner, owner_of(json_string_value(json_object_get(root, "owner")))))
        why = "damaged (id, owner, session or conversation missing)";
    if (e && !why) {
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
    for (entry *e = s->head, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&s->mu);
    statedir_close(s->sd);
    free(s->model_tag);
    free(s);
}

// ---- entries ------------------------------------------------------------------------------

static attnd_status persist(const rstore *s, const entry *e, attnd_err *err) {
    if (!s->sd) return ATTND_OK;
    json_t *root = json_pack("{s:s,s:i,s:s,s:s,s:s,s:O,s:O}", "format", "attnd-response", "version", 1, "model",
                             s->model_tag, "owner", e->owner, "session", e->session, "response", e->response,
                             "conversation", e->conversation);
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    attnd_status rc = text ? statedir_write(s->sd, e->owner, e->id, SUFFIX, text, strlen(text), NULL, err)
                           : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    free(text);
    json_decref(root);
    return rc;
}

attnd_status rstore_put(rstore *s, const char *owner, const json_t *response, const json_t *conversation,
                        const char *session, attnd_err *err) {
    entry *e = entry_make(owner, response, conversation, session);
    if (!e)
        return attnd_fail(err, ATTND_ERR_INVALID, "a stored response needs a valid id, owner, session and conversation");
    pthread_mutex_lock(&s->mu);
    entry **at = find(s, e->owner, e->id);
    attnd_status rc = ATTND_OK;
    if (!*at && s->n >= s->max)
        rc = attnd_fail(err, ATTND_ERR_NOMEM, "%d responses are stored, the most this server keeps; delete some",
                        s->max);
    if (rc == ATTND_OK) rc = persist(s, e, err); /* under the lock: a delete cannot race the write */
    if (rc == ATTND_OK) {
        if (*at) {
            e->next = (*at)->next;
            entry_free(*at);
        } else {
            e->next = NULL;
            s->n++;
        }
        *at = e;
        e = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    entry_free(e);
    return rc;
}

attnd_status rstore_get(rstore *s, const char *owner, const char *id, json_t **response, json_t **conversation,
                        char session[SESS_ID_MAX + 1], attnd_err *err) {
    if (response) *response = NULL;
    if (conversation) *conversation = NULL;
    pthread_mutex_lock(&s->mu);
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
                           attnd_err *err) {
    if (orphan) orphan[0] = '\0';
    pthread_mutex_lock(&s->mu);
    entry **at = find(s, owner, id), *e = *at;
    if (e) {
        *at = e->next;
        s->n--;
        bool shared = false;
        for (entry *o = s->head; o && !shared; o = o->next)
            shared = !strcmp(o->session, e->session) && !strcmp(o->owner, e->owner);
        if (!shared && orphan) snprintf(orphan, SESS_ID_MAX + 1, "%s", e->session);
        attnd_err re;
        if (s->sd && statedir_remove(s->sd, e->owner, id, SUFFIX, NULL, &re) != ATTND_OK) slog_warn("%s", re.msg);
    }
    pthread_mutex_unlock(&s->mu);
    if (!e) return attnd_fail(err, ATTND_ERR_NOT_FOUND, "no stored response with id '%.64s'", id);
    entry_free(e);
    return ATTND_OK;
}

int rstore_count(rstore *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}
