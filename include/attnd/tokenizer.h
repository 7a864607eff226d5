/*
 * tokenizer.h — text <-> token ids, read from a GGUF's tokenizer.* metadata.
 *
 * Three families: "llama" (SentencePiece-style BPE driven by token scores, U+2581 for spaces,
 * byte-fallback tokens <0xXX>), "gpt2" (byte-level BPE with ranked merges and the pre-tokenizer
 * named by tokenizer.ggml.pre) and "bert" (WordPiece as Hugging Face's BertTokenizer: cleaning,
 * optional lowercasing and accent stripping, CJK and punctuation split, greedy longest pieces,
 * [UNK], [CLS] ... [SEP]; see docs/tokenizer.md). Nothing is hard-coded per model.
 *
 * Thread-safety: a tokenizer is immutable after tok_load; any number of threads may encode and
 * decode with it concurrently. A tok_stream belongs to one thread.
 */
#ifndef ATTND_TOKENIZER_H
#define ATTND_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/gguf.h"

typedef struct tokenizer tokenizer;

/* Reads the vocabulary from f (copies what it keeps; f may be closed afterwards). */
attnd_status tok_load(tokenizer **out, const gguf_file *f, attnd_err *err);
void tok_destroy(tokenizer *t); /* accepts NULL */

int tok_n_vocab(const tokenizer *t);
int32_t tok_bos(const tokenizer *t); /* -1 when the model has none */
int32_t tok_eos(const tokenizer *t);
/* The separator ([SEP] of WordPiece, tokenizer.ggml.seperator_token_id); -1 when none. For
 * WordPiece, tok_bos is [CLS] (bos_token_id, else cls_token_id, else 101). */
int32_t tok_sep(const tokenizer *t);
bool tok_add_bos(const tokenizer *t);
/* The fill-in-the-middle tokens of code models (POST /infill), by role: prefix, suffix, middle,
 * padding, repository name and file separator (the last two lay out repository-level context). */
typedef enum tok_fim_role { TOK_FIM_PRE, TOK_FIM_SUF, TOK_FIM_MID, TOK_FIM_PAD, TOK_FIM_REP, TOK_FIM_SEP, TOK_FIM_N } tok_fim_role;
/* The id of role r, from tokenizer.ggml.fim_*_token_id (or the older prefix/suffix/middle keys),
 * else found by the spellings coder vocabularies use (<|fim_prefix|>, <PRE>, ...); -1 = none. */
int32_t tok_fim(const tokenizer *t, tok_fim_role r);
/* True for end-of-generation ids (EOS, EOT, <|im_end|>, ...): generation stops there. */
bool tok_is_eog(const tokenizer *t, int32_t id);
/* The vocabulary string of id as stored in the GGUF (borrowed), or NULL when out of range. */
const char *tok_piece(const tokenizer *t, int32_t id);
/* Looks a token up by its exact vocabulary string; -1 when absent. */
int32_t tok_find(const tokenizer *t, const char *piece);
/* True for control and unknown tokens (hidden by decoding unless render_special). */
bool tok_is_control(const tokenizer *t, int32_t id);
/* The bytes id decodes to on its own (borrowed, valid until tok_destroy; not NUL-terminated; may
 * be a partial UTF-8 character): byte tokens and the byte-level mapping undone, U+2581 as a space,
 * no dummy-prefix handling, a WordPiece continuation piece without its "##". Control/unknown
 * tokens give 0 bytes unless render_special. False when id is out of range. For logprob "bytes"
 * fields and token-by-token displays. */
bool tok_token_bytes(const tokenizer *t, int32_t id, bool render_special, const char **bytes, size_t *len);

/*
 * Encodes len bytes of text. add_special: prepend BOS (and append EOS, and for WordPiece SEP) as
 * the model's metadata asks. parse_special: also match control tokens written literally in the text (chat templates);
 * user-defined tokens always match. *ids is malloc'd (caller frees) and *n_ids set.
 * Invalid UTF-8 is encoded, not refused (byte fallback / byte-level mapping).
 */
attnd_status tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t **ids, size_t *n_ids, attnd_err *err);

/*
 * Encodes a pair of texts as a cross-encoder (reranker) reads them. WordPiece: HF's BERT
 * template, [CLS] a [SEP] b [SEP]. Other families: llama.cpp's rerank layout, BOS a EOS SEP b EOS,
 * each special present only when the vocabulary has it and its add_* flag is set. Both texts are
 * plain text (special-token strings in them are not parsed; user-defined tokens still match).
 * *ids is malloc'd (caller frees), *n_ids set. segs (may be NULL) receives a malloc'd array of
 * the same length with each token's segment, the token type ids of BERT: 0 for the first
 * special, a and the separator after it; 1 for b and the final separator.
 * Errors as tok_encode; on error nothing is allocated.
 */
attnd_status tok_encode_pair(const tokenizer *t, const char *a, size_t a_len, const char *b, size_t b_len,
                             int32_t **ids, int32_t **segs, size_t *n_ids, attnd_err *err);

/* A byte range [start, end) of a text. */
typedef struct tok_span {
    size_t start, end;
} tok_span;
/*
 * Encodes text whose control tokens count only inside the given spans (sorted, disjoint): a
 * chat prompt whose template markers are special while the messages' content is plain text, so
 * "</s>" or "<|im_start|>" typed by a user stays text. User-defined tokens match everywhere, as
 * in tok_encode. Otherwise as tok_encode with parse_special; ATTND_ERR_INVALID for bad spans.
 */
attnd_status tok_encode_marked(const tokenizer *t, const char *text, size_t len, bool add_special,
                               const tok_span *spans, size_t n_spans, int32_t **ids, size_t *n_ids, attnd_err *err);
/* Decodes ids to bytes (SentencePiece leading space of the first piece removed, byte tokens and
 * byte-level mapping undone; WordPiece as HF's decoder: a space before each word-initial
 * piece but the first, continuations glued (a first one keeps its "##"), HF's cleanup of " ."
 * " ," " ?" " !" and such). *text is malloc'd and NUL-terminated; *len excludes the NUL.
 * Control tokens decode to nothing unless render_special. */
attnd_status tok_decode(const tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **text,
                        size_t *len, attnd_err *err);

/*
 * Incremental decoding for streaming. Push ids one at a time; each push returns the newly
 * complete text (never a split UTF-8 character). The concatenation of all pushes and the final
 * flush equals tok_decode of all ids.
 */
typedef struct tok_stream tok_stream;
attnd_status tok_stream_create(tok_stream **out, const tokenizer *t, bool render_special);
void tok_stream_destroy(tok_stream *s);
/* Appends the text released by id to *out (malloc'd/realloc'd buffer owned by the stream;
 * valid until the next call). Returns bytes released (possibly 0). */
size_t tok_stream_push(tok_stream *s, int32_t id, const char **out);
/* Releases held-back bytes (an incomplete UTF-8 tail is emitted as-is). */
size_t tok_stream_flush(tok_stream *s, const char **out);
/* For a stream that continues text already shown (a completion after its prompt): keep the
 * leading space of the first piece, which tok_decode (and a plain stream) drop as SentencePiece's
 * dummy prefix. Call before the first push. Ids out of range push nothing. */
void tok_stream_keep_leading_space(tok_stream *s);

#endif /* ATTND_TOKENIZER_H */
