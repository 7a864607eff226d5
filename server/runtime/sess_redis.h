/*
 * sess_redis.h — the shared session store's Redis client (hiredis): one record per named
 * session, so that several attnd instances can continue each other's sessions (sess.h's shared
 * mode is built on it). It knows nothing of KV caches or of the local store.
 *
 * A record is one Redis hash at <prefix>[<owner>~]<id> (the state directory's names, sess.h):
 *   v    the session's version: 1 when created (empty), +1 for every acknowledged turn
 *   rec  the session file's JSON (sess_file.h): id, owner, model tag, times, token history
 *   w    a random id of the write that stored it (a retry of that write is not a conflict)
 * A write names the version it read (sess_redis_put's expect); a Lua script compares and writes
 * atomically on the server, so of two turns racing from the same version exactly one wins and the
 * other is refused, never merged. Every write sets the key's TTL (ttl_s; 0 = none), so an idle
 * session disappears from Redis after ttl_s.
 *
 * Quota: a Redis set at <prefix>[<owner>~].sessions (no session id starts with '.') holds each
 * owner's session ids; a create counts it in the same script, so instances creating at once never
 * overshoot the owner's quota (sess_redis_set_quota). Ids whose record expired are dropped from it
 * when it looks full; sess_redis_delete removes the id with the record.
 *
 * Failures: Redis unreachable, or a call not answered within its deadline (sess_redis_set_timeout,
 * default 2 s: waiting for a connection, connecting and the answer together; a listing's
 * commands share one), is ATTND_ERR_IO with a message naming the server; the next call reconnects
 * by itself (once per call), so service resumes when Redis returns. A hung Redis (stopped, not
 * gone) therefore fails every call within its deadline, however many wait. The first failure
 * and the recovery are logged once each.
 *
 * Thread-safety: any thread may call any function. Calls share a pool of at most SESSREDIS_POOL
 * connections (each call is one round trip, ~0.1 ms on loopback); a connection whose answer timed
 * out is closed, never reused.
 */
#ifndef ATTND_SERVER_SESS_REDIS_H
#define ATTND_SERVER_SESS_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

typedef struct sess_redis sess_redis;

/* A session as stored. */
typedef struct sess_redis_rec {
    uint64_t version;      /* 1 = created, +1 per acknowledged turn */
    int64_t created_ms, last_use_ms;
    int32_t *tokens;       /* (n_tokens) owned by the record (sess_redis_rec_free) */
    int n_tokens;
} sess_redis_rec;

void sess_redis_rec_free(sess_redis_rec *rec); /* frees the tokens; accepts NULL */

// ---- pure functions (no Redis): the URL, the key, the record ----------------------------

/* "redis://HOST[:PORT][/DB]" (PORT default 6379, DB default 0) into host (cap bytes), *port,
 * *db. ATTND_ERR_INVALID with a message saying what is wrong. */
attnd_status sess_redis_url_parse(const char *url, char *host, size_t cap, int *port, int *db, attnd_err *err);
/* The record's text for owner's session id (new string, caller frees; NULL when out of memory). */
char *sess_redis_rec_encode(const char *owner, const char *id, const char *model_tag, const sess_redis_rec *rec);
/* A stored record back: version is the "v" field's text, text/len the "rec" field. The record
 * must be model_tag's and name the same owner and id as its key (a record copied under another
 * key is damaged). ATTND_ERR_FORMAT (damaged), ATTND_ERR_UNSUPPORTED (another model's record).
 * out->tokens is owned by the caller on OK only. */
attnd_status sess_redis_rec_decode(const char *version, const char *text, size_t len, const char *owner,
                                  const char *id, const char *model_tag, sess_redis_rec *out, attnd_err *err);

// ---- the client ---------------------------------------------------------------------------

/* Parses url and keeps prefix, ttl_s and model_tag (copied). Does not connect: the first call
 * does, so an instance starts while Redis is down and serves sessions once it is up. */
attnd_status sess_redis_create(sess_redis **out, const char *url, const char *prefix, int ttl_s, const char *model_tag,
                              attnd_err *err);
void sess_redis_destroy(sess_redis *r); /* accepts NULL */
/* "redis://host:port" as configured, for messages. */
const char *sess_redis_url(const sess_redis *r);

#define SESSREDIS_POOL 8            /* connections at once */
#define SESSREDIS_TIMEOUT_MS 2000   /* a call's deadline by default */

/* A call's deadline in milliseconds (> 0; else the default). Thread-safe. */
void sess_redis_set_timeout(sess_redis *r, int ms);

/* Most sessions one owner may hold in the store (0 = no cap, the default): a create past it is
 * refused (sess_redis_put). */
void sess_redis_set_quota(sess_redis *r, int per_owner);

/* Reads owner's session id. NOT_FOUND (none, or another model's), FORMAT (damaged), IO. */
attnd_status sess_redis_get(sess_redis *r, const char *owner, const char *id, sess_redis_rec *out, attnd_err *err);
/* Writes rec (rec->version = expect + 1) if the stored version is still expect; expect 0 = create
 * (no record may exist). BUSY: the stored version is another (a turn of another request, maybe
 * on another instance, won), or the record exists (create); NOT_FOUND: expect > 0 and the record
 * is gone (deleted, expired); NOMEM: a create while owner holds its quota of sessions (the message
 * names max_sessions_per_key: the API's 429); IO. Repeating a write that went through (its answer was lost with
 * the connection) is OK, not BUSY. */
attnd_status sess_redis_put(sess_redis *r, const char *owner, const char *id, uint64_t expect, const sess_redis_rec *rec,
                           attnd_err *err);
/* Removes owner's session id. NOT_FOUND, IO. */
attnd_status sess_redis_delete(sess_redis *r, const char *owner, const char *id, attnd_err *err);
/* Calls each(user, id, rec) for owner's sessions of this model (rec borrowed for the call), in
 * no particular order; damaged records are skipped. Returns how many were listed, or a negative
 * status (IO, NOMEM). */
int sess_redis_list(sess_redis *r, const char *owner, void (*each)(void *user, const char *id, const sess_redis_rec *rec),
                   void *user, attnd_err *err);

#endif
