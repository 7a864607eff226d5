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
#include "attnd/engine.h"
#include "attnd/grammar.h"
#include "attnd/sampler.h"
#include "chat.h"
#include "toolcall.h"
#include "oai_field.h"
#include "settings.h"

/* How every JSON answer is written: compact, reals with 9 significant digits, the most a float
 * needs to read back as itself; jansson's default of 17 prints a float widened to double with
 * its noise (0.800000011920929 for 0.8f). Settings go in through completion_body_float. */
#define OAI_DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* The roles a chat message may have, as error messages list them ('developer' is OpenAI's newer
 * name for 'system'; 'tool' carries a tool's result back). */
#define OAI_ROLES "system, developer, user, assistant, tool"

/* Limits of one request: prompts in a /v1/completions list, choices per prompt (n), and
 * choices in all (prompts x n), each of which is one sequence in the scheduler. */
#define OAI_MAX_PROMPTS 64
#define OAI_MAX_N 16
#define OAI_MAX_CHOICES 64

/* One prompt of a /v1/completions request: text, or token ids. */
typedef struct oai_prompt {
    const char *text;       /* borrowed from the request JSON; NULL when ids are given */
    int32_t *ids;           /* (n_ids) owned */
    int n_ids;
} oai_prompt;

/* What the output must be: free text, any JSON object (response_format json_object), JSON
 * under a schema (response_format json_schema, llama.cpp's json_schema), or a GBNF grammar
 * (llama.cpp's grammar). */
typedef enum oai_format {
    OAI_FORMAT_TEXT = 0,
    OAI_FORMAT_JSON_OBJECT,
    OAI_FORMAT_JSON_SCHEMA,
    OAI_FORMAT_GRAMMAR,
    OAI_FORMAT_TOOL_CALL,   /* tool_choice required / named: a call is forced */
} oai_format;

typedef struct oai_request {
    bool chat;
    // ---- the prompt: exactly one of these ----
    oai_prompt *prompts;    /* completions: (n_prompts) owned, texts borrowed from the request JSON */
    int n_prompts;
    chat_msg *msgs;         /* chat (owned array; roles borrowed, contents owned) */
    size_t n_msgs;
    // ---- generation ----
    int n;                  /* choices per prompt (1..OAI_MAX_N) */
    int max_tokens;         /* -1 = not given (server default) */
    sampler_params sp;      /* sp.bias points into bias */
    logit_bias *bias;       /* (n_bias) owned */
    int n_bias;
    char **stops;           /* owned */
    int n_stops;
    bool stream, include_usage, echo;
    bool ignore_eos;            /* llama-server's: end-of-generation tokens do not end the answer */
    int reasoning_budget;       /* llama-server's reasoning_budget_tokens: a <think> block is closed
                                   after this many tokens (gen.h); 0 = no limit */
    int logprobs;           /* alternatives per token (0..20); -1 = no logprobs */
    int draft_max;          /* speculative decoding: drafts per step at most, 0..32; -1 = the server's */
    float draft_min_p;      /* the draft model's cut, 0..1; -1 = the server's */
    const char *session_id; /* borrowed; NULL = none */
    const json_t *messages_json;   /* chat: the messages as sent (borrowed), for the template */
    const json_t *template_kwargs; /* chat_template_kwargs: an object for the template (borrowed); NULL = none */
    // ---- structured output ----
    oai_format format;      /* what constrains the output */
    bool open_reasoning;    /* the rendered prompt ended inside a reasoning block (oai_open_reasoning) */
    bool think_to_call;     /* oai_bind_template: the template's call format ends reasoning at its
                               <tool_call> too (toolcall_format_think_ends_at_call) */
    grammar *grammar;       /* owned reference; NULL for OAI_FORMAT_TEXT */
    bool grammar_close;     /* close_within_budget: the grammar's sentence is closed within
                               max_tokens (gen.h's grammar_close); default on for JSON formats and
                               forced calls */
    // ---- tools (chat) ----
    toolcall_spec tools;    /* tools.tools is NULL when the request has none */
    const json_t *tools_json; /* the body's tools (borrowed) when tool_choice is not none, else
                                 NULL: what a tool-aware Jinja template gets as `tools` */
    bool template_tools;    /* oai_bind_template: the template renders tools and tool turns itself */
    chat_msg *fmsgs;        /* (n_fmsgs) the messages for a built-in family when they differ from
                               msgs (tool results and calls rendered as text, the tools described
                               in the system message; toolcall.h); NULL = use msgs. Owned. */
    size_t n_fmsgs;
    // ---- interventions (ablate_api.h) ----
    engine_ablation_head *ablate; /* (n_ablate) owned; NULL = none. Ranges unchecked (no model here) */
    int n_ablate;
} oai_request;

/*
 * Validates a /v1/completions (chat = false) or /v1/chat/completions (chat = true) body.
 * Defaults come from cfg; n_vocab bounds token ids and logit_bias keys; max_tokens above
 * cfg->max_tokens_cap is refused. On error *param names the field (NULL for the body itself).
 * Structured output: response_format {"type": "text" | "json_object" | "json_schema",
 * "json_schema": {"name", "schema", "strict"}}, and llama.cpp's "grammar" (GBNF) and
 * "json_schema" (a schema) on every endpoint, compile into r->grammar; a schema keyword the
 * conversion does not cover is a 400 naming it (json_schema.h).
 * Tools (chat): "tools", "tool_choice", "parallel_tool_calls" into r->tools (toolcall.h); the
 * tools are described in the system message (Hermes style, for the built-in families), history
 * messages' tool_calls and role "tool" results are rendered as the model writes them, and
 * tool_choice required / named compiles the forcing grammar (then response_format is a 400).
 * "ablate" (ablate_api.h) into r->ablate, its ranges left to the caller, who knows the model.
 * Features not implemented (functions, function_call, audio, modalities
 * other than ["text"], best_of > 1, suffix) are refused by name;
 * unknown fields and harmless ones clients send (user, stream_options, metadata, store) are not.
 * out must be freed with oai_request_free, also after an error.
 */
attnd_status oai_parse(const json_t *body, bool chat, const server_settings *cfg, int n_vocab, oai_request *out,
                       const char **param, attnd_err *err);
void oai_request_free(oai_request *r);

/*
 * After oai_parse, what the server's chat template changes (chat only; a no-op otherwise): a
 * template that shows tools (takes_tools, chat.h) gets the request's tools (OpenAI's shape) and
 * its messages as sent, tool_calls and role "tool" included, and the forcing grammar writes the
 * call format f its model was taught; other templates keep fmsgs, the Hermes description.
 * The grammar becomes lazy (grammar.h): a reasoning block (<think>…</think>) at the start of the
 * answer is never constrained (JSON formats and calls; a GBNF "grammar" applies as given), and
 * tool_choice auto gets the call grammar, switched on where the format's opening text appears.
 * A format whose calls end reasoning (think_to_call) also starts a call grammar (auto or forced)
 * at a call opened inside the reasoning block (grammar_lazy's skip_break).
 * Errors: ATTND_ERR_NOMEM.
 */
attnd_status oai_bind_template(oai_request *r, bool takes_tools, toolcall_format f, attnd_err *err);
/* The rendered prompt ended inside a reasoning block (chat_request.opens_reasoning): the reply
 * starts as reasoning (r->open_reasoning, for the output parser), and a lazy grammar that skips
 * a leading reasoning block begins inside it, so it constrains only after "</think>". Before the
 * grammar is shared with a job. Errors: ATTND_ERR_NOMEM. */
attnd_status oai_open_reasoning(oai_request *r, attnd_err *err);
/* How a chat reply to r is read (toolcall_parser_open): calls parsed when r has tools and
 * tool_choice is not none, r's tools (borrowed from r), id_base (borrowed; NULL = random call
 * ids), starting inside reasoning (open_reasoning) and ending it at a call (think_to_call) as
 * oai_open_reasoning and oai_bind_template found. Every API's reply goes through this. */
toolcall_reading oai_reply_reading(const oai_request *r, const char *id_base);
/* The template's input for r's messages (pointers borrowed from r), add_generation_prompt on. */
void oai_chat_input(const oai_request *r, chat_request *out);

/*
 * The prompts of a /v1/completions "prompt" field, which OpenAI lets be a string, an array of
 * token ids, or an array of strings or of token-id arrays (one completion per prompt, in order).
 * At most max_prompts. *out (n_out entries) must be freed with oai_prompts_free; its texts are
 * borrowed from `prompt`. Errors: ATTND_ERR_INVALID naming the offending element, ATTND_ERR_NOMEM.
 */
attnd_status oai_parse_prompts(const json_t *prompt, int n_vocab, int max_prompts, oai_prompt **out, int *n_out,
                               attnd_err *err);
void oai_prompts_free(oai_prompt *ps, int n); /* accepts NULL */

/* {"error": {"message", "type", "param", "code"}} (new reference). type follows the status:
 * 400/404/405/409/413 invalid_request_error (404 not_found_error), 401 authentication_error,
 * 403/421 permission_error, 429 rate_limit_error, 503 unavailable_error, else server_error. param may be NULL. */
json_t *oai_error(int http_status, const char *message, const char *param);
const char *oai_error_type(int http_status);
/* The same with OpenAI's own type and code where it has one (NULL = the status's defaults). */
json_t *oai_error_coded(int http_status, const char *type, const char *code, const char *message,
                        const char *param);
/* 400 context_length_exceeded: the prompt (n_prompt tokens) plus n_reserved tokens for the
 * completion do not fit n_ctx; the numbers are in the message (clients parse them to trim). */
json_t *oai_error_context_length(long long n_prompt, int n_ctx, int n_reserved, const char *param);
/* 404 model_not_found for a model id this server does not serve (param "model"). */
json_t *oai_error_model_not_found(const char *id);

/* A JSON string for bytes that may be invalid UTF-8: invalid sequences become U+FFFD
 * (new reference). */
json_t *oai_string(const char *p, size_t n);

#endif
