/*
 * ollama.h — Ollama's API (POST /api/chat, /api/generate) as pure functions: a request body
 * becomes the chat or completion body attnd runs, and a generation becomes Ollama's answer, whole
 * or as NDJSON lines (one JSON object per line, the last with "done": true and the timings). No
 * model, no HTTP.
 *
 * The request is translated, as anthropic.h's is: oai_parse validates what it becomes.
 *   /api/chat messages (system, user, assistant with thinking and tool_calls, tool with
 *   tool_name)                                 → chat messages (images: a 400);
 *   /api/generate prompt + system              → a chat of one turn; raw: true → the prompt as it
 *                                                stands (a completion); images are refused;
 *   /api/generate template (not raw)           → Ollama's Go template, the subset of gotmpl.h,
 *                                                filled with system and prompt (with a suffix:
 *                                                prompt and suffix): the text runs as a
 *                                                completion; what gotmpl.h does not render is a
 *                                                400 naming the action;
 *   /api/generate prompt + suffix              → fill-in-the-middle, as Ollama fills its model's
 *                                                template with only .Prompt and .Suffix: the FIM
 *                                                layout of /infill (infill.h) with the prompt as
 *                                                the prefix, a completion of token ids
 *                                                (ollama_fim_prompt); system is ignored; raw: true
 *                                                → the prompt as it stands, the suffix ignored
 *                                                (Ollama's); either way the model must have FIM
 *                                                tokens (Ollama's "insert" capability);
 *   options num_predict, temperature, top_k, top_p, min_p, typical_p, repeat_penalty,
 *   repeat_last_n, presence_penalty, frequency_penalty, seed, stop
 *                                              → the same sampling fields (num_predict ≤ 0 and
 *                                                above max_tokens_cap: the server's limit); num_ctx
 *                                                and the other load options are accepted and ignored;
 *   format "json" / a JSON schema              → response_format json_object / json_schema;
 *   tools                                      → tools (OpenAI's shape already);
 *   think (bool or "low" / "medium" / "high")  → chat_template_kwargs.enable_thinking;
 *   keep_alive                                 → accepted (the model stays loaded).
 * The reply goes through the tool-call parser (toolcall.h): reasoning becomes "thinking", calls
 * message.tool_calls [{"id", "function": {"index", "name", "arguments": {...}}}].
 */
#ifndef ATTND_SERVER_OLLAMA_H
#define ATTND_SERVER_OLLAMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "attnd/buf.h"
#include "attnd/common.h"
#include "attnd/tokenizer.h"
#include "settings.h"
#include "toolcall.h"

/* The Ollama API version /api/version reports: the one whose shapes these follow. */
#define OLLAMA_API_VERSION "0.14.0"

typedef struct ollama_request {
    json_t *body;        /* (owned) the chat (chat) or completion body that runs the request */
    bool chat;           /* through the chat template (everything but raw generate) */
    bool stream;         /* Ollama's default: true */
    bool load_only;      /* /api/generate without a prompt: load the model, generate nothing */
    const char *model;   /* borrowed from the body */
    const char *suffix;  /* /api/generate's suffix when not empty, borrowed: the model must have
                            FIM tokens (ollama_fim_prompt checks) */
    bool fim;            /* the body's prompt is the prefix (text) until ollama_fim_prompt lays it
                            out: a suffix without raw */
} ollama_request;

/* True when an Ollama client's model name means the served model's id: with or without
 * ":latest". */
bool ollama_model_matches(const char *served, const char *name);

/* Validates an /api/chat (chat_api) or /api/generate body. On error *param names the field and
 * the status is ATTND_ERR_INVALID. out must be freed with ollama_request_free. */
attnd_status ollama_parse(const json_t *body, bool chat_api, const server_settings *cfg, ollama_request *out,
                          const char **param, attnd_err *err);
void ollama_request_free(ollama_request *r); /* accepts NULL */

/* For a request with a suffix (r->suffix): refuses a tok without FIM tokens, and when r->fim
 * (and not load_only) makes the body's prompt the FIM layout (infill_prompt_ids) of the prefix
 * and r->suffix, for a context of n_ctx tokens and the body's max_tokens, else
 * default_max_tokens. A request without a suffix is left as it is. Errors:
 * ATTND_ERR_UNSUPPORTED (the message names the missing tokens), ATTND_ERR_NOMEM, a tokenizer's. */
attnd_status ollama_fim_prompt(ollama_request *r, const tokenizer *tok, int n_ctx, int default_max_tokens,
                               attnd_err *err);

/* The answer's fields beside the reply. */
typedef struct ollama_result {
    const char *model;
    const char *created_at;   /* RFC 3339, UTC */
    const char *done_reason;  /* "stop", "length", "load"; NULL while running */
    int prompt_eval_count, eval_count;
    long long total_ns, load_ns, prompt_ns, eval_ns;
} ollama_result;

/* A reply as it streams. */
typedef struct ollama_stream {
    struct toolcall_parser *tp; /* owned; NULL for raw text (nothing split) */
    bool chat_api;
    buf content, thinking;      /* the whole reply so far */
    json_t *calls;              /* the calls so far, Ollama's shape (owned) */
    json_t *open_call;          /* a call whose arguments are still to come (owned) */
    char tail[4];               /* raw text: a UTF-8 sequence cut at a piece's end, held back */
    int n_tail;
} ollama_stream;

/* chat_api: /api/chat lines (message), else /api/generate (response). how: the reply goes
 * through the parser, read as how says (toolcall_parser_open; how->tools borrowed, must outlive
 * st); NULL: raw text, nothing split. false: out of memory. */
bool ollama_stream_init(ollama_stream *st, bool chat_api, const toolcall_reading *how);
void ollama_stream_free(ollama_stream *st); /* accepts a stream that never began */
/* The NDJSON line for the next piece of the reply (nothing while the parser holds text back). */
void ollama_stream_delta(ollama_stream *st, const ollama_result *res, const char *text, size_t n, buf *out);
/* What the parser held back, then the done line. */
void ollama_stream_end(ollama_stream *st, const ollama_result *res, buf *out);
/* A line that says nothing new (an empty piece), for a stream that waits. */
void ollama_stream_idle(const ollama_stream *st, const ollama_result *res, buf *out);
/* The whole answer for the reply text[n], chat_api and how as ollama_stream_init (new reference;
 * NULL when out of memory). */
json_t *ollama_answer(const ollama_result *res, const char *text, size_t n, bool chat_api,
                      const toolcall_reading *how);

#endif
