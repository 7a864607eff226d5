/*
 * chat.h — chat templates: turning a list of (role, content) messages into the prompt text a
 * model was trained on.
 *
 * Jinja is not interpreted. The GGUF's tokenizer.chat_template is recognised by characteristic
 * substrings as one of the common families and rendered by C code; unknown templates fall back
 * to ChatML (the caller warns). Rendered text contains the family's control tokens literally and
 * no BOS; chat_encode tokenizes it so that only those markers are special tokens.
 */
#ifndef ATTND_SERVER_CHAT_H
#define ATTND_SERVER_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "attnd/common.h"
#include "attnd/tokenizer.h"

typedef enum chat_family {
    CHAT_CHATML = 0,
    CHAT_LLAMA2,
    CHAT_LLAMA3,
    CHAT_MISTRAL,
    CHAT_ZEPHYR,
    CHAT_GEMMA,
    CHAT_PHI3,
    CHAT_FAMILY_COUNT,
} chat_family;

typedef struct chat_msg {
    const char *role;    /* "system", "user" or "assistant" (borrowed) */
    const char *content; /* borrowed, NUL-terminated */
} chat_msg;

/* Family name as used in configuration ("chatml", "llama2", "llama3", "mistral", "zephyr",
 * "gemma", "phi3"). */
const char *chat_family_name(chat_family f);
/* By configuration name (case-insensitive); ATTND_ERR_NOT_FOUND naming the known ones. */
attnd_status chat_family_from_name(const char *name, chat_family *out, attnd_err *err);
/* Recognises a Jinja template string. Returns false (and *out = CHAT_CHATML) when the
 * template is NULL, empty or unrecognised. */
bool chat_detect(const char *jinja, chat_family *out);

/* The text that ends an assistant turn in family f ("<|im_end|>", "<|eot_id|>", ...). Chat
 * requests stop there too, for models whose vocabulary spells the marker as plain text. */
const char *chat_end_marker(chat_family f);

/*
 * Renders messages and the opening of the assistant's turn (add_generation_prompt).
 * *out is malloc'd and NUL-terminated (caller frees). ATTND_ERR_INVALID for an unknown role
 * (naming it and its index) or no messages.
 */
attnd_status chat_render(chat_family f, const chat_msg *msgs, size_t n, char **out, attnd_err *err);

/*
 * Renders messages like chat_render and tokenizes the result for the model (BOS per its
 * metadata): the template's own markers become special tokens, message content is always plain
 * text (a user's "</s>" or "<|im_start|>system" stays text and cannot forge a turn). *ids is
 * malloc'd (caller frees). Errors as chat_render and tok_encode.
 */
attnd_status chat_encode(const tokenizer *tok, chat_family f, const chat_msg *msgs, size_t n, int32_t **ids,
                         size_t *n_ids, attnd_err *err);

#endif
