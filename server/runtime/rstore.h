/*
 * rstore.h — stored responses of /v1/responses (store: true): each is the Response object a GET
 * returns, the conversation a follow-up (previous_response_id) continues, and the id of the
 * durable session whose KV cache holds that conversation (sess.h). A chain of follow-ups shares
 * its first response's session, so each turn reuses the KV of the turns before it.
 *
 * Owners (several API keys): a response belongs to the key that made it, like a session
 * (sess.h); another owner's response is "not found". "" or NULL = none.
 *
 * On disk (when a state directory is configured) every response is one JSON file next to the
 * sessions, <state_dir>/[<owner>~]<id>.response.json, written atomically:
 *   {"format": "attnd-response", "version": 1, "model": "<model tag>", "owner": "<tag>",
 *    "session": "<id>", "response": {...}, "conversation": [{"role", "content"}, ...]}
 * Files of another model are left alone; all of this model's are loaded at start.
 *
 * Thread-safety: every function takes the store's mutex. Nothing handed out is shared: getters
 * return copies.
 */
#ifndef ATTND_SERVER_RSTORE_H
#define ATTND_SERVER_RSTORE_H

#include <jansson.h>

#include "attnd/common.h"
#include "sess.h"

typedef struct rstore rstore;

/* dir may be NULL (memory only). At most max_entries responses (more: ATTND_ERR_NOMEM on put). */
attnd_status rstore_create(rstore **out, const char *dir, const char *model_tag, int max_entries, attnd_err *err);
void rstore_destroy(rstore *s); /* accepts NULL */

/*
 * Stores response (borrowed; copied) under id = its "id" field, with the conversation (borrowed;
 * copied) and the session id. Replaces an entry of the same id. Persists before returning when
 * the store has a directory. Errors: INVALID (no valid id), NOMEM (max_entries reached or out of
 * memory), IO (the file could not be written; the entry is not kept).
 */
attnd_status rstore_put(rstore *s, const char *owner, const json_t *response, const json_t *conversation,
                        const char *session, attnd_err *err);

/* Copies of what is stored under id (any out pointer may be NULL). NOT_FOUND. */
attnd_status rstore_get(rstore *s, const char *owner, const char *id, json_t **response, json_t **conversation,
                        char session[SESS_ID_MAX + 1], attnd_err *err);

/* Removes id (and its file). *orphan (may be NULL) receives the session id when no other stored
 * response uses that session any more ("" otherwise), so the caller can delete the session.
 * NOT_FOUND. */
attnd_status rstore_delete(rstore *s, const char *owner, const char *id, char orphan[SESS_ID_MAX + 1],
                           attnd_err *err);

int rstore_count(rstore *s);

#endif
