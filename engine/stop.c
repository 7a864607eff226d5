/*
 * stop.c — the stop-string matcher and stop reasons of attnd/stop.h.
 *
 * Generated text arrives in pieces (one per token) and a stop string may span several of them,
 * so the matcher keeps a small buffer of text not yet released: the longest tail of the text
 * that is still a proper prefix of some stop string, plus an incomplete UTF-8 character at the
 * very end. Each push appends the piece, looks for a complete stop string (only matches that
 * involve the new bytes are possible, since the held tail contains none), and releases
 * everything before the part that must still be held. The held part is never longer than the
 * longest stop string (+3 bytes of UTF-8), so the work per piece is O(piece + stops^2) bytes,
 * and the buffer only grows when a piece is bigger than any before it.
 */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/stop.h"

struct stop_matcher {
    char **stops;     /* (n_stops) own copies */
    size_t *lens;     /* (n_stops) their lengths */
    int n_stops;
    char *buf;        /* (cap) text not yet released: buf[0..len) */
    size_t len, cap;
    size_t n_release; /* bytes of buf[0..n_release) handed out by the last call, dropped next time */
    int matched;      /* index of the stop string that matched, or -1 */
    attnd_status status;
};

attnd_status stop_matcher_create(stop_matcher **out, const char *const *stops, int n_stops, attnd_err *err) {
    *out = NULL;
    if (n_stops < 0) return attnd_fail(err, ATTND_ERR_INVALID, "stop: negative count %d", n_stops);
    if (n_stops > 0 && !stops) return attnd_fail(err, ATTND_ERR_INVALID, "stop: %d strings but no list", n_stops);
    for (int i = 0; i < n_stops; i++) {
        if (!stops[i]) return attnd_fail(err, ATTND_ERR_INVALID, "stop: string %d is missing", i);
        if (!stops[i][0]) return attnd_fail(err, ATTND_ERR_INVALID, "stop: string %d is empty", i);
    }
    stop_matcher *m = calloc(1, sizeof(*m));
    if (!m) return attnd_fail(err, ATTND_ERR_NOMEM, "stop: out of memory");
    m->matched = -1;
    size_t longest = 0;
    if (n_stops > 0) {
        m->stops = calloc((size_t)n_stops, sizeof(*m->stops));
        m->lens = calloc((size_t)n_stops, sizeof(*m->lens));
        if (!m->stops || !m->lens) goto nomem;
        m->n_stops = n_stops;
        for (int i = 0; i < n_stops; i++) {
            m->lens[i] = strlen(stops[i]);
            if (!(m->stops[i] = strdup(stops[i]))) goto nomem;
            if (m->lens[i] > longest) longest = m->lens[i];
        }
    }
    /* Room for the held tail plus a typical piece (token pieces are rarely above 64 bytes). */
    m->cap = longest + 4 + 256;
    if (!(m->buf = malloc(m->cap))) goto nomem;
    *out = m;
    return ATTND_OK;
nomem:
    stop_matcher_destroy(m);
    return attnd_fail(err, ATTND_ERR_NOMEM, "stop: out of memory");
}

void stop_matcher_destroy(stop_matcher *m) {
    if (!m) return;
    for (int i = 0; i < m->n_stops; i++) free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->buf);
    free(m);
}

attnd_status stop_matcher_status(const stop_matcher *m) { return m->status; }

const char *stop_matcher_matched(const stop_matcher *m) { return m->matched >= 0 ? m->stops[m->matched] : NULL; }

/* Drops the bytes released by the previous call (their pointer was valid until now). */
static void drop_released(stop_matcher *m) {
    if (m->n_release == 0) return;
    memmove(m->buf, m->buf + m->n_release, m->len - m->n_release);
    m->len -= m->n_release;
    m->n_release = 0;
}

/* Length of the UTF-8 sequence a lead byte announces; 0 for a continuation or invalid byte. */
static size_t utf8_seq_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) return 2;
    if (b >= 0xe0 && b <= 0xef) return 3;
    if (b >= 0xf0 && b <= 0xf4) return 4;
    return 0;
}

/* Bytes at the end of buf[0..len) forming the start of a UTF-8 character that more bytes could
 * still complete (0 when the text ends on a character boundary or on invalid bytes). */
static size_t incomplete_utf8_tail(const char *buf, size_t len) {
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char b = (unsigned char)buf[len - back];
        if ((b & 0xc0) == 0x80) continue; /* continuation byte: keep looking for the lead */
        size_t need = utf8_seq_len(b);
        return need > back ? back : 0;
    }
    return 0;
}

bool stop_matcher_push(stop_matcher *m, const char *piece, size_t len, const char **emit, size_t *n_emit) {
    drop_released(m);
    *emit = m->buf;
    *n_emit = 0;
    if (m->matched >= 0 || m->status != ATTND_OK) return true;
    size_t old_len = m->len;
    if (!attnd_grow(&m->buf, &m->cap, m->len + len, 1, 0)) {
        /* Without room for the piece nothing more can be matched: release the held text
         * (it holds no stop string) and end the generation. */
        m->status = ATTND_ERR_NOMEM;
        *n_emit = m->n_release = m->len;
        return true;
    }
    *emit = m->buf;
    if (len) memcpy(m->buf + m->len, piece, len);
    m->len += len;

    /* The match that ends first (ties: the one starting first), as if the text came one byte
     * at a time, so the result never depends on how the text was cut into pieces. A match must
     * end in the new bytes, so it starts no earlier than old_len - (stop length - 1). */
    size_t best = SIZE_MAX, best_end = SIZE_MAX;
    for (int i = 0; i < m->n_stops; i++) {
        size_t sl = m->lens[i];
        if (sl > m->len) continue;
        size_t from = old_len >= sl ? old_len - sl + 1 : 0;
        const char *hit = memmem(m->buf + from, m->len - from, m->stops[i], sl);
        if (!hit) continue;
        size_t at = (size_t)(hit - m->buf);
        if (at + sl < best_end || (at + sl == best_end && at < best)) {
            best = at;
            best_end = at + sl;
            m->matched = i;
        }
    }
    if (m->matched >= 0) {
        *n_emit = m->n_release = best;
        return true;
    }

    /* Hold the longest tail that is a proper prefix of some stop string. */
    size_t hold = 0;
    for (int i = 0; i < m->n_stops; i++) {
        size_t max_k = m->lens[i] - 1 < m->len ? m->lens[i] - 1 : m->len;
        for (size_t k = max_k; k > hold; k--) {
            if (memcmp(m->buf + m->len - k, m->stops[i], k) == 0) {
                hold = k;
                break;
            }
        }
    }
    /* And a character still being completed, so released text never splits one. */
    size_t tail = incomplete_utf8_tail(m->buf, m->len);
    if (tail > hold) hold = tail;
    *n_emit = m->n_release = m->len - hold;
    return false;
}

size_t stop_matcher_flush(stop_matcher *m, const char **emit) {
    drop_released(m);
    *emit = m->buf;
    if (m->matched >= 0) return 0;
    m->n_release = m->len;
    return m->len;
}

const char *stop_reason_finish(stop_reason r) {
    switch (r) {
    case STOP_EOG:
    case STOP_STRING:
    case STOP_GRAMMAR: return "stop";
    case STOP_LENGTH: return "length";
    case STOP_NONE: break;
    }
    return NULL;
}
