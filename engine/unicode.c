/*
 * unicode.c — UTF-8 decoding, character classes and NFC for the tokenizers (see unicode.h).
 *
 * Classes for the 128 ASCII code points are cached in a table filled from utf8proc on first use
 * (prose is mostly ASCII, and the pre-tokenizer asks once per character); everything else asks
 * utf8proc directly, which is a two-level table lookup.
 */
#include "unicode.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <utf8proc.h>

uint32_t unicode_next(const char *s, size_t len, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t left = len - *i;
    unsigned c = p[0];
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    size_t n;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        *i += 1;
        return UNI_INVALID;
    }
    if (left < n) {
        *i += 1;
        return UNI_INVALID;
    }
    for (size_t k = 1; k < n; k++) {
        if ((p[k] & 0xC0) != 0x80) {
            *i += 1;
            return UNI_INVALID;
        }
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        *i += 1;
        return UNI_INVALID;
    }
    *i += n;
    return cp;
}

size_t unicode_complete_prefix(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    /* Look back at most 3 bytes for the lead byte of a sequence that is still open. */
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned c = p[len - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte: keep looking for its lead */
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
        if (need <= back) return len; /* the last sequence is complete (or c is not a lead byte) */
        /* Hold back only a tail that can still become valid: check the bytes present so far
         * decode without error when treated as a prefix (second-byte limits of E0/ED/F0/F4). */
        if (back >= 2) {
            unsigned c1 = p[len - back + 1];
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
                (c == 0xF4 && c1 > 0x8F))
                return len;
        }
        return len - back;
    }
    return len;
}

static uint8_t class_of(uint32_t cp) {
    if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return UNI_SPACE;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LT:
        return UNI_LETTER | UNI_UPPER;
    case UTF8PROC_CATEGORY_LL:
        return UNI_LETTER | UNI_LOWER;
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return UNI_LETTER;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return UNI_MARK;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return UNI_NUMBER;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        return UNI_PUNCT;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        return UNI_SPACE;
    default:
        return 0;
    }
}

static uint8_t ascii_class[128];
static pthread_once_t ascii_once = PTHREAD_ONCE_INIT;

static void ascii_init(void) {
    for (uint32_t c = 0; c < 128; c++) ascii_class[c] = class_of(c);
}

uint8_t unicode_class(uint32_t cp) {
    if (cp < 128) {
        pthread_once(&ascii_once, ascii_init);
        return ascii_class[cp];
    }
    if (cp > 0x10FFFF) return 0;
    return class_of(cp);
}

attnd_status unicode_nfc(const char *s, size_t len, char **out, size_t *out_len, attnd_err *err) {
    /* Worst case NFC growth is bounded (UAX #15: at most 3x in UTF-8); grow as needed anyway. */
    size_t cap = len + 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory normalising %zu bytes", len);
    size_t i = 0;
    while (i < len) {
        /* A maximal run of valid UTF-8, then the invalid byte (if any) that ended it. */
        size_t start = i, end = i;
        bool invalid = false;
        while (end < len) {
            size_t j = end;
            if (unicode_next(s, len, &j) == UNI_INVALID) {
                invalid = true;
                break;
            }
            end = j;
        }
        const char *piece = s + start;
        size_t piece_len = end - start;
        utf8proc_uint8_t *norm = NULL;
        bool ascii = true;
        for (size_t k = 0; k < piece_len && ascii; k++) ascii = (unsigned char)piece[k] < 0x80;
        if (!ascii && piece_len) {
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)piece, (utf8proc_ssize_t)piece_len, &norm,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (r < 0) {
                free(buf);
                return attnd_fail(err, r == UTF8PROC_ERROR_NOMEM ? ATTND_ERR_NOMEM : ATTND_ERR_INVALID,
                                  "NFC normalisation failed: %s", utf8proc_errmsg(r));
            }
            piece = (const char *)norm;
            piece_len = (size_t)r;
        }
        if (!attnd_grow(&buf, &cap, n + piece_len + 2, 1, 0)) {
            free(norm);
            free(buf);
            return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory normalising %zu bytes", len);
        }
        memcpy(buf + n, piece, piece_len);
        n += piece_len;
        free(norm);
        i = end;
        if (invalid) buf[n++] = s[i++];
    }
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return ATTND_OK;
}

// ---- what BERT's normaliser needs -------------------------------------------------------------

bool unicode_is_control(uint32_t cp) {
    if (cp > 0x10FFFF) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
        return true;
    default:
        return false;
    }
}

bool unicode_is_nonspacing_mark(uint32_t cp) {
    return cp <= 0x10FFFF && utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_MN;
}

size_t unicode_lower(uint32_t cp, uint32_t out[2]) {
    if (cp == 0x130) { /* SpecialCasing: the only unconditional lowercase mapping to two */
        out[0] = 'i', out[1] = 0x307;
        return 2;
    }
    out[0] = cp < 128 ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
    return 1;
}

attnd_status unicode_nfd(const char *s, size_t len, char **out, size_t *out_len, attnd_err *err) {
    *out = NULL;
    *out_len = 0;
    utf8proc_uint8_t *norm = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &norm,
                                      UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    if (r < 0)
        return attnd_fail(err, r == UTF8PROC_ERROR_NOMEM ? ATTND_ERR_NOMEM : ATTND_ERR_INVALID,
                          "NFD normalisation failed: %s", utf8proc_errmsg(r));
    *out = (char *)norm;
    *out_len = (size_t)r;
    return ATTND_OK;
}

bool unicode_grapheme_break(uint32_t a, uint32_t b, int32_t *state) {
    return utf8proc_grapheme_break_stateful((utf8proc_int32_t)a, (utf8proc_int32_t)b, state);
}
