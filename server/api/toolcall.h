/*
 * toolcall.h — tool calling for chat: the tool definitions and tool_choice of a request, how
 * tools and tool history reach a model through the built-in chat families, the grammar that
 * forces a call, and the parser that splits a model's output into content, reasoning and tool
 * calls, whole or as it streams.
 *
 * The output parser recognises, wherever they start in the text:
 *   <think> … </think>                            reasoning (reasoning_content)
 *   <tool_call>{"name": …, "arguments": …}</tool_call>   Hermes / Qwen
 *   <|python_tag|>{"name": …, "parameters": …}    Llama 3.x (also ";"-separated calls)
 *   [TOOL_CALLS][{"name": …, "arguments": …}, …] Mistral
 *   <|tool_call|>[{"name": …, "arguments": …}, …] Granite (when the marker reaches the text;
 *                                                  else the array is bare JSON)
 *   <|channel|>analysis<|message|>…<|end|>        gpt-oss harmony reasoning, and
 *   <|channel|>commentary to=functions.NAME …<|message|>{…}<|call|>   its calls
 *   <tool_call><function=NAME><parameter=P>VALUE</parameter>…</function></tool_call>
 *                                                  Qwen3-Coder's and Qwen3.5's XML (newlines
 *                                                  between the tags)
 *   <tool_call>NAME<arg_key>P</arg_key><arg_value>VALUE</arg_value>…</tool_call>   GLM
 * and, when the request has tools, an answer that is only a JSON object {"name", "arguments" |
 * "parameters"} (Llama 3.x's bare JSON, the generic fallback) or an array of them. Text that
 * could still become one of these markers is held back until it is decided, so the result is
 * the same however the text is cut into chunks.
 *
 * A call is what it claims, or it is no call: its name is one of the request's tools, its
 * arguments one complete JSON object (no key twice, no raw control character, not both
 * "arguments" and "parameters"; a string of such an object is kept as written), and its block
 * is whole (its JSON balanced, its XML closed by </function>; only blanks before the block's
 * close). Anything else — a reply cut inside a call, an unknown name, broken JSON — goes out
 * as the content the model wrote and counts as rejected: the choice's finish_reason stays the
 * natural one. A call is therefore held back until it is whole and checked.
 *
 * Streamed deltas follow OpenAI's chat chunks: {"content": …}, {"reasoning_content": …}, and
 * {"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments": ""}}]}
 * followed by {"tool_calls": [{"index", "function": {"arguments": ARGS}}]}, once per call; the
 * arguments are the model's JSON text with the blanks outside strings dropped (the compact form,
 * also in the whole answer).
 *
 * Pure functions of JSON and text (no model, no HTTP). A parser belongs to one choice.
 */
#ifndef ATTND_SERVER_TOOLCALL_H
#define ATTND_SERVER_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "attnd/buf.h"
#include "attnd/common.h"

typedef enum toolcall_choice {
    TOOLCALL_AUTO = 0,   /* the model decides */
    TOOLCALL_NONE,       /* tools are described but never parsed as calls */
    TOOLCALL_REQUIRED,   /* a grammar forces at least one call */
    TOOLCALL_NAMED,      /* a grammar forces a call of `name` */
} toolcall_choice;

/* How a chat template writes a call (chat.c finds it by rendering a probe call): the format
 * the forcing grammar produces and whose opening text switches the lazy grammar on. */
typedef enum toolcall_format {
    TOOLCALL_FMT_HERMES = 0, /* <tool_call>\n{"name": …, "arguments": …}\n</tool_call> (Hermes, Qwen,
                              * and the built-in families' description) */
    TOOLCALL_FMT_LLAMA,      /* {"name": …, "parameters": …} (Llama 3.1+ JSON tool calling) */
    TOOLCALL_FMT_MISTRAL,    /* [TOOL_CALLS] then [{"name": …, "arguments": …}] (the marker is a
                              * control token: the grammar writes the array after it) */
    TOOLCALL_FMT_QWEN_XML,   /* <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n…
                              * </function>\n</tool_call> (Qwen3-Coder; found by <function= and
                              * <parameter= in the probe call) */
    TOOLCALL_FMT_HARMONY,    /* gpt-oss: <|channel|>commentary to=functions.NAME <|constrain|>json
                              * <|message|>{…}<|call|> (the markers are special tokens: the grammar
                              * names them as token terminals) */
    TOOLCALL_FMT_GRANITE,    /* Granite: <|tool_call|>[{"name": …, "arguments": …}] (the marker a
                              * special token, named by the grammar) */
    TOOLCALL_FMT_GLM,        /* GLM-4.5 / 4.6 / 4.7: <tool_call>NAME<arg_key>P</arg_key><arg_value>VALUE
                              * </arg_value>…</tool_call> (found by <arg_key> in the probe call) */
    TOOLCALL_FMT_GEMMA4,     /* Gemma 4: <|tool_call>call:NAME{key:<|"|>text<|"|>,n:3}<tool_call|> (the
                              * markers are tokens the vocabulary renders as text, so the grammar
                              * writes them as bytes; json_schema_rules_gemma4 for the arguments) */
} toolcall_format;

/* A request's tools, as validated from "tools" / "tool_choice" / "parallel_tool_calls". */
typedef struct toolcall_spec {
    json_t *tools;       /* array of {"name", "description", "parameters"} (owned; NULL = none) */
    toolcall_choice choice;
    const char *name;    /* TOOLCALL_NAMED: the function (borrowed from tools) */
    bool parallel;       /* more than one call per answer (default true) */
} toolcall_spec;

/*
 * Validates body's "tools" (chat: [{"type": "function", "function": {"name", "description",
 * "parameters"}}]; responses_shape: [{"type": "function", "name", ...}]), "tool_choice" ("auto",
 * "none", "required", or a named function in either shape) and "parallel_tool_calls". *param
 * names the offending field. out must be freed with toolcall_spec_free, also after an error.
 */
attnd_status toolcall_parse_spec(const json_t *body, bool responses_shape, toolcall_spec *out, const char **param,
                                 attnd_err *err);
void toolcall_spec_free(toolcall_spec *s);

/* The system-prompt text that describes the tools to a built-in chat family (Hermes style:
 * the tools' JSON inside <tools></tools> and the <tool_call> answer format). Appended to out.
 * The one place the request's tools become prompt text (the Jinja path replaces it). */
bool toolcall_system_prompt(const toolcall_spec *s, buf *out);
/* An assistant message's tool_calls (OpenAI's array) as the text the model would have written
 * (<tool_call>…</tool_call> lines), and a tool result as the user-side <tool_response> text. */
attnd_status toolcall_render_calls(const json_t *tool_calls, buf *out, attnd_err *err);
bool toolcall_render_result(const char *content, buf *out);

/* The GBNF of a call in format f (REQUIRED / AUTO: any of the tools; NAMED: that one;
 * parallel: one or more), each call's arguments under its parameters' schema. Every sentence
 * starts with toolcall_trigger(f), so the same grammar serves the lazy start of tool_choice
 * auto. Appended to out. Errors: the schema conversion's (json_schema.h), naming the tool. */
attnd_status toolcall_grammar(const toolcall_spec *s, toolcall_format f, buf *out, attnd_err *err);
/* Whether a tool parameter's value is written as free text rather than JSON, in the XML-like
 * call formats (Qwen3-Coder / Qwen3.5, GLM): its schema s may be a string (as llama.cpp's
 * resolves_to_string decides: type "string" or a type list with it, a oneOf / anyOf branch or
 * every allOf part that may be one, a string const or enum member, pattern / minLength /
 * maxLength, a string format, a local $ref into params' $defs / definitions to such a schema).
 * An untyped schema is JSON. depth: 0 (bounds $ref loops). */
bool toolcall_schema_is_text_at(const json_t *s, const json_t *params, int depth);
/* The text that opens a call in format f (static). */
const char *toolcall_trigger(toolcall_format f);
/* The reasoning block a model of format f may open its reply with, which a forcing grammar leaves
 * free (grammar.h's skip_open / skip_close; static): <think> … </think>, Gemma 4's <|channel> …
 * <channel|>. */
void toolcall_reasoning_markers(toolcall_format f, const char **open, const char **close);
/* Whether format f's grammar names special tokens (token terminals), so it can neither start at a
 * byte trigger (tool_choice auto leaves such calls free) nor follow a <think> probe. */
bool toolcall_format_uses_tokens(toolcall_format f);
/* Whether a model of format f may open a call inside an unclosed <think>, so that the call's
 * "<tool_call>" ends the reasoning (Qwen3.5's XML, as llama.cpp's Qwen3-Coder / Qwen3.5 parser;
 * GLM's parser ends reasoning only at </think>). */
bool toolcall_format_think_ends_at_call(toolcall_format f);

// ---- the output parser ----

typedef struct toolcall_parser toolcall_parser;
/* calls: whether tool calls are parsed (the request has tools and tool_choice is not none);
 * reasoning <think> / harmony analysis is split off either way. Errors: NOMEM (NULL). */
toolcall_parser *toolcall_parser_create(bool calls);
void toolcall_parser_destroy(toolcall_parser *p); /* accepts NULL */
/* The request's tools (borrowed, must outlive p): OpenAI's [{"type": "function", "function":
 * {"name", "parameters"}}] or the validated [{"name", "parameters"}]. A call must name one of
 * them (without tools, no call is valid). They also type the values of the XML-like calls
 * (Qwen3-Coder / Qwen3.5, GLM): a parameter whose schema may be a string
 * (toolcall_schema_is_text_at), or that the tool does not list, keeps its text verbatim (Qwen:
 * one leading and one trailing newline trimmed); any other is read as JSON, and stays the
 * string when its text is not JSON. A call's arguments are the JSON object of its parameters
 * in their order. */
void toolcall_parser_set_tools(toolcall_parser *p, const json_t *tools);
/* Call ids become "call_" base "_" index (copied, up to 47 bytes; NULL or "" = random), so that
 * two parsers of the same text name the same calls (a streamed response and its final object). */
void toolcall_parser_set_id_base(toolcall_parser *p, const char *base);
/* The output starts inside a reasoning block: the prompt ended with an open "<think>" (DeepSeek
 * R1 style templates), so the text up to "</think>" is reasoning. Before the first feed only. */
void toolcall_parser_start_in_reasoning(toolcall_parser *p);
/* A "<tool_call>" also ends a <think> block (the call is then read as usual): Qwen3.5 may open a
 * call without closing its thinking, and llama.cpp's parser for its format ends the reasoning
 * there (toolcall_format_think_ends_at_call). Before the first feed. */
void toolcall_parser_end_think_at_call(toolcall_parser *p);

/* How a chat reply is read: one setting of the parser for every API that returns one (chat
 * completions, Responses, Anthropic's Messages, Ollama's chat), so that what one of them splits
 * out of a reply (reasoning, calls) every other splits the same way. oai_reply_reading fills it
 * from a validated request. */
typedef struct toolcall_reading {
    bool calls;          /* tool calls are parsed (toolcall_parser_create) */
    const json_t *tools; /* toolcall_parser_set_tools (borrowed, must outlive the parser; NULL = none) */
    const char *id_base; /* toolcall_parser_set_id_base (NULL = random) */
    bool in_reasoning;   /* toolcall_parser_start_in_reasoning */
    bool think_to_call;  /* toolcall_parser_end_think_at_call */
} toolcall_reading;
/* A parser set up as how says (how borrowed for the call only; how->tools as set_tools). Errors:
 * NOMEM (NULL). */
toolcall_parser *toolcall_parser_open(const toolcall_reading *how);

/* Feeds text[n]; appends the deltas it can release now to deltas (a JSON array). */
void toolcall_parser_feed(toolcall_parser *p, const char *text, size_t n, json_t *deltas);
/* The end of the output: releases what was held back (an unfinished call as content). */
void toolcall_parser_finish(toolcall_parser *p, json_t *deltas);
/* After finish: the whole message's parts. content: the text outside calls and reasoning (JSON
 * null when there is none: what OpenAI's client libraries make of the stream, whose role chunk
 * says content null); reasoning (NULL when none); calls: OpenAI's tool_calls array (new
 * reference; NULL when none). */
json_t *toolcall_parser_content(const toolcall_parser *p);
json_t *toolcall_parser_reasoning(const toolcall_parser *p);
json_t *toolcall_parser_calls(const toolcall_parser *p);
int toolcall_parser_n_calls(const toolcall_parser *p);
/* Call blocks that were no valid call (their text went out as content). */
int toolcall_parser_n_rejected(const toolcall_parser *p);
/* The choice's finish_reason after finish: "tool_calls" when the natural one is "stop" and the
 * reply made calls and no rejected block; else natural (static or natural itself). */
const char *toolcall_parser_finish_reason(const toolcall_parser *p, const char *natural);

/* A whole chat choice ({"message": {...}, "finish_reason"}, changed in place) for the output
 * text[n] read as how says (toolcall_parser_open): content, reasoning_content and tool_calls
 * split out, finish_reason as toolcall_parser_finish_reason. false: out of memory (choice
 * unchanged). */
bool toolcall_apply(json_t *choice, const char *text, size_t n, const toolcall_reading *how);

#endif
