/*
 * tok_ugm.c — the unigram model's normaliser and best segmentation (see tok_ugm.h).
 *
 * The character map is a double-array trie over UTF-8 bytes, each node one 32-bit word: bits
 * 0-7 the byte that leads to it (bit 31 set marks a value node, so it never matches a byte),
 * bit 8 "a key ends here", bits 10-30 the offset to its children (shifted left by 8 more when
 * bit 9 is set). From node s, byte c leads to s' = s ^ offset(s) ^ c; at a key's end, the value
 * node at s' ^ offset(s') holds the offset of the replacement string. (Facts from llama.cpp's
 * reader and SentencePiece's format.)
 *
 * Segmentation is the classic unigram Viterbi: best[i] is the highest score of any cut of the
 * first i bytes; every piece starting at a reached position relaxes the position after it. The
 * caller's lookup says when no piece begins with the bytes so far, which ends the search at that
 * position: a word of n bytes costs O(n * longest piece) hash probes at worst, a few per byte on
 * text, and 16 bytes of memory per byte.
 */
#include "tok_ugm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"
#include "unicode.h"

/* U+2581, SentencePiece's visible space. */
static const char UGM_SPACE[3] = {'\xE2', '\x96', '\x81'};

/* HF only tries a whole grapheme cluster in the map when it is shorter than this (bytes). */
#define UGM_GRAPHEME_MAX 6

attnd_status tok_ugm_map_init(tok_ugm_map *m, const uint8_t *data, size_t n, attnd_err *err) {
    memset(m, 0, sizeof(*m));
    if (n == 0) return ATTND_OK;
    if (n < 4) return attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.precompiled_charsmap: %zu bytes", n);
    uint32_t trie = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    if (trie % 4 || trie > n - 4) {
        return attnd_fail(err, ATTND_ERR_FORMAT,
                          "tokenizer.ggml.precompiled_charsmap: a trie of %u bytes in a map of %zu bytes", trie, n);
    }
    if (!(m->blob = malloc(n))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the character map");
    memcpy(m->blob, data, n);
    m->nodes = m->blob + 4;
    m->n_nodes = trie / 4;
    m->repl = (const char *)m->blob + 4 + trie;
    m->n_repl = n - 4 - trie;
    return ATTND_OK;
}

void tok_ugm_map_free(tok_ugm_map *m) {
    free(m->blob);
    memset(m, 0, sizeof(*m));
}

static bool map_node(const tok_ugm_map *m, size_t i, uint32_t *w) {
    if (i >= m->n_nodes) return false;
    const uint8_t *p = m->nodes + 4 * i;
    *w = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return true;
}

static inline size_t map_offset(uint32_t w) { return (size_t)(w >> 10) << ((w & (1u << 9)) >> 6); }

/* The replacement for the shortest key that is a prefix of p[0..n) (HF's choice), or NULL. */
static const char *map_find(const tok_ugm_map *m, const char *p, size_t n, size_t *rlen) {
    uint32_t w;
    if (!map_node(m, 0, &w)) return NULL;
    size_t s = map_offset(w);
    for (size_t i = 0; i < n && p[i]; i++) {
        unsigned c = (unsigned char)p[i];
        s ^= c;
        if (!map_node(m, s, &w) || (w & 0x800000FFu) != c) return NULL;
        s ^= map_offset(w);
        if (!((w >> 8) & 1)) continue;
        uint32_t v;
        if (!map_node(m, s, &v)) return NULL;
        size_t off = v & 0x7FFFFFFFu;
        if (off >= m->n_repl) return NULL;
        const char *r = memchr(m->repl + off, '\0', m->n_repl - off);
        if (!r) return NULL;
        *rlen = (size_t)(r - (m->repl + off));
        return m->repl + off;
    }
    return NULL;
}

/* Appends n bytes to *buf (length *len, capacity *cap). */
static bool put(char **buf, size_t *len, size_t *cap, const char *p, size_t n) {
    if (!attnd_grow(buf, cap, *len + n + 1, 1, 256)) return false;
    memcpy(*buf + *len, p, n);
    *len += n;
    return true;
}

/* text with every invalid UTF-8 byte replaced by U+FFFD. */
static bool valid_utf8(const char *text, size_t len, char **out, size_t *n, size_t *cap) {
    for (size_t i = 0; i < len;) {
        size_t a = i;
        uint32_t cp = unicode_next(text, len, &i);
        if (!put(out, n, cap, cp == UNI_INVALID ? "\xEF\xBF\xBD" : text + a, cp == UNI_INVALID ? 3 : i - a))
            return false;
    }
    return true;
}

/* One grapheme cluster s[0..n) through the map, HF's way: whole, else character by character. */
static bool map_cluster(const tok_ugm_map *m, const char *s, size_t n, char **out, size_t *len, size_t *cap) {
    size_t rn;
    const char *r = n < UGM_GRAPHEME_MAX ? map_find(m, s, n, &rn) : NULL;
    if (r) return put(out, len, cap, r, rn);
    for (size_t i = 0; i < n;) {
        size_t a = i;
        unicode_next(s, n, &i);
        r = map_find(m, s + a, i - a, &rn);
        if (!put(out, len, cap, r ? r : s + a, r ? rn : i - a)) return false;
    }
    return true;
}

/* The character map over valid UTF-8 s[0..n), cluster by cluster. */
static bool apply_map(const tok_ugm_map *m, const char *s, size_t n, char **out, size_t *len, size_t *cap) {
    int32_t state = 0;
    size_t start = 0, i = 0;
    uint32_t prev = unicode_next(s, n, &i);
    while (i < n) {
        size_t at = i;
        uint32_t cp = unicode_next(s, n, &i);
        if (unicode_grapheme_break(prev, cp, &state)) {
            if (!map_cluster(m, s + start, at - start, out, len, cap)) return false;
            start = at;
        }
        prev = cp;
    }
    return map_cluster(m, s + start, n - start, out, len, cap);
}

/* Is the character at s[i] (of n) a space, i.e. a word boundary? Only ' ' in llama.cpp; with
 * remove_extra_whitespaces any White_Space character (HF's WhitespaceSplit: U+0085, which the
 * map keeps, splits words as in HF). Moves *i past the character. */
static bool take_space(const tok_ugm_flags *fl, const char *s, size_t n, size_t *i) {
    uint32_t cp = unicode_next(s, n, i);
    return cp == ' ' || (fl->remove_extra_ws && cp != UNI_INVALID && (unicode_class(cp) & UNI_SPACE));
}

/* White space as llama.cpp's flags say, U+2581 written for each space kept. */
static bool escape_spaces(const tok_ugm_flags *fl, const char *s, size_t n, char **out, size_t *len, size_t *cap) {
    bool in_word = false, prefixed = false;
    for (size_t i = 0; i < n;) {
        size_t a = i;
        if (take_space(fl, s, n, &i)) {
            in_word = false;
            if (!fl->remove_extra_ws && !put(out, len, cap, UGM_SPACE, 3)) return false;
            continue;
        }
        if (!in_word) {
            in_word = true;
            if ((fl->add_space_prefix && !prefixed) || fl->remove_extra_ws) {
                if (!put(out, len, cap, UGM_SPACE, 3)) return false;
                prefixed = true;
            }
        }
        if (!put(out, len, cap, s + a, i - a)) return false;
    }
    return true;
}

attnd_status tok_ugm_normalize(const tok_ugm_map *m, const tok_ugm_flags *fl, const char *text, size_t len,
                               char **out, size_t *out_len, attnd_err *err) {
    char *a = NULL, *b = NULL;
    size_t na = 0, ca = 0, nb = 0, cb = 0;
    bool ok = valid_utf8(text, len, &a, &na, &ca);
    if (ok && m->n_nodes) {
        char *mapped = NULL;
        size_t nm = 0, cm = 0;
        ok = apply_map(m, a, na, &mapped, &nm, &cm);
        free(a);
        a = mapped, na = nm;
    }
    ok = ok && escape_spaces(fl, a ? a : "", na, &b, &nb, &cb) && put(&b, &nb, &cb, "", 0);
    free(a);
    if (!ok) {
        free(b);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory normalising %zu bytes", len);
    }
    b[nb] = '\0';
    *out = b;
    *out_len = nb;
    return ATTND_OK;
}

bool tok_ugm_next_word(const char *s, size_t len, size_t *pos, size_t *start, size_t *end) {
    size_t i = *pos;
    if (i >= len) return false;
    *start = i;
    i += len - i >= 3 && !memcmp(s + i, UGM_SPACE, 3) ? 3 : 1;
    while (i < len && !(len - i >= 3 && !memcmp(s + i, UGM_SPACE, 3))) i++;
    *end = *pos = i;
    return true;
}

/* Relaxes best[] with every piece (and, if no piece is the character alone, the unknown token)
 * starting at byte pos of w[0..n). */
static void relax(const tok_ugm_vocab *v, const char *w, size_t n, size_t pos, double *best, size_t *from,
                  int32_t *tok) {
    size_t j = pos;
    unicode_next(w, n, &j);
    size_t char_end = j;
    bool single = false;
    for (size_t end = char_end; end - pos <= v->max_piece;) {
        int32_t id;
        double sc;
        tok_ugm_found r = v->find(v->ctx, w + pos, end - pos, &id, &sc);
        if (r == TOK_UGM_NONE) break;
        if (r == TOK_UGM_PIECE) {
            single |= end == char_end;
            if (best[pos] + sc > best[end]) best[end] = best[pos] + sc, from[end] = pos, tok[end] = id;
        }
        if (end == n) break;
        unicode_next(w, n, &end);
    }
    if (!single && best[pos] + v->unk_score > best[char_end])
        best[char_end] = best[pos] + v->unk_score, from[char_end] = pos, tok[char_end] = v->unk;
}

attnd_status tok_ugm_word(const tok_ugm_vocab *v, const char *w, size_t n, int32_t *out, size_t *count,
                          attnd_err *err) {
    *count = 0;
    if (!n) return ATTND_OK;
    double *best = malloc((n + 1) * sizeof(*best));
    size_t *from = malloc((n + 1) * sizeof(*from));
    int32_t *tok = malloc((n + 1) * sizeof(*tok));
    if (!best || !from || !tok) {
        free(best), free(from), free(tok);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for a word of %zu bytes", n);
    }
    for (size_t i = 0; i <= n; i++) best[i] = -INFINITY;
    best[0] = 0.0;
    for (size_t pos = 0; pos < n;) {
        relax(v, w, n, pos, best, from, tok);
        unicode_next(w, n, &pos);
    }
    size_t k = 0;
    for (size_t end = n; end > 0; end = from[end]) { /* backwards; adjacent unknowns fuse */
        if (!(k && tok[end] == v->unk && out[k - 1] == v->unk)) out[k++] = tok[end];
    }
    for (size_t i = 0; i < k / 2; i++) {
        int32_t x = out[i];
        out[i] = out[k - 1 - i], out[k - 1 - i] = x;
    }
    *count = k;
    free(best), free(from), free(tok);
    return ATTND_OK;
}
