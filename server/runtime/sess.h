/*
 * sess.h — the session store: named conversations whose token history is the durable truth,
 * each with an optional KV cache handle, plus anonymous prompt-cache entries.
 *
 * A session's KV cache (a kv_seq) is created, extended, evicted and destroyed only by the
 * scheduler thread; this store merely records the handle so every thread can see which
 * sessions hold KV memory. The store itself never calls the engine.
 *
 * On disk (when a state directory is configured) every named session is one JSON file,
 * <state_dir>/<id>.session.json (sess_file.h), written atomically by statedir.h:
 *   {"format": "attnd-session", "version": 1, "id": "...", "model": "<model tag>",
 *    "created": <unix ms>, "last_used": <unix ms>, "tokens": [1, 415, ...]}
 * Files whose model tag differs from the loaded model's are left alone: not loaded, and their ids
 * cannot be created (409), so they are never overwritten. The directory must be writable.
 *
 * Owners: with several API keys, each session and prompt-cache entry belongs to the key that
 * made it (an owner tag derived from the key, "" or NULL = none). Every lookup takes the owner:
 * another owner's session is "not found", not listed, and its cached prompt never matched; its
 * file is <owner>~<id>.session.json with an "owner" field.
 *
 * Thread-safety: every function takes the store's mutex; sess pointers handed out by
 * sess_acquire stay valid until sess_release (a busy session cannot be deleted).
 */
#ifndef ATTND_SERVER_SESS_H
#define ATTND_SERVER_SESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

struct kv_seq;

#define SESS_ID_MAX 64
#define SESS_OWNER_MAX 16 /* hex digits of an owner tag */

typedef struct sess {
    char id[SESS_ID_MAX + 1]; /* "" for anonymous prompt-cache entries */
    char owner[SESS_OWNER_MAX + 1]; /* the API key's tag ("" = none): only it can see this entry */
    bool anon;
    int32_t *tokens;          /* (n_tokens) history: every prompt and generated token, in order */
    int n_tokens;
    size_t cap_tokens;
    struct kv_seq *kv;        /* owned by the scheduler; NULL = evicted (rebuilt from tokens) */
    int kv_len;               /* tokens of `tokens` whose KV is in kv */
    size_t kv_bytes;
    bool busy;                /* a request holds it: queued for the scheduler, or running */
    bool running;             /* in a scheduler slot: its KV is in use and cannot be evicted
                                 (a busy session still queued can lose its KV: the scheduler
                                 rebuilds it from the tokens when the job starts) */
    int64_t created_ms, last_use_ms;
    uint64_t version, persisted_version;
    int32_t *disk;            /* (n_disk) the history its file holds, when on_disk: a write that
                                 fails puts the history back to it, so memory stays what a
                                 restart would load */
    int n_disk;
    bool on_disk;
    /* shared store only (sess_store_share): the stored version tokens came from, and which
     * acquire (turn) of this copy last released and was last saved */
    uint64_t rversion, turn, released_turn, saved_turn;
    struct sess *next;
} sess;

typedef struct sess_store sess_store;
struct sess_redis;

/* state_dir may be NULL (no persistence); it is created when missing, and ATTND_ERR_IO when it
 * cannot be created, read or written. model_tag identifies the vocabulary the token ids belong
 * to. Loads the saved sessions of this model. */
attnd_status sess_store_create(sess_store **out, const char *state_dir, const char *model_tag, int max_sessions,
                               attnd_err *err);
/* All KV handles must have been released by the scheduler first (sess_take_kv). */
void sess_store_destroy(sess_store *st);

/*
 * Shared mode: named sessions live in a shared store (sess_redis.h; several instances use the
 * same one) and the entries here are a cache of it, with their KV. Takes ownership of shared;
 * call once, before serving, on a store made without a state directory.
 *   - sess_create writes the new (empty) record there first: an id taken on any instance is 409;
 *   - sess_acquire reads the record every time: a session made or continued on another instance
 *     is loaded, and a local copy keeps the KV of the history it shares with the record (the
 *     rest is recomputed); one deleted elsewhere is 404;
 *   - sess_persist_turn writes the turn's history if the record still has the version it was
 *     read at; a turn of another request (another instance) saved since makes it BUSY (409) and
 *     nothing is merged;
 *   - sess_delete removes the record; get/list read the records.
 * An unreachable store is ATTND_ERR_IO ("retry shortly"); it recovers by itself. At
 * max_sessions the least recently used idle local copy is dropped (the record stays).
 */
void sess_store_share(sess_store *st, struct sess_redis *shared);

/* The state directory's rules (statedir.h), for ids and owners that never reach a file too:
 * 1..64 characters of [A-Za-z0-9._-], not starting with '.'. */
bool sess_id_valid(const char *id);
/* True for NULL or 0..16 lower-case hex digits. */
bool sess_owner_valid(const char *owner);

/*
 * Tenants' capacity: each owner (API key; "" = requests without one, a single tenant) keeps at
 * most per_owner named sessions (0 = only max_sessions bounds them). At its quota, or at
 * max_sessions, a new session of owner evicts owner's own least recently used idle session
 * (sess_store_set_lifetime's evict_lru), never another owner's; without one to evict it is
 * refused (NOMEM, the message naming max_sessions_per_key or max_sessions: the API's 429).
 * In shared mode the shared store counts owner's records against per_owner instead (all
 * instances together, sess_redis.h), with no eviction: a create at the quota is refused there
 * (NOMEM naming max_sessions_per_key); max_sessions bounds only this instance's local copies.
 */
void sess_store_set_quota(sess_store *st, int per_owner);
/* Whether owner may make one more named session now (room, or an idle one of its own to evict):
 * OK, or NOMEM with sess_create's message. For a path that makes sessions another way (a fork)
 * and must refuse before its work; sess_create applies the same rule under its lock. */
attnd_status sess_quota_check(sess_store *st, const char *owner, attnd_err *err);

/* Creates a named session. id NULL = generate one. Copies the final id into out_id. At owner's
 * quota or max_sessions, evicts owner's least recently used idle session when the store allows
 * it (sess_store_set_quota). Errors: INVALID (bad id), BUSY (id taken, also by a file not
 * loaded -> 409), NOMEM (a quota full with none evictable, or OOM). */
attnd_status sess_create(sess_store *st, const char *owner, const char *id, char out_id[SESS_ID_MAX + 1],
                         attnd_err *err);
/* Marks the session busy and returns it. NOT_FOUND, or BUSY when a request is running on it. */
attnd_status sess_acquire(sess_store *st, const char *owner, const char *id, sess **out, attnd_err *err);
/* The idle anonymous entry of owner sharing the longest prefix with tokens, marked busy; creates
 * one while fewer than max_anon exist, else reuses the least recently used idle one (emptied
 * first when it belonged to another owner). NULL when all are busy. */
sess *sess_acquire_anon(sess_store *st, const char *owner, const int32_t *tokens, int n, int max_anon);
/* Ends a request: the history becomes tokens[0..n) (copied), busy cleared, last use now. */
attnd_status sess_release(sess_store *st, sess *s, const int32_t *tokens, int n, attnd_err *err);
/* Records the KV state after the scheduler changed it. */
void sess_set_kv(sess_store *st, sess *s, struct kv_seq *kv, int kv_len, size_t kv_bytes);
/* Detaches and returns the KV handle of the entry used least recently that is not running in a
 * scheduler slot (idle entries first, anonymous before named of the same age; then sessions
 * whose request still waits in the queue: admission does not count their KV, so it must stay
 * evictable), or NULL when none holds KV. The caller (the scheduler) destroys it; the entry
 * keeps its token history. */
struct kv_seq *sess_evict_lru(sess_store *st);
/* The scheduler took the entry into a slot (running = true) or let it go: only a running
 * entry's KV is out of sess_evict_lru's reach. sess_release and sess_abandon clear it. */
void sess_set_running(sess_store *st, sess *s, bool running);
/* Ends a request that never reached the scheduler: clears busy, history unchanged. */
void sess_abandon(sess_store *st, sess *s);
/* Session lifetime: named sessions idle for more than ttl_ms are removed by sess_expire (0 =
 * never); with evict_lru, sess_create at the owner's quota or max_sessions removes that owner's
 * least recently used idle session (file included) instead of failing. Defaults: no TTL, no
 * eviction. */
void sess_store_set_lifetime(sess_store *st, int64_t ttl_ms, bool evict_lru);
/* Where the KV handles of sessions removed by the store itself go (the scheduler destroys them
 * on its thread); fn is called outside the store's lock. Must be set before any session holds
 * KV. */
void sess_store_set_kv_sink(sess_store *st, void (*fn)(void *user, struct kv_seq *kv), void *user);
/* Removes the idle named sessions past the TTL (files included); returns how many. */
int sess_expire(sess_store *st);
/* Removes a named session and its file, durably (unlink and directory fsync) before it is gone
 * from memory. Hands back its KV handle in *kv for the scheduler to destroy. NOT_FOUND, BUSY,
 * IO (*sys_errno says why): when the file could not be removed the session stays; when only the
 * directory sync failed the file is gone and so is the session (memory = disk; its KV then goes
 * to the store's KV sink, not *kv), though a crash might bring it back. */
attnd_status sess_delete(sess_store *st, const char *owner, const char *id, struct kv_seq **kv, int *sys_errno,
                         attnd_err *err);
/* Detaches every KV handle (shutdown): calls fn on each. */
void sess_take_all_kv(sess_store *st, void (*fn)(struct kv_seq *kv));

/* Writes a named session's history to disk if it changed (no-op without a state dir): file
 * fsync, rename, directory fsync, so it survives a crash once this returns OK. An older
 * snapshot is never renamed over a newer one (per-session version counter). Start-up removes
 * the temporary files of writes a crash interrupted.
 * A write that fails (IO, with the system's errno in *sys_errno when not NULL: ENOSPC, EROFS,
 * EIO...) puts the in-memory history back to what the file holds, and a session that never
 * reached its file is removed, so memory never holds what a restart would lose: the caller
 * must not acknowledge the turn (507 / 503). A session busy with a newer turn is left to that
 * turn's write. */
attnd_status sess_persist(sess_store *st, const char *owner, const char *id, int *sys_errno, attnd_err *err);
/* sess_persist for the turn that acquired the session as acquire number turn (the sess's turn
 * field right after sess_acquire): in shared mode, that turn's history is written (IO when the
 * store is unreachable, *sys_errno 0), or BUSY when the session was acquired again since (the
 * turn was superseded, never saved) or another turn was saved first. turn 0 = the latest. Same
 * as sess_persist without a shared store. */
attnd_status sess_persist_turn(sess_store *st, const char *owner, const char *id, uint64_t turn, int *sys_errno,
                               attnd_err *err);
/* Persists every changed session (shutdown). Returns the number of failures. */
int sess_persist_all(sess_store *st);

/* A named session as the API shows it: a copy taken under the lock (sess_json.h renders it). */
typedef struct sess_info {
    char id[SESS_ID_MAX + 1];
    int n_tokens, kv_tokens;
    size_t kv_bytes;
    bool busy;
    int64_t created_ms, last_use_ms;
} sess_info;

/* Copies owner's named session id into *out; false when there is none. */
bool sess_get_info(sess_store *st, const char *owner, const char *id, sess_info *out);
/* sess_get_info with the reason: NOT_FOUND, or IO when the shared store is unreachable. */
attnd_status sess_lookup_info(sess_store *st, const char *owner, const char *id, sess_info *out, attnd_err *err);
/* *out = owner's named sessions, most recently created first (new array, caller frees); returns
 * how many, -1 when out of memory (*out NULL). */
int sess_list_info(sess_store *st, const char *owner, sess_info **out);
int sess_count(sess_store *st);

/* Length of the common prefix of a[0..na) and b[0..nb). */
int sess_common_prefix(const int32_t *a, int na, const int32_t *b, int nb);

#endif
