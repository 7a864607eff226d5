/*
 * fuzz_sess_redis.c — (fuzzing only) what the shared session store parses: the session_store
 * URL and a record read back from Redis (its version field and its JSON).
 *
 * Input: line 1 is a URL for sess_redis_url_parse, line 2 the record's "v" field, the rest the
 * "rec" field, decoded as owner "ab12"'s session "s" of the model "m/vocab64". A record that
 * decodes must encode and decode again to the same history.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "sess_redis.h"

/* The next line of [*p, end) as a new string (caller frees); *p moves past it. */
static char *line(const char **p, const char *end) {
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    size_t n = (size_t)((nl ? nl : end) - *p);
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, *p, n);
    s[n] = '\0';
    *p = nl ? nl + 1 : end;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data, *end = p + size;
    char *url = line(&p, end), *version = line(&p, end);
    char host[256];
    int port, db;
    attnd_err err;
    if (sess_redis_url_parse(url, host, sizeof(host), &port, &db, &err) == ATTND_OK)
        FUZZ_CHECK(*host && port > 0 && port < 65536 && db >= 0, "parsed a URL to host '%s' port %d db %d", host, port, db);
    sess_redis_rec rec, again;
    if (sess_redis_rec_decode(version, p, (size_t)(end - p), "ab12", "s", "m/vocab64", &rec, &err) == ATTND_OK) {
        char *text = sess_redis_rec_encode("ab12", "s", "m/vocab64", &rec);
        FUZZ_CHECK(text != NULL, "encode failed");
        FUZZ_CHECK(sess_redis_rec_decode(version, text, strlen(text), "ab12", "s", "m/vocab64", &again, &err) == ATTND_OK,
                   "re-encoded record rejected: %s", err.msg);
        FUZZ_CHECK(again.version == rec.version && again.n_tokens == rec.n_tokens &&
                       (!rec.n_tokens || !memcmp(again.tokens, rec.tokens, (size_t)rec.n_tokens * sizeof(int32_t))),
                   "history differs after a round trip");
        sess_redis_rec_free(&again);
        free(text);
        sess_redis_rec_free(&rec);
    }
    free(url);
    free(version);
    return 0;
}
