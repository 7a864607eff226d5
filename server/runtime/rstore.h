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
 *    "session": "<id>", "stored": <unix ms>, "response": {...},
 *    "conversation": [{"role", "content"}, ...]}
 * ("stored" may be missing in older files: the response's created_at stands for it). Files of
 * another model are left alone; all of this model's are loaded at start.
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

/* dir may be NULL (memory only). At most max_entries responses in all (more: BUSY on put). */
attnd_status rstore_create(rstore **out, const char *dir, const char *model_tag, int max_entries, attnd_err *err);
void rstore_destroy(rstore *s); /* accepts NULL */

/*
 * Tenants' capacity: each owner keeps at most per_owner responses (0 = only max_entries bounds
 * them) taking at most per_owner_bytes of files (their JSON text; 0 = no cap), and a response
 * stored more than ttl_ms ago is removed, file included (0 = never). The names are those of the
 * settings (max_responses_per_key, response_bytes_per_key, response_ttl_s), which the quota
 * errors quote. Applies at once: responses already past the TTL (loaded at start) go now; an
 * owner already over a cap keeps what it has and cannot store more. With a TTL, a thread of the
 * store removes each response (memory and file) when its TTL passes, so disk is freed without
 * any request using the store; every put, get, delete and count also first removes what has
 * expired. A file that cannot be removed keeps its response, retried every second.
 */
typedef struct rstore_limits {
    int per_owner;
    size_t per_owner_bytes;
    int64_t ttl_ms;
} rstore_limits;
void rstore_set_limits(rstore *s, const rstore_limits *lim);

/* Whether owner may store one more response now, before the work of making it: OK, or BUSY with
 * a message naming the full quota and its setting (the caller answers 429). */
attnd_status rstore_admit(rstore *s, const char *owner, attnd_err *err);

/*
 * Stores response (borrowed; copied) under id = its "id" field, with the conversation (borrowed;
 * copied) and the session id. Replaces an entry of the same id. Durable before returning when
 * the store has a directory (file fsync, rename, directory fsync). Errors: INVALID (no valid id),
 * BUSY (a quota or max_entries is full: the message names it), NOMEM (out of memory), IO (the
 * file could not be made durable; *sys_errno, when not NULL, gets the errno: ENOSPC, EROFS...).
 * On IO the store holds what its directory holds: nothing new when the write failed before the
 * rename, the new entry when only the directory sync failed (the file is in place, but the
 * caller must not acknowledge it).
 */
attnd_status rstore_put(rstore *s, const char *owner, const json_t *response, const json_t *conversation,
                        const char *session, int *sys_errno, attnd_err *err);

/* Copies of what is stored under id (any out pointer may be NULL). NOT_FOUND. */
attnd_status rstore_get(rstore *s, const char *owner, const char *id, json_t **response, json_t **conversation,
                        char session[SESS_ID_MAX + 1], attnd_err *err);

/* Removes id and its file, durably (unlink and directory fsync) before it leaves memory.
 * *orphan (may be NULL) receives the session id when no other stored response uses that session
 * any more ("" otherwise), so the caller can delete the session. NOT_FOUND, or IO when the
 * removal could not be made durable (*sys_errno says why): when the file could not be removed the
 * response stays; when only the directory sync failed the file is gone and so is the response
 * (memory = disk), though a crash might still bring it back. */
attnd_status rstore_delete(rstore *s, const char *owner, const char *id, char orphan[SESS_ID_MAX + 1],
                           int *sys_errno, attnd_err *err);

int rstore_count(rstore *s);

#endif
