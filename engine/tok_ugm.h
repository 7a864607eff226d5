/*
 * tok_ugm.h — SentencePiece's unigram model ("t5" in tokenizer.ggml.model: XLM-RoBERTa, T5,
 * bge-m3, bge-reranker-v2-m3, multilingual-e5), the parts that do not need the vocabulary's
 * index: the normaliser (precompiled character map, white space, U+2581) and the best
 * segmentation of one word by piece scores (Viterbi), as Hugging Face's tokenizers define them
 * (Precompiled normaliser, WhitespaceSplit + Metaspace pre-tokenizer, Unigram model).
 *
 *   charsmap   tokenizer.ggml.precompiled_charsmap: a 4-byte size, a double-array trie over
 *              UTF-8 bytes (XOR-compressed, one 32-bit word per node), then NUL-terminated
 *              replacement strings. HF applies it per grapheme cluster: a cluster shorter than
 *              6 bytes with an entry (the shortest entry that is a prefix of it) is replaced as a
 *              whole; otherwise each character with an entry is replaced on its own.
 *   spaces     with remove_extra_whitespaces, runs of white space (Unicode's White_Space, as
 *              HF's WhitespaceSplit) are dropped and every word gets one U+2581 in front; without it every ' ' becomes U+2581 and add_space_prefix puts one
 *              before the first non-space (llama.cpp's rules for the flags).
 *   words      the normalised text is cut before every U+2581 (HF's Metaspace split).
 *   viterbi    pieces are the vocabulary's normal, user-defined and unused tokens; a character
 *              no piece covers alone is the unknown token at (lowest normal score - 10); the
 *              highest total score wins (float64 sums, the first found on ties), and adjacent
 *              unknown tokens fuse into one.
 * Engine-private.
 */
#ifndef ATTND_TOK_UGM_H
#define ATTND_TOK_UGM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

/* A precompiled character map (owns a copy of the blob); all zero = none. */
typedef struct tok_ugm_map {
    uint8_t *blob;
    const uint8_t *nodes; /* n_nodes little-endian 32-bit words */
    size_t n_nodes;
    const char *repl; /* n_repl bytes of NUL-terminated strings */
    size_t n_repl;
} tok_ugm_map;

/* Copies and checks the blob's framing (ATTND_ERR_FORMAT when the sizes do not add up). Node
 * and string indices are checked at each use: a bad one means "no entry", never a read out of
 * bounds. */
attnd_status tok_ugm_map_init(tok_ugm_map *m, const uint8_t *data, size_t n, attnd_err *err);
void tok_ugm_map_free(tok_ugm_map *m);

typedef struct tok_ugm_flags {
    bool add_space_prefix;  /* tokenizer.ggml.add_space_prefix */
    bool remove_extra_ws;   /* tokenizer.ggml.remove_extra_whitespaces */
} tok_ugm_flags;

/*
 * The normalised text of text[0..len) (any bytes: an invalid UTF-8 byte is U+FFFD, as in
 * llama.cpp). *out is malloc'd (caller frees) and NUL-terminated; *out_len excludes the NUL.
 */
attnd_status tok_ugm_normalize(const tok_ugm_map *m, const tok_ugm_flags *fl, const char *text, size_t len,
                               char **out, size_t *out_len, attnd_err *err);

/* The next word of normalised text s[0..len) at or after *pos (a word starts at a U+2581 or at
 * 0 and runs to the next U+2581): sets *start and *end and moves *pos past it; false at the end. */
bool tok_ugm_next_word(const char *s, size_t len, size_t *pos, size_t *start, size_t *end);

/* Looks p[0..n) up: TOK_UGM_PIECE with its id and score, TOK_UGM_PREFIX when it is no piece but
 * may begin one, TOK_UGM_NONE when no piece begins with it (the search stops there). */
typedef enum { TOK_UGM_NONE, TOK_UGM_PREFIX, TOK_UGM_PIECE } tok_ugm_found;
typedef tok_ugm_found (*tok_ugm_find_fn)(const void *ctx, const char *p, size_t n, int32_t *id, double *score);

/* A piece lookup and the unknown token, for tok_ugm_word. */
typedef struct tok_ugm_vocab {
    tok_ugm_find_fn find;
    const void *ctx;
    size_t max_piece; /* the longest piece, in bytes */
    int32_t unk;
    double unk_score;
} tok_ugm_vocab;

/*
 * The best segmentation of w[0..n): writes the ids to out (room for n) and returns their count.
 * ATTND_ERR_NOMEM on allocation failure (then *count is 0).
 */
attnd_status tok_ugm_word(const tok_ugm_vocab *v, const char *w, size_t n, int32_t *out, size_t *count,
                          attnd_err *err);

#endif /* ATTND_TOK_UGM_H */
