/*
 * tok_pre.c — the byte-level BPE pre-tokenizers (see tok_pre.h).
 *
 * Each matcher answers "how long is the match starting at code point i, within [i, end)?" by
 * trying the regex alternatives in order, exactly as a backtracking regex engine would try them
 * (first alternative that matches wins, greedy quantifiers backtrack only where the pattern can
 * need it). Pieces are never looked at beyond `end`, so a later stage cannot see across the
 * boundaries an earlier stage made, as in llama.cpp.
 */
#include "tok_pre.h"

#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "unicode.h"

static const tok_pre_kind KINDS[] = {
    /* llama.cpp's "default" BPE pre-tokenizer, used when tokenizer.ggml.pre is absent */
    {"default", {TOK_PRE_PUNCT_RUN, TOK_PRE_GPT2, TOK_PRE_DIGIT_RUN, TOK_PRE_DIGIT3}, false, false},
    {"gpt-2", {TOK_PRE_GPT2}, false, false},
    {"phi-2", {TOK_PRE_GPT2}, false, false},
    {"roberta-bpe", {TOK_PRE_GPT2}, false, false},
    {"modern-bert", {TOK_PRE_GPT2}, false, false},
    {"llama-bpe", {TOK_PRE_LLAMA3}, true, false},
    {"llama3", {TOK_PRE_LLAMA3}, true, false},
    {"llama-v3", {TOK_PRE_LLAMA3}, true, false},
    {"falcon3", {TOK_PRE_LLAMA3}, true, false},
    /* GLM-4 / 4.5 / 4.7 (llama.cpp's CHATGLM4): Llama 3's regex, but merges as usual and no BOS of
     * their own (the file's bos_token_id is [gMASK]; their templates write "[gMASK]<sop>") */
    {"glm4", {TOK_PRE_LLAMA3}, false, false},
    {"chatglm-bpe", {TOK_PRE_LLAMA3}, false, false},
    /* HF's Qwen2/2.5/3 tokenizers normalise to NFC before splitting. */
    {"qwen2", {TOK_PRE_QWEN2}, false, true},
    {"deepseek-r1-qwen", {TOK_PRE_QWEN2}, false, true},
    /* StarCoder-style: every digit alone, then GPT-2's regex (SmolLM, Refact, Command-R). */
    {"smollm", {TOK_PRE_DIGIT1, TOK_PRE_GPT2}, false, false},
    {"starcoder", {TOK_PRE_DIGIT1, TOK_PRE_GPT2}, false, false},
    {"refact", {TOK_PRE_DIGIT1, TOK_PRE_GPT2}, false, false},
    {"command-r", {TOK_PRE_DIGIT1, TOK_PRE_GPT2}, false, false},
    /* OpenAI's o200k (GPT-4o, gpt-oss): case-aware words with contraction suffixes. */
    {"gpt-4o", {TOK_PRE_O200K}, false, false},
};

const tok_pre_kind *tok_pre_find(const char *name) {
    if (!name) name = "default";
    for (size_t i = 0; i < ATTND_ARRAY_LEN(KINDS); i++)
        if (!strcmp(KINDS[i].name, name)) return &KINDS[i];
    return NULL;
}

void tok_pre_buf_free(tok_pre_buf *b) {
    if (!b) return;
    free(b->mem);
    memset(b, 0, sizeof(*b));
}

// ---- matchers ---------------------------------------------------------------------------------

/* Views of the decoded piece; `end` bounds every look-ahead. */
typedef struct view {
    const uint32_t *cp;
    const uint8_t *cl;
    size_t end;
} view;

static inline uint32_t lower_ascii(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d at i, case-insensitively when `fold`. Returns the length or 0. */
static size_t match_contraction(const view *v, size_t i, bool fold) {
    if (v->cp[i] != '\'' || i + 1 >= v->end) return 0;
    uint32_t a = v->cp[i + 1], b = i + 2 < v->end ? v->cp[i + 2] : 0;
    if (fold) a = lower_ascii(a), b = lower_ascii(b);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static inline bool is_l(const view *v, size_t i) { return i < v->end && (v->cl[i] & UNI_LETTER); }
static inline bool is_n(const view *v, size_t i) { return i < v->end && (v->cl[i] & UNI_NUMBER); }
static inline bool is_s(const view *v, size_t i) { return i < v->end && (v->cl[i] & UNI_SPACE); }
/* [^\s\p{L}\p{N}] */
static inline bool is_other(const view *v, size_t i) {
    return i < v->end && !(v->cl[i] & (UNI_SPACE | UNI_LETTER | UNI_NUMBER));
}
static inline bool is_crlf(const view *v, size_t i) { return i < v->end && (v->cp[i] == '\r' || v->cp[i] == '\n'); }

/* \s+(?!\S)|\s+ at i (cp[i] is white space): the run, minus its last character when a
 * non-space follows and the run is longer than one. */
static size_t match_space_run(const view *v, size_t i) {
    size_t j = i;
    while (is_s(v, j)) j++;
    if (j < v->end && j - i > 1) return j - i - 1;
    return j - i;
}

static size_t match_gpt2(const view *v, size_t i) {
    size_t n = match_contraction(v, i, false);
    if (n) return n;
    size_t j = i + (v->cp[i] == ' ' ? 1 : 0);
    if (is_l(v, j)) {
        while (is_l(v, j)) j++;
        return j - i;
    }
    if (is_n(v, j)) {
        while (is_n(v, j)) j++;
        return j - i;
    }
    if (is_other(v, j)) {
        while (is_other(v, j)) j++;
        return j - i;
    }
    if (is_s(v, i)) return match_space_run(v, i);
    return 0;
}

/* The tail shared by Llama 3's and o200k's regexes:  ?[^\s\p{L}\p{N}]+[\r\n]* (o200k: [\r\n/]*)
 * |\s*[\r\n]+|\s+(?!\S)|\s+ at i. */
static size_t match_punct_space(const view *v, size_t i, bool slash) {
    size_t j = i + (v->cp[i] == ' ' ? 1 : 0);
    if (is_other(v, j)) {
        while (is_other(v, j)) j++;
        while (is_crlf(v, j) || (slash && j < v->end && v->cp[j] == '/')) j++;
        return j - i;
    }
    if (is_s(v, i)) {
        /* \s*[\r\n]+ : up to and including the last CR/LF of the white-space run */
        size_t last = 0;
        for (j = i; is_s(v, j); j++)
            if (v->cp[j] == '\r' || v->cp[j] == '\n') last = j + 1;
        if (last) return last - i;
        return match_space_run(v, i);
    }
    return 0;
}

static size_t match_llama3(const view *v, size_t i, size_t max_digits) {
    size_t n = match_contraction(v, i, true);
    if (n) return n;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t j = i;
    if (!is_l(v, j) && !is_n(v, j) && !is_crlf(v, j) && is_l(v, j + 1)) j++;
    if (is_l(v, j)) {
        while (is_l(v, j)) j++;
        return j - i;
    }
    /* \p{N}{1,max} */
    if (is_n(v, i)) {
        j = i;
        while (j - i < max_digits && is_n(v, j)) j++;
        return j - i;
    }
    return match_punct_space(v, i, false);
}

/* o200k's letter classes: U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}] (Lm, Lo and
 * marks are in both). */
static inline bool is_o200k_u(const view *v, size_t i) {
    return i < v->end && ((v->cl[i] & UNI_MARK) || ((v->cl[i] & UNI_LETTER) && !(v->cl[i] & UNI_LOWER)));
}
static inline bool is_o200k_w(const view *v, size_t i) {
    return i < v->end && ((v->cl[i] & UNI_MARK) || ((v->cl[i] & UNI_LETTER) && !(v->cl[i] & UNI_UPPER)));
}

/* U*W+ (upper_first: U+W*) from j, as a backtracking engine finds it; then (?i:'s|...)? Returns
 * the end, or 0 when the alternative does not match at j. */
static size_t match_o200k_word(const view *v, size_t j, bool upper_first) {
    size_t e = j;
    while (is_o200k_u(v, e)) e++;
    size_t end = 0;
    if (upper_first) {
        if (e == j) return 0;
        for (end = e; is_o200k_w(v, end); end++) {}
    } else if (is_o200k_w(v, e)) {
        for (end = e; is_o200k_w(v, end); end++) {}
    } else {
        /* U* gives back characters until W+ can take one: the last W inside the U run ends it */
        for (size_t q = e; q > j && !end; q--)
            if (is_o200k_w(v, q - 1)) end = q;
        if (!end) return 0;
    }
    return end + match_contraction(v, end, true);
}

/* [^\r\n\p{L}\p{N}]? at i, then the word: with the optional character first, then without. */
static size_t match_o200k_prefixed(const view *v, size_t i, bool upper_first) {
    if (!is_l(v, i) && !is_n(v, i) && !is_crlf(v, i)) {
        size_t end = match_o200k_word(v, i + 1, upper_first);
        if (end) return end - i;
    }
    size_t end = match_o200k_word(v, i, upper_first);
    return end ? end - i : 0;
}

static size_t match_o200k(const view *v, size_t i) {
    size_t n = match_o200k_prefixed(v, i, false);
    if (!n) n = match_o200k_prefixed(v, i, true);
    if (n) return n;
    /* \p{N}{1,3} */
    size_t j = i;
    while (j - i < 3 && is_n(v, j)) j++;
    if (j > i) return j - i;
    return match_punct_space(v, i, true);
}

static size_t match_stage(tok_pre_stage st, const view *v, size_t i) {
    size_t j = i;
    switch (st) {
    case TOK_PRE_GPT2: return match_gpt2(v, i);
    case TOK_PRE_LLAMA3: return match_llama3(v, i, 3);
    case TOK_PRE_QWEN2: return match_llama3(v, i, 1);
    case TOK_PRE_O200K: return match_o200k(v, i);
    case TOK_PRE_PUNCT_RUN:
        while (j < v->end && ((v->cl[j] & UNI_PUNCT) || v->cp[j] == '$' || v->cp[j] == '+' || v->cp[j] == '<' ||
                              v->cp[j] == '=' || v->cp[j] == '>' || v->cp[j] == '^' || v->cp[j] == '~' ||
                              v->cp[j] == '|'))
            j++;
        return j - i;
    case TOK_PRE_DIGIT_RUN:
        while (is_n(v, j)) j++;
        return j - i;
    case TOK_PRE_DIGIT3:
        return i + 3 <= v->end && v->cp[i] - '0' < 10 && v->cp[i + 1] - '0' < 10 && v->cp[i + 2] - '0' < 10 ? 3 : 0;
    case TOK_PRE_DIGIT1: return is_n(v, i) ? 1 : 0;
    case TOK_PRE_NONE: break;
    }
    return 0;
}

// ---- splitting --------------------------------------------------------------------------------

/* Lays out b's arrays for cap entries in mem (block.h); returns the bytes they need. */
static size_t layout(tok_pre_buf *b, char *mem, size_t cap) {
    block k = {.mem = mem};
    b->cps = block_take(&k, cap, sizeof(*b->cps));
    b->cls = block_take(&k, cap, sizeof(*b->cls));
    b->offs = block_take(&k, cap, sizeof(*b->offs));
    b->bounds = block_take(&k, 2 * cap, sizeof(*b->bounds)); /* and tmp: the two halves swap roles */
    b->tmp = b->bounds ? b->bounds + cap : NULL;
    return block_size(&k);
}

/* Room for cap entries (the contents are not kept: every split rebuilds them); false when out of
 * memory, b unchanged. */
static bool grow(tok_pre_buf *b, size_t cap) {
    tok_pre_buf probe;
    char *mem = malloc(layout(&probe, NULL, cap));
    if (!mem) return false;
    free(b->mem);
    b->mem = mem;
    b->cap = cap;
    layout(b, mem, cap);
    return true;
}

attnd_status tok_pre_split(const tok_pre_kind *kind, const char *text, size_t len, tok_pre_buf *b, attnd_err *err) {
    if (len >= UINT32_MAX) return attnd_fail(err, ATTND_ERR_INVALID, "text of %zu bytes is too long to tokenize", len);
    /* Decode once; a code point never takes less than a byte, so len + 1 entries suffice. */
    if (len + 1 > b->cap && !grow(b, len + 1))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory splitting %zu bytes", len);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        b->offs[n] = (uint32_t)i;
        uint32_t cp = unicode_next(text, len, &i);
        b->cps[n] = cp;
        b->cls[n] = unicode_class(cp);
        n++;
    }
    b->offs[n] = (uint32_t)len;

    /* Every code point can start a word, so n + 1 bounds always suffice; two arrays are
     * swapped between stages. */
    /* The whole text as one piece, then refine stage by stage. */
    b->bounds[0] = 0;
    b->bounds[1] = (uint32_t)n;
    b->n_bounds = n ? 2 : 1;
    for (int s = 0; s < TOK_PRE_MAX_STAGES && kind->stages[s] != TOK_PRE_NONE; s++) {
        uint32_t *out = b->tmp;
        size_t m = 0;
        out[m++] = 0;
        for (size_t k = 0; k + 1 < b->n_bounds; k++) {
            view v = {b->cps, b->cls, b->bounds[k + 1]};
            size_t i = b->bounds[k], gap = i;
            while (i < v.end) {
                size_t l = match_stage(kind->stages[s], &v, i);
                if (!l) {
                    i++;
                    continue;
                }
                if (gap < i) out[m++] = (uint32_t)i; /* close the unmatched gap before the match */
                i += l;
                out[m++] = (uint32_t)i;
                gap = i;
            }
            if (gap < v.end) out[m++] = (uint32_t)v.end;
        }
        b->tmp = b->bounds;
        b->bounds = out;
        b->n_bounds = m;
    }
    return ATTND_OK;
}
