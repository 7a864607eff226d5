/*
 * infill.h — llama-server's POST /infill (fill-in-the-middle for code completion), without HTTP:
 * the request's fields, and the prompt a code model was trained on, laid out with its FIM tokens
 * (tokenizer.h's tok_fim). The endpoint (completions.c) turns the layout into a token-id prompt
 * and runs it as llama.cpp's /completion, so sampling, streaming and the answer are /completion's.
 *
 * The layout, as llama-server writes it (its format_prompt_infill), with repository-level
 * context where the model has the repository and file-separator tokens (Qwen2.5-Coder's):
 *
 *     [BOS] [REP]myproject\n [SEP]{filename}\n{text} ... [SEP]filename\n
 *     [PRE]{input_prefix}{prompt} [SUF]{input_suffix} [MID]
 *
 * Without a file separator each input_extra chunk is written after "\n\n--- snippet ---\n\n"
 * (and no repository line without [REP]). Trimming, for a window W = min(2048, what the context
 * holds besides the answer and the markers): the prefix keeps its last 3W/4 tokens, the suffix
 * its first W/4 minus the prompt's tokens, as llama-server does with its batch as W; the extra
 * context keeps its last tokens that fit in the rest of the context (llama-server gives it
 * n_ctx - n_batch - 2 n_predict, nothing at all on contexts of 2048 or less). Unlike
 * llama-server, BOS comes first, before the extra context, as the models were trained.
 */
#ifndef ATTND_SERVER_INFILL_H
#define ATTND_SERVER_INFILL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/tokenizer.h"

/* One input_extra chunk: a file of the project that gives context. */
typedef struct infill_extra {
    const char *filename;   /* borrowed from the body; "tmp" when not given (llama-server's) */
    const char *text;       /* borrowed */
} infill_extra;

typedef struct infill_input {
    const char *prefix, *suffix;  /* input_prefix, input_suffix: borrowed, required */
    const char *prompt;           /* written after the prefix ("" when not given); its special
                                     tokens count as tokens. Borrowed */
    infill_extra *extra;          /* (n_extra) owned array */
    size_t n_extra;
} infill_input;

/* Reads the infill fields of body into *out (strings borrowed from body): input_prefix and
 * input_suffix (strings, required), prompt (a string), input_extra (an array of {"filename",
 * "text"}). Errors: ATTND_ERR_INVALID with *param the field, ATTND_ERR_NOMEM. *out must be freed
 * with infill_input_free, also after an error. */
attnd_status infill_parse(const json_t *body, infill_input *out, const char **param, attnd_err *err);
void infill_input_free(infill_input *in); /* accepts NULL */

/* ATTND_OK when tok has the prefix, suffix and middle tokens; else ATTND_ERR_UNSUPPORTED with a
 * message naming the missing ones and where they come from. */
attnd_status infill_check_model(const tokenizer *tok, attnd_err *err);

/* The prompt of in for a context of n_ctx tokens that must keep room for n_predict generated
 * tokens (the layout above): *ids malloc'd (the caller frees), *n its length. The model must pass
 * infill_check_model. Errors: ATTND_ERR_NOMEM, a tokenizer's error. */
attnd_status infill_layout(const tokenizer *tok, const infill_input *in, int n_ctx, int n_predict, int32_t **ids,
                           size_t *n, attnd_err *err);

/* The FIM prompt of in as a token-id JSON array (*prompt, new reference) for a context of n_ctx
 * tokens and an answer of up to max_tokens: infill_check_model, then infill_layout (max_tokens
 * above n_ctx counts as n_ctx). What /infill and Ollama's /api/generate with a suffix run.
 * Errors: those two's (ATTND_ERR_UNSUPPORTED: no FIM tokens), ATTND_ERR_NOMEM. */
attnd_status infill_prompt_ids(const tokenizer *tok, const infill_input *in, int n_ctx, long long max_tokens,
                               json_t **prompt, attnd_err *err);

#endif
