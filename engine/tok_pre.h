/*
 * tok_pre.h — pre-tokenizers of the byte-level BPE family: the regular expressions that cut text
 * into words before BPE merges run inside each word, written as hand-coded matchers over code
 * point classes (no regex engine: each alternative is a few branches, and the matchers are
 * linear in the text, with at most one character of look-ahead past a run).
 *
 * A pre-tokenizer is a pipeline of stages; each stage splits every piece produced by the stage
 * before it into matches and the unmatched gaps between them (llama.cpp's semantics for its
 * multi-regex pre-tokenizers; HF's Split with behaviour "Isolated"). Engine-private.
 */
#ifndef ATTND_TOK_PRE_H
#define ATTND_TOK_PRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

typedef enum tok_pre_stage {
    TOK_PRE_NONE = 0,
    /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    TOK_PRE_GPT2,
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
     * \s*[\r\n]+|\s+(?!\S)|\s+ */
    TOK_PRE_LLAMA3,
    /* the same with \p{N} instead of \p{N}{1,3} */
    TOK_PRE_QWEN2,
    /* [\p{P}\$\+<=>\^~\|]+ */
    TOK_PRE_PUNCT_RUN,
    /* \p{N}+ */
    TOK_PRE_DIGIT_RUN,
    /* [0-9][0-9][0-9] */
    TOK_PRE_DIGIT3,
    /* \p{N} */
    TOK_PRE_DIGIT1,
    /* [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
     * [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
     * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+   (o200k) */
    TOK_PRE_O200K,
} tok_pre_stage;

#define TOK_PRE_MAX_STAGES 4

/* A named pre-tokenizer as tokenizer.ggml.pre spells it. */
typedef struct tok_pre_kind {
    const char *name;
    tok_pre_stage stages[TOK_PRE_MAX_STAGES]; /* run in order; TOK_PRE_NONE ends the list */
    bool ignore_merges; /* a word that is itself a vocabulary token is emitted without merging */
    bool nfc;           /* normalise text to NFC first (the HF tokenizer's normalizer) */
} tok_pre_kind;

/* The kind for a tokenizer.ggml.pre value (NULL = key absent: "default"); NULL when unknown. */
const tok_pre_kind *tok_pre_find(const char *name);

/* Working buffers for splitting, reused across calls (owned by one encode call). Every array has
 * room for cap entries: a text of cap - 1 bytes has at most that many code points. */
typedef struct tok_pre_buf {
    uint32_t *cps;    /* (n_cps) code points, UNI_INVALID for stray bytes */
    uint8_t *cls;     /* (n_cps) UNI_* class bits */
    uint32_t *offs;   /* (n_cps + 1) byte offset of each code point; offs[n_cps] = text length */
    uint32_t *bounds; /* word boundaries, in code point indices: words are [bounds[k], bounds[k+1]) */
    uint32_t *tmp;    /* the same, for the stage being built */
    size_t n_bounds, cap;
    char *mem;        /* owns the arrays (engine/block.h) */
} tok_pre_buf;

void tok_pre_buf_free(tok_pre_buf *b); /* frees the arrays; b itself is the caller's */

/*
 * Splits text[0..len) (len < 4 GiB) into words with `kind`. On success b->bounds[0..n_bounds)
 * holds increasing code point indices starting at 0 and ending at the code point count; word k
 * spans bytes b->offs[bounds[k]] .. b->offs[bounds[k+1]]. ATTND_ERR_NOMEM on allocation failure.
 */
attnd_status tok_pre_split(const tok_pre_kind *kind, const char *text, size_t len, tok_pre_buf *b, attnd_err *err);

#endif /* ATTND_TOK_PRE_H */
