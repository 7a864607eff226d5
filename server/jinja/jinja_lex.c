/*
 * jinja_lex.c — splitting a template into tokens, as jinja2's lexer does with HF's settings:
 * newlines normalised to "\n" and one trailing newline dropped (keep_trailing_newline off);
 * "{%-" / "-%}" strip all whitespace beside the tag; trim_blocks drops the newline after a
 * block or comment tag; lstrip_blocks drops the spaces and tabs before a block or comment tag
 * that starts its line ("{%+" keeps them); {% raw %} ... {% endraw %} is text.
 */
#include "jinja_lex.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"

typedef struct lexer {
    const char *s;   /* normalised source */
    size_t n, pos;
    int line;
    jarena *a;
    buf toks;        /* (n_toks) jtoken */
    size_t n_toks;
    bool strip_next; /* the last tag ended with '-': the next text loses its leading whitespace */
    bool trim_nl;    /* the last tag was a block or comment: the next text loses one newline */
    attnd_err *err;
} lexer;

static attnd_status lex_fail(lexer *L, const char *what) {
    return attnd_fail(L->err, ATTND_ERR_FORMAT, "template line %d: %s", L->line, what);
}

static jtoken *emit(lexer *L, jtk kind, const char *p, size_t n) {
    if (!buf_reserve(&L->toks, sizeof(jtoken))) return NULL;
    jtoken *t = (jtoken *)(void *)(L->toks.p + L->toks.len);
    L->toks.len += sizeof(jtoken);
    L->n_toks++;
    *t = (jtoken){.kind = kind, .line = L->line, .p = p, .n = n};
    return t;
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) L->line += L->s[i] == '\n';
}

// ---- text and tags -----------------------------------------------------------------------------

/* The next "{{", "{%" or "{#" at or after from; n when none. */
static size_t next_tag(const lexer *L, size_t from) {
    for (size_t i = from; i + 1 < L->n; i++)
        if (L->s[i] == '{' && (L->s[i + 1] == '{' || L->s[i + 1] == '%' || L->s[i + 1] == '#')) return i;
    return L->n;
}

/* Emits the text [from, to) with the whitespace control of the tags beside it. */
static bool emit_text(lexer *L, size_t from, size_t to, char tag, char mod) {
    size_t a = from, b = to;
    if (L->trim_nl && a < b && L->s[a] == '\n') a++;
    if (L->strip_next)
        while (a < b && isspace((unsigned char)L->s[a])) a++;
    if (tag && mod == '-') {
        while (b > a && isspace((unsigned char)L->s[b - 1])) b--;
    } else if ((tag == '%' || tag == '#') && mod != '+') {
        size_t j = to;
        while (j > from && (L->s[j - 1] == ' ' || L->s[j - 1] == '\t')) j--;
        if ((j == 0 || L->s[j - 1] == '\n') && j >= a) b = j;
    }
    L->trim_nl = L->strip_next = false;
    if (b > a && !emit(L, T_TEXT, L->s + a, b - a)) return false;
    return true;
}

/* After "{%": when the tag is "raw", emits the raw text up to {% endraw %} and returns 1. */
static int lex_raw(lexer *L, size_t body, attnd_status *st) {
    size_t i = body;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) i++;
    while (i < L->n && isspace((unsigned char)L->s[i])) i++;
    if (L->n - i < 3 || memcmp(L->s + i, "raw", 3) != 0) return 0;
    i += 3;
    while (i < L->n && isspace((unsigned char)L->s[i])) i++;
    bool strip_after = i < L->n && L->s[i] == '-';
    if (strip_after) i++;
    if (L->n - i < 2 || memcmp(L->s + i, "%}", 2) != 0) return 0;
    size_t start = i + 2;
    for (size_t k = start; k + 1 < L->n; k++) {
        if (L->s[k] != '{' || L->s[k + 1] != '%') continue;
        size_t e = k + 2, content_end = k;
        bool strip_before = e < L->n && L->s[e] == '-';
        if (strip_before || (e < L->n && L->s[e] == '+')) e++;
        while (e < L->n && isspace((unsigned char)L->s[e])) e++;
        if (L->n - e < 6 || memcmp(L->s + e, "endraw", 6) != 0) continue;
        e += 6;
        while (e < L->n && isspace((unsigned char)L->s[e])) e++;
        bool strip_end = e < L->n && L->s[e] == '-';
        if (strip_end) e++;
        if (L->n - e < 2 || memcmp(L->s + e, "%}", 2) != 0) continue;
        size_t a = start, b = content_end;
        if (strip_after) while (a < b && isspace((unsigned char)L->s[a])) a++;
        else if (a < b && L->s[a] == '\n') a++;
        if (strip_before) while (b > a && isspace((unsigned char)L->s[b - 1])) b--;
        if (b > a && !emit(L, T_TEXT, L->s + a, b - a)) return *st = ATTND_ERR_NOMEM, -1;
        count_lines(L, body, e + 2);
        L->pos = e + 2;
        L->strip_next = strip_end, L->trim_nl = !strip_end;
        return 1;
    }
    *st = lex_fail(L, "{% raw %} without {% endraw %}");
    return -1;
}

// ---- inside a tag ---------------------------------------------------------------------------------

/* Appends cp as UTF-8 at o[*k]; false (nothing written) beyond U+10FFFF. */
static bool put_utf8(char *o, size_t *k, unsigned long cp) {
    size_t n = cp > 0x10FFFF ? 0 : utf8_encode(o + *k, (uint32_t)cp);
    *k += n;
    return n > 0;
}

/* One escape after a backslash at s[*i] (Python's string-literal rules); writes to o. */
static void unescape_one(const char *s, size_t end, size_t *i, char *o, size_t *k) {
    char ch = s[*i];
    static const char from[] = "nrtbfva\\'\"", to[] = "\n\r\t\b\f\v\a\\'\"";
    const char *m = ch ? strchr(from, ch) : NULL;
    if (m) {
        o[(*k)++] = to[m - from], (*i)++;
        return;
    }
    if (ch == '\n') {
        (*i)++;
        return;
    }
    int digits = ch == 'x' ? 2 : ch == 'u' ? 4 : ch == 'U' ? 8 : 0;
    if (digits && *i + (size_t)digits < end) {
        unsigned long cp = 0;
        int j = 1;
        for (; j <= digits && utf8_hex_digit(s[*i + (size_t)j]) >= 0; j++)
            cp = cp * 16 + (unsigned long)utf8_hex_digit(s[*i + (size_t)j]);
        if (j > digits && put_utf8(o, k, cp)) {
            *i += (size_t)digits + 1;
            return;
        }
    }
    if (ch >= '0' && ch <= '7') {
        unsigned long cp = 0;
        for (int j = 0; j < 3 && *i < end && s[*i] >= '0' && s[*i] <= '7'; j++) cp = cp * 8 + (unsigned long)(s[(*i)++] - '0');
        put_utf8(o, k, cp);
        return;
    }
    o[(*k)++] = '\\';
}

static attnd_status lex_string(lexer *L) {
    char q = L->s[L->pos];
    size_t i = L->pos + 1, start = i;
    while (i < L->n && L->s[i] != q) i += L->s[i] == '\\' && i + 1 < L->n ? 2 : 1;
    if (i >= L->n) return lex_fail(L, "unterminated string");
    char *o = jarena_alloc(L->a, (i - start) * 2 + 1); /* an escape never grows by more than 2x */
    jtoken *t = o ? emit(L, T_STRING, o, 0) : NULL;
    if (!t) return ATTND_ERR_NOMEM;
    size_t k = 0;
    for (size_t j = start; j < i;) {
        if (L->s[j] == '\\') {
            j++;
            unescape_one(L->s, i, &j, o, &k);
        } else {
            o[k++] = L->s[j++];
        }
    }
    t->n = k;
    count_lines(L, L->pos, i + 1);
    L->pos = i + 1;
    return ATTND_OK;
}

static attnd_status lex_number(lexer *L) {
    size_t i = L->pos;
    bool is_float = false;
    while (i < L->n && (isdigit((unsigned char)L->s[i]) || L->s[i] == '_')) i++;
    if (i + 1 < L->n && L->s[i] == '.' && isdigit((unsigned char)L->s[i + 1])) {
        is_float = true;
        for (i++; i < L->n && (isdigit((unsigned char)L->s[i]) || L->s[i] == '_');) i++;
    }
    if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
        if (j < L->n && isdigit((unsigned char)L->s[j])) {
            is_float = true;
            for (i = j; i < L->n && isdigit((unsigned char)L->s[i]);) i++;
        }
    }
    char num[64];
    size_t k = 0;
    for (size_t j = L->pos; j < i && k < sizeof(num) - 1; j++)
        if (L->s[j] != '_') num[k++] = L->s[j];
    num[k] = '\0';
    jtoken *t = emit(L, is_float ? T_FLOAT : T_INT, L->s + L->pos, i - L->pos);
    if (!t) return ATTND_ERR_NOMEM;
    errno = 0;
    if (is_float) t->f = strtod(num, NULL);
    else t->i = strtoll(num, NULL, 10);
    if (!is_float && errno == ERANGE) return lex_fail(L, "integer literal out of range");
    L->pos = i;
    return ATTND_OK;
}

/* True when the tag closes at L->pos; emits the end token and applies its whitespace control. */
static bool tag_end(lexer *L, char tag, attnd_status *st) {
    const char *s = L->s + L->pos;
    size_t left = L->n - L->pos;
    char close = tag == '{' ? '}' : '%';
    size_t k = 0;
    if (left >= 3 && (s[0] == '-' || (s[0] == '+' && tag == '%')) && s[1] == close && s[2] == '}') k = 1;
    else if (!(left >= 2 && s[0] == close && s[1] == '}')) return false;
    if (!emit(L, tag == '{' ? T_VAR_END : T_BLOCK_END, s, k + 2)) *st = ATTND_ERR_NOMEM;
    L->strip_next = k && s[0] == '-';
    L->trim_nl = tag == '%' && !k;
    L->pos += k + 2;
    return true;
}

static attnd_status lex_tag(lexer *L, char tag) {
    static const char *ops2[] = {"**", "//", "==", "!=", "<=", ">="};
    int open = 0; /* unclosed brackets: "}}" inside {'k': {}} does not end the tag (as in jinja2) */
    for (;;) {
        while (L->pos < L->n && isspace((unsigned char)L->s[L->pos])) L->line += L->s[L->pos++] == '\n';
        if (L->pos >= L->n) return lex_fail(L, tag == '{' ? "unclosed '{{'" : "unclosed '{%'");
        attnd_status st = ATTND_OK;
        if (open <= 0 && tag_end(L, tag, &st)) return st;
        char ch = L->s[L->pos];
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t i = L->pos;
            while (i < L->n && (isalnum((unsigned char)L->s[i]) || L->s[i] == '_')) i++;
            if (!emit(L, T_NAME, L->s + L->pos, i - L->pos)) return ATTND_ERR_NOMEM;
            L->pos = i;
        } else if (isdigit((unsigned char)ch)) {
            if ((st = lex_number(L)) != ATTND_OK) return st;
        } else if (ch == '\'' || ch == '"') {
            if ((st = lex_string(L)) != ATTND_OK) return st;
        } else {
            size_t k = 0;
            for (size_t j = 0; j < ATTND_ARRAY_LEN(ops2) && !k; j++)
                if (L->n - L->pos >= 2 && !memcmp(L->s + L->pos, ops2[j], 2)) k = 2;
            if (!k && strchr("+-*/%~<>()[]{},.:|=", ch)) k = 1;
            if (!k) return lex_fail(L, "unexpected character in a tag");
            if (!emit(L, T_OP, L->s + L->pos, k)) return ATTND_ERR_NOMEM;
            if (k == 1) open += strchr("([{", ch) ? 1 : strchr(")]}", ch) ? -1 : 0;
            L->pos += k;
        }
    }
}

static attnd_status lex_comment(lexer *L) {
    for (size_t i = L->pos; i + 1 < L->n; i++) {
        if (L->s[i] != '#' || L->s[i + 1] != '}') continue;
        bool strip = i > L->pos && L->s[i - 1] == '-';
        count_lines(L, L->pos, i);
        L->pos = i + 2;
        L->strip_next = strip, L->trim_nl = !strip;
        return ATTND_OK;
    }
    return lex_fail(L, "unclosed comment");
}

static attnd_status lex_all(lexer *L) {
    while (L->pos < L->n) {
        size_t at = next_tag(L, L->pos);
        char tag = at < L->n ? L->s[at + 1] : 0;
        char mod = at + 2 < L->n ? L->s[at + 2] : 0;
        if (!emit_text(L, L->pos, at, tag == '{' ? '{' : tag, mod)) return ATTND_ERR_NOMEM;
        count_lines(L, L->pos, at);
        if (at >= L->n) break;
        L->pos = at + 2;
        if (mod == '-' || (mod == '+' && tag != '{')) L->pos++;
        attnd_status st = ATTND_OK;
        if (tag == '#') st = lex_comment(L);
        else if (tag == '%' && lex_raw(L, at + 2, &st) != 0) {
            /* raw text emitted (or st says why not) */
        } else {
            if (!emit(L, tag == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, L->s + at, 2)) return ATTND_ERR_NOMEM;
            st = lex_tag(L, tag);
        }
        if (st != ATTND_OK) return st;
    }
    return emit(L, T_EOF, L->s + L->n, 0) ? ATTND_OK : ATTND_ERR_NOMEM;
}

attnd_status jinja_lex(const char *src, size_t len, jarena *a, jtoken **toks, size_t *n_toks, attnd_err *err) {
    char *s = jarena_alloc(a, len + 1);
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) { /* "\r\n" and "\r" become "\n" */
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    lexer L = {.s = s, .n = n, .line = 1, .a = a, .err = err};
    attnd_status st = lex_all(&L);
    if (st == ATTND_ERR_NOMEM || a->failed) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    if (st != ATTND_OK) return buf_free(&L.toks), st;
    *toks = (jtoken *)(void *)L.toks.p, *n_toks = L.n_toks;
    return ATTND_OK;
}
