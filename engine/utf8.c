/* utf8.c — UTF-8 validation, repair and encoding (see attnd/utf8.h). */
#include "attnd/utf8.h"

#include <stdlib.h>
#include <string.h>

size_t utf8_char_len(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t k = 1; k < len; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    /* overlong, surrogate and beyond-U+10FFFF forms are decided by the second byte */
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

/* Length of the character at s, or 0 when it must be replaced. */
static size_t keep_len(const char *s, size_t n, bool replace_nul) {
    return replace_nul && s[0] == '\0' ? 0 : utf8_char_len(s, n);
}

bool utf8_valid(const char *s, size_t n, bool no_nul) {
    for (size_t i = 0; i < n;) {
        size_t len = keep_len(s + i, n - i, no_nul);
        if (!len) return false;
        i += len;
    }
    return true;
}

char *utf8_sanitize(const char *s, size_t n, bool replace_nul, size_t *out_n) {
    char *o = malloc(n * 3 + 1); /* worst case: every byte becomes the 3-byte U+FFFD */
    if (!o) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t len = keep_len(s + i, n - i, replace_nul);
        if (len) {
            memcpy(o + m, s + i, len);
            m += len, i += len;
        } else {
            memcpy(o + m, "\xEF\xBF\xBD", 3);
            m += 3, i++;
        }
    }
    o[m] = '\0';
    *out_n = m;
    return o;
}

size_t utf8_encode(char out[4], uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) return 0;
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int utf8_hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
