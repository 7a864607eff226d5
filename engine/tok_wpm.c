/*
 * tok_wpm.c — WordPiece's normaliser, word splitter and greedy matcher (see tok_wpm.h).
 *
 * The normaliser runs in the order of HF's BertNormalizer, one pass per step over a UTF-8
 * buffer: clean text and space out CJK ideographs, then strip accents (NFD, drop Mn), then
 * lowercase. The order matters where steps interact: U+0130 (İ) loses its dot to accent
 * stripping before lowercasing sees it, but lowercases to "i" + U+0307 when accents are kept.
 * Words are found in the normalised text, so a character that NFD turns into punctuation
 * (U+1FEF -> '`') splits as punctuation, as in HF.
 */
#include "tok_wpm.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"
#include "unicode.h"

/* The CJK ideograph blocks BERT spaces out (HF's is_chinese_char, ranges as written there). */
static bool is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* BERT's punctuation: every ASCII punctuation character (symbols such as $ + < = > ^ ` | ~
 * included) and Unicode's P* categories. */
static bool is_punct(uint32_t cp) {
    if (cp < 128) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
    return unicode_class(cp) & UNI_PUNCT;
}

static inline bool is_space(uint32_t cp) { return cp == ' ' || (cp != UNI_INVALID && (unicode_class(cp) & UNI_SPACE)); }

/* Step 1, BERT's clean_text and CJK spacing, into out (room for 2 * len + 1 bytes: a character
 * of k >= 2 bytes grows to at most k + 2). Returns the bytes written. */
static size_t clean_text(const char *text, size_t len, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)text[i];
        if (c >= 0x20 && c < 0x7F) { /* printable ASCII, most of any text: kept as it is */
            out[n++] = (char)c, i++;
            continue;
        }
        uint32_t cp = unicode_next(text, len, &i);
        if (cp == UNI_INVALID || cp == 0 || cp == 0xFFFD) continue; /* invalid bytes read as U+FFFD */
        if (cp == '\t' || cp == '\n' || cp == '\r') {
            out[n++] = ' ';
        } else if (unicode_is_control(cp)) {
            continue;
        } else if (is_space(cp)) {
            out[n++] = ' ';
        } else if (is_cjk(cp)) {
            out[n++] = ' ';
            n += utf8_encode(out + n, cp);
            out[n++] = ' ';
        } else {
            n += utf8_encode(out + n, cp);
        }
    }
    return n;
}

/* Appends the NFD of run[0..len) without its nonspacing marks to out (grown as needed). */
static attnd_status strip_run(const char *run, size_t len, char **out, size_t *n, size_t *cap, attnd_err *err) {
    char *nfd;
    size_t nfd_len;
    attnd_status st = unicode_nfd(run, len, &nfd, &nfd_len, err);
    if (st != ATTND_OK) return st;
    if (!attnd_grow(out, cap, *n + nfd_len + 1, 1, 0)) {
        free(nfd);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory normalising %zu bytes", len);
    }
    for (size_t i = 0; i < nfd_len;) {
        size_t at = i;
        if (!unicode_is_nonspacing_mark(unicode_next(nfd, nfd_len, &i))) {
            memcpy(*out + *n, nfd + at, i - at);
            *n += i - at;
        }
    }
    free(nfd);
    return ATTND_OK;
}

/* Step 2, strip_accents: NFD of s[0..*len), nonspacing marks dropped; replaces *s. ASCII
 * characters never decompose and are starters (no mark reorders across them), so only the
 * runs of other characters go through NFD. */
static attnd_status strip_accents(char **s, size_t *len, attnd_err *err) {
    const char *in = *s;
    size_t cap = *len + 16, n = 0;
    char *out = malloc(cap);
    if (!out) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory normalising %zu bytes", *len);
    for (size_t i = 0; i < *len;) {
        size_t start = i;
        while (i < *len && (unsigned char)in[i] >= 0x80) i++;
        attnd_status st = i > start ? strip_run(in + start, i - start, &out, &n, &cap, err) : ATTND_OK;
        if (st != ATTND_OK) {
            free(out);
            return st;
        }
        for (start = i; i < *len && (unsigned char)in[i] < 0x80; i++) {}
        if (!attnd_grow(&out, &cap, n + (i - start) + 1, 1, 0)) {
            free(out);
            return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory normalising %zu bytes", *len);
        }
        memcpy(out + n, in + start, i - start);
        n += i - start;
    }
    out[n] = '\0';
    free(*s);
    *s = out, *len = n;
    return ATTND_OK;
}

/* Step 3, lowercase: the full mapping of every character; replaces *s. */
static attnd_status lowercase(char **s, size_t *len, attnd_err *err) {
    size_t cap = *len + 16, n = 0;
    char *out = malloc(cap);
    if (!out) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory lowercasing %zu bytes", *len);
    for (size_t i = 0; i < *len;) {
        unsigned char c = (unsigned char)(*s)[i];
        if (c < 0x80 && n + 1 < cap) { /* ASCII */
            out[n++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c), i++;
            continue;
        }
        uint32_t cps[2];
        size_t k = unicode_lower(unicode_next(*s, *len, &i), cps);
        if (n + 9 > cap && !attnd_grow(&out, &cap, n + 9, 1, 0)) {
            free(out);
            return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory lowercasing %zu bytes", *len);
        }
        for (size_t j = 0; j < k; j++) n += utf8_encode(out + n, cps[j]);
    }
    out[n] = '\0';
    free(*s);
    *s = out, *len = n;
    return ATTND_OK;
}

attnd_status tok_wpm_normalize(const char *text, size_t len, bool lower, bool strip, char **out, size_t *out_len,
                               attnd_err *err) {
    *out = NULL;
    *out_len = 0;
    char *s = malloc(2 * len + 1);
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory normalising %zu bytes", len);
    size_t n = clean_text(text, len, s);
    s[n] = '\0';
    attnd_status st = ATTND_OK;
    if (strip && n) st = strip_accents(&s, &n, err);
    if (st == ATTND_OK && lower) st = lowercase(&s, &n, err);
    if (st != ATTND_OK) {
        free(s);
        return st;
    }
    *out = s;
    *out_len = n;
    return ATTND_OK;
}

bool tok_wpm_next_word(const char *s, size_t len, size_t *pos, size_t *start, size_t *end) {
    size_t i = *pos;
    for (;;) { /* skip white space */
        if (i >= len) {
            *pos = len;
            return false;
        }
        size_t j = i;
        if (!is_space(unicode_next(s, len, &j))) break;
        i = j;
    }
    *start = i;
    if (is_punct(unicode_next(s, len, &i))) { /* a punctuation character is a word of its own */
        *pos = *end = i;
        return true;
    }
    while (i < len) {
        size_t j = i;
        uint32_t cp = unicode_next(s, len, &j);
        if (is_space(cp) || is_punct(cp)) break;
        i = j;
    }
    *pos = *end = i;
    return true;
}

/* The start of the last character that begins before byte `end` of w (end > 0). */
static size_t prev_char(const char *w, size_t end) {
    do end--;
    while (end > 0 && ((unsigned char)w[end] & 0xC0) == 0x80);
    return end;
}

size_t tok_wpm_word(const char *w, size_t n, size_t max_piece, tok_wpm_find_fn find, const void *ctx, int32_t *out) {
    size_t chars = 0;
    for (size_t i = 0; i < n; i++) chars += ((unsigned char)w[i] & 0xC0) != 0x80;
    if (chars > TOK_WPM_MAX_CHARS || !n) return 0;
    size_t k = 0;
    for (size_t start = 0; start < n;) {
        /* the longest piece that starts here and is a token, trying at most max_piece bytes */
        size_t end = n - start > max_piece ? start + max_piece + 1 : n + 1;
        int32_t id = -1;
        while (id < 0) {
            end = end > n ? n : prev_char(w, end);
            if (end <= start) return 0; /* no piece starts here: the whole word is unknown */
            id = find(ctx, w + start, end - start, start == 0);
        }
        out[k++] = id;
        start = end;
    }
    return k;
}
