/*
 * sess_redis.c — the shared session store's Redis client (see sess_redis.h): records as
 * session-file JSON in a hash with a version, an atomic compare-and-write in Lua (which also
 * counts each owner's sessions against its quota), a small pool of reconnecting connections,
 * and one deadline for everything a call does (waiting for a connection, connecting, the answer).
 */
#include "sess_redis.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "sess_file.h"
#include "slog.h"

#define CONNECT_TIMEOUT_MS 500
#define KEY_MAX 512

struct sess_redis {
    pthread_mutex_t mu;
    pthread_cond_t freed;  /* a connection went back to the pool */
    redisContext *idle[SESSREDIS_POOL]; /* (n_idle) connected and free */
    int n_idle;
    int n_out;             /* connections taken by calls (connected or being connected) */
    int timeout_ms;        /* a call's deadline (sess_redis_set_timeout) */
    bool down;             /* the last call failed (logged once until it works again) */
    char host[256];
    int port, db;
    char url[300];
    char *prefix, *model_tag;
    int ttl_s;
    int quota;       /* sessions one owner may hold (sess_redis_set_quota); 0 = no cap */
};

/*
 * KEYS[1] the record, KEYS[2] its owner's set of session ids (OWNED_ID: a name no session id can
 * have); ARGV: expected version ("0" = must not exist), new version, record text, TTL in seconds
 * ("0" = none), a random id of this write, the owner's quota ("0" = none), the session id, the
 * key prefix of the owner's records. Returns 1 written (or already written by this very write's
 * earlier try: the stored write id is its own), 0 another version is stored (or the record exists
 * on create), -1 the record is gone, -2 a create past the owner's quota.
 * The set is counted at creation only; ids whose record expired (TTL) or was deleted by an
 * older attnd are dropped from it then, when it looks full. Every write adds its id (a record
 * made before the set existed joins it at its next turn) and gives the set the records' TTL,
 * so it never expires before one of them.
 */
static const char PUT_SCRIPT[] =
    "local cur = redis.call('HGET', KEYS[1], 'v')\n"
    "if cur == ARGV[2] and redis.call('HGET', KEYS[1], 'w') == ARGV[5] then return 1 end\n"
    "if ARGV[1] == '0' then\n"
    "  if cur then return 0 end\n"
    "  local quota = tonumber(ARGV[6])\n"
    "  if quota > 0 and redis.call('SCARD', KEYS[2]) >= quota then\n"
    "    for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do\n"
    "      if redis.call('EXISTS', ARGV[8] .. id) == 0 then redis.call('SREM', KEYS[2], id) end\n"
    "    end\n"
    "    if redis.call('SCARD', KEYS[2]) >= quota then return -2 end\n"
    "  end\n"
    "elseif not cur then return -1\n"
    "elseif cur ~= ARGV[1] then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'v', ARGV[2], 'rec', ARGV[3], 'w', ARGV[5])\n"
    "redis.call('SADD', KEYS[2], ARGV[7])\n"
    "if ARGV[4] ~= '0' then\n"
    "  redis.call('EXPIRE', KEYS[1], ARGV[4])\n"
    "  redis.call('EXPIRE', KEYS[2], ARGV[4])\n"
    "else redis.call('PERSIST', KEYS[2]) end\n"
    "return 1\n";

/* KEYS[1] the record, KEYS[2] its owner's set; ARGV[1] the session id. Returns how many records
 * were removed (0 or 1). */
static const char DELETE_SCRIPT[] =
    "local n = redis.call('DEL', KEYS[1])\n"
    "redis.call('SREM', KEYS[2], ARGV[1])\n"
    "return n\n";

/* The owner's set's name in the id's place: session ids never start with '.' (sess.h). */
#define OWNED_ID ".sessions"

void sess_redis_rec_free(sess_redis_rec *rec) {
    if (!rec) return;
    free(rec->tokens);
    rec->tokens = NULL;
    rec->n_tokens = 0;
}

// ---- pure functions -----------------------------------------------------------------------

static bool parse_uint(const char *s, size_t n, long max, long *out) {
    long v = 0;
    if (n == 0 || n > 9) return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max) return false;
    *out = v;
    return true;
}

attnd_status sess_redis_url_parse(const char *url, char *host, size_t cap, int *port, int *db, attnd_err *err) {
    static const char scheme[] = "redis://";
    const char *bad = NULL;
    if (strncmp(url, scheme, strlen(scheme))) return attnd_fail(err, ATTND_ERR_INVALID, "session_store '%.200s': must start with redis://", url);
    const char *h = url + strlen(scheme), *end = h + strcspn(h, ":/"), *p = end;
    long v_port = 6379, v_db = 0;
    if (end == h) bad = "no host";
    else if ((size_t)(end - h) >= cap) bad = "host name too long";
    else if (strcspn(h, "@?#") < (size_t)(end - h) || strchr(h, '@')) bad = "user names, passwords and options are not supported";
    if (!bad && *p == ':') {
        size_t n = strcspn(p + 1, "/");
        if (!parse_uint(p + 1, n, 65535, &v_port) || v_port == 0) bad = "the port must be 1..65535";
        p += 1 + n;
    }
    if (!bad && *p == '/') {
        size_t n = strlen(p + 1);
        if (n && !parse_uint(p + 1, n, 1 << 20, &v_db)) bad = "the database must be a number";
        p += 1 + n;
    }
    if (!bad && *p) bad = "unexpected text after the host";
    if (bad) return attnd_fail(err, ATTND_ERR_INVALID, "session_store '%.200s': %s (redis://HOST[:PORT][/DB])", url, bad);
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = '\0';
    *port = (int)v_port;
    *db = (int)v_db;
    return ATTND_OK;
}

char *sess_redis_rec_encode(const char *owner, const char *id, const char *model_tag, const sess_redis_rec *rec) {
    return sess_file_encode(id, owner ? owner : "", model_tag, rec->created_ms, rec->last_use_ms, rec->tokens,
                            rec->n_tokens);
}

attnd_status sess_redis_rec_decode(const char *version, const char *text, size_t len, const char *owner,
                                  const char *id, const char *model_tag, sess_redis_rec *out, attnd_err *err) {
    memset(out, 0, sizeof(*out));
    char *end = NULL;
    unsigned long long v = version && *version >= '0' && *version <= '9' ? strtoull(version, &end, 10) : 0;
    if (!v || *end) return attnd_fail(err, ATTND_ERR_FORMAT, "session record '%s': bad version", id);
    sess_file f;
    sess_file_result r = sess_file_decode(text ? text : "", text ? len : 0, model_tag, &f);
    if (r == SESS_FILE_OTHER_MODEL) return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "session '%s' belongs to another model", id);
    if (r == SESS_FILE_DAMAGED) return attnd_fail(err, ATTND_ERR_FORMAT, "session record '%s' is damaged: %s", id, f.why);
    if (strcmp(f.id, id) || strcmp(f.owner, owner ? owner : "")) {
        free(f.tokens);
        return attnd_fail(err, ATTND_ERR_FORMAT, "session record '%s' names another session or owner", id);
    }
    *out = (sess_redis_rec){.version = v, .created_ms = f.created_ms, .last_use_ms = f.last_use_ms,
                           .tokens = f.tokens, .n_tokens = f.n_tokens};
    return ATTND_OK;
}

// ---- the connection -----------------------------------------------------------------------

attnd_status sess_redis_create(sess_redis **out, const char *url, const char *prefix, int ttl_s, const char *model_tag,
                              attnd_err *err) {
    *out = NULL;
    sess_redis *r = calloc(1, sizeof(*r));
    if (!r) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    attnd_status rc = sess_redis_url_parse(url, r->host, sizeof(r->host), &r->port, &r->db, err);
    if (rc != ATTND_OK) goto fail;
    rc = ATTND_ERR_INVALID;
    if (prefix && strlen(prefix) > 200) {
        attnd_fail(err, rc, "session_store_prefix is longer than 200 bytes");
        goto fail;
    }
    rc = ATTND_ERR_NOMEM;
    r->prefix = strdup(prefix ? prefix : "");
    r->model_tag = strdup(model_tag ? model_tag : "");
    if (!r->prefix || !r->model_tag) {
        attnd_fail(err, rc, "out of memory");
        goto fail;
    }
    snprintf(r->url, sizeof(r->url), "redis://%s:%d/%d", r->host, r->port, r->db);
    r->ttl_s = ttl_s > 0 ? ttl_s : 0;
    r->timeout_ms = SESSREDIS_TIMEOUT_MS;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->freed, NULL);
    *out = r;
    return ATTND_OK;
fail:
    free(r->prefix);
    free(r->model_tag);
    free(r);
    return rc;
}

void sess_redis_destroy(sess_redis *r) {
    if (!r) return;
    ATTND_ASSERT(r->n_out == 0); /* no call may be running */
    for (int i = 0; i < r->n_idle; i++) redisFree(r->idle[i]);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->freed);
    free(r->prefix);
    free(r->model_tag);
    free(r);
}

const char *sess_redis_url(const sess_redis *r) { return r->url; }

void sess_redis_set_quota(sess_redis *r, int per_owner) {
    pthread_mutex_lock(&r->mu);
    r->quota = per_owner > 0 ? per_owner : 0;
    pthread_mutex_unlock(&r->mu);
}

void sess_redis_set_timeout(sess_redis *r, int ms) {
    pthread_mutex_lock(&r->mu);
    r->timeout_ms = ms > 0 ? ms : SESSREDIS_TIMEOUT_MS;
    pthread_mutex_unlock(&r->mu);
}

static struct timeval ms_tv(int ms) { return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000}; }

/* A call's deadline: now + the timeout, in attnd_now_s seconds. */
static double deadline_of(sess_redis *r) {
    pthread_mutex_lock(&r->mu);
    double d = attnd_now_s() + r->timeout_ms / 1e3;
    pthread_mutex_unlock(&r->mu);
    return d;
}

/* Milliseconds left until deadline (0 when it passed). */
static int ms_left(double deadline) {
    double left = (deadline - attnd_now_s()) * 1e3;
    return left <= 0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
}

/* A new connection, the database selected, within ms. NULL: *why says. */
static redisContext *connect_within(sess_redis *r, int ms, char *why, size_t cap) {
    redisContext *c = redisConnectWithTimeout(r->host, r->port, ms_tv(ms < CONNECT_TIMEOUT_MS ? ms : CONNECT_TIMEOUT_MS));
    if (!c || c->err) {
        snprintf(why, cap, "%s", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    redisReply *rep = NULL;
    if (redisSetTimeout(c, ms_tv(ms)) != REDIS_OK ||
        (r->db && (!(rep = redisCommand(c, "SELECT %d", r->db)) || rep->type == REDIS_REPLY_ERROR))) {
        snprintf(why, cap, "%s", rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr[0] ? c->errstr : "SELECT failed");
        if (rep) freeReplyObject(rep);
        redisFree(c);
        return NULL;
    }
    if (rep) freeReplyObject(rep);
    return c;
}

/* A connection of the pool for one command: an idle one, else a new one (at most SESSREDIS_POOL
 * at once; a call waits for one to come back until its deadline). false: none before the
 * deadline (*why says). *c NULL with true: the caller connects (the place is held). */
static bool pool_take(sess_redis *r, double deadline, redisContext **c, char *why, size_t cap) {
    struct timespec ts;
    attnd_deadline(&ts, ms_left(deadline));
    pthread_mutex_lock(&r->mu);
    while (r->n_idle == 0 && r->n_out >= SESSREDIS_POOL)
        if (pthread_cond_timedwait(&r->freed, &r->mu, &ts) != 0) break;
    bool ok = r->n_idle > 0 || r->n_out < SESSREDIS_POOL;
    *c = r->n_idle > 0 ? r->idle[--r->n_idle] : NULL;
    if (ok) r->n_out++;
    pthread_mutex_unlock(&r->mu);
    if (!ok) snprintf(why, cap, "no answer within %d ms (all %d connections busy)", r->timeout_ms, SESSREDIS_POOL);
    return ok;
}

/* Gives back the place pool_take held: c joins the idle ones when it still works, else it is
 * closed (a connection whose answer timed out is out of step: never reused). */
static void pool_give(sess_redis *r, redisContext *c, bool works) {
    pthread_mutex_lock(&r->mu);
    r->n_out--;
    if (c && works) r->idle[r->n_idle++] = c, c = NULL;
    pthread_cond_signal(&r->freed);
    pthread_mutex_unlock(&r->mu);
    if (c) redisFree(c);
}

/*
 * One command (argv, binary-safe) before deadline. A connection that fails is dropped; a reused
 * one is retried once on a fresh connection (Redis restarted since the last call: the old socket
 * is dead). Returns the reply (caller frees), or NULL with ATTND_ERR_IO in err. An error reply
 * from Redis is returned as a reply (the caller decides).
 */
static redisReply *command(sess_redis *r, double deadline, int argc, const char **argv, const size_t *lens,
                           attnd_err *err) {
    char why[160] = "";
    redisReply *rep = NULL;
    for (int attempt = 0; attempt < 2 && !rep; attempt++) {
        redisContext *c;
        if (!pool_take(r, deadline, &c, why, sizeof(why))) break;
        int left = ms_left(deadline); /* after the wait for a connection */
        bool fresh = !c;
        if (!left) snprintf(why, sizeof(why), "no answer within %d ms", r->timeout_ms);
        if (!left || (fresh && !(c = connect_within(r, left, why, sizeof(why))))) {
            pool_give(r, c, true); /* an idle one that was not used still works */
            break;
        }
        if (!fresh) redisSetTimeout(c, ms_tv(left));
        rep = redisCommandArgv(c, argc, argv, lens);
        if (!rep) snprintf(why, sizeof(why), "%s", c->errstr[0] ? c->errstr : "no answer");
        pool_give(r, c, rep != NULL);
        if (!rep && fresh) break;
    }
    pthread_mutex_lock(&r->mu);
    bool was_down = r->down;
    r->down = rep == NULL;
    pthread_mutex_unlock(&r->mu);
    if (!rep) {
        if (!was_down) slog_warn("session store %s unavailable: %s", r->url, why);
        attnd_fail(err, ATTND_ERR_IO, "the session store (%s) is unavailable: %s; retry shortly", r->url, why);
    } else if (was_down) {
        slog_info("session store %s reachable again", r->url);
    }
    return rep;
}

/* <prefix>[<owner>~]<id> into key; false when too long. */
static bool make_key(const sess_redis *r, const char *owner, const char *id, char key[KEY_MAX]) {
    int n = snprintf(key, KEY_MAX, "%s%s%s%s", r->prefix, owner && *owner ? owner : "", owner && *owner ? "~" : "", id);
    return n > 0 && n < KEY_MAX;
}

static attnd_status reply_error(const sess_redis *r, redisReply *rep, attnd_err *err) {
    attnd_status rc = attnd_fail(err, ATTND_ERR_IO, "the session store (%s) answered: %.200s", r->url,
                                 rep->type == REDIS_REPLY_ERROR ? rep->str : "an unexpected reply");
    freeReplyObject(rep);
    return rc;
}

// ---- records ------------------------------------------------------------------------------

/* HMGET's answer [v, rec] decoded into out. */
static attnd_status decode_reply(sess_redis *r, redisReply *rep, const char *owner, const char *id,
                                 sess_redis_rec *out, attnd_err *err) {
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) return reply_error(r, rep, err);
    redisReply *v = rep->element[0], *rec = rep->element[1];
    attnd_status rc;
    if (v->type == REDIS_REPLY_NIL) rc = attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found", id);
    else if (v->type != REDIS_REPLY_STRING || rec->type != REDIS_REPLY_STRING)
        rc = attnd_fail(err, ATTND_ERR_FORMAT, "session record '%s' is damaged: fields missing", id);
    else
        rc = sess_redis_rec_decode(v->str, rec->str, rec->len, owner, id, r->model_tag, out, err);
    freeReplyObject(rep);
    return rc;
}

/* sess_redis_get before deadline. */
static attnd_status get_by(sess_redis *r, double deadline, const char *owner, const char *id, sess_redis_rec *out,
                           attnd_err *err) {
    memset(out, 0, sizeof(*out));
    char key[KEY_MAX];
    if (!make_key(r, owner, id, key)) return attnd_fail(err, ATTND_ERR_INVALID, "session key too long");
    const char *argv[] = {"HMGET", key, "v", "rec"};
    size_t lens[] = {5, strlen(key), 1, 3};
    redisReply *rep = command(r, deadline, 4, argv, lens, err);
    if (!rep) return ATTND_ERR_IO;
    attnd_status rc = decode_reply(r, rep, owner, id, out, err);
    if (rc == ATTND_ERR_UNSUPPORTED) rc = attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found (it belongs to another model)", id);
    return rc;
}

attnd_status sess_redis_get(sess_redis *r, const char *owner, const char *id, sess_redis_rec *out, attnd_err *err) {
    return get_by(r, deadline_of(r), owner, id, out, err);
}

attnd_status sess_redis_put(sess_redis *r, const char *owner, const char *id, uint64_t expect, const sess_redis_rec *rec,
                           attnd_err *err) {
    ATTND_ASSERT(rec->version == expect + 1);
    char key[KEY_MAX], set[KEY_MAX], base[KEY_MAX], sv_expect[24], sv_new[24], sv_ttl[16], sv_quota[16];
    if (!make_key(r, owner, id, key) || !make_key(r, owner, OWNED_ID, set) || !make_key(r, owner, "", base))
        return attnd_fail(err, ATTND_ERR_INVALID, "session key too long");
    char *text = sess_redis_rec_encode(owner, id, r->model_tag, rec);
    if (!text) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    snprintf(sv_expect, sizeof(sv_expect), "%" PRIu64, expect);
    snprintf(sv_new, sizeof(sv_new), "%" PRIu64, rec->version);
    snprintf(sv_ttl, sizeof(sv_ttl), "%d", r->ttl_s);
    pthread_mutex_lock(&r->mu);
    int quota = r->quota;
    pthread_mutex_unlock(&r->mu);
    snprintf(sv_quota, sizeof(sv_quota), "%d", quota);
    char write_id[40]; /* tells a retry of this write (its answer lost) from another writer's */
    attnd_random_id(write_id, sizeof(write_id), "");
    const char *argv[] = {"EVAL", PUT_SCRIPT, "2", key, set, sv_expect, sv_new, text, sv_ttl, write_id, sv_quota, id, base};
    enum { ARGC = sizeof(argv) / sizeof(*argv) };
    size_t lens[ARGC];
    for (int i = 0; i < ARGC; i++) lens[i] = strlen(argv[i]);
    redisReply *rep = command(r, deadline_of(r), ARGC, argv, lens, err);
    free(text);
    if (!rep) return ATTND_ERR_IO;
    if (rep->type != REDIS_REPLY_INTEGER) return reply_error(r, rep, err);
    long long res = rep->integer;
    freeReplyObject(rep);
    if (res == 1) return ATTND_OK;
    if (res == -1) return attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' was deleted meanwhile", id);
    if (res == -2)
        return attnd_fail(err, ATTND_ERR_NOMEM,
                          "this API key holds %d sessions in the shared session store, its quota "
                          "(max_sessions_per_key); delete one first", quota);
    if (expect == 0) return attnd_fail(err, ATTND_ERR_BUSY, "session '%s' already exists", id);
    return attnd_fail(err, ATTND_ERR_BUSY,
                      "session '%s' was changed by another request meanwhile (a turn racing on another instance?); "
                      "this turn was not saved: read the session and resend it", id);
}

attnd_status sess_redis_delete(sess_redis *r, const char *owner, const char *id, attnd_err *err) {
    char key[KEY_MAX], set[KEY_MAX];
    if (!make_key(r, owner, id, key) || !make_key(r, owner, OWNED_ID, set))
        return attnd_fail(err, ATTND_ERR_INVALID, "session key too long");
    const char *argv[] = {"EVAL", DELETE_SCRIPT, "2", key, set, id};
    size_t lens[6];
    for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
    redisReply *rep = command(r, deadline_of(r), 6, argv, lens, err);
    if (!rep) return ATTND_ERR_IO;
    if (rep->type != REDIS_REPLY_INTEGER) return reply_error(r, rep, err);
    long long n = rep->integer;
    freeReplyObject(rep);
    return n > 0 ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOT_FOUND, "session '%s' not found", id);
}

// ---- listing ------------------------------------------------------------------------------

/* The SCAN pattern of owner's keys: the prefix with glob characters escaped, then "owner~*". */
static void scan_pattern(const sess_redis *r, const char *owner, char *pat, size_t cap) {
    size_t k = 0;
    for (const char *p = r->prefix; *p && k + 3 < cap; p++) {
        if (strchr("*?[]\\", *p)) pat[k++] = '\\';
        pat[k++] = *p;
    }
    snprintf(pat + k, cap - k, "%s%s*", owner && *owner ? owner : "", owner && *owner ? "~" : "");
}

/* One key SCAN found: the id it names for owner (NULL when it is another owner's). */
static const char *id_of_key(const sess_redis *r, const char *owner, const char *key) {
    size_t np = strlen(r->prefix), no = owner && *owner ? strlen(owner) + 1 : 0;
    if (strlen(key) <= np + no) return NULL;
    const char *id = key + np + no;
    return strchr(id, '~') ? NULL : id; /* without an owner, "<tag>~<id>" keys are others' */
}

/* The records of one SCAN batch (keys) handed to each. Returns how many, or a negative status. */
static int list_batch(sess_redis *r, double deadline, const char *owner, redisReply *keys,
                      void (*each)(void *, const char *, const sess_redis_rec *), void *user, attnd_err *err) {
    int n = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *k = keys->element[i];
        const char *id = k->type == REDIS_REPLY_STRING ? id_of_key(r, owner, k->str) : NULL;
        if (!id || strlen(id) > 64 || *id == '.') continue; /* '.': the owner's set (OWNED_ID) */
        sess_redis_rec rec;
        attnd_err e;
        attnd_status rc = get_by(r, deadline, owner, id, &rec, &e);
        if (rc == ATTND_ERR_IO || rc == ATTND_ERR_NOMEM) {
            if (err) *err = e;
            return rc;
        }
        if (rc != ATTND_OK) continue; /* gone meanwhile, another model's, damaged */
        each(user, id, &rec);
        sess_redis_rec_free(&rec);
        n++;
    }
    return n;
}

int sess_redis_list(sess_redis *r, const char *owner, void (*each)(void *user, const char *id, const sess_redis_rec *rec),
                   void *user, attnd_err *err) {
    char pat[KEY_MAX + 8], cursor[24] = "0";
    scan_pattern(r, owner, pat, sizeof(pat));
    int total = 0;
    double deadline = deadline_of(r); /* the whole listing */
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", pat, "COUNT", "200"};
        size_t lens[6];
        for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
        redisReply *rep = command(r, deadline, 6, argv, lens, err);
        if (!rep) return ATTND_ERR_IO;
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 || rep->element[0]->type != REDIS_REPLY_STRING ||
            rep->element[1]->type != REDIS_REPLY_ARRAY)
            return reply_error(r, rep, err);
        snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
        int n = list_batch(r, deadline, owner, rep->element[1], each, user, err);
        freeReplyObject(rep);
        if (n < 0) return n;
        total += n;
    } while (strcmp(cursor, "0"));
    return total;
}
