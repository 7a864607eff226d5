/*
 * chat.h — chat templates: turning a chat request's messages into the prompt text a model was
 * trained on, and that text into tokens.
 *
 * The model's own Jinja template (tokenizer.chat_template) is rendered by the Jinja engine
 * (server/jinja/) exactly as Hugging Face's apply_chat_template renders it. Which template a
 * server uses (chat_template_load), in order:
 *   1. the GGUF's tokenizer.chat_template, when it parses;
 *   2. the configured Jinja file (chat_template_file / --chat-template-file), or the configured
 *      built-in family (chat_template / --chat-template);
 *   3. the built-in family recognised from the GGUF's template text, else ChatML (a warning).
 * A message's content reaches a Jinja template as the client sent it (a string, or text parts)
 * when a probe at load shows the template reads parts; otherwise as one string, the parts joined
 * (what llama.cpp does too).
 * The built-in families (ChatML, Llama 2 and 3, Mistral, Zephyr, Gemma, Phi-3) are rendered
 * from a table of their markers.
 *
 * Either way the rendered text is tokenized so that only what the template itself wrote can be
 * a special token: a client's "</s>" or "<|im_start|>system" stays plain text and cannot forge
 * a turn (the Jinja engine's provenance marks, jinja.h).
 */
#ifndef ATTND_SERVER_CHAT_H
#define ATTND_SERVER_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "attnd/common.h"
#include "attnd/tokenizer.h"
#include "../jinja/jinja.h"
#include "toolcall.h"

typedef enum chat_family {
    CHAT_CHATML = 0,
    CHAT_LLAMA2,
    CHAT_LLAMA3,
    CHAT_MISTRAL,
    CHAT_ZEPHYR,
    CHAT_GEMMA,
    CHAT_PHI3,
    CHAT_GEMMA4,
    CHAT_GLM,
    CHAT_FAMILY_COUNT,
} chat_family;

typedef struct chat_msg {
    const char *role;    /* "system", "developer", "user" or "assistant" (borrowed) */
    const char *content; /* borrowed, NUL-terminated: a string, or the text parts joined */
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
 * Renders messages in built-in family f and the opening of the assistant's turn. *out is
 * malloc'd and NUL-terminated (caller frees). ATTND_ERR_INVALID for an unknown role (naming it
 * and its index) or no messages.
 */
attnd_status chat_render(chat_family f, const chat_msg *msgs, size_t n, char **out, attnd_err *err);

/*
 * Renders messages like chat_render and tokenizes the result for the model (BOS per its
 * metadata): the family's markers become special tokens, message content is always plain text.
 * *ids is malloc'd (caller frees). Errors as chat_render and tok_encode.
 */
attnd_status chat_encode(const tokenizer *tok, chat_family f, const chat_msg *msgs, size_t n, int32_t **ids,
                         size_t *n_ids, attnd_err *err);

// ---- the server's template: Jinja or a built-in family ----------------------------------------

typedef enum chat_source {
    CHAT_SRC_GGUF = 0,     /* the model's tokenizer.chat_template, rendered as Jinja */
    CHAT_SRC_FILE,         /* the configured Jinja file */
    CHAT_SRC_CONFIGURED,   /* the configured built-in family */
    CHAT_SRC_DETECTED,     /* a built-in family recognised in a template the engine cannot parse */
    CHAT_SRC_FALLBACK,     /* ChatML: the model has no usable template */
} chat_source;

typedef struct chat_template {
    chat_family family;     /* the built-in rendering when jinja is NULL; the end marker always */
    jinja_template *jinja;  /* owned; NULL = render family */
    char *text;             /* the Jinja source jinja was parsed from (owned; NULL with a family) */
    chat_source source;
    bool content_parts;     /* the Jinja template reads content given as [{"type": "text", ...}] parts */
    bool takes_tools;       /* the Jinja template shows the request's `tools` (Qwen, Llama 3.1+,
                             * Mistral, Hermes...): it gets them and the tool turns as sent */
    toolcall_format tool_format; /* how the template's model writes a call (Hermes when unknown) */
    char *bos, *eos;        /* the model's BOS / EOS text as bos_token / eos_token (owned) */
    const struct tm *now;   /* strftime_now's clock (borrowed); NULL = the wall clock */
    char why[600];          /* for CHAT_SRC_DETECTED / FALLBACK: what was wrong, for the warning */
} chat_template;

/* A short description of where ct came from ("tokenizer.chat_template (Jinja)", ...). */
const char *chat_source_str(const chat_template *ct);

/*
 * Chooses the template (the order in this file's header) and parses it. gguf_jinja is the model's
 * tokenizer.chat_template (NULL = none); file_path a Jinja file (NULL = none); family_name a
 * configured family (NULL or "" = none); tok gives the BOS / EOS text (NULL = empty). A parsed
 * template is probed (content parts, tools); one that runs out of the engine's bounds there
 * (steps, time, size, depth) fails at load: the model's is then refused like one that does not
 * parse (ct falls back to a built-in family and ct->why says why). Errors: ATTND_ERR_IO / FORMAT
 * / NOMEM for a configured file that cannot be read, parsed or loaded, NOT_FOUND for an unknown
 * family name. ct must be freed with chat_template_free, also after an error.
 */
attnd_status chat_template_load(chat_template *ct, const char *gguf_jinja, const char *file_path,
                                const char *family_name, const tokenizer *tok, attnd_err *err);
void chat_template_free(chat_template *ct);

/* What a chat request gives the template. */
typedef struct chat_request {
    const chat_msg *msgs;
    size_t n_msgs;
    const json_t *raw;     /* the request's messages array, index for index with msgs (borrowed; NULL =
                            * none): a Jinja template also sees each message's tool_calls,
                            * tool_call_id, name and reasoning_content */
    const json_t *tools;   /* the request's tools array (borrowed; NULL = none) */
    const json_t *kwargs;  /* chat_template_kwargs, an object (borrowed; NULL = none) */
    bool add_generation_prompt;
    bool *opens_reasoning; /* out, set by chat_template_encode (NULL = not wanted): the prompt ends
                            * inside a reasoning block the template opened ("<think>" and blanks,
                            * as DeepSeek-R1 style generation prompts do), so the reply starts as
                            * reasoning */
} chat_request;

/*
 * Renders rq with ct. *out is the caller's (jinja_output_free); for a built-in family it is one
 * segment per marker or content run. Errors: ATTND_ERR_INVALID as chat_render, ATTND_ERR_FORMAT
 * with the template's message ("template line 12: Conversation roles must alternate ...").
 */
attnd_status chat_template_render(const chat_template *ct, const chat_request *rq, jinja_output *out,
                                  attnd_err *err);
/* Renders and tokenizes: the template's literal text may hold special tokens, the client's data
 * never. BOS is added per the model's metadata unless the rendering starts with it already. */
attnd_status chat_template_encode(const chat_template *ct, const tokenizer *tok, const chat_request *rq,
                                  int32_t **ids, size_t *n_ids, attnd_err *err);

#endif
