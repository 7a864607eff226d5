/*
 * tok_wpm.h — BERT's WordPiece ("bert" in tokenizer.ggml.model), the parts that do not need the
 * vocabulary's index: the normaliser, the word splitter and the greedy longest-match loop, as
 * Hugging Face's tokenizers define them (BertNormalizer, BertPreTokenizer, WordPiece).
 *
 *   normalise  drop NUL, U+FFFD and categories Cc Cf Co (tab, LF and CR are kept), white
 *              space -> ' ', a space each side of every CJK ideograph, then (when asked) NFD with
 *              the nonspacing marks (Mn) dropped, then (when asked) the full lowercase mapping.
 *   split      words are runs between spaces; every punctuation character (ASCII !-/ :-@ [-` {-~
 *              and Unicode's P*) is a word of its own.
 *   match      a word longer than TOK_WPM_MAX_CHARS characters is the unknown token; otherwise it
 *              is cut greedily, longest vocabulary piece first, from the left: the first piece is
 *              a word-initial token, the others continuation tokens (HF's "##" form). A word with
 *              no complete cut is the unknown token as a whole.
 *
 * In a GGUF, llama.cpp's converter writes word-initial pieces with U+2581 in front ("▁play")
 * and continuation pieces bare ("##ing" -> "ing"); the lookup that knows this is the caller's
 * (tokenizer.c), passed in as a function. Engine-private.
 */
#ifndef ATTND_TOK_WPM_H
#define ATTND_TOK_WPM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

/* HF's max_input_chars_per_word: a longer word is the unknown token. */
#define TOK_WPM_MAX_CHARS 100

/*
 * The normalised text of text[0..len) (any bytes: invalid UTF-8 bytes are dropped as U+FFFD is).
 * *out is malloc'd (caller frees) and NUL-terminated; *out_len excludes the NUL. The result is
 * valid UTF-8 in which every white space is ' '.
 */
attnd_status tok_wpm_normalize(const char *text, size_t len, bool lowercase, bool strip_accents, char **out,
                               size_t *out_len, attnd_err *err);

/*
 * The next word of normalised text s[0..len) at or after *pos: sets *start and *end (bytes) and
 * moves *pos past it; false when no word is left.
 */
bool tok_wpm_next_word(const char *s, size_t len, size_t *pos, size_t *start, size_t *end);

/* Looks up p[0..n) as a word-initial piece (initial) or a continuation piece: its id or -1. */
typedef int32_t (*tok_wpm_find_fn)(const void *ctx, const char *p, size_t n, bool initial);

/*
 * Cuts word w[0..n) (one word of tok_wpm_next_word) into pieces, longest first, trying pieces
 * of at most max_piece bytes. Writes the ids to out (room for TOK_WPM_MAX_CHARS) and returns
 * their count; 0 means the word is the unknown token (too long, or no complete cut).
 */
size_t tok_wpm_word(const char *w, size_t n, size_t max_piece, tok_wpm_find_fn find, const void *ctx, int32_t *out);

#endif /* ATTND_TOK_WPM_H */
