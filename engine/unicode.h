/*
 * unicode.h — the few Unicode facts the tokenizers need: strict UTF-8 decoding, a per-code-point
 * class (letter and its case / mark / number / punctuation / white space) for the pre-tokenizer regexes, NFC,
 * and what BERT's normaliser asks (control test, nonspacing marks, NFD, full lowercase).
 *
 * Category data comes from libutf8proc (the Unicode Character Database as compiled by the
 * utf8proc project), never from ASCII tests. White space is the Unicode White_Space property,
 * which is exactly categories Zs, Zl, Zp plus the controls U+0009..U+000D and U+0085.
 * Engine-private; not part of the public API.
 */
#ifndef ATTND_UNICODE_H
#define ATTND_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

enum {
    UNI_LETTER = 1, /* \p{L}: Lu Ll Lt Lm Lo */
    UNI_NUMBER = 2, /* \p{N}: Nd Nl No */
    UNI_PUNCT = 4,  /* \p{P}: Pc Pd Ps Pe Pi Pf Po */
    UNI_SPACE = 8,  /* \s: the White_Space property */
    UNI_MARK = 16,  /* \p{M}: Mn Mc Me */
    UNI_UPPER = 32, /* Lu Lt (with UNI_LETTER): a letter that is neither Ll, Lm nor Lo */
    UNI_LOWER = 64, /* Ll (with UNI_LETTER) */
};

/* Code point returned by unicode_next for a byte that does not start a valid UTF-8 sequence.
 * It has no class bits (it is "other", like U+FFFD) and stands for exactly one byte. */
#define UNI_INVALID 0xFFFFFFFFu

/* Decodes the UTF-8 character at s[*i] (i < len) and advances *i past it. Overlong forms,
 * surrogates, values above U+10FFFF and truncated sequences decode as UNI_INVALID and advance
 * by one byte, so every byte of the input is covered exactly once. */
uint32_t unicode_next(const char *s, size_t len, size_t *i);

/* Length of the longest prefix of s[0..len) that does not end inside an incomplete (but so far
 * valid) UTF-8 sequence: the bytes after it could still become one character. */
size_t unicode_complete_prefix(const char *s, size_t len);

/* UNI_* bits of a code point (0 for UNI_INVALID and unassigned code points). */
uint8_t unicode_class(uint32_t cp);

/* NFC of s[0..len). Invalid UTF-8 bytes are kept as they are and split the text into runs that
 * are normalised separately. *out is malloc'd (caller frees), NUL-terminated, *out_len excludes
 * the NUL. ATTND_ERR_NOMEM on allocation failure. */
attnd_status unicode_nfc(const char *s, size_t len, char **out, size_t *out_len, attnd_err *err);

/* True for categories Cc Cf Cs Co (controls, formats, surrogates, private use): what BERT's
 * text cleaning drops (tab, newline and CR aside). Unassigned code points (Cn) are not
 * included: HF's tokenizers keep them (they become [UNK]), and so a character assigned after
 * utf8proc's Unicode version is kept too. */
bool unicode_is_control(uint32_t cp);

/* True for a nonspacing mark (category Mn): what BERT's accent stripping drops after NFD. */
bool unicode_is_nonspacing_mark(uint32_t cp);

/* Full lowercase mapping of cp (Unicode's SpecialCasing included, without the context-dependent
 * final sigma rule): writes 1 or 2 code points to out and returns how many. U+0130 is the one
 * character whose lowercase is two (i, U+0307), as Rust's char::to_lowercase has it. */
size_t unicode_lower(uint32_t cp, uint32_t out[2]);

/* NFD of s[0..len), which must be valid UTF-8 (ATTND_ERR_INVALID otherwise). *out is malloc'd
 * (caller frees), NUL-terminated, *out_len excludes the NUL. */
attnd_status unicode_nfd(const char *s, size_t len, char **out, size_t *out_len, attnd_err *err);

/* Is there an extended grapheme cluster boundary between code points a and b (UAX #29)? state
 * starts at 0 for a text and carries the rules that look further back (emoji, regional
 * indicators) from one call to the next. */
bool unicode_grapheme_break(uint32_t a, uint32_t b, int32_t *state);

#endif /* ATTND_UNICODE_H */
