/*
 * tokenizer.c — the two GGUF tokenizer families (see include/attnd/tokenizer.h).
 *
 * Load: every vocabulary string is copied into one arena, with a hash index from string to id
 * and a second arena holding what each token decodes to (so decoding is a memcpy per token).
 * Merges are indexed by the pair of token ids they join (BPE: tokenizer.ggml.merges; SPM: every
 * way of cutting a token into two tokens, see build_spm_pairs), so merging never builds strings:
 * symbols carry ids, and a merge is one hash probe.
 *
 * Encode: the text is first cut at special-token strings (leftmost, longest first); each plain
 * fragment is then tokenized on its own.
 *   SPM  ("llama"): spaces become U+2581, every fragment gets the dummy-prefix space, and pairs
 *        of adjacent symbols are merged best-score-first (ties: leftmost) while their
 *        concatenation is a vocabulary token; symbols that are not tokens fall back to <0xXX>
 *        byte tokens.
 *   BPE  ("gpt2"): the pre-tokenizer (tok_pre.c) cuts the fragment into words, and inside each
 *        word adjacent symbols are merged lowest-rank-first (ties: leftmost).
 *   SentencePiece-style BPE ("gemma4"): spaces become U+2581 (no dummy prefix); the fragment is
 *        cut into runs of newlines and runs of anything else; a newline run that is a token is
 *        that token, otherwise its characters (UTF-8, not byte-level) are merged by rank as BPE
 *        does, and a symbol that is not a token falls back to <0xXX> byte tokens.
 *   WPM  ("bert"): BERT's normaliser and word splitter (tok_wpm.c), then each word is cut into
 *        the longest vocabulary pieces from the left; [CLS] ... [SEP] around it all.
 *   UGM  ("t5"): SentencePiece's unigram model (tok_ugm.c): the precompiled character map,
 *        U+2581 before every word, and each word cut where the piece scores sum highest.
 * Both merge loops keep, for every live symbol, the priority of merging it with its right
 * neighbour in an indexed 4-ary heap, so a word of n bytes costs O(n log n) time and about
 * 24 bytes of working memory per byte, whatever its content (no quadratic case). Words (and SPM
 * pieces) that repeat within one call come from a per-call cache.
 *
 * Decode: concatenation of the per-token decoded bytes; the SentencePiece dummy-prefix space is
 * dropped from the first piece that produces text. The stream decoder does the same one id at a
 * time and holds back an unfinished UTF-8 tail.
 */
#include "attnd/tokenizer.h"

#include <math.h>
#include <string.h>

#include "attnd/utf8.h"
#include "block.h"
#include "tok_pre.h"
#include "tok_ugm.h"
#include "tok_wpm.h"
#include "unicode.h"

/* Token types as GGUF numbers them (tokenizer.ggml.token_type). */
enum {
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

enum { KIND_SPM, KIND_BPE, KIND_WPM, KIND_SBPE, KIND_UGM };

#define KEY_NONE UINT32_MAX

/* U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space. */
static const char SPM_SPACE[3] = {'\xE2', '\x96', '\x81'};

// ---- string -> id hash index ------------------------------------------------------------------

/* Open addressing over token ids; the keys live in the tokenizer's arenas. */
typedef struct strmap {
    int32_t *slots; /* (mask + 1) token id or -1 */
    uint64_t mask;
    const char *arena;
    const uint32_t *off, *len; /* (n_vocab) key of each id */
} strmap;

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0x100000001B3ULL);
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = (h ^ mix64(k)) * 0x9E3779B97F4A7C15ULL;
        p += 8, n -= 8;
    }
    uint64_t k = 0;
    memcpy(&k, p, n);
    return mix64(h ^ k ^ (n << 56));
}

static attnd_status strmap_init(strmap *m, size_t n_keys, const char *arena, const uint32_t *off,
                                const uint32_t *len) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n_keys * 2) cap *= 2;
    m->slots = malloc(cap * sizeof(*m->slots));
    if (!m->slots) return ATTND_ERR_NOMEM;
    memset(m->slots, 0xFF, cap * sizeof(*m->slots));
    m->mask = cap - 1;
    m->arena = arena, m->off = off, m->len = len;
    return ATTND_OK;
}

static int32_t strmap_get(const strmap *m, const char *p, size_t n) {
    if (!m->slots) return -1;
    for (uint64_t i = hash_bytes(p, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slots[i];
        if (id < 0) return -1;
        if (m->len[id] == n && !memcmp(m->arena + m->off[id], p, n)) return id;
    }
}

/* Inserts id under its key; a later id with the same key replaces the earlier (as llama.cpp). */
static void strmap_put(strmap *m, int32_t id) {
    const char *p = m->arena + m->off[id];
    size_t n = m->len[id];
    for (uint64_t i = hash_bytes(p, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t cur = m->slots[i];
        if (cur < 0 || (m->len[cur] == n && !memcmp(m->arena + m->off[cur], p, n))) {
            m->slots[i] = id;
            return;
        }
    }
}

// ---- (id, id) -> merge hash index -------------------------------------------------------------

typedef struct merge_slot {
    uint64_t pair;  /* left id << 32 | right id; UINT64_MAX = empty */
    uint32_t rank;  /* position in tokenizer.ggml.merges: lower merges first */
    int32_t result; /* id of the merged token */
} merge_slot;

typedef struct mergemap {
    merge_slot *slots; /* (mask + 1) */
    uint64_t mask;
} mergemap;

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static const merge_slot *merge_get(const mergemap *m, int32_t a, int32_t b) {
    if (a < 0 || b < 0 || !m->slots) return NULL;
    uint64_t key = pair_key(a, b);
    for (uint64_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        const merge_slot *s = &m->slots[i];
        if (s->pair == key) return s;
        if (s->pair == UINT64_MAX) return NULL;
    }
}

// ---- the tokenizer ----------------------------------------------------------------------------

struct tokenizer {
    int kind; /* KIND_SPM, KIND_BPE, KIND_WPM, KIND_SBPE or KIND_UGM */
    int32_t n_vocab;
    char *text;             /* arena: every vocabulary string, each NUL-terminated */
    uint32_t *text_off;     /* (n_vocab) */
    uint32_t *text_len;     /* (n_vocab) */
    char *dec;              /* arena: the bytes each token decodes to */
    uint32_t *dec_off;      /* (n_vocab) */
    uint32_t *dec_len;      /* (n_vocab) */
    uint8_t *type;          /* (n_vocab) TT_* */
    float *score;           /* (n_vocab) SPM merge priority (higher first), UGM piece log-probability */
    bool *eog;              /* (n_vocab) end-of-generation ids */
    strmap by_text;         /* stored string -> id */
    strmap by_bytes;        /* BPE with ignore_merges: decoded bytes of normal tokens -> id */
    mergemap merges;        /* BPE ranks, or SPM pairs when spm_pairs */
    int32_t byte_tok[256];  /* token for a raw byte (SPM <0xXX>, BPE its byte-level character) */
    int32_t *special;       /* (n_special) control/user/unknown ids, by first byte, longest first */
    size_t n_special;
    uint32_t special_at[257]; /* special[special_at[b] .. special_at[b+1]) start with byte b */
    int32_t bos, eos, eot, eom, unk, pad;
    int32_t sep;            /* separator ([SEP]): closes a WordPiece text, and each text of a pair */
    int32_t fim[TOK_FIM_N]; /* fill-in-the-middle ids by tok_fim_role; -1 = none */
    bool add_bos, add_eos, add_space_prefix;
    bool add_sep;           /* add_special appends sep (WordPiece); a pair's separator (pair_specials) */
    bool wpm_lower, wpm_strip; /* WordPiece: lowercase, strip accents (BertNormalizer) */
    size_t wpm_max_piece;   /* WordPiece: the longest normal token, in bytes */
    bool spm_split;         /* no token joins a non-space to a following U+2581 (see spm_fragment) */
    bool spm_pairs;         /* SPM merges go through `merges` by id pair (see build_spm_pairs) */
    int32_t spm_ascii[128]; /* SPM: mergeable token of each ASCII character, or -1 */
    int32_t spm_space;      /* SPM: mergeable token of U+2581, or -1 */
    tok_ugm_map ugm_map;    /* UGM: tokenizer.ggml.precompiled_charsmap (empty when absent) */
    tok_ugm_flags ugm_flags;
    size_t ugm_max_piece;   /* UGM: the longest piece, in bytes */
    double ugm_unk_score;   /* UGM: the lowest normal score - 10 */
    uint64_t *ugm_prefix;   /* UGM: Bloom filter of every proper prefix of a piece (build_ugm_prefixes) */
    uint64_t ugm_prefix_mask; /* its size in bits - 1 */
    const tok_pre_kind *pre;
    char *tables; /* owns text .. eog and special (engine/block.h) */
};

/* GPT-2's byte <-> character table: printable Latin-1 bytes stand for themselves, the other 68
 * bytes for U+0100.. in byte order. */
static uint32_t byte_to_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
    return 0x100 + n;
}

/* The byte of an SPM "<0xXX>" token, or -1 when the text is not of that form. */
static int spm_byte_of(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int hi = utf8_hex_digit(s[3]), lo = utf8_hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* HF's WordPiece decoder cleanup, applied to each token's text as HF does (in this order):
 * " ." -> "." and so on, so punctuation glues to the word before it. Shrinks s in place. */
static size_t wpm_cleanup(char *s, size_t n) {
    static const char *const RULES[][2] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    for (size_t r = 0; r < ATTND_ARRAY_LEN(RULES); r++) {
        size_t from = strlen(RULES[r][0]), to = strlen(RULES[r][1]), m = 0;
        for (size_t i = 0; i < n;) {
            if (i + from <= n && !memcmp(s + i, RULES[r][0], from)) {
                memcpy(s + m, RULES[r][1], to);
                m += to, i += from;
            } else {
                s[m++] = s[i++];
            }
        }
        n = m;
    }
    return n;
}

/* Is id a WordPiece continuation piece (HF's "##ing", stored bare as "ing")? */
static inline bool wpm_continuation(const tokenizer *t, int32_t id) {
    return t->kind == KIND_WPM && t->type[id] == TT_NORMAL &&
           (t->text_len[id] < 3 || memcmp(t->text + t->text_off[id], SPM_SPACE, 3));
}

/* What a WordPiece token decodes to, HF's WordPiece decoder: a word-initial piece ("▁play", any
 * special or added token) is a space and its text, then the cleanup; a continuation piece is
 * "##" and its text ("##ing"), the "##" being dropped (by piece_of) unless the piece comes
 * first, as HF does. Room: text + 2. */
static size_t wpm_decode_token(const tokenizer *t, int32_t id, char *out) {
    const char *s = t->text + t->text_off[id];
    size_t n = t->text_len[id];
    if (wpm_continuation(t, id)) {
        memcpy(out, "##", 2);
        memcpy(out + 2, s, n);
        return n + 2;
    }
    if (t->type[id] == TT_NORMAL) s += 3, n -= 3; /* the "▁" of a word-initial piece */
    out[0] = ' ';
    memcpy(out + 1, s, n);
    return wpm_cleanup(out, n + 1);
}

/* Writes what token id decodes to at out (room for 4 * text length + 1) and returns its length. */
static size_t decode_token(const tokenizer *t, int32_t id, const uint32_t *cp_to_byte, char *out) {
    const char *s = t->text + t->text_off[id];
    size_t n = t->text_len[id];
    if (t->type[id] != TT_UNUSED && t->kind == KIND_WPM) return wpm_decode_token(t, id, out);
    switch (t->type[id]) {
    case TT_UNUSED: return 0;
    case TT_CONTROL: case TT_UNKNOWN: case TT_USER: /* verbatim (control/unknown only when rendered) */
        memcpy(out, s, n);
        return n;
    case TT_BYTE: {
        int b = spm_byte_of(s, n);
        if (b >= 0) {
            out[0] = (char)b;
            return 1;
        }
        break; /* malformed byte token: decode it as normal text */
    }
    default: break;
    }
    size_t m = 0;
    if (t->kind == KIND_SPM || t->kind == KIND_SBPE || t->kind == KIND_UGM) { /* U+2581 stands for a space */
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && !memcmp(s + i, SPM_SPACE, 3)) {
                out[m++] = ' ';
                i += 3;
            } else {
                out[m++] = s[i++];
            }
        }
        return m;
    }
    /* byte-level: map each character back to its byte; characters outside the table (not
     * produced by the byte-level encoder) are kept as they are */
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = unicode_next(s, n, &i);
        if (cp < 0x144 && cp_to_byte[cp] < 256) {
            out[m++] = (char)cp_to_byte[cp];
        } else {
            memcpy(out + m, s + start, i - start);
            m += i - start;
        }
    }
    return m;
}

static const char *EOG_TEXTS[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
    "_<EOT>", "<|end_of_text|>", "</s>", "<｜end▁of▁sentence｜>", "<|return|>", "<|call|>",
};
/* End-of-generation and control whatever type the file gives them, as llama.cpp's loader makes
 * them: Gemma 4's end of turn, and the opening of a tool's response, which ends the model's turn
 * after a tool call (its converter writes it user-defined; llama.cpp retypes it, so it matches
 * only where control tokens do). */
static const char *EOG_TEXTS_ANY_TYPE[] = {"<turn|>", "<|tool_response>"};

/* The fill-in-the-middle tokens: the GGUF's key for each role (fim_*_token_id), the older key
 * (prefix/suffix/middle_token_id) where there is one, and else the spellings the coder families
 * use in their vocabularies, as llama.cpp's loader knows them (its llama-vocab.cpp). */
static const struct {
    const char *key, *old_key;
    const char *texts[9]; /* NULL-ended */
} FIM_ROLES[TOK_FIM_N] = {
    [TOK_FIM_PRE] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id",
                     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                      "▁<PRE>", "<|code_prefix|>", "<|prefix|>", NULL}},
    [TOK_FIM_SUF] = {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id",
                     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                      "▁<SUF>", "<|code_suffix|>", "<|suffix|>", NULL}},
    [TOK_FIM_MID] = {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id",
                     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                      "▁<MID>", "<|code_middle|>", "<|middle|>", NULL}},
    [TOK_FIM_PAD] = {"tokenizer.ggml.fim_pad_token_id", NULL, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL}},
    [TOK_FIM_REP] = {"tokenizer.ggml.fim_rep_token_id", NULL,
                     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL}},
    [TOK_FIM_SEP] = {"tokenizer.ggml.fim_sep_token_id", NULL, {"<|file_sep|>", NULL}},
};

/* Reads an optional id key: -1 when absent; format error when present but out of range. */
static attnd_status read_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t dflt, int32_t *out,
                            attnd_err *err) {
    int64_t v;
    attnd_status st = gguf_get_i64(f, key, &v, err);
    if (st == ATTND_ERR_NOT_FOUND) {
        *out = dflt < n_vocab ? dflt : -1;
        return ATTND_OK;
    }
    if (st != ATTND_OK) return st;
    if (v == -1 || v == UINT32_MAX) { /* some converters write -1 (or its u32 form) for "none" */
        *out = -1;
        return ATTND_OK;
    }
    if (v < 0 || v >= n_vocab)
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s = %lld is outside the vocabulary (%d tokens)", key,
                          (long long)v, n_vocab);
    *out = (int32_t)v;
    return ATTND_OK;
}

/* The fill-in-the-middle ids (FIM_ROLES). A token found by its spelling is made a control token,
 * as llama.cpp does, so that it never reads as text. The pad, repository and file-separator tokens
 * end generation: a model that writes one has finished the middle. */
static attnd_status read_fim_ids(tokenizer *t, const gguf_file *f, attnd_err *err) {
    for (int r = 0; r < TOK_FIM_N; r++) {
        attnd_status st = read_id(f, FIM_ROLES[r].key, t->n_vocab, -1, &t->fim[r], err);
        if (st == ATTND_OK && t->fim[r] < 0 && FIM_ROLES[r].old_key)
            st = read_id(f, FIM_ROLES[r].old_key, t->n_vocab, -1, &t->fim[r], err);
        if (st != ATTND_OK) return st;
        for (int k = 0; t->fim[r] < 0 && FIM_ROLES[r].texts[k]; k++) {
            const char *s = FIM_ROLES[r].texts[k];
            int32_t id = strmap_get(&t->by_text, s, strlen(s));
            if (id >= 0 && t->type[id] == TT_NORMAL) t->type[id] = TT_CONTROL;
            t->fim[r] = id;
        }
        if (t->fim[r] >= 0 && (r == TOK_FIM_PAD || r == TOK_FIM_REP || r == TOK_FIM_SEP)) t->eog[t->fim[r]] = true;
    }
    return ATTND_OK;
}

static bool read_bool(const gguf_file *f, const char *key, bool dflt) {
    bool b;
    return gguf_get_bool(f, key, &b, NULL) == ATTND_OK ? b : dflt;
}

/* Sort record for the special-token index: by first byte, then longest first, then id. */
typedef struct special_rec {
    uint32_t first, len;
    int32_t id;
} special_rec;

static int cmp_special(const void *pa, const void *pb) {
    const special_rec *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static attnd_status load_merges(tokenizer *t, const gguf_file *f, attnd_err *err) {
    const gguf_array *arr;
    attnd_status st = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_VT_STRING, &arr, err);
    if (st != ATTND_OK) return st;
    if (arr->n >= UINT32_MAX) return attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.merges: too many merges");
    uint64_t cap = 16;
    while (cap < arr->n * 2) cap *= 2;
    t->merges.slots = malloc(cap * sizeof(merge_slot));
    if (!t->merges.slots) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for %llu merges", (unsigned long long)arr->n);
    for (uint64_t i = 0; i < cap; i++) t->merges.slots[i].pair = UINT64_MAX;
    t->merges.mask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t r = 0; r < arr->n; r++) {
        const char *s = arr->strings[r].str;
        size_t n = arr->strings[r].len;
        /* "left right": split at the first space after the first byte (a token may be " "). */
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) {
            free(buf);
            return attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.merges[%llu] is not \"left right\"",
                              (unsigned long long)r);
        }
        size_t nl = (size_t)(sp - s), nr = n - nl - 1;
        int32_t a = strmap_get(&t->by_text, s, nl), b = strmap_get(&t->by_text, sp + 1, nr);
        if (!attnd_grow(&buf, &buf_cap, nl + nr, 1, 64)) {
            free(buf);
            return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory reading merges");
        }
        memcpy(buf, s, nl);
        memcpy(buf + nl, sp + 1, nr);
        int32_t c = strmap_get(&t->by_text, buf, nl + nr);
        /* A merge whose parts or result are not tokens can never apply to token symbols. */
        if (a < 0 || b < 0 || c < 0) continue;
        uint64_t key = pair_key(a, b);
        for (uint64_t i = mix64(key) & t->merges.mask;; i = (i + 1) & t->merges.mask) {
            merge_slot *slot = &t->merges.slots[i];
            if (slot->pair == key) break; /* a repeated pair keeps its first (lowest) rank */
            if (slot->pair == UINT64_MAX) {
                *slot = (merge_slot){key, (uint32_t)r, c};
                break;
            }
        }
    }
    free(buf);
    return ATTND_OK;
}

/* Merge priority of a score: higher scores get smaller keys (order-preserving float bits). */
static inline uint32_t score_key(float f) {
    if (f == 0.0f) f = 0.0f; /* -0 == +0 */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t asc = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~asc;
}

/* Token for bytes p[0..n) that SPM merges may produce: normal and user-defined pieces only
 * (SentencePiece never forms control, byte or unused pieces from text). */
static inline int32_t spm_lookup(const tokenizer *t, const char *p, size_t n) {
    int32_t id = strmap_get(&t->by_text, p, n);
    return id >= 0 && (t->type[id] == TT_NORMAL || t->type[id] == TT_USER) ? id : -1;
}

/*
 * SentencePiece merges two adjacent symbols when their concatenated text is a token. Symbols are
 * single characters or earlier merge results (tokens), so if every character of every mergeable
 * token is itself a token, all symbols that can ever merge are tokens, and the rule is exactly:
 * pair (A, B) -> the token spelled A+B, for every way of cutting a token into two tokens. This
 * builds that table (priority = the result's score) so merging is one hash probe on ids instead
 * of hashing strings; when the condition fails, merging falls back to string lookups.
 */
static attnd_status build_spm_pairs(tokenizer *t, attnd_err *err) {
    size_t nv = (size_t)t->n_vocab, n_pairs = 0;
    for (size_t i = 0; i < nv; i++) {
        if (t->type[i] != TT_NORMAL && t->type[i] != TT_USER) continue;
        const char *s = t->text + t->text_off[i];
        size_t n = t->text_len[i];
        for (size_t k = 0; k < n;) {
            size_t start = k;
            unicode_next(s, n, &k);
            if (spm_lookup(t, s + start, k - start) < 0) return ATTND_OK; /* condition fails */
            if (start) n_pairs++;
        }
    }
    uint64_t cap = 16;
    while (cap < n_pairs * 2) cap *= 2;
    t->merges.slots = malloc(cap * sizeof(merge_slot));
    if (!t->merges.slots) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for SPM merge pairs");
    for (uint64_t i = 0; i < cap; i++) t->merges.slots[i].pair = UINT64_MAX;
    t->merges.mask = cap - 1;
    for (size_t i = 0; i < nv; i++) {
        if (t->type[i] != TT_NORMAL && t->type[i] != TT_USER) continue;
        const char *s = t->text + t->text_off[i];
        size_t n = t->text_len[i];
        int32_t c = spm_lookup(t, s, n);
        if (c != (int32_t)i) continue; /* a duplicate string: the index names another id */
        size_t k = 0;
        unicode_next(s, n, &k);
        while (k < n) {
            int32_t a = spm_lookup(t, s, k), b = spm_lookup(t, s + k, n - k);
            if (a >= 0 && b >= 0) {
                uint64_t key = pair_key(a, b);
                for (uint64_t j = mix64(key) & t->merges.mask;; j = (j + 1) & t->merges.mask) {
                    merge_slot *slot = &t->merges.slots[j];
                    if (slot->pair == UINT64_MAX) {
                        *slot = (merge_slot){key, score_key(t->score[c]), c};
                        break;
                    }
                }
            }
            unicode_next(s, n, &k);
        }
    }
    t->spm_pairs = true;
    return ATTND_OK;
}

/* The tokenizer family (tokenizer.ggml.model) and, for BPE, its pre-tokenizer. */
static attnd_status read_kind(tokenizer *t, const gguf_file *f, attnd_err *err) {
    attnd_status st;
    const char *model;
    if ((st = gguf_get_str(f, "tokenizer.ggml.model", &model, err)) != ATTND_OK) return st;
    if (!strcmp(model, "llama")) {
        t->kind = KIND_SPM;
    } else if (!strcmp(model, "gpt2")) {
        t->kind = KIND_BPE;
    } else if (!strcmp(model, "bert")) {
        t->kind = KIND_WPM;
    } else if (!strcmp(model, "gemma4")) {
        t->kind = KIND_SBPE;
    } else if (!strcmp(model, "t5")) {
        t->kind = KIND_UGM;
    } else {
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED,
                          "tokenizer.ggml.model \"%s\" is not supported (only \"llama\", \"gpt2\", \"bert\", "
                          "\"gemma4\" and \"t5\")",
                          model);
    }
    if (t->kind == KIND_BPE) {
        const char *pre = NULL;
        if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, NULL) != ATTND_OK) pre = NULL;
        t->pre = tok_pre_find(pre);
        if (!t->pre) {
            return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "tokenizer.ggml.pre \"%s\" is not a known pre-tokenizer", pre);
        }
    }
    return ATTND_OK;
}

/* The vocabulary arrays, their lengths checked against each other (types, scores optional). */
static attnd_status read_arrays(tokenizer *t, const gguf_file *f, const gguf_array **toks, const gguf_array **types,
                                const gguf_array **scores, attnd_err *err) {
    attnd_status st;
    *types = *scores = NULL;
    if ((st = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, toks, err)) != ATTND_OK) return st;
    if ((*toks)->n == 0 || (*toks)->n > INT32_MAX / 2) {
        return attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)(*toks)->n);
    }
    t->n_vocab = (int32_t)(*toks)->n;
    if (gguf_find_kv(f, "tokenizer.ggml.token_type")) {
        if ((st = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_VT_INT32, types, err)) != ATTND_OK) return st;
        if ((*types)->n != (*toks)->n) {
            return attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.token_type has %llu entries for %d tokens",
                              (unsigned long long)(*types)->n, t->n_vocab);
        }
    }
    if (gguf_find_kv(f, "tokenizer.ggml.scores")) {
        if ((st = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, scores, err)) != ATTND_OK) return st;
        if ((*scores)->n != (*toks)->n) {
            return attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.scores has %llu entries for %d tokens",
                              (unsigned long long)(*scores)->n, t->n_vocab);
        }
    }
    return ATTND_OK;
}

/* Lays out the per-token tables in mem (block.h), with text_bytes for each string arena; returns
 * the bytes they need. */
static size_t layout_tables(tokenizer *t, char *mem, size_t text_bytes) {
    size_t nv = (size_t)t->n_vocab;
    block b = {.mem = mem};
    t->text = block_take(&b, text_bytes, 1);
    t->text_off = block_take(&b, nv, sizeof(*t->text_off));
    t->text_len = block_take(&b, nv, sizeof(*t->text_len));
    /* a token never decodes to more bytes than its text has, but for WordPiece's " " and "##" */
    t->dec = block_take(&b, text_bytes + (t->kind == KIND_WPM ? 2 * nv : 0), 1);
    t->dec_off = block_take(&b, nv, sizeof(*t->dec_off));
    t->dec_len = block_take(&b, nv, sizeof(*t->dec_len));
    t->type = block_take(&b, nv, sizeof(*t->type));
    t->score = block_take(&b, t->kind == KIND_SPM || t->kind == KIND_UGM ? nv : 0, sizeof(*t->score));
    t->eog = block_take(&b, nv, sizeof(*t->eog));
    t->special = block_take(&b, nv, sizeof(*t->special));
    return block_size(&b);
}

/* Every per-token table, sized from the vocabulary strings. */
static attnd_status alloc_tables(tokenizer *t, const gguf_array *toks, attnd_err *err) {
    size_t nv = (size_t)t->n_vocab, total = 0;
    for (size_t i = 0; i < nv; i++) {
        total += toks->strings[i].len + 1;
        if (toks->strings[i].len > UINT32_MAX / 8 || total > UINT32_MAX / 8) {
            return attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.tokens: vocabulary strings too long");
        }
    }
    if (!(t->tables = calloc(1, layout_tables(t, NULL, total))))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for a %d-token vocabulary", t->n_vocab);
    layout_tables(t, t->tables, total);
    return ATTND_OK;
}

/* o200k_harmony (gpt-oss): the channel markup a client parses out of the reply stays visible
 * text, as llama.cpp has it: these control tokens are read as user-defined (rendered, and
 * matched in text). Where <|return|> and <|call|> end the reply, <|end|> only closes one message
 * (the analysis channel comes before the final one): it is user-defined too, so not an end. */
static const char *HARMONY_VISIBLE[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "<|end|>"};

static void retype_harmony(tokenizer *t) {
    bool ends = strmap_get(&t->by_text, "<|return|>", 10) >= 0 && strmap_get(&t->by_text, "<|call|>", 8) >= 0;
    for (size_t k = 0; k < ATTND_ARRAY_LEN(HARMONY_VISIBLE); k++) {
        int32_t id = strmap_get(&t->by_text, HARMONY_VISIBLE[k], strlen(HARMONY_VISIBLE[k]));
        if (id >= 0 && t->type[id] == TT_CONTROL && (ends || strcmp(HARMONY_VISIBLE[k], "<|end|>")))
            t->type[id] = TT_USER;
    }
}

/* Token texts, types and scores into the tables, and the text -> id index. */
/* As llama.cpp's loader types them: Gemma 4's end of turn and tool-response opening are control
 * tokens (its converter writes the latter user-defined), and in a vocabulary with that opening,
 * "</s>" is a normal token (llama.cpp's workaround for Gemma 4: neither special nor an end). */
static void retype_gemma4(tokenizer *t) {
    for (size_t k = 0; k < ATTND_ARRAY_LEN(EOG_TEXTS_ANY_TYPE); k++) {
        int32_t id = strmap_get(&t->by_text, EOG_TEXTS_ANY_TYPE[k], strlen(EOG_TEXTS_ANY_TYPE[k]));
        if (id >= 0) t->type[id] = TT_CONTROL;
    }
    int32_t s = strmap_get(&t->by_text, "</s>", 4);
    if (s >= 0 && strmap_get(&t->by_text, "<|tool_response>", 16) >= 0) t->type[s] = TT_NORMAL;
}

static attnd_status fill_tokens(tokenizer *t, const gguf_array *toks, const gguf_array *types,
                                const gguf_array *scores, attnd_err *err) {
    attnd_status st;
    size_t nv = (size_t)t->n_vocab, pos = 0;
    for (size_t i = 0; i < nv; i++) {
        t->text_off[i] = (uint32_t)pos;
        t->text_len[i] = (uint32_t)toks->strings[i].len;
        memcpy(t->text + pos, toks->strings[i].str, toks->strings[i].len);
        pos += toks->strings[i].len;
        t->text[pos++] = '\0';
        int32_t ty = types ? ((const int32_t *)types->data)[i] : TT_NORMAL;
        if (ty < 0 || ty > TT_BYTE) { /* 0 is "undefined" in llama.cpp: read as normal */
            return attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.token_type[%zu] = %d is not a token type", i,
                              (int)ty);
        }
        t->type[i] = ty >= TT_NORMAL ? (uint8_t)ty : TT_NORMAL;
        if (t->score) {
            float sc = scores ? ((const float *)scores->data)[i] : 0.0f;
            t->score[i] = isnan(sc) ? -INFINITY : sc;
        }
    }
    if ((st = strmap_init(&t->by_text, nv, t->text, t->text_off, t->text_len)) != ATTND_OK) {
        return attnd_fail(err, st, "out of memory for the vocabulary index");
    }
    for (size_t i = 0; i < nv; i++) strmap_put(&t->by_text, (int32_t)i);
    retype_harmony(t);
    retype_gemma4(t);
    return ATTND_OK;
}

/* The bytes every token decodes to, and the token of every raw byte (byte fallback). */
static attnd_status build_decoded(tokenizer *t, attnd_err *err) {
    uint32_t *cp_to_byte = malloc(0x144 * sizeof(uint32_t));
    if (!cp_to_byte) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for a %d-token vocabulary", t->n_vocab);
    /* Decoded bytes of every token. */
    for (uint32_t c = 0; c < 0x144; c++) cp_to_byte[c] = 256;
    for (unsigned b = 0; b < 256; b++) cp_to_byte[byte_to_cp(b)] = b;
    size_t nv = (size_t)t->n_vocab, pos = 0;
    for (size_t i = 0; i < nv; i++) {
        t->dec_off[i] = (uint32_t)pos;
        t->dec_len[i] = (uint32_t)decode_token(t, (int32_t)i, cp_to_byte, t->dec + pos);
        pos += t->dec_len[i];
    }

    /* Raw byte -> token. */
    for (unsigned b = 0; b < 256; b++) {
        char s[8];
        int32_t id = -1;
        if (t->kind == KIND_SPM || t->kind == KIND_SBPE || t->kind == KIND_UGM) {
            snprintf(s, sizeof(s), "<0x%02X>", b);
            id = strmap_get(&t->by_text, s, 6);
            if (id < 0) {
                s[0] = (char)b;
                id = strmap_get(&t->by_text, s, 1);
            }
        } else if (t->kind == KIND_BPE) {
            id = strmap_get(&t->by_text, s, utf8_encode(s, byte_to_cp(b)));
        }
        t->byte_tok[b] = id; /* WordPiece has no byte tokens */
    }
    free(cp_to_byte);
    return ATTND_OK;
}

/* Special strings matched in the text: control, user-defined and unknown tokens. */
static attnd_status build_specials(tokenizer *t, attnd_err *err) {
    size_t nv = (size_t)t->n_vocab, n_special = 0;
    for (size_t i = 0; i < nv; i++)
        if ((t->type[i] == TT_CONTROL || t->type[i] == TT_USER || t->type[i] == TT_UNKNOWN) && t->text_len[i] > 0)
            n_special++;
    special_rec *recs = malloc((n_special ? n_special : 1) * sizeof(*recs));
    if (!recs) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for special tokens");
    for (size_t i = 0; i < nv; i++)
        if ((t->type[i] == TT_CONTROL || t->type[i] == TT_USER || t->type[i] == TT_UNKNOWN) && t->text_len[i] > 0)
            recs[t->n_special++] = (special_rec){(unsigned char)t->text[t->text_off[i]], t->text_len[i], (int32_t)i};
    qsort(recs, t->n_special, sizeof(*recs), cmp_special);
    for (size_t k = 0; k < t->n_special; k++) t->special[k] = recs[k].id;
    free(recs);
    for (unsigned b = 0, k = 0; b <= 256; b++) {
        while (k < t->n_special && (unsigned char)t->text[t->text_off[t->special[k]]] < b) k++;
        t->special_at[b] = k;
    }
    return ATTND_OK;
}

/* Special ids and flags. SPM's conventional ids apply when the keys are absent. */
static attnd_status read_special_ids(tokenizer *t, const gguf_file *f, attnd_err *err) {
    attnd_status st;
    bool spm = t->kind == KIND_SPM;
    bool wpm = t->kind == KIND_WPM;
    int32_t cls = -1; /* BERT files name [CLS] by bos_token_id or cls_token_id (conventionally 101) */
    if ((st = read_id(f, "tokenizer.ggml.cls_token_id", t->n_vocab, wpm ? 101 : -1, &cls, err)) != ATTND_OK ||
        (st = read_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, spm ? 1 : wpm ? cls : -1, &t->bos, err)) != ATTND_OK ||
        (st = read_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, spm ? 2 : -1, &t->eos, err)) != ATTND_OK ||
        (st = read_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, spm ? 0 : wpm ? 100 : -1, &t->unk, err)) != ATTND_OK ||
        (st = read_id(f, "tokenizer.ggml.seperator_token_id", t->n_vocab, wpm ? 102 : -1, &t->sep, err)) != ATTND_OK ||
        (st = read_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab, -1, &t->eot, err)) != ATTND_OK ||
        (st = read_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab, -1, &t->eom, err)) != ATTND_OK ||
        (st = read_id(f, "tokenizer.ggml.padding_token_id", t->n_vocab, wpm ? 0 : -1, &t->pad, err)) != ATTND_OK)
        return st;
    /* Gemma 4: always a BOS, as llama.cpp overrides a file's false */
    t->add_bos = (read_bool(f, "tokenizer.ggml.add_bos_token", spm || wpm) || t->kind == KIND_SBPE) && t->bos >= 0;
    t->add_eos = read_bool(f, "tokenizer.ggml.add_eos_token", false) && t->eos >= 0;
    t->add_sep = read_bool(f, "tokenizer.ggml.add_sep_token", wpm) && t->sep >= 0;
    /* llama.cpp's defaults: lowercase unless the file says not, strip accents as lowercase */
    t->wpm_lower = read_bool(f, "tokenizer.ggml.normalizer.lowercase", true);
    t->wpm_strip = read_bool(f, "tokenizer.ggml.normalizer.strip_accents", t->wpm_lower);
    t->add_space_prefix = read_bool(f, "tokenizer.ggml.add_space_prefix", spm || t->kind == KIND_UGM);
    t->ugm_flags.add_space_prefix = t->add_space_prefix;
    t->ugm_flags.remove_extra_ws = read_bool(f, "tokenizer.ggml.remove_extra_whitespaces", false);
    if (t->eos >= 0) t->eog[t->eos] = true;
    if (t->eot >= 0) t->eog[t->eot] = true;
    if (t->eom >= 0) t->eog[t->eom] = true;
    for (size_t k = 0; k < ATTND_ARRAY_LEN(EOG_TEXTS); k++) {
        int32_t id = strmap_get(&t->by_text, EOG_TEXTS[k], strlen(EOG_TEXTS[k]));
        if (id >= 0 && t->type[id] == TT_CONTROL) t->eog[id] = true; /* "</s>" normal in Gemma 4's: not */
    }
    for (size_t k = 0; k < ATTND_ARRAY_LEN(EOG_TEXTS_ANY_TYPE); k++) {
        int32_t id = strmap_get(&t->by_text, EOG_TEXTS_ANY_TYPE[k], strlen(EOG_TEXTS_ANY_TYPE[k]));
        if (id >= 0) t->eog[id] = true;
    }
    return ATTND_OK;
}

/* Is id a piece of the unigram lattice? Normal, user-defined and unused tokens (llama.cpp). */
static inline bool ugm_piece(const tokenizer *t, int32_t id) {
    return t->type[id] == TT_NORMAL || t->type[id] == TT_USER || t->type[id] == TT_UNUSED;
}

/* The prefix filter is a Bloom filter with two probes: a false "yes" only costs a lookup more. */
static void prefix_put(tokenizer *t, uint64_t h) {
    uint64_t g = mix64(h);
    t->ugm_prefix[(h & t->ugm_prefix_mask) >> 6] |= 1ull << (h & 63);
    t->ugm_prefix[(g & t->ugm_prefix_mask) >> 6] |= 1ull << (g & 63);
}

static bool prefix_has(const tokenizer *t, uint64_t h) {
    uint64_t g = mix64(h);
    return (t->ugm_prefix[(h & t->ugm_prefix_mask) >> 6] >> (h & 63) & 1) &&
           (t->ugm_prefix[(g & t->ugm_prefix_mask) >> 6] >> (g & 63) & 1);
}

/* Every proper prefix (at a character boundary) of every piece, so a lattice search can stop as
 * soon as no piece begins with the bytes it has. About 8 bits per vocabulary byte (4 MB for
 * XLM-R's 2.6 MB of pieces). */
static attnd_status build_ugm_prefixes(tokenizer *t, attnd_err *err) {
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (ugm_piece(t, i)) total += t->text_len[i];
    size_t bits = 1024;
    while (bits < 8 * total) bits *= 2;
    if (!(t->ugm_prefix = calloc(bits / 64, sizeof(*t->ugm_prefix))))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for a %d-token vocabulary", t->n_vocab);
    t->ugm_prefix_mask = bits - 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!ugm_piece(t, i)) continue;
        const char *s = t->text + t->text_off[i];
        size_t n = t->text_len[i];
        for (size_t k = 0; k < n;) {
            unicode_next(s, n, &k);
            if (k < n) prefix_put(t, hash_bytes(s, k));
        }
    }
    return ATTND_OK;
}

/* The unigram model's character map, longest piece and unknown-token score. */
static attnd_status prepare_ugm(tokenizer *t, const gguf_file *f, attnd_err *err) {
    attnd_status st;
    if (t->unk < 0) return attnd_fail(err, ATTND_ERR_FORMAT, "a \"t5\" (unigram) vocabulary needs an unknown token");
    const char *key = "tokenizer.ggml.precompiled_charsmap";
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (kv) {
        const gguf_array *a;
        if (gguf_get_arr(f, key, GGUF_VT_UINT8, &a, NULL) != ATTND_OK &&
            (st = gguf_get_arr(f, key, GGUF_VT_INT8, &a, err)) != ATTND_OK)
            return st;
        if ((st = tok_ugm_map_init(&t->ugm_map, a->data, (size_t)a->n, err)) != ATTND_OK) return st;
    }
    double lowest = INFINITY;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!ugm_piece(t, i)) continue;
        if (t->text_len[i] > t->ugm_max_piece) t->ugm_max_piece = t->text_len[i];
        if (t->type[i] == TT_NORMAL && t->score[i] < lowest) lowest = t->score[i];
    }
    t->ugm_unk_score = (isfinite(lowest) ? lowest : 0.0) - 10.0;
    return build_ugm_prefixes(t, err);
}

/* The merge machinery: SPM's pair table and shortcuts, or BPE's merges. */
static attnd_status prepare_merges(tokenizer *t, const gguf_file *f, attnd_err *err) {
    attnd_status st;
    size_t nv = (size_t)t->n_vocab;
    if (t->kind == KIND_SPM) {
        /* Can a merge join a non-space character to a following U+2581? If no token contains
         * U+2581 after something other than U+2581, text can be cut before every such U+2581 and
         * the pieces merged independently with the same result (no candidate pair spans a cut). */
        t->spm_split = true;
        for (size_t i = 0; i < nv && t->spm_split; i++) {
            if (t->type[i] != TT_NORMAL && t->type[i] != TT_USER) continue;
            const char *s = t->text + t->text_off[i];
            size_t n = t->text_len[i];
            for (size_t p = 1; p + 3 <= n; p++)
                if (!memcmp(s + p, SPM_SPACE, 3) && (p < 3 || memcmp(s + p - 3, SPM_SPACE, 3))) {
                    t->spm_split = false;
                    break;
                }
        }
        if ((st = build_spm_pairs(t, err)) != ATTND_OK) return st;
        for (int c = 0; c < 128; c++) {
            char ch = (char)c;
            t->spm_ascii[c] = spm_lookup(t, &ch, 1);
        }
        t->spm_space = spm_lookup(t, SPM_SPACE, 3);
    } else if (t->kind == KIND_WPM) {
        for (size_t i = 0; i < nv; i++)
            if (t->type[i] == TT_NORMAL && t->text_len[i] > t->wpm_max_piece) t->wpm_max_piece = t->text_len[i];
    } else if (t->kind == KIND_UGM) {
        return prepare_ugm(t, f, err);
    } else {
        if ((st = load_merges(t, f, err)) != ATTND_OK) return st;
        if (t->pre && t->pre->ignore_merges) {
            if ((st = strmap_init(&t->by_bytes, nv, t->dec, t->dec_off, t->dec_len)) != ATTND_OK) {
                return attnd_fail(err, st, "out of memory for the vocabulary index");
            }
            for (size_t i = 0; i < nv; i++)
                if (t->type[i] == TT_NORMAL) strmap_put(&t->by_bytes, (int32_t)i);
        }
    }
    return ATTND_OK;
}

void tok_destroy(tokenizer *t) {
    if (!t) return;
    free(t->tables);
    free(t->by_text.slots);
    free(t->by_bytes.slots);
    free(t->merges.slots);
    tok_ugm_map_free(&t->ugm_map);
    free(t->ugm_prefix);
    free(t);
}

attnd_status tok_load(tokenizer **out, const gguf_file *f, attnd_err *err) {
    *out = NULL;
    attnd_status st;
    tokenizer *t = calloc(1, sizeof(*t));
    if (!t) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the tokenizer");
    const gguf_array *toks, *types, *scores;
    if ((st = read_kind(t, f, err)) != ATTND_OK || (st = read_arrays(t, f, &toks, &types, &scores, err)) != ATTND_OK ||
        (st = alloc_tables(t, toks, err)) != ATTND_OK || (st = fill_tokens(t, toks, types, scores, err)) != ATTND_OK ||
        (st = read_fim_ids(t, f, err)) != ATTND_OK || (st = build_decoded(t, err)) != ATTND_OK || (st = build_specials(t, err)) != ATTND_OK ||
        (st = read_special_ids(t, f, err)) != ATTND_OK || (st = prepare_merges(t, f, err)) != ATTND_OK) {
        tok_destroy(t);
        return st;
    }
    *out = t;
    return ATTND_OK;
}

int tok_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }
int32_t tok_sep(const tokenizer *t) { return t->sep; }
bool tok_add_bos(const tokenizer *t) { return t->add_bos; }
int32_t tok_fim(const tokenizer *t, tok_fim_role r) { return r >= 0 && r < TOK_FIM_N ? t->fim[r] : -1; }
bool tok_is_eog(const tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->eog[id]; }

const char *tok_piece(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->text + t->text_off[id] : NULL;
}

int32_t tok_find(const tokenizer *t, const char *piece) { return strmap_get(&t->by_text, piece, strlen(piece)); }

bool tok_is_control(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->type[id] == TT_CONTROL || t->type[id] == TT_UNKNOWN);
}

bool tok_token_bytes(const tokenizer *t, int32_t id, bool render_special, const char **bytes, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return false;
    bool hidden = !render_special && (t->type[id] == TT_CONTROL || t->type[id] == TT_UNKNOWN);
    *bytes = t->dec + t->dec_off[id];
    *len = hidden ? 0 : t->dec_len[id];
    if (wpm_continuation(t, id)) *bytes += 2, *len -= 2; /* "ing", not "##ing" */
    return true;
}

// ---- encoding: shared state and the indexed heap ----------------------------------------------

/*
 * Word cache: how a word (BPE) or a piece between SPM cuts was tokenized, so repeated words in
 * one text cost one hash probe. Exact, because such a piece's tokens do not depend on its
 * context. Per call (no locking); only words up to WCACHE_MAX_WORD bytes, at most
 * WCACHE_MAX_ENTRIES of them.
 */
#define WCACHE_MAX_WORD 64
#define WCACHE_MAX_ENTRIES (1u << 18)

typedef struct wentry {
    uint64_t hash;
    uint32_t key_off, key_len; /* into keys */
    uint32_t ids_off, n_ids;   /* into ids */
} wentry;

typedef struct wcache {
    uint32_t *slots; /* (mask + 1) entry index + 1, 0 = empty */
    uint64_t mask;
    wentry *ent; /* (n_ent) */
    size_t n_ent, cap_ent;
    char *keys;
    size_t n_keys, cap_keys;
    int32_t *ids;
    size_t n_ids, cap_ids;
} wcache;

static void wcache_free(wcache *c) {
    free(c->slots);
    free(c->ent);
    free(c->keys);
    free(c->ids);
}

/* The cached tokens of p[0..n), or NULL. */
static const wentry *wcache_get(const wcache *c, const char *p, size_t n, uint64_t h) {
    if (!c->slots) return NULL;
    for (uint64_t i = h & c->mask;; i = (i + 1) & c->mask) {
        uint32_t k = c->slots[i];
        if (!k) return NULL;
        const wentry *e = &c->ent[k - 1];
        if (e->hash == h && e->key_len == n && !memcmp(c->keys + e->key_off, p, n)) return e;
    }
}

/* Remembers that p[0..n) gives ids[0..k). Best effort: a failed allocation only skips caching. */
static void wcache_put(wcache *c, const char *p, size_t n, uint64_t h, const int32_t *ids, size_t k) {
    if (c->n_ent >= WCACHE_MAX_ENTRIES) return;
    if ((c->n_ent + 1) * 2 > (c->slots ? c->mask + 1 : 0)) {
        uint64_t cap = c->slots ? (c->mask + 1) * 2 : 1024;
        uint32_t *slots = calloc(cap, sizeof(*slots));
        if (!slots) return;
        for (size_t e = 0; e < c->n_ent; e++) {
            uint64_t i = c->ent[e].hash & (cap - 1);
            while (slots[i]) i = (i + 1) & (cap - 1);
            slots[i] = (uint32_t)e + 1;
        }
        free(c->slots);
        c->slots = slots;
        c->mask = cap - 1;
    }
    if (!attnd_grow(&c->ent, &c->cap_ent, c->n_ent + 1, sizeof(*c->ent), 256) ||
        !attnd_grow(&c->keys, &c->cap_keys, c->n_keys + n, 1, 256) ||
        !attnd_grow(&c->ids, &c->cap_ids, c->n_ids + k, sizeof(*c->ids), 256))
        return;
    wentry *e = &c->ent[c->n_ent];
    *e = (wentry){h, (uint32_t)c->n_keys, (uint32_t)n, (uint32_t)c->n_ids, (uint32_t)k};
    memcpy(c->keys + c->n_keys, p, n);
    memcpy(c->ids + c->n_ids, ids, k * sizeof(int32_t));
    c->n_keys += n;
    c->n_ids += k;
    uint64_t i = h & c->mask;
    while (c->slots[i]) i = (i + 1) & c->mask;
    c->slots[i] = (uint32_t)++c->n_ent;
}

/*
 * Per-call working state. The symbol arrays are indexed by byte position within the current
 * word (a symbol is named by the position of its first byte) and grow to the longest word seen.
 */
typedef struct enc {
    const tokenizer *t;
    int32_t *ids; /* (n_ids) output */
    size_t n_ids, cap_ids;
    int32_t *prev, *next; /* (cap_sym) neighbours of live symbols; -1 at the ends */
    int32_t *sid;         /* (cap_sym) token id of each symbol, -1 when it is not a token */
    int32_t *hpos;        /* (cap_sym) index in heap, -1 when absent */
    uint64_t *heap;       /* (n_heap) merge priority << 32 | symbol, see heap_set */
    size_t n_heap, cap_sym;
    char *sym_mem; /* owns prev, next, sid, hpos and heap (engine/block.h) */
    char *buf; /* escaped SPM text or NFC text */
    size_t cap_buf;
    tok_pre_buf pre;
    wcache cache;
    attnd_err *err;
} enc;

static void enc_free(enc *e) {
    free(e->sym_mem);
    free(e->buf);
    tok_pre_buf_free(&e->pre);
    wcache_free(&e->cache);
}

static attnd_status emit(enc *e, int32_t id);

/* Tokenizes a context-independent piece with merge(), through the word cache. */
static attnd_status cached(enc *e, const char *p, size_t len,
                           attnd_status (*merge)(enc *e, const char *p, size_t len)) {
    if (len > WCACHE_MAX_WORD || len < 2) return merge(e, p, len);
    uint64_t h = hash_bytes(p, len);
    const wentry *w = wcache_get(&e->cache, p, len, h);
    if (w) {
        for (uint32_t k = 0; k < w->n_ids; k++) {
            attnd_status st = emit(e, e->cache.ids[w->ids_off + k]);
            if (st != ATTND_OK) return st;
        }
        return ATTND_OK;
    }
    size_t before = e->n_ids;
    attnd_status st = merge(e, p, len);
    if (st == ATTND_OK) wcache_put(&e->cache, p, len, h, e->ids + before, e->n_ids - before);
    return st;
}

static attnd_status emit(enc *e, int32_t id) {
    if (!attnd_grow(&e->ids, &e->cap_ids, e->n_ids + 1, sizeof(*e->ids), 64))
        return attnd_fail(e->err, ATTND_ERR_NOMEM, "out of memory for %zu token ids", e->n_ids + 1);
    e->ids[e->n_ids++] = id;
    return ATTND_OK;
}

/* Lays out the symbol arrays, cap elements each, in mem (block.h); returns the bytes they need. */
static size_t layout_sym(enc *e, char *mem, size_t cap) {
    block b = {.mem = mem};
    e->prev = block_take(&b, cap, sizeof(*e->prev));
    e->next = block_take(&b, cap, sizeof(*e->next));
    e->sid = block_take(&b, cap, sizeof(*e->sid));
    e->hpos = block_take(&b, cap, sizeof(*e->hpos));
    e->heap = block_take(&b, cap, sizeof(*e->heap));
    return block_size(&b);
}

/* Room for n symbols. What the arrays held is dropped: each word fills them afresh. */
static attnd_status reserve_sym(enc *e, size_t n) {
    if (n <= e->cap_sym) return ATTND_OK;
    size_t cap = e->cap_sym ? e->cap_sym : 256;
    while (cap < n) cap *= 2;
    free(e->sym_mem);
    e->cap_sym = 0;
    if (!(e->sym_mem = malloc(layout_sym(e, NULL, cap))))
        return attnd_fail(e->err, ATTND_ERR_NOMEM, "out of memory tokenizing a %zu-byte word", n);
    layout_sym(e, e->sym_mem, cap);
    e->cap_sym = cap;
    return ATTND_OK;
}

/*
 * A 4-ary min-heap of (key << 32 | symbol) entries: comparing entries orders by merge priority,
 * then by position (leftmost first), without touching any other array, and four children share
 * a cache line, which is what matters once a word outgrows the caches.
 */
static inline void heap_place(enc *e, size_t i, uint64_t v) {
    e->heap[i] = v;
    e->hpos[(uint32_t)v] = (int32_t)i;
}

static void heap_up(enc *e, size_t i, uint64_t v) {
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (e->heap[p] <= v) break;
        heap_place(e, i, e->heap[p]);
        i = p;
    }
    heap_place(e, i, v);
}

static void heap_down(enc *e, size_t i, uint64_t v) {
    size_t n = e->n_heap;
    for (;;) {
        size_t c = 4 * i + 1, m = c;
        if (c >= n) break;
        size_t end = c + 4 < n ? c + 4 : n;
        for (size_t k = c + 1; k < end; k++)
            if (e->heap[k] < e->heap[m]) m = k;
        if (e->heap[m] >= v) break;
        heap_place(e, i, e->heap[m]);
        i = m;
    }
    heap_place(e, i, v);
}

/* Sets the priority of merging symbol s with its right neighbour (KEY_NONE: no merge),
 * inserting, moving or removing s in the heap as needed. */
static void heap_set(enc *e, int32_t s, uint32_t key) {
    int32_t at = e->hpos[s];
    if (key == KEY_NONE) {
        if (at < 0) return;
        e->hpos[s] = -1;
        uint64_t old = e->heap[at], last = e->heap[--e->n_heap];
        if ((size_t)at == e->n_heap) return;
        if (last < old) heap_up(e, (size_t)at, last);
        else heap_down(e, (size_t)at, last);
        return;
    }
    uint64_t v = (uint64_t)key << 32 | (uint32_t)s;
    if (at < 0) {
        heap_up(e, e->n_heap++, v);
    } else if (v < e->heap[at]) {
        heap_up(e, (size_t)at, v);
    } else {
        heap_down(e, (size_t)at, v);
    }
}

// ---- merging by id pairs ----------------------------------------------------------------------

static void pair_rekey(enc *e, int32_t s) {
    if (s < 0) return;
    const merge_slot *m = e->next[s] >= 0 ? merge_get(&e->t->merges, e->sid[s], e->sid[e->next[s]]) : NULL;
    heap_set(e, s, m ? m->rank : KEY_NONE);
}

/* Merges the linked symbols starting at 0 by the `merges` table until no pair applies. */
static void merge_pairs(enc *e) {
    e->n_heap = 0;
    for (int32_t s = 0; s >= 0; s = e->next[s]) pair_rekey(e, s);
    while (e->n_heap) {
        /* Merge the best pair (the heap top) into its left symbol; its new pairs with both
         * neighbours get fresh priorities. */
        int32_t l = (int32_t)(uint32_t)e->heap[0], r = e->next[l];
        e->sid[l] = merge_get(&e->t->merges, e->sid[l], e->sid[r])->result;
        heap_set(e, r, KEY_NONE);
        e->next[l] = e->next[r];
        if (e->next[r] >= 0) e->prev[e->next[r]] = l;
        pair_rekey(e, l);
        pair_rekey(e, e->prev[l]);
    }
}

// ---- SPM --------------------------------------------------------------------------------------

static inline size_t sym_end(const enc *e, int32_t s, size_t len) {
    return e->next[s] >= 0 ? (size_t)e->next[s] : len;
}

static void spm_rekey(enc *e, const char *p, size_t len, int32_t s) {
    if (s < 0) return;
    uint32_t key = KEY_NONE;
    if (e->next[s] >= 0) {
        int32_t id = spm_lookup(e->t, p + s, sym_end(e, e->next[s], len) - (size_t)s);
        if (id >= 0) key = score_key(e->t->score[id]);
    }
    heap_set(e, s, key);
}

/* Merges one piece of escaped text p[0..len) and emits its tokens. */
static attnd_status spm_merge(enc *e, const char *p, size_t len) {
    const tokenizer *t = e->t;
    attnd_status st;
    if (!len) return ATTND_OK;
    if ((st = reserve_sym(e, len)) != ATTND_OK) return st;
    int32_t last = -1;
    for (size_t i = 0; i < len;) {
        size_t start = i;
        unicode_next(p, len, &i);
        int32_t s = (int32_t)start;
        e->prev[s] = last;
        e->next[s] = -1;
        if (last >= 0) e->next[last] = s;
        /* initial symbols: the character's token; the two commonest cases without hashing */
        if (i - start == 1 && (unsigned char)p[start] < 128) e->sid[s] = t->spm_ascii[(unsigned char)p[start]];
        else if (i - start == 3 && !memcmp(p + start, SPM_SPACE, 3)) e->sid[s] = t->spm_space;
        else e->sid[s] = spm_lookup(t, p + start, i - start);
        e->hpos[s] = -1;
        last = s;
    }
    if (t->spm_pairs) {
        merge_pairs(e);
    } else {
        e->n_heap = 0;
        for (int32_t s = 0; s >= 0; s = e->next[s]) spm_rekey(e, p, len, s);
    }
    while (e->n_heap) {
        /* Merge the best pair (the heap top) into its left symbol; its new pairs with both
         * neighbours get fresh priorities. */
        int32_t l = (int32_t)(uint32_t)e->heap[0], r = e->next[l];
        e->sid[l] = spm_lookup(t, p + l, sym_end(e, r, len) - (size_t)l);
        heap_set(e, r, KEY_NONE);
        e->next[l] = e->next[r];
        if (e->next[r] >= 0) e->prev[e->next[r]] = l;
        spm_rekey(e, p, len, l);
        spm_rekey(e, p, len, e->prev[l]);
    }
    for (int32_t s = 0; s >= 0; s = e->next[s]) {
        if (e->sid[s] >= 0) {
            if ((st = emit(e, e->sid[s])) != ATTND_OK) return st;
            continue;
        }
        /* Not a token: byte fallback, else the unknown token per byte. */
        for (size_t k = (size_t)s; k < sym_end(e, s, len); k++) {
            int32_t id = t->byte_tok[(unsigned char)p[k]];
            if (id < 0) id = t->unk;
            if (id >= 0 && (st = emit(e, id)) != ATTND_OK) return st;
        }
    }
    return ATTND_OK;
}

static attnd_status spm_fragment(enc *e, const char *text, size_t len, bool prefix) {
    const tokenizer *t = e->t;
    if (!attnd_grow(&e->buf, &e->cap_buf, (len + 1) * 3, 1, 64))
        return attnd_fail(e->err, ATTND_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
    size_t n = 0;
    if (prefix) memcpy(e->buf, SPM_SPACE, 3), n = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') memcpy(e->buf + n, SPM_SPACE, 3), n += 3;
        else e->buf[n++] = text[i];
    }
    if (!t->spm_split) return spm_merge(e, e->buf, n);
    /* Cut before every U+2581 that follows something else (see spm_split in tok_load). */
    size_t start = 0;
    for (size_t i = 3; i + 3 <= n; i++) {
        if (e->buf[i] != SPM_SPACE[0] || memcmp(e->buf + i, SPM_SPACE, 3) || !memcmp(e->buf + i - 3, SPM_SPACE, 3))
            continue;
        attnd_status st = cached(e, e->buf + start, i - start, spm_merge);
        if (st != ATTND_OK) return st;
        start = i;
    }
    return cached(e, e->buf + start, n - start, spm_merge);
}

// ---- byte-level BPE ---------------------------------------------------------------------------

static attnd_status bpe_merge(enc *e, const char *p, size_t len) {
    const tokenizer *t = e->t;
    attnd_status st;
    if (t->pre->ignore_merges) {
        int32_t id = strmap_get(&t->by_bytes, p, len);
        if (id >= 0) return emit(e, id);
    }
    if (len == 1) {
        int32_t id = t->byte_tok[(unsigned char)p[0]];
        return id >= 0 ? emit(e, id) : t->unk >= 0 ? emit(e, t->unk) : ATTND_OK;
    }
    if ((st = reserve_sym(e, len)) != ATTND_OK) return st;
    for (size_t i = 0; i < len; i++) {
        e->prev[i] = (int32_t)i - 1;
        e->next[i] = i + 1 < len ? (int32_t)i + 1 : -1;
        e->sid[i] = t->byte_tok[(unsigned char)p[i]];
        e->hpos[i] = -1;
    }
    merge_pairs(e);
    for (int32_t s = 0; s >= 0; s = e->next[s]) {
        int32_t id = e->sid[s] >= 0 ? e->sid[s] : t->unk;
        if (id >= 0 && (st = emit(e, id)) != ATTND_OK) return st;
    }
    return ATTND_OK;
}

static attnd_status bpe_fragment(enc *e, const char *text, size_t len) {
    attnd_status st;
    char *norm = NULL;
    if (e->t->pre->nfc) {
        size_t nlen;
        if ((st = unicode_nfc(text, len, &norm, &nlen, e->err)) != ATTND_OK) return st;
        text = norm, len = nlen;
    }
    st = tok_pre_split(e->t->pre, text, len, &e->pre, e->err);
    for (size_t k = 0; st == ATTND_OK && k + 1 < e->pre.n_bounds; k++) {
        uint32_t a = e->pre.offs[e->pre.bounds[k]], b = e->pre.offs[e->pre.bounds[k + 1]];
        st = cached(e, text + a, b - a, bpe_merge);
    }
    free(norm);
    return st;
}

// ---- SentencePiece-style BPE ("gemma4") -------------------------------------------------------

/* Merges one run of escaped text p[0..len) (no newline in it, or only newlines) and emits its
 * tokens, as llama.cpp's BPE session does for a vocabulary that is not byte-level. */
static attnd_status sbpe_merge(enc *e, const char *p, size_t len) {
    const tokenizer *t = e->t;
    attnd_status st;
    int32_t whole = p[0] == '\n' ? strmap_get(&t->by_text, p, len) : -1;
    if (whole >= 0) return emit(e, whole); /* a run of newlines that is one token */
    if ((st = reserve_sym(e, len)) != ATTND_OK) return st;
    int32_t last = -1;
    for (size_t i = 0; i < len;) { /* one symbol per UTF-8 character */
        size_t start = i;
        unicode_next(p, len, &i);
        int32_t s = (int32_t)start;
        e->prev[s] = last, e->next[s] = -1, e->hpos[s] = -1;
        if (last >= 0) e->next[last] = s;
        e->sid[s] = strmap_get(&t->by_text, p + start, i - start);
        last = s;
    }
    merge_pairs(e);
    for (int32_t s = 0; s >= 0; s = e->next[s]) {
        if (e->sid[s] >= 0) {
            if ((st = emit(e, e->sid[s])) != ATTND_OK) return st;
            continue;
        }
        for (size_t k = (size_t)s; k < sym_end(e, s, len); k++) /* <0xXX> byte tokens, where they exist */
            if (t->byte_tok[(unsigned char)p[k]] >= 0 && (st = emit(e, t->byte_tok[(unsigned char)p[k]])) != ATTND_OK)
                return st;
    }
    return ATTND_OK;
}

/* Spaces to U+2581, then each run of newlines and each run of other text on its own. */
static attnd_status sbpe_fragment(enc *e, const char *text, size_t len) {
    if (!attnd_grow(&e->buf, &e->cap_buf, len * 3 + 1, 1, 64))
        return attnd_fail(e->err, ATTND_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') memcpy(e->buf + n, SPM_SPACE, 3), n += 3;
        else e->buf[n++] = text[i];
    }
    for (size_t start = 0, i = 1; start < n; i++)
        if (i == n || (e->buf[i] == '\n') != (e->buf[start] == '\n')) {
            attnd_status st = cached(e, e->buf + start, i - start, sbpe_merge);
            if (st != ATTND_OK) return st;
            start = i;
        }
    return ATTND_OK;
}

// ---- WordPiece --------------------------------------------------------------------------------

/* tok_wpm_find_fn over the vocabulary index: a word-initial piece is stored as "▁" + piece, a
 * continuation piece bare (llama.cpp's converter); only normal tokens are pieces. */
static int32_t wpm_find(const void *ctx, const char *p, size_t n, bool initial) {
    const tokenizer *t = ctx;
    int32_t id;
    if (initial) {
        char buf[3 + 4 * TOK_WPM_MAX_CHARS]; /* a piece is part of a word of at most that many characters */
        ATTND_ASSERT(n <= 4 * TOK_WPM_MAX_CHARS);
        memcpy(buf, SPM_SPACE, 3);
        memcpy(buf + 3, p, n);
        id = strmap_get(&t->by_text, buf, n + 3);
    } else {
        id = strmap_get(&t->by_text, p, n);
    }
    return id >= 0 && t->type[id] == TT_NORMAL ? id : -1;
}

/* One word's pieces, or the unknown token for the whole word. */
static attnd_status wpm_merge(enc *e, const char *p, size_t len) {
    int32_t ids[TOK_WPM_MAX_CHARS];
    size_t k = tok_wpm_word(p, len, e->t->wpm_max_piece, wpm_find, e->t, ids);
    if (!k) return e->t->unk >= 0 ? emit(e, e->t->unk) : ATTND_OK;
    attnd_status st = ATTND_OK;
    for (size_t i = 0; i < k && st == ATTND_OK; i++) st = emit(e, ids[i]);
    return st;
}

static attnd_status wpm_fragment(enc *e, const char *text, size_t len) {
    char *norm;
    size_t n, pos = 0, a, b;
    attnd_status st = tok_wpm_normalize(text, len, e->t->wpm_lower, e->t->wpm_strip, &norm, &n, e->err);
    while (st == ATTND_OK && tok_wpm_next_word(norm, n, &pos, &a, &b)) st = cached(e, norm + a, b - a, wpm_merge);
    free(norm);
    return st;
}

// ---- unigram ----------------------------------------------------------------------------------

/* tok_ugm_find_fn over the vocabulary index; a user-defined piece scores 0 (llama.cpp). */
static tok_ugm_found ugm_find(const void *ctx, const char *p, size_t n, int32_t *id, double *score) {
    const tokenizer *t = ctx;
    int32_t k = strmap_get(&t->by_text, p, n);
    if (k >= 0 && ugm_piece(t, k)) {
        *id = k;
        *score = t->type[k] == TT_USER ? 0.0 : (double)t->score[k];
        return TOK_UGM_PIECE;
    }
    return prefix_has(t, hash_bytes(p, n)) ? TOK_UGM_PREFIX : TOK_UGM_NONE;
}

/* One word's best segmentation. */
static attnd_status ugm_merge(enc *e, const char *p, size_t len) {
    const tokenizer *t = e->t;
    tok_ugm_vocab v = {ugm_find, t, t->ugm_max_piece, t->unk, t->ugm_unk_score};
    int32_t *ids = malloc(len * sizeof(*ids));
    if (!ids) return attnd_fail(e->err, ATTND_ERR_NOMEM, "out of memory for a word of %zu bytes", len);
    size_t k;
    attnd_status st = tok_ugm_word(&v, p, len, ids, &k, e->err);
    for (size_t i = 0; i < k && st == ATTND_OK; i++) st = emit(e, ids[i]);
    free(ids);
    return st;
}

static attnd_status ugm_fragment(enc *e, const char *text, size_t len) {
    char *norm;
    size_t n, pos = 0, a, b;
    attnd_status st = tok_ugm_normalize(&e->t->ugm_map, &e->t->ugm_flags, text, len, &norm, &n, e->err);
    while (st == ATTND_OK && tok_ugm_next_word(norm, n, &pos, &a, &b)) st = cached(e, norm + a, b - a, ugm_merge);
    free(norm);
    return st;
}

// ---- encode -----------------------------------------------------------------------------------

/* The special token matching at text[i..len), longest first, or -1. */
static int32_t special_at(const tokenizer *t, const char *text, size_t i, size_t len, bool parse_special) {
    unsigned b = (unsigned char)text[i];
    for (uint32_t k = t->special_at[b]; k < t->special_at[b + 1]; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->type[id] != TT_USER) continue;
        size_t n = t->text_len[id];
        if (n <= len - i && !memcmp(text + i, t->text + t->text_off[id], n)) return id;
    }
    return -1;
}

static attnd_status fragment(enc *e, const char *text, size_t len) {
    if (!len) return ATTND_OK;
    if (e->t->kind == KIND_SPM) return spm_fragment(e, text, len, e->t->add_space_prefix);
    if (e->t->kind == KIND_SBPE) return sbpe_fragment(e, text, len);
    if (e->t->kind == KIND_WPM) return wpm_fragment(e, text, len);
    if (e->t->kind == KIND_UGM) return ugm_fragment(e, text, len);
    return bpe_fragment(e, text, len);
}

/* Is a control token matching at text[i, i + n) inside one of the marked spans? spans are
 * sorted and disjoint; *k is the caller's cursor into them (text is scanned left to right). */
static bool in_spans(const tok_span *spans, size_t n_spans, size_t *k, size_t i, size_t n) {
    while (*k < n_spans && spans[*k].end <= i) (*k)++;
    return *k < n_spans && spans[*k].start <= i && i + n <= spans[*k].end;
}

/* tok_encode and tok_encode_marked: spans == NULL means "control tokens everywhere" when
 * parse_special, else nowhere; otherwise only inside spans. */
static attnd_status encode(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                           const tok_span *spans, size_t n_spans, int32_t **ids, size_t *n_ids, attnd_err *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return attnd_fail(err, ATTND_ERR_INVALID, "tok_encode: NULL text");
    if (len >= UINT32_MAX / 4) return attnd_fail(err, ATTND_ERR_INVALID, "text of %zu bytes is too long to tokenize", len);
    enc e = {.t = t, .err = err};
    attnd_status st = ATTND_OK;
    if (add_special && t->add_bos) st = emit(&e, t->bos);

    /* Which bytes can start a special string the caller wants matched? */
    bool starts[256] = {false};
    bool any = false;
    for (size_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (parse_special || t->type[id] == TT_USER) starts[(unsigned char)t->text[t->text_off[id]]] = any = true;
    }
    /* Plain fragments always start the text or follow a special token, so each one gets
     * SPM's dummy-prefix space (as llama.cpp and SentencePiece-per-fragment do). */
    size_t frag = 0, span = 0;
    for (size_t i = 0; any && st == ATTND_OK && i < len; i++) {
        if (!starts[(unsigned char)text[i]]) continue;
        int32_t id = special_at(t, text, i, len, parse_special);
        if (id >= 0 && spans && t->type[id] != TT_USER && !in_spans(spans, n_spans, &span, i, t->text_len[id]))
            id = special_at(t, text, i, len, false); /* outside the markers only user-defined tokens match */
        if (id < 0) continue;
        st = fragment(&e, text + frag, i - frag);
        if (st == ATTND_OK) st = emit(&e, id);
        i += t->text_len[id] - 1;
        frag = i + 1;
    }
    if (st == ATTND_OK && frag < len) st = fragment(&e, text + frag, len - frag);
    if (st == ATTND_OK && add_special && t->add_eos) st = emit(&e, t->eos);
    /* only WordPiece ends a text with sep; elsewhere add_sep_token is the pair separator (XLM-R's
     * and RoBERTa's files set it for <s> a </s> </s> b </s>), as llama.cpp's tokenizer reads it */
    if (st == ATTND_OK && add_special && t->add_sep && t->kind == KIND_WPM) st = emit(&e, t->sep);
    enc_free(&e);
    if (st != ATTND_OK) {
        free(e.ids);
        return st;
    }
    if (!e.ids) { /* an empty result is still a valid (freeable, non-NULL) array */
        e.ids = malloc(sizeof(int32_t));
        if (!e.ids) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    *ids = e.ids;
    *n_ids = e.n_ids;
    return ATTND_OK;
}

attnd_status tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t **ids, size_t *n_ids, attnd_err *err) {
    return encode(t, text, len, add_special, parse_special, NULL, 0, ids, n_ids, err);
}

attnd_status tok_encode_marked(const tokenizer *t, const char *text, size_t len, bool add_special,
                               const tok_span *spans, size_t n_spans, int32_t **ids, size_t *n_ids, attnd_err *err) {
    for (size_t k = 0; k < n_spans; k++)
        if (spans[k].start > spans[k].end || spans[k].end > len || (k && spans[k].start < spans[k - 1].end)) {
            *ids = NULL;
            *n_ids = 0;
            return attnd_fail(err, ATTND_ERR_INVALID, "tok_encode_marked: span %zu is out of order or range", k);
        }
    static const tok_span NONE = {0, 0};
    return encode(t, text, len, add_special, true, n_spans ? spans : &NONE, n_spans, ids, n_ids, err);
}

/* The special ids around the texts of a pair: head A mid B tail (-1: none). WordPiece follows
 * HF's BERT template; the others llama.cpp's rerank layout (BOS, EOS, SEP per the flags). */
static void pair_specials(const tokenizer *t, int32_t *head, int32_t mid[2], int32_t *tail) {
    *head = t->add_bos ? t->bos : -1;
    if (t->kind == KIND_WPM) {
        mid[0] = t->sep, mid[1] = -1, *tail = t->sep;
        return;
    }
    if (t->kind == KIND_UGM) { /* HF's XLM-RoBERTa template: <s> a </s> </s> b </s> */
        mid[0] = mid[1] = *tail = t->eos;
        return;
    }
    mid[0] = t->add_eos ? t->eos : -1;
    mid[1] = t->add_sep ? t->sep : -1;
    *tail = t->add_eos ? t->eos : -1;
}

attnd_status tok_encode_pair(const tokenizer *t, const char *a, size_t a_len, const char *b, size_t b_len,
                             int32_t **ids, int32_t **segs, size_t *n_ids, attnd_err *err) {
    *ids = NULL, *n_ids = 0;
    if (segs) *segs = NULL;
    int32_t *ia = NULL, *ib = NULL, *out = NULL, *seg = NULL;
    size_t na = 0, nb = 0, n = 0;
    attnd_status st = tok_encode(t, a, a_len, false, false, &ia, &na, err);
    if (st == ATTND_OK) st = tok_encode(t, b, b_len, false, false, &ib, &nb, err);
    if (st != ATTND_OK) goto out;
    int32_t head, mid[2], tail;
    pair_specials(t, &head, mid, &tail);
    out = malloc((na + nb + 4) * sizeof(*out));
    seg = malloc((na + nb + 4) * sizeof(*seg));
    if (!out || !seg) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for a pair of %zu + %zu tokens", na, nb);
        goto out;
    }
    if (head >= 0) seg[n] = 0, out[n++] = head;
    for (size_t i = 0; i < na; i++) seg[n] = 0, out[n++] = ia[i];
    for (size_t k = 0; k < 2; k++)
        if (mid[k] >= 0) seg[n] = 0, out[n++] = mid[k];
    int32_t sb = t->kind == KIND_UGM ? 0 : 1; /* XLM-RoBERTa has one token type */
    for (size_t i = 0; i < nb; i++) seg[n] = sb, out[n++] = ib[i];
    if (tail >= 0) seg[n] = sb, out[n++] = tail;
    *ids = out, *n_ids = n, out = NULL;
    if (segs) *segs = seg, seg = NULL;
out:
    free(ia);
    free(ib);
    free(out);
    free(seg);
    return st;
}

// ---- decode -----------------------------------------------------------------------------------

/* Does decoding drop the leading space of the first piece that gives text? SentencePiece's dummy
 * prefix; WordPiece, whose decoder puts a space before every word-initial piece but the first. */
static bool strips_first_space(const tokenizer *t) {
    return ((t->kind == KIND_SPM || t->kind == KIND_UGM) && t->add_space_prefix) || t->kind == KIND_WPM;
}

/* Decoding state shared by tok_decode and the stream: whether the dummy-prefix space of the
 * first piece is still to be dropped. */
static void piece_of(const tokenizer *t, int32_t id, bool render_special, bool *strip, const char **p, size_t *n) {
    bool hidden = t->type[id] == TT_CONTROL || t->type[id] == TT_UNKNOWN ? !render_special : false;
    *p = t->dec + t->dec_off[id];
    *n = hidden ? 0 : t->dec_len[id];
    if (!*strip && wpm_continuation(t, id)) (*p) += 2, (*n) -= 2; /* HF keeps "##" on a first piece only */
    if (*strip && *n) {
        if ((t->type[id] == TT_NORMAL || t->kind == KIND_WPM) && **p == ' ') (*p)++, (*n)--;
        *strip = false;
    }
}

attnd_status tok_decode(const tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **text,
                        size_t *len, attnd_err *err) {
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return attnd_fail(err, ATTND_ERR_INVALID, "token id %d at position %zu is outside the vocabulary (%d tokens)",
                              ids[i], i, t->n_vocab);
        total += t->dec_len[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory decoding %zu tokens", n);
    bool strip = strips_first_space(t);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t k;
        piece_of(t, ids[i], render_special, &strip, &p, &k);
        memcpy(out + m, p, k);
        m += k;
    }
    out[m] = '\0';
    *text = out;
    *len = m;
    return ATTND_OK;
}

// ---- streaming decode -------------------------------------------------------------------------

struct tok_stream {
    const tokenizer *t;
    bool render_special;
    bool strip; /* the SentencePiece dummy-prefix space is still to be dropped */
    char *buf;  /* (cap) held-back bytes of an unfinished character, then the released text */
    size_t held, cap;
    char *out;  /* (cap_out) text handed to the caller */
    size_t cap_out;
};

void tok_stream_destroy(tok_stream *s) {
    if (!s) return;
    free(s->buf);
    free(s->out);
    free(s);
}

attnd_status tok_stream_create(tok_stream **out, const tokenizer *t, bool render_special) {
    *out = NULL;
    tok_stream *s = calloc(1, sizeof(*s));
    if (!s) return ATTND_ERR_NOMEM;
    s->t = t;
    s->render_special = render_special;
    s->strip = strips_first_space(t);
    s->cap = s->cap_out = 64;
    s->buf = malloc(s->cap);
    s->out = malloc(s->cap_out);
    if (!s->buf || !s->out) {
        tok_stream_destroy(s);
        return ATTND_ERR_NOMEM;
    }
    *out = s;
    return ATTND_OK;
}

void tok_stream_keep_leading_space(tok_stream *s) { s->strip = false; }

/* Moves the first n held bytes to the output buffer. */
static size_t release(tok_stream *s, size_t n, const char **out) {
    if (!attnd_grow(&s->out, &s->cap_out, n + 1, 1, 0)) n = 0; /* out of memory: keep holding */
    memcpy(s->out, s->buf, n);
    s->out[n] = '\0';
    memmove(s->buf, s->buf + n, s->held - n);
    s->held -= n;
    *out = s->out;
    return n;
}

size_t tok_stream_push(tok_stream *s, int32_t id, const char **out) {
    *out = s->out;
    if (id < 0 || id >= s->t->n_vocab) return release(s, 0, out);
    const char *p;
    size_t n;
    piece_of(s->t, id, s->render_special, &s->strip, &p, &n);
    if (!attnd_grow(&s->buf, &s->cap, s->held + n, 1, 0)) return release(s, 0, out);
    memcpy(s->buf + s->held, p, n);
    s->held += n;
    return release(s, unicode_complete_prefix(s->buf, s->held), out);
}

size_t tok_stream_flush(tok_stream *s, const char **out) { return release(s, s->held, out); }
