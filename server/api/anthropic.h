/*
 * anthropic.h — Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) as pure
 * functions: a request body becomes the chat completion body attnd runs, and a generation becomes
 * the Message object or its stream of events. No model, no HTTP.
 *
 * The request is translated, not reimplemented: oai_parse validates the chat body it becomes, so
 * sampling, stops, tools and their grammars follow one set of rules. The translation:
 *   system (a string or text blocks)          → a system message;
 *   user text blocks                          → user messages;
 *   tool_result (text or text blocks)         → role "tool" messages (is_error: "Error: " first);
 *   assistant text / thinking / tool_use      → content / reasoning_content / tool_calls;
 *   redacted_thinking                         → dropped (its data is opaque);
 *   image, document and other block types     → 400 naming the block;
 *   tools [{name, description, input_schema}] → function tools; tool_choice auto / any / tool /
 *   none → "auto" / "required" / named / "none"; disable_parallel_tool_use → parallel_tool_calls;
 *   max_tokens (required) above cfg->max_tokens_cap is clamped to it; stop_sequences → stop;
 *   thinking {"type": "enabled" | "disabled"} → chat_template_kwargs.enable_thinking.
 *
 * The reply goes through the tool-call parser (toolcall.h) and becomes content blocks in the
 * order they appear: thinking, text and tool_use. The whole Message is built by feeding the whole
 * reply to the same state machine the stream uses, so both agree. stop_reason is the caller's
 * natural one (end_turn, max_tokens, stop_sequence), tool_use when the reply made calls.
 *
 * Streaming: every event is an SSE frame "event: <type>\ndata: <json>\n\n": message_start, ping,
 * then per block content_block_start, content_block_delta (text_delta, thinking_delta,
 * input_json_delta with partial_json fragments of the call's arguments), content_block_stop; last
 * message_delta (stop_reason, stop_sequence, usage) and message_stop — or an error event.
 */
#ifndef ATTND_SERVER_ANTHROPIC_H
#define ATTND_SERVER_ANTHROPIC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "attnd/buf.h"
#include "attnd/common.h"
#include "settings.h"
#include "toolcall.h"

typedef struct anthropic_request {
    json_t *chat_body;   /* (owned) the chat completion body that runs the request */
    bool stream;
    bool clamped;        /* max_tokens was above the server's cap */
} anthropic_request;

/*
 * Validates a /v1/messages body (count_only: a count_tokens body, where max_tokens is not asked
 * for) into out->chat_body. On error *param names the field ("messages[1].content[0]") and the
 * status is ATTND_ERR_INVALID (ATTND_ERR_NOMEM when out of memory). out is always initialised
 * and must be freed with anthropic_request_free.
 */
attnd_status anthropic_parse(const json_t *body, const server_settings *cfg, bool count_only, anthropic_request *out,
                             const char **param, attnd_err *err);
void anthropic_request_free(anthropic_request *r); /* accepts NULL */

/* How a generation went, as the Message reports it. */
typedef struct anthropic_result {
    const char *id;            /* "msg_..." */
    const char *model;
    const char *stop_reason;   /* natural: "end_turn", "max_tokens", "stop_sequence"; NULL = running */
    const char *stop_sequence; /* the stop sequence that ended it; NULL = none */
    int input_tokens;          /* prompt tokens not read from the prefix cache */
    int cache_read_tokens;     /* prompt tokens whose KV was reused */
    int output_tokens;
} anthropic_result;

/* The reply's content blocks, as a stream builds them. */
typedef struct anthropic_stream {
    struct toolcall_parser *tp; /* owned */
    json_t *blocks;       /* the content blocks so far (owned) */
    int open;             /* the open block's index; -1 = none */
    int kind;             /* the open block's kind (anthropic.c); 0 = none */
    json_t *args;         /* the open tool_use block's arguments so far (a string, owned) */
    buf blank;            /* blanks that may yet begin a text block (not sent until text follows) */
    bool ended;
} anthropic_stream;

/* Starts a reply's state: the reply is read as how says (toolcall_parser_open: calls,
 * reasoning, a call that ends reasoning; how->tools borrowed, must outlive st). false: out of
 * memory. */
bool anthropic_stream_init(anthropic_stream *st, const toolcall_reading *how);
void anthropic_stream_free(anthropic_stream *st); /* accepts a stream that never began */

/* The frames message_start and ping (appended to out). */
void anthropic_stream_begin(anthropic_stream *st, const anthropic_result *res, buf *out);
/* The frames for the next piece of the reply (nothing while the parser holds text back). */
void anthropic_stream_delta(anthropic_stream *st, const char *text, size_t n, buf *out);
/* What the parser held back, the open block's stop, message_delta and message_stop. */
void anthropic_stream_end(anthropic_stream *st, const anthropic_result *res, buf *out);
/* An error event (a failure after the stream began): {"type": "error", "error": {type, message}}. */
void anthropic_stream_error(anthropic_stream *st, int http_status, const char *message, buf *out);

/* The whole Message for the reply text[n] read as how says (new reference; NULL when out of
 * memory). */
json_t *anthropic_message(const anthropic_result *res, const char *text, size_t n, const toolcall_reading *how);

/* {"type": "error", "error": {"type", "message"}} (new reference): the type follows the status
 * as Anthropic's do (400 invalid_request_error, 401 authentication_error, 403 permission_error,
 * 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503 overloaded_error, else
 * api_error). */
json_t *anthropic_error(int http_status, const char *message);
const char *anthropic_error_type(int http_status);

#endif
