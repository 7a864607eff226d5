/*
 * oai.h — the OpenAI API's JSON shapes: validating completion and chat requests into plain C
 * structs, and building error bodies. Pure functions of JSON in, JSON/C out (no model, no
 * HTTP), so every validation rule is unit-testable.
 *
 * Errors name the offending field: oai_parse_* return ATTND_ERR_INVALID with err->msg and
 * *param set (a static string such as "max_tokens" or "messages"), which the caller turns into
 * a 400 {"error": {"message", "type": "invalid_request_error", "param", "code"}}.
 */
#ifndef ATTND_SERVER_OAI_H
#define ATTND_SERVER_OAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/sampler.h"
#include "chat.h"
#include "settings.h"

typedef struct oai_request {
    bool chat;
    // ---- the prompt: exactly one of these ----
    const char *prompt;     /* completions, text prompt (borrowed from the request JSON) */
    int32_t *prompt_ids;    /* completions, token-id prompt (owned) */
    int n_prompt_ids;
    chat_msg *msgs;         /* chat (owned array; roles borrowed, contents owned) */
    size_t n_msgs;
    // ---- generation ----
    int max_tokens;         /* -1 = not given (server default) */
    sampler_params sp;      /* sp.bias points into bias */
    logit_bias *bias;       /* (n_bias) owned */
    int n_bias;
    char **stops;           /* owned */
    int n_stops;
    bool stream, include_usage, echo;
    int logprobs;           /* alternatives per token (0..20); -1 = no logprobs */
    const char *session_id; /* borrowed; NULL = none */
} oai_request;

/*
 * Validates a /v1/completions (chat = false) or /v1/chat/completions (chat = true) body.
 * Defaults come from cfg; n_vocab bounds token ids and logit_bias keys; max_tokens above
 * cfg->max_tokens_cap is refused. On error *param names the field (NULL for the body itself).
 * Features not implemented (tools, tool_choice, functions, function_call, response_format other
 * than "text", audio, modalities other than ["text"], best_of > 1, suffix) are refused by name;
 * unknown fields and harmless ones clients send (user, stream_options, metadata, store) are not.
 * out must be freed with oai_request_free, also after an error.
 */
attnd_status oai_parse(const json_t *body, bool chat, const server_settings *cfg, int n_vocab, oai_request *out,
                       const char **param, attnd_err *err);
void oai_request_free(oai_request *r);

/* {"error": {"message", "type", "param", "code"}} (new reference). type follows the status:
 * 400/404/405/409/413 invalid_request_error (404 not_found_error), 401 authentication_error,
 * 403/421 permission_error, 429 rate_limit_error, 503 unavailable_error, else server_error. param may be NULL. */
json_t *oai_error(int http_status, const char *message, const char *param);
const char *oai_error_type(int http_status);

/* A JSON string for bytes that may be invalid UTF-8: invalid sequences become U+FFFD
 * (new reference). */
json_t *oai_string(const char *p, size_t n);

#endif
