/*
 * responses.h — OpenAI's Responses API (POST /v1/responses) for text, as pure functions: a request
 * body becomes the chat request attnd runs (instructions + earlier turns + input as chat
 * messages), and a generation becomes the Response object or its stream of semantic events. No
 * model, no HTTP, no store: the endpoint looks up previous_response_id itself and hands its
 * conversation in.
 *
 * What is not text generation (other tool types, the `reasoning` settings, images and files,
 * background runs) is refused with ATTND_ERR_INVALID and *param naming the field, never silently
 * ignored.
 *
 * The reply goes through the tool-call parser (toolcall.h) and becomes output items in the
 * order they appear: a `reasoning` item for the text inside the template's reasoning markers
 * ({"type": "reasoning", "id": "rs_…", "summary": [], "content": [{"type": "reasoning_text",
 * "text"}], "status"}), the assistant `message` with the rest of the text, and with tools a
 * `function_call` item per call. A reply without calls always has its message.
 *
 * Streaming: every event is an SSE frame "event: <type>\ndata: <json>\n\n" whose JSON carries
 * "type" and an increasing "sequence_number". The order is response.created,
 * response.in_progress, then for each item as it appears response.output_item.added and:
 *   message:       response.content_part.added, response.output_text.delta (one per piece of
 *                  text), response.output_text.done, response.content_part.done;
 *   reasoning:     response.content_part.added (a reasoning_text part),
 *                  response.reasoning_text.delta …, response.reasoning_text.done,
 *                  response.content_part.done;
 *   function_call: response.function_call_arguments.delta …, response.function_call_arguments.done;
 * then its response.output_item.done (a reasoning item or call closes when the next item
 * starts, the message at the end), and last response.completed (or response.incomplete when
 * max_output_tokens, a cancellation or the server's shutdown cut the text short). The items,
 * their ids and output_index are those of the final Response object, which is built by the
 * same code over the whole reply.
 */
#ifndef ATTND_SERVER_RESPONSES_H
#define ATTND_SERVER_RESPONSES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "attnd/common.h"
#include "settings.h"

typedef struct responses_request {
    json_t *input;            /* (owned) this turn's messages: [{"role", "content": string}, ...] */
    const char *instructions; /* borrowed from the body; NULL = none */
    const char *previous_id;  /* borrowed; NULL = a new conversation */
    bool store;               /* keep the response for GET and follow-ups (OpenAI's default: true) */
    bool stream;
    int max_output_tokens;    /* -1 = not given */
    json_t *sampling;         /* (owned) the body's sampling fields, as a chat completion body */
    json_t *metadata;         /* (owned) echoed back; an object, possibly empty */
    const char *user;         /* borrowed; NULL = none */
    bool tools;               /* function tools that may be called: the reply becomes
                                 function_call items (toolcall.h) */
} responses_request;

/*
 * Validates a /v1/responses body. max_output_tokens is checked against cfg->max_tokens_cap. On
 * error *param names the field (e.g. "tools", "input[1].content[0]"). out is always initialised
 * and must be freed with responses_request_free. The borrowed strings live as long as body.
 */
attnd_status responses_parse(const json_t *body, const server_settings *cfg, responses_request *out,
                             const char **param, attnd_err *err);
void responses_request_free(responses_request *r); /* accepts NULL */

/*
 * The chat completion body that runs this turn (new reference): r->sampling plus "messages" =
 * instructions as a system message, then the earlier conversation (borrowed array of
 * {"role", "content"} with the assistant's replies, or NULL), then r->input; "max_tokens" from
 * max_output_tokens. Instructions of earlier turns are not carried over (as in OpenAI's API).
 * NULL when out of memory.
 */
json_t *responses_chat_body(const responses_request *r, const json_t *earlier);

/* A finished or running generation as the Response object reports it. */
typedef struct responses_result {
    const char *id;           /* "resp_..." */
    const char *msg_id;       /* "msg_..." id of the output message */
    const char *model;
    long long created_at;     /* Unix seconds */
    const char *status;       /* "in_progress", "completed", "incomplete" or "failed" */
    const char *text;         /* (text_len) the reply so far */
    size_t text_len;
    bool cut_short;           /* max_output_tokens (or the context) ended the reply */
    int input_tokens, cached_tokens, output_tokens;
    int reasoning_tokens;     /* of output_tokens, those that were reasoning (reasoning.h) */
    const responses_request *req; /* echoed fields: instructions, previous_id, store, ... */
    double temperature, top_p;
    bool open_reasoning;      /* the prompt ended inside a reasoning block (an open <think>): the
                                 reply starts as reasoning */
    bool think_to_call;       /* a <tool_call> also ends reasoning (toolcall_parser_end_think_at_call) */
} responses_result;

/* The conversation to store for follow-ups (new reference): earlier + res->req->input + the
 * reply as an assistant message split as the output items are: "content", "reasoning_content"
 * when there is reasoning (a template that renders it gets it back), "tool_calls" with the
 * calls' ids. NULL when out of memory. */
json_t *responses_conversation(const responses_result *res, const json_t *earlier);

/* The Response object (new reference). */
json_t *responses_object(const responses_result *res);
/* {"id", "object": "response.deleted", "deleted": true} (new reference). */
json_t *responses_deleted(const char *id);

/* The event stream of one response: sequence numbers and the output items so far. */
typedef struct responses_stream {
    int seq;                  /* next sequence_number */
    struct toolcall_parser *tp; /* the reply's parser (owned; NULL until begin) */
    json_t *items;            /* the output items so far, by output_index (owned) */
    int n_items;              /* output items opened */
    int msg_index;            /* the message's output_index; -1 = not opened */
    bool msg_closed, ended;
    int rs_index;             /* the open reasoning item's output_index; -1 = none */
    int n_rs;                 /* reasoning items opened */
    char rs_id[72];
    json_t *rs_text;          /* the open reasoning item's text so far (a string, owned) */
    int call_index;           /* the open call's output_index; -1 = none */
    int n_calls;
    char call_item[96], call_id[80], call_name[400]; /* the name, U+FFFD for each stray byte */
    json_t *call_args;        /* the open call's arguments so far (a string, owned) */
} responses_stream;
/* Frees what the stream holds (not st); accepts a stream that never began. */
void responses_stream_free(responses_stream *st);

/* SSE frames response.created and response.in_progress (malloc'd string, NULL when out of
 * memory). res->status should be "in_progress". */
char *responses_stream_begin(responses_stream *st, const responses_result *res);
/* The frames for the next piece of the reply, text[0..n): deltas, and items opening and closing
 * (malloc'd, "" when the parser holds the text back; NULL when out of memory). */
char *responses_stream_delta(responses_stream *st, const responses_result *res, const char *text, size_t n);
/* The closing frames: what the parser held back, the open items' .done events, then
 * response.completed / .incomplete. */
char *responses_stream_end(responses_stream *st, const responses_result *res);
/* The closing frame of a generation that failed: response.failed, whose response has status
 * "failed" and error {"code": "server_error", "message"}. */
char *responses_stream_failed(responses_stream *st, const responses_result *res, const char *message);

#endif
