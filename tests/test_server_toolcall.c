/*
 * test_server_toolcall.c — tool calling (server/api/toolcall.c, toolcall_parse.c): recorded
 * outputs of each family's format parsed into content, reasoning and calls, the same under every
 * chunking (one byte at a time, every fixed size, random cuts), streamed deltas that reassemble
 * to the whole answer; a call that is not what it claims (the audit of issue 44: 47 hostile or
 * forced outputs, and a valid call cut at every byte in seven formats) is content, never a call,
 * and leaves the natural finish_reason; the tools / tool_choice validation; the grammar that
 * forces a call.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/gen.h"
#include "attnd/grammar.h"
#include "attnd/kv.h"
#include "attnd/model.h"
#include "engine_rig.h"
#include "family_specs.h"
#include "grammar_sentence.h"
#include "json_schema.h"
#include "toolcall.h"

typedef struct parsed {
    char content[2048], reasoning[1024], streamed_content[2048], streamed_reasoning[1024];
    char names[8][64], args[8][512], streamed_args[8][512], streamed_names[8][64];
    int n_calls, n_streamed, n_rejected;
    int n_fragments[8];  /* non-empty argument deltas per call */
    bool content_null;
} parsed;

static void collect(json_t *deltas, parsed *out) {
    for (size_t i = 0; i < json_array_size(deltas); i++) {
        json_t *d = json_array_get(deltas, i), *v;
        if ((v = json_object_get(d, "content"))) strcat(out->streamed_content, json_string_value(v));
        if ((v = json_object_get(d, "reasoning_content"))) strcat(out->streamed_reasoning, json_string_value(v));
        json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        if (!tc) continue;
        int idx = (int)json_integer_value(json_object_get(tc, "index"));
        cr_assert(idx >= 0 && idx < 8);
        json_t *f = json_object_get(tc, "function"), *name = json_object_get(f, "name");
        if (name) {
            cr_assert_str_eq(json_string_value(json_object_get(tc, "type")), "function");
            cr_assert(json_is_string(json_object_get(tc, "id")), "the first delta of a call has its id");
            strcpy(out->streamed_names[idx], json_string_value(name));
            if (idx + 1 > out->n_streamed) out->n_streamed = idx + 1;
        }
        const char *frag = json_string_value(json_object_get(f, "arguments"));
        out->n_fragments[idx] += frag[0] != '\0';
        strcat(out->streamed_args[idx], frag);
    }
}

/* The tools of most tests: every name they call (none has a schema, so XML values are text). */
static const char DEFAULT_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}, {\"name\": \"get_time\"}, {\"name\": \"f\"}, "
    "{\"name\": \"search\"}, {\"name\": \"open\"}, {\"name\": \"a\"}, {\"name\": \"b\"}, {\"name\": \"ping\"}]";

static bool start_open = false;     /* the prompt ended with an open <think> */
static bool think_to_call = false;  /* a <tool_call> also ends reasoning (Qwen3.5's format) */
static const json_t *run_tools;     /* the request's tools; NULL = DEFAULT_TOOLS */
static bool no_tools = false;       /* the parser gets no tools at all */

static const json_t *default_tools(void) {
    static json_t *t;
    if (!t) t = json_loads(DEFAULT_TOOLS, 0, NULL);
    cr_assert(t);
    return t;
}

/* Whether name is one of tools (either shape). */
static bool tool_named(const json_t *tools, const char *name) {
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i), *f = json_object_get(t, "function");
        if (!strcmp(json_string_value(json_object_get(f ? f : t, "name")), name)) return true;
    }
    return false;
}

/* Parses text fed in pieces: cut[i] marks where chunks end (NULL: in `size`-byte chunks). */
static void run(const char *text, bool calls, size_t size, unsigned seed, parsed *out) {
    memset(out, 0, sizeof(*out));
    toolcall_parser *p = toolcall_parser_create(calls);
    cr_assert(p);
    if (start_open) toolcall_parser_start_in_reasoning(p);
    if (think_to_call) toolcall_parser_end_think_at_call(p);
    const json_t *tools = no_tools ? NULL : run_tools ? run_tools : default_tools();
    toolcall_parser_set_tools(p, tools);
    json_t *deltas = json_array();
    size_t n = strlen(text), i = 0;
    unsigned x = seed;
    while (i < n) {
        size_t k = size;
        if (seed) x = x * 1103515245u + 12345u, k = 1 + (x >> 16) % 9;
        if (k > n - i) k = n - i;
        toolcall_parser_feed(p, text + i, k, deltas);
        i += k;
    }
    toolcall_parser_finish(p, deltas);
    collect(deltas, out);
    json_decref(deltas);
    json_t *c = toolcall_parser_content(p), *r = toolcall_parser_reasoning(p), *tc = toolcall_parser_calls(p);
    cr_assert(json_is_null(c) || json_string_length(c) > 0, "content is text or null, never \"\"");
    out->content_null = json_is_null(c);
    if (json_is_string(c)) strcpy(out->content, json_string_value(c));
    if (r) strcpy(out->reasoning, json_string_value(r));
    out->n_calls = toolcall_parser_n_calls(p);
    out->n_rejected = toolcall_parser_n_rejected(p);
    for (int k = 0; k < out->n_calls; k++) {
        json_t *f = json_object_get(json_array_get(tc, (size_t)k), "function");
        strcpy(out->names[k], json_string_value(json_object_get(f, "name")));
        strcpy(out->args[k], json_string_value(json_object_get(f, "arguments")));
        cr_assert(strncmp(json_string_value(json_object_get(json_array_get(tc, (size_t)k), "id")), "call_", 5) == 0);
    }
    json_decref(c), json_decref(r), json_decref(tc);
    toolcall_parser_destroy(p);
    /* the stream says what the whole answer says */
    cr_assert_str_eq(out->streamed_content, out->content, "streamed content");
    cr_assert_str_eq(out->streamed_reasoning, out->reasoning, "streamed reasoning");
    cr_assert_eq(out->n_streamed, out->n_calls);
    for (int k = 0; k < out->n_calls; k++) {
        cr_assert_str_eq(out->streamed_names[k], out->names[k]);
        cr_assert_str_eq(out->streamed_args[k], out->args[k]);
        /* every call is what it claims: a tool's name, one JSON object read strictly */
        cr_assert(tool_named(tools, out->names[k]), "call %d names a tool: %s", k, out->names[k]);
        json_t *j = json_loads(out->args[k], JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, NULL);
        cr_assert(json_is_object(j), "call %d's arguments are one JSON object: %s", k, out->args[k]);
        json_decref(j);
        cr_assert_leq(out->n_fragments[k], 1, "a call's arguments come in one piece, once checked");
    }
}

/* The whole answer, then the same under every chunking. */
static parsed *check_all_chunkings(const char *text, bool calls) {
    static parsed whole, other;
    run(text, calls, 1 << 20, 0, &whole);
    for (size_t size = 1; size <= 13; size++) {
        run(text, calls, size, 0, &other);
        cr_assert_str_eq(other.content, whole.content, "chunks of %zu", size);
        cr_assert_eq(other.content_null, whole.content_null, "chunks of %zu", size);
        cr_assert_str_eq(other.reasoning, whole.reasoning, "chunks of %zu", size);
        cr_assert_eq(other.n_calls, whole.n_calls, "chunks of %zu", size);
        cr_assert_eq(other.n_rejected, whole.n_rejected, "chunks of %zu", size);
        for (int k = 0; k < whole.n_calls; k++) cr_assert_str_eq(other.args[k], whole.args[k]);
    }
    for (unsigned seed = 1; seed <= 40; seed++) {
        run(text, calls, 0, seed, &other);
        cr_assert_str_eq(other.content, whole.content, "random cut %u", seed);
        cr_assert_eq(other.n_calls, whole.n_calls, "random cut %u", seed);
    }
    return &whole;
}

Test(toolcall, hermes_calls_with_text_before_them) {
    parsed *p = check_all_chunkings("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                    "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
                                    "\"arguments\": {\"tz\": \"CET\"}}\n</tool_call>", true);
    cr_assert_eq(p->n_calls, 2);
    cr_assert_str_eq(p->names[0], "get_weather");
    cr_assert_str_eq(p->args[0], "{\"city\":\"Paris\",\"unit\":\"c\"}");
    cr_assert_str_eq(p->names[1], "get_time");
    cr_assert_str_eq(p->content, "Let me check.\n\n");
}

/* A call goes out once it is whole and checked: fed a byte at a time, its head and its
 * arguments (compact, as the model wrote them) come in one delta each, after the last byte of
 * its JSON; nothing of it goes out before. */
Test(toolcall, a_call_goes_out_whole_once_checked) {
    static const char TEXT[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"S\u00e3o "
                               "Paulo\", \"days\": [1, 2], \"big\": 123456789012345678901234567890, \"r\": 1.50}}\n</tool_call>";
    parsed *p = check_all_chunkings(TEXT, true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->args[0], "{\"city\":\"S\u00e3o Paulo\",\"days\":[1,2],\"big\":123456789012345678901234567890,"
                                 "\"r\":1.50}", "numbers as written, never re-encoded");
    parsed bytes;
    run(TEXT, true, 1, 0, &bytes);
    cr_assert_eq(bytes.n_fragments[0], 1, "one fragment");
    toolcall_parser *tp = toolcall_parser_create(true);
    toolcall_parser_set_tools(tp, default_tools());
    json_t *deltas = json_array();
    const char *head = "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"ab\"}";
    toolcall_parser_feed(tp, head, strlen(head), deltas);
    cr_assert_eq(json_array_size(deltas), 0, "nothing of an unfinished call");
    toolcall_parser_feed(tp, "}", 1, deltas);
    cr_assert_eq(json_array_size(deltas), 0, "a close may still come: the block is not decided");
    toolcall_parser_feed(tp, "</tool_call>", 12, deltas);
    cr_assert_eq(json_array_size(deltas), 2, "the call's head and its arguments");
    json_t *f = json_object_get(json_array_get(json_object_get(json_array_get(deltas, 1), "tool_calls"), 0), "function");
    cr_assert_str_eq(json_string_value(json_object_get(f, "arguments")), "{\"q\":\"ab\"}");
    toolcall_parser_destroy(tp);
    json_decref(deltas);
}

/* Multi-byte characters in a call's strings arrive whole; bytes that are no JSON (a stray
 * character outside a string) make the block text. Found by fuzz_toolcall. */
Test(toolcall, characters_of_the_arguments_stay_whole_and_broken_bytes_are_text) {
    parsed *p = check_all_chunkings("<tool_call>{\"name\": \"f\", \"arguments\": {\"b\": \"\xe2\x82\xac<\xf0\x9f\x98\x80</x\"}}"
                                    "</tool_call>", true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->args[0], "{\"b\":\"\xe2\x82\xac<\xf0\x9f\x98\x80</x\"}");
    p = check_all_chunkings("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1\xf3 \xa6\xa6\xa6}}</tool_call>", true);
    cr_assert_eq(p->n_calls, 0);
    cr_assert_eq(p->n_rejected, 1);
    p = check_all_chunkings("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1\xc3 ", true);
    cr_assert_eq(p->n_calls, 0, "cut inside a character: no call");
    cr_assert_str_eq(p->content, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1\xef\xbf\xbd ",
                     "the text, its unfinished character U+FFFD");
}

/* A call cut short (max_tokens, a </tool_call> inside its JSON) is no call: the text as the
 * model wrote it is content, and the text after a close that cut it is parsed on. */
Test(toolcall, a_call_whose_json_is_broken_is_content) {
    parsed *p = check_all_chunkings("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": </tool_call> done", true);
    cr_assert_eq(p->n_calls, 0);
    cr_assert_eq(p->n_rejected, 1);
    cr_assert_str_eq(p->content, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": </tool_call> done");
    p = check_all_chunkings("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, ", true);
    cr_assert_eq(p->n_calls, 0, "the length ran out");
    cr_assert_str_eq(p->content, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, ");
    p = check_all_chunkings("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"</tool_call>\"}}</tool_call>", true);
    cr_assert_eq(p->n_calls, 1, "a close inside a string is the string's");
    cr_assert_str_eq(p->args[0], "{\"a\":\"</tool_call>\"}");
    p = check_all_chunkings("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": </tool_call><tool_call>{\"name\": \"ping\"}"
                            "</tool_call>", true);
    cr_assert_eq(p->n_calls, 1, "a call after a cut one is still read");
    cr_assert_str_eq(p->names[0], "ping");
    cr_assert_str_eq(p->args[0], "{}", "no arguments: an empty object");
    cr_assert_eq(p->n_rejected, 1);
    p = check_all_chunkings("<tool_call>{\"nam\": \"f\"}</tool_call> done", true);
    cr_assert_eq(p->n_calls, 0);
    cr_assert_str_eq(p->content, "<tool_call>{\"nam\": \"f\"}</tool_call> done");
}

Test(toolcall, llama3_python_tag_and_bare_json) {
    parsed *p = check_all_chunkings("<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a}b\"}}; "
                                    "{\"name\": \"open\", \"parameters\": {\"id\": 3}}", true);
    cr_assert_eq(p->n_calls, 2);
    cr_assert_str_eq(p->args[0], "{\"q\":\"a}b\"}");
    cr_assert_str_eq(p->names[1], "open");
    p = check_all_chunkings("  {\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}", true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert(p->content_null, "a call alone: content is null");
    p = check_all_chunkings("{\"answer\": 42}", true);
    cr_assert_eq(p->n_calls, 0, "JSON that is not a call is content");
    cr_assert_eq(p->n_rejected, 0, "and no rejected call");
    cr_assert_str_eq(p->content, "{\"answer\": 42}");
    p = check_all_chunkings("{\"name\": \"search\", \"parameters\": {}}", false);
    cr_assert_eq(p->n_calls, 0, "without tools nothing is a call");
}

Test(toolcall, mistral_tool_calls_array) {
    parsed *p = check_all_chunkings("[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": [1, 2]}}, {\"name\": \"b\", "
                                    "\"arguments\": \"{\\\"y\\\": true}\"}]", true);
    cr_assert_eq(p->n_calls, 2);
    cr_assert_str_eq(p->args[0], "{\"x\":[1,2]}");
    cr_assert_str_eq(p->args[1], "{\"y\": true}", "string arguments are kept as written");
}

Test(toolcall, harmony_analysis_and_commentary_call) {
    parsed *p = check_all_chunkings("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
                                    "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}"
                                    "<|call|>", true);
    cr_assert_str_eq(p->reasoning, "Need the weather.");
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->names[0], "get_weather");
    cr_assert_str_eq(p->args[0], "{\"city\":\"Oslo\"}");
    p = check_all_chunkings("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
                            false);
    cr_assert_str_eq(p->reasoning, "think");
    cr_assert_str_eq(p->content, "Hi!");
}

/* A function name that is not valid UTF-8 (the model wrote stray bytes) is no tool's: that call
 * is content (its bytes U+FFFD), and the call before it keeps its own arguments. Found by
 * fuzz_toolcall. */
Test(toolcall, a_name_of_invalid_utf8_is_no_call) {
    parsed *p = check_all_chunkings("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":0}<|call|>"
                                    "<|start|>assistant<|channel|>commentary to=functions.\x8bg <|constrain|>json"
                                    "<|message|>{\"b\":1}<|call|>", true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->names[0], "f");
    cr_assert_str_eq(p->args[0], "{\"a\":0}");
    cr_assert_str_eq(p->content, "<|channel|>commentary to=functions.\xef\xbf\xbdg <|constrain|>json<|message|>{\"b\":1}"
                                 "<|call|>");
    cr_assert_eq(p->n_rejected, 1);
}

Test(toolcall, think_blocks_become_reasoning_content) {
    parsed *p = check_all_chunkings("<think>\nThe user wants JSON.\n</think>\n\n{\"a\": 1}", false);
    cr_assert_str_eq(p->reasoning, "\nThe user wants JSON.\n");
    cr_assert_str_eq(p->content, "{\"a\": 1}", "the blank lines after reasoning are dropped");
    p = check_all_chunkings("<think>hmm</think><tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>", true);
    cr_assert_str_eq(p->reasoning, "hmm");
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->args[0], "{}");
    p = check_all_chunkings("a < b and <thin ice>, [TOOL_CALL", true);
    cr_assert_str_eq(p->content, "a < b and <thin ice>, [TOOL_CALL", "marker prefixes that never complete are text");
    p = check_all_chunkings("<think>never closed", false);
    cr_assert_str_eq(p->reasoning, "never closed");
    cr_assert(p->content_null, "no text: content null, whole and streamed alike");
}

/* A DeepSeek-R1 style prompt ends with "<think>\n": the reply is reasoning up to </think>, and
 * what follows is parsed as usual (a call, or a later think block). */
Test(toolcall, an_open_think_in_the_prompt_starts_the_reply_as_reasoning) {
    start_open = true;
    parsed *p = check_all_chunkings("The user wants Paris.\n</think>\n\n<tool_call>{\"name\": \"f\", \"arguments\": "
                                    "{\"city\": \"Paris\"}}</tool_call>", true);
    cr_assert_str_eq(p->reasoning, "The user wants Paris.\n");
    cr_assert(p->content_null, "no text besides the call");
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->args[0], "{\"city\":\"Paris\"}");
    p = check_all_chunkings("a <b> c</think>Answer: <think>x</think>4", false);
    cr_assert_str_eq(p->reasoning, "a <b> cx");
    cr_assert_str_eq(p->content, "Answer: 4");
    p = check_all_chunkings("cut off mid-thought", false);
    cr_assert_str_eq(p->reasoning, "cut off mid-thought");
    cr_assert(p->content_null, "an unclosed think: content null, as the stream's role chunk says");
    start_open = false;
    p = check_all_chunkings("a <b> c</think>Answer", false);
    cr_assert_str_eq(p->content, "a <b> c</think>Answer", "without the open think, a stray close is text");

    /* toolcall_apply takes the same start */
    json_t *choice = json_pack("{s:{s:s},s:s}", "message", "role", "assistant", "finish_reason", "stop");
    cr_assert(toolcall_apply(choice, "hmm</think>Hi", 13, &(toolcall_reading){.in_reasoning = true}));
    json_t *msg = json_object_get(choice, "message");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "reasoning_content")), "hmm");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "content")), "Hi");
    json_decref(choice);
}

// ---- hostile and forced outputs: a call is what it claims, or content -------------------------

/* The tools of the hostile battery: a function with a schema and one without. */
static const char HOSTILE_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"ping\"}}]";

/* Outputs a model forced through `grammar` or tool_choice auto was seen to write (the audit of
 * issue 44) and their kin: none is a valid call, so each is content as written, with no call and
 * one rejected block (the choice keeps its natural finish_reason). */
static const char *const HOSTILE[] = {
    /* names not among the tools */
    "<tool_call>\n{\"name\": \"rm_rf_root\", \"arguments\": {}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"rm -rf /\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\\\"\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"ping \", \"arguments\": {}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"PING\", \"arguments\": {}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"p\xd1\x96ng\", \"arguments\": {}}\n</tool_call>", /* a Cyrillic i */
    "<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>",
    "<tool_call>\n{\"name\": 5, \"arguments\": {}}\n</tool_call>",
    "<tool_call>\n{\"function\": {\"name\": \"ping\"}, \"arguments\": {}}\n</tool_call>",
    /* a key twice: which one would run? */
    "<tool_call>\n{\"name\": \"ping\", \"name\": \"rm_rf_root\", \"arguments\": {}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"rm_rf_root\", \"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"city\": \"b\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}, \"parameters\": {\"x\": 1}}\n</tool_call>",
    /* arguments that are not one JSON object */
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\x01" "b\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\x1f\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\\u0000b\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"\\ud800\"}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [\"Rome\", 3]}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": 5}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"Rome\"}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Ro\"}\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\",}}\n</tool_call>",
    "<tool_call>\n{'name': 'ping', 'arguments': {}}\n</tool_call>",
    /* unbalanced, nested wrongly, or more than the call in the block */
    "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"a\": {\"b\": [}}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"a\": [1, 2}]}\n</tool_call>",
    "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}}\n</tool_call>",
    "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}} and then\n</tool_call>",
    "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"a\": </tool_call>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ro",
    "<tool_call>\nI will call ping now\n</tool_call>",
    "<tool_call>",
    /* the other formats */
    "<tool_call>\n[{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"exec\", \"arguments\": {}}]\n</tool_call>",
    "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"exec\", \"arguments\": {}}]",
    "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {\"a\": 1, \"a\": 2}}]",
    "[TOOL_CALLS]",
    "<|python_tag|>{\"name\": \"exec\", \"parameters\": {\"cmd\": \"id\"}}",
    "<|python_tag|>{\"name\": \"ping\", \"parameters\": {\"x\": \"\x01\"}}",
    "<|tool_call|>[{\"name\": \"rm_rf_root\", \"arguments\": {}}]",
    "{\"name\": \"exec\", \"parameters\": {\"cmd\": \"rm -rf /\"}}",
    "<|channel|>commentary to=functions.exec <|constrain|>json<|message|>{\"cmd\": \"id\"}<|call|>",
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Ro",
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": 1, \"city\": 2}<|call|>",
    "<|channel|>commentary to=functions.ping <|constrain|>json<|message|>[]<|call|>",
    "<tool_call>\n<function=rm_rf_root>\n</function>\n</tool_call>",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=city>\nOslo\n</parameter>\n"
    "</function>\n</tool_call>",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nRo",
};

Test(toolcall, hostile_outputs_are_content_never_calls) {
    json_t *tools = json_loads(HOSTILE_TOOLS, 0, NULL);
    run_tools = tools;
    cr_assert_geq(ATTND_ARRAY_LEN(HOSTILE), 36);
    for (size_t k = 0; k < ATTND_ARRAY_LEN(HOSTILE); k++) {
        parsed *p = check_all_chunkings(HOSTILE[k], true);
        cr_assert_eq(p->n_calls, 0, "%zu: %s is no call", k, HOSTILE[k]);
        cr_assert_eq(p->n_rejected, 1, "%zu: %s is one rejected block", k, HOSTILE[k]);
        cr_assert_str_eq(p->content, HOSTILE[k], "%zu: the text as written", k);
    }
    run_tools = NULL;
    json_decref(tools);
}

/* The same outputs that are valid calls (for contrast: the checks do not refuse what is fine). */
Test(toolcall, what_is_valid_stays_a_call) {
    json_t *tools = json_loads(HOSTILE_TOOLS, 0, NULL);
    run_tools = tools;
    static const char *const GOOD[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\\u0001b\"}}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {\"city\": \"Rome\"}, \"name\": \"get_weather\"}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 123456789012345678901234567890}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}", /* the reply ended after the JSON */
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_", /* ... inside the close */
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"a\": {\"b\": [[[{\"c\": null}]]]}}}\n</tool_call>",
        "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"abc123456\"}]",
        "<|channel|>commentary to=functions.ping <|constrain|>json<|message|>{}<|call|>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>",
    };
    for (size_t k = 0; k < ATTND_ARRAY_LEN(GOOD); k++) {
        parsed *p = check_all_chunkings(GOOD[k], true);
        cr_assert_eq(p->n_calls, 1, "%zu: %s is a call", k, GOOD[k]);
        cr_assert_eq(p->n_rejected, 0, "%zu", k);
        cr_assert(p->content_null, "%zu: a call alone", k);
    }
    run_tools = NULL;
    json_decref(tools);
}

/* A reply cut at every byte of a valid call (max_tokens can fall anywhere): before the call's
 * JSON is whole it is no call and the text as written is content; once whole it is the call.
 * Whole and streamed agree at every cut. */
Test(toolcall, a_call_cut_at_every_byte_is_whole_or_content) {
    json_t *tools = json_loads(HOSTILE_TOOLS, 0, NULL);
    run_tools = tools;
    static const char *const CALLS[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 3}}\n</tool_call>",
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"R\\\"m\"}}",
        "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {\"x\": [1, {\"y\": 2}]}}]",
        "<|python_tag|>{\"name\": \"ping\", \"parameters\": {}}",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\"}<|call|>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>",
    };
    char cut[256];
    for (size_t c = 0; c < ATTND_ARRAY_LEN(CALLS); c++) {
        size_t n = strlen(CALLS[c]);
        for (size_t len = 1; len <= n; len++) {
            memcpy(cut, CALLS[c], len);
            cut[len] = '\0';
            parsed *p = check_all_chunkings(cut, true);
            cr_assert_leq(p->n_calls, 1);
            if (p->n_calls == 0) cr_assert_str_eq(p->content, cut, "%zu/%zu: the text as written", c, len);
            else cr_assert(p->content_null, "%zu/%zu: the call alone", c, len);
        }
        parsed *p = check_all_chunkings(CALLS[c], true);
        cr_assert_eq(p->n_calls, 1, "%zu: uncut, a call", c);
    }
    /* where the call becomes one: the Hermes JSON's last brace */
    size_t at = (size_t)(strstr(CALLS[0], "}}") - CALLS[0]) + 2;
    memcpy(cut, CALLS[0], at - 1);
    cut[at - 1] = '\0';
    cr_assert_eq(check_all_chunkings(cut, true)->n_calls, 0, "one brace short: no call");
    memcpy(cut, CALLS[0], at);
    cut[at] = '\0';
    cr_assert_eq(check_all_chunkings(cut, true)->n_calls, 1, "its last brace: the call");
    run_tools = NULL;
    json_decref(tools);
}

/* finish_reason "tool_calls" only when the reply's every call block was a valid call; a
 * rejected one (cut, unknown) leaves the natural reason, whole (toolcall_apply) and streamed
 * (toolcall_parser_finish_reason) alike. Without tools no name is valid. */
Test(toolcall, finish_reason_is_tool_calls_only_when_every_call_is_valid) {
    static const struct { const char *text, *natural, *want; } C[] = {
        {"<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>", "stop", "tool_calls"},
        {"<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>", "length", "length"},
        {"<tool_call>{\"name\": \"exec\", \"arguments\": {}}</tool_call>", "stop", "stop"},
        {"<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"ping\", \"argu", "length",
         "length"},
        {"<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"rm_rf_root\"}</tool_call>",
         "stop", "stop"},
        {"Hello", "stop", "stop"},
    };
    json_t *tools = json_loads(HOSTILE_TOOLS, 0, NULL);
    const toolcall_reading how = {.calls = true, .tools = tools, .id_base = "x"};
    for (size_t k = 0; k < ATTND_ARRAY_LEN(C); k++) {
        json_t *choice = json_pack("{s:{s:s},s:s}", "message", "role", "assistant", "finish_reason", C[k].natural);
        cr_assert(toolcall_apply(choice, C[k].text, strlen(C[k].text), &how));
        cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), C[k].want, "%zu: %s", k, C[k].text);
        const json_t *msg = json_object_get(choice, "message");
        bool has_calls = json_array_size(json_object_get(msg, "tool_calls")) > 0;
        toolcall_parser *p = toolcall_parser_create(true);
        toolcall_parser_set_tools(p, tools);
        json_t *d = json_array();
        for (size_t i = 0; C[k].text[i]; i++) toolcall_parser_feed(p, C[k].text + i, 1, d);
        toolcall_parser_finish(p, d);
        cr_assert_str_eq(toolcall_parser_finish_reason(p, C[k].natural), C[k].want, "streamed %zu", k);
        cr_assert_eq(toolcall_parser_n_calls(p) > 0, has_calls);
        toolcall_parser_destroy(p);
        json_decref(d);
        json_decref(choice);
    }
    json_t *choice = json_pack("{s:{s:s},s:s}", "message", "role", "assistant", "finish_reason", "stop");
    const char *t = "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>";
    cr_assert(toolcall_apply(choice, t, strlen(t), &(toolcall_reading){.calls = true, .id_base = "x"}));
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "stop", "no tools, no call");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(choice, "message"), "content")), t);
    json_decref(choice);
    json_decref(tools);
}

// ---- Qwen3-Coder's XML calls -----------------------------------------------------------------

static const char XML_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"write_file\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"path\": {\"type\": \"string\"}, \"content\": {\"type\": \"string\"}, \"mode\": {\"type\": "
    "\"integer\"}, \"force\": {\"type\": \"boolean\"}, \"tags\": {\"type\": \"array\"}, \"opts\": {\"type\": "
    "\"object\"}, \"ratio\": {\"type\": \"number\"}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"ls\"}}]";

/* A recorded Qwen3-Coder reply (its template's format): text, then two calls whose values are
 * typed by the tools' schemas; a string keeps its inner newlines and markup verbatim. */
Test(toolcall, qwen3_coder_xml_calls_become_typed_json_arguments) {
    json_t *tools = json_loads(XML_TOOLS, 0, NULL);
    run_tools = tools;
    parsed *p = check_all_chunkings(
        "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a b.py\n</parameter>\n"
        "<parameter=content>\nif a < b:\n    print(\"x</y>\")\n\n</parameter>\n<parameter=mode>\n420\n</parameter>\n"
        "<parameter=force>\ntrue\n</parameter>\n<parameter=tags>\n[\"a\", 1]\n</parameter>\n<parameter=opts>\n"
        "{\"k\": null}\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
        "<function=ls>\n</function>\n</tool_call>", true);
    cr_assert_eq(p->n_calls, 2);
    cr_assert_str_eq(p->content, "I'll write it.\n\n", "the newline between the calls is text");
    cr_assert_str_eq(p->names[0], "write_file");
    cr_assert_str_eq(p->args[0], "{\"path\":\"/tmp/a b.py\",\"content\":\"if a < b:\\n    print(\\\"x</y>\\\")\\n\","
                                 "\"mode\":420,\"force\":true,\"tags\":[\"a\",1],\"opts\":{\"k\":null},\"ratio\":0.5}");
    cr_assert_str_eq(p->names[1], "ls");
    cr_assert_str_eq(p->args[1], "{}");
    run_tools = NULL;
    json_decref(tools);
}

/* A value that is not JSON stays the string; a parameter no schema types is a string; a reply
 * cut inside a call, a call not closed by </function>, a function not among the tools or a
 * parameter twice is no call: the block is content as written. */
Test(toolcall, qwen3_coder_values_fall_back_to_strings_and_broken_calls_are_text) {
    json_t *tools = json_loads(XML_TOOLS, 0, NULL);
    run_tools = tools;
    parsed *p = check_all_chunkings("<tool_call>\n<function=write_file>\n<parameter=mode>\nrw-r--r--\n</parameter>\n"
                                    "<parameter=extra>\n42\n</parameter>\n</function>\n</tool_call>", true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->args[0], "{\"mode\":\"rw-r--r--\",\"extra\":\"42\"}");
    static const char *const BROKEN[] = {
        "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/m",
        "<tool_call>\n<function=write_file>\n<parameter=pa",
        "<tool_call>\n<function=write_file>\n<parameter=path>\na\n</parameter>\n</tool_call>",
        "<tool_call>\n<function=exec>\n<parameter=cmd>\nrm -rf /\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=write_file>\n<parameter=path>\na\n</parameter>\n<parameter=path>\n/etc/passwd\n"
        "</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=ls>\n</function>\nrm -rf /</tool_call>",
    };
    for (size_t k = 0; k < ATTND_ARRAY_LEN(BROKEN); k++) {
        p = check_all_chunkings(BROKEN[k], true);
        cr_assert_eq(p->n_calls, 0, "%s", BROKEN[k]);
        cr_assert_str_eq(p->content, BROKEN[k]);
        cr_assert_eq(p->n_rejected, 1, "%s", BROKEN[k]);
    }
    run_tools = NULL;
    /* a function without a schema takes every value as a string; a function tag that is no
     * name is content */
    p = check_all_chunkings("<tool_call>\n<function=f>\n<parameter=n>\n1\n</parameter>\n</function>\n</tool_call>", true);
    cr_assert_str_eq(p->args[0], "{\"n\":\"1\"}");
    p = check_all_chunkings("<tool_call>\n<function=\nno</tool_call> after", true);
    cr_assert_eq(p->n_calls, 0);
    cr_assert_str_eq(p->content, "<tool_call>\n<function=\nno</tool_call> after");
    p = check_all_chunkings("<tool_call><function=f></function></tool_call>", false);
    cr_assert_eq(p->n_calls, 0, "no calls parsed without tools");
    json_decref(tools);
}

/* Tools whose parameters' schemas say "a string" in each way llama.cpp's resolves_to_string
 * reads (a $ref, a type list, an enum, an anyOf branch), or JSON (integer, boolean, untyped). */
static const char TYPED_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"tail\", \"parameters\": {\"type\": \"object\", \"$defs\": "
    "{\"P\": {\"type\": \"string\"}}, \"properties\": {\"path\": {\"$ref\": \"#/$defs/P\"}, \"lines\": {\"type\": "
    "\"integer\"}, \"follow\": {\"type\": \"boolean\"}, \"since\": {\"type\": [\"string\", \"null\"]}, \"level\": "
    "{\"enum\": [\"err\", \"warn\"]}, \"limit\": {\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\"}]}, "
    "\"any\": {}, \"meta\": {\"description\": \"free\"}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"ls\"}}]";

/* A Qwen3.5 reply as its template primes it (the prompt ends inside <think>): reasoning, text,
 * then calls whose values are typed as llama.cpp types them: text when the schema may be a
 * string, else JSON (an untyped schema too), and the text when it is not JSON (Python's True,
 * which the template writes for a past call's boolean, is no JSON). */
Test(toolcall, qwen35_reply_after_open_think_types_values_as_llama_cpp_does) {
    json_t *tools = json_loads(TYPED_TOOLS, 0, NULL);
    run_tools = tools;
    start_open = true;
    parsed *p = check_all_chunkings(
        "I should tail it.\n</think>\n\nLooking.\n\n<tool_call>\n<function=tail>\n<parameter=path>\n42\n</parameter>\n"
        "<parameter=lines>\n20\n</parameter>\n<parameter=follow>\ntrue\n</parameter>\n<parameter=since>\nnull\n"
        "</parameter>\n<parameter=level>\n1\n</parameter>\n<parameter=limit>\n5\n</parameter>\n<parameter=any>\n"
        "[1, 2]\n</parameter>\n<parameter=meta>\nx y\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
        "<function=tail>\n<parameter=follow>\nTrue\n</parameter>\n</function>\n</tool_call>", true);
    start_open = false;
    cr_assert_str_eq(p->reasoning, "I should tail it.\n");
    cr_assert_str_eq(p->content, "Looking.\n\n\n");
    cr_assert_eq(p->n_calls, 2);
    cr_assert_str_eq(p->args[0], "{\"path\":\"42\",\"lines\":20,\"follow\":true,\"since\":\"null\",\"level\":\"1\","
                                 "\"limit\":\"5\",\"any\":[1,2],\"meta\":\"x y\"}");
    cr_assert_str_eq(p->args[1], "{\"follow\":\"True\"}");
    run_tools = NULL;
    json_decref(tools);
}

/* Qwen3.5 may open a call without closing its thinking; llama.cpp's parser for its format ends
 * the reasoning at <tool_call> and reads the call. Only that format: elsewhere the block runs on,
 * and a call-less request leaves the call's text as content. */
Test(toolcall, qwen35_call_without_think_close_ends_the_reasoning) {
    static const char R[] = "I need the weather.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                            "</parameter>\n</function>\n</tool_call>";
    start_open = think_to_call = true;
    parsed *p = check_all_chunkings(R, true);
    cr_assert_str_eq(p->reasoning, "I need the weather.\n");
    cr_assert(p->content_null);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->names[0], "get_weather");
    cr_assert_str_eq(p->args[0], "{\"city\":\"Paris\"}");
    /* a </think> that comes first closes as usual; a <think> opened in the text ends at a call too */
    p = check_all_chunkings("a</think>b<tool_call>\n<function=ping>\n</function>\n</tool_call>", true);
    cr_assert_str_eq(p->reasoning, "a");
    cr_assert_str_eq(p->content, "b");
    cr_assert_eq(p->n_calls, 1);
    start_open = false;
    p = check_all_chunkings("<think>x <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", true);
    cr_assert_str_eq(p->reasoning, "x ");
    cr_assert_eq(p->n_calls, 1);
    /* calls not parsed: the block after the reasoning is content */
    start_open = true;
    p = check_all_chunkings("hm\n<tool_call>\n<function=ping>\n</function>\n</tool_call>", false);
    cr_assert_str_eq(p->reasoning, "hm\n");
    cr_assert_str_eq(p->content, "<tool_call>\n<function=ping>\n</function>\n</tool_call>");
    cr_assert_eq(p->n_calls, 0);
    /* another format: the reasoning runs on over the call's text */
    think_to_call = false;
    p = check_all_chunkings(R, true);
    cr_assert_str_eq(p->reasoning, R);
    cr_assert_eq(p->n_calls, 0);
    start_open = false;
    cr_assert(toolcall_format_think_ends_at_call(TOOLCALL_FMT_QWEN_XML));
    cr_assert(!toolcall_format_think_ends_at_call(TOOLCALL_FMT_GLM));
    cr_assert(!toolcall_format_think_ends_at_call(TOOLCALL_FMT_HERMES));

    /* toolcall_apply (the whole answer) takes the same flag */
    json_t *choice = json_pack("{s:{s:s},s:s}", "message", "role", "assistant", "finish_reason", "stop");
    const toolcall_reading how = {.calls = true, .tools = default_tools(), .id_base = "x", .in_reasoning = true,
                                  .think_to_call = true};
    cr_assert(toolcall_apply(choice, R, strlen(R), &how));
    json_t *msg = json_object_get(choice, "message");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "reasoning_content")), "I need the weather.\n");
    cr_assert_eq(json_array_size(json_object_get(msg, "tool_calls")), 1);
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls");
    json_decref(choice);
}

// ---- GLM's calls ----------------------------------------------------------------------------

/* A GLM-4.7-Flash reply as its template primes it (the prompt ends with <think>): reasoning to
 * </think>, text, a call typed by the schema as for Qwen (no newline trimming: GLM's values sit
 * tight between their tags), and a call with no parameters. */
Test(toolcall, glm47_reply_after_open_think_has_reasoning_text_and_typed_calls) {
    json_t *tools = json_loads(TYPED_TOOLS, 0, NULL);
    run_tools = tools;
    start_open = true;
    parsed *p = check_all_chunkings(
        "Tail the log.</think>Looking.<tool_call>tail<arg_key>path</arg_key><arg_value>app.log</arg_value><arg_key>"
        "lines</arg_key><arg_value>20</arg_value><arg_key>meta</arg_key><arg_value>\na <b>\n</arg_value><arg_key>any"
        "</arg_key><arg_value>{\"k\": [true]}</arg_value></tool_call><tool_call>ls</tool_call>", true);
    start_open = false;
    cr_assert_str_eq(p->reasoning, "Tail the log.");
    cr_assert_str_eq(p->content, "Looking.");
    cr_assert_eq(p->n_calls, 2);
    cr_assert_str_eq(p->names[0], "tail");
    cr_assert_str_eq(p->args[0], "{\"path\":\"app.log\",\"lines\":20,\"meta\":\"\\na <b>\\n\",\"any\":{\"k\":[true]}}");
    cr_assert_str_eq(p->names[1], "ls");
    cr_assert_str_eq(p->args[1], "{}");
    /* GLM-4.6 writes a newline after the name and after each tag pair */
    p = check_all_chunkings("<tool_call>tail\n<arg_key>lines</arg_key>\n<arg_value>3</arg_value>\n</tool_call>", true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->args[0], "{\"lines\":3}");
    cr_assert(p->content_null);
    run_tools = NULL;
    json_decref(tools);
}

/* What is not a whole GLM call of a tool is content as written: a cut block, an unknown name, a
 * key twice, text between the tags, a name with a blank inside, a block the reply ends in. */
Test(toolcall, glm_broken_calls_are_content) {
    json_t *tools = json_loads(TYPED_TOOLS, 0, NULL);
    run_tools = tools;
    static const char *const BROKEN[] = {
        "<tool_call>tail<arg_key>path</arg_key><arg_value>a",
        "<tool_call>exec<arg_key>cmd</arg_key><arg_value>rm -rf /</arg_value></tool_call>",
        "<tool_call>tail<arg_key>path</arg_key><arg_value>a</arg_value><arg_key>path</arg_key><arg_value>/etc/passwd"
        "</arg_value></tool_call>",
        "<tool_call>tail<arg_key>path</arg_key>x<arg_value>a</arg_value></tool_call>",
        "<tool_call>tail<arg_key>path</arg_key><arg_value>a</arg_value>and more</tool_call>",
        "<tool_call>tail me</tool_call>",
        "<tool_call>tail<arg_key>pa<b>th</arg_key><arg_value>a</arg_value></tool_call>",
        "<tool_call>tail<arg_key>path</arg_key><arg_value>a</arg_value></tool_ca",
    };
    for (size_t k = 0; k < ATTND_ARRAY_LEN(BROKEN); k++) {
        parsed *p = check_all_chunkings(BROKEN[k], true);
        cr_assert_eq(p->n_calls, 0, "%s", BROKEN[k]);
        cr_assert_str_eq(p->content, BROKEN[k]);
        cr_assert_eq(p->n_rejected, 1, "%s", BROKEN[k]);
    }
    /* text after a rejected block is parsed on: here a valid call */
    parsed *p = check_all_chunkings("<tool_call>nope</tool_call> then <tool_call>ls</tool_call>", true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->content, "<tool_call>nope</tool_call> then ");
    run_tools = NULL;
    json_decref(tools);
}

// ---- the request side ---------------------------------------------------------------------

static attnd_status spec_of(const char *body_text, bool rshape, toolcall_spec *s, const char **param) {
    json_t *b = json_loads(body_text, 0, NULL);
    cr_assert(b, "%s", body_text);
    attnd_err err;
    attnd_status st = toolcall_parse_spec(b, rshape, s, param, &err);
    json_decref(b);
    return st;
}

static const char *TOOLS = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
                           "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":"
                           "{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},\"required\":[\"city\",\"days\"]}}},"
                           "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";

/* The spec of a request with TOOLS and this tool_choice (a JSON value). */
static void tools_spec(const char *choice, toolcall_spec *s) {
    char body[2048];
    const char *param = NULL;
    snprintf(body, sizeof(body), "{%s,\"tool_choice\":%s}", TOOLS, choice);
    cr_assert_eq(spec_of(body, false, s, &param), ATTND_OK, "%s", body);
}

/* s's forcing grammar in format f, written to gb and compiled. */
static grammar *forcing_grammar(const toolcall_spec *s, toolcall_format f, buf *gb) {
    attnd_err err;
    cr_assert_eq(toolcall_grammar(s, f, gb, &err), ATTND_OK, "%s", err.msg);
    grammar *g;
    cr_assert_eq(grammar_compile(&g, gb->p, gb->len, &err), ATTND_OK, "%s\n%s", err.msg, gb->p);
    return g;
}

Test(toolcall, tools_and_tool_choice_are_validated) {
    toolcall_spec s;
    const char *param = NULL;
    char body[2048];
    snprintf(body, sizeof(body), "{%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"ping\"}},"
             "\"parallel_tool_calls\":false}", TOOLS);
    cr_assert_eq(spec_of(body, false, &s, &param), ATTND_OK);
    cr_assert_eq(s.choice, TOOLCALL_NAMED);
    cr_assert_str_eq(s.name, "ping");
    cr_assert(!s.parallel);
    toolcall_spec_free(&s);
    cr_assert_eq(spec_of("{\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":\"function\","
                         "\"name\":\"f\"}}", true, &s, &param), ATTND_OK);
    cr_assert_eq(s.choice, TOOLCALL_NAMED);
    toolcall_spec_free(&s);
    static const struct { const char *body, *param; } bad[] = {
        {"{\"tools\":{}}", "tools"},
        {"{\"tools\":[{\"type\":\"retrieval\"}]}", "tools"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"has space\"}}]}", "tools"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]}", "tools"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", "tools"},
        {"{\"tool_choice\":\"required\"}", "tool_choice"},
        {"{\"tool_choice\":\"sometimes\"}", "tool_choice"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", "tool_choice"},
        {"{\"parallel_tool_calls\":\"yes\"}", "parallel_tool_calls"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        param = NULL;
        cr_assert_eq(spec_of(bad[i].body, false, &s, &param), ATTND_ERR_INVALID, "%s", bad[i].body);
        cr_assert_str_eq(param, bad[i].param, "%s", bad[i].body);
        toolcall_spec_free(&s);
    }
}

Test(toolcall, the_forcing_grammar_accepts_only_valid_calls) {
    toolcall_spec s;
    tools_spec("\"required\"", &s);
    buf gb = {0};
    grammar *g = forcing_grammar(&s, TOOLCALL_FMT_HERMES, &gb);
    const char *good = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 3}}\n"
                       "</tool_call>";
    cr_assert(grammar_sentence(g, good));
    cr_assert(grammar_sentence(g, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n"
                                  "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"),
              "parallel calls");
    cr_assert(!grammar_sentence(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", "
                                   "\"days\": 9}}\n</tool_call>"),
              "arguments follow the schema");
    cr_assert(!grammar_sentence(g, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
    cr_assert(!grammar_sentence(g, "Sure!"));
    /* and what the grammar forces is what the parser reads */
    parsed out;
    run(good, true, 3, 0, &out);
    cr_assert_eq(out.n_calls, 1);
    cr_assert_str_eq(out.args[0], "{\"city\":\"Rome\",\"days\":3}");
    grammar_unref(g);
    buf_free(&gb);
    toolcall_spec_free(&s);
}

/* The Llama 3.1 and Mistral forms: what each template writes, and what the parser reads back. */
Test(toolcall, the_forcing_grammar_writes_each_templates_format) {
    toolcall_spec s;
    tools_spec("{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", &s);
    static const struct {
        toolcall_format f;
        const char *good, *bad;
    } CASES[] = {
        {TOOLCALL_FMT_LLAMA, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"days\": 3}}",
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}"},
        {TOOLCALL_FMT_MISTRAL, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 3}}]",
         "[{\"name\": \"ping\", \"arguments\": {}}]"},
    };
    for (size_t k = 0; k < ATTND_ARRAY_LEN(CASES); k++) {
        buf gb = {0};
        grammar *g = forcing_grammar(&s, CASES[k].f, &gb);
        cr_expect(grammar_sentence(g, CASES[k].good), "format %d: %s\n%s", CASES[k].f, CASES[k].good, gb.p);
        cr_expect(!grammar_sentence(g, CASES[k].bad), "format %d refuses %s", CASES[k].f, CASES[k].bad);
        const char *trig = toolcall_trigger(CASES[k].f);
        cr_expect(!strncmp(CASES[k].good, trig, strlen(trig)), "a call starts with its trigger %s", trig);
        parsed out;
        run(CASES[k].good, true, 5, 0, &out);
        cr_expect_eq(out.n_calls, 1, "format %d parses back", CASES[k].f);
        cr_expect_str_eq(out.args[0], "{\"city\":\"Rome\",\"days\":3}");
        grammar_unref(g);
        buf_free(&gb);
    }
    toolcall_spec_free(&s);
}

/* Qwen3-Coder's XML form: required and optional parameters, strings as free text without
 * </parameter>, integers under their schema; what it accepts parses back. */
Test(toolcall, the_forcing_grammar_writes_qwen3_coder_xml) {
    toolcall_spec s;
    tools_spec("\"required\"", &s);
    buf gb = {0};
    grammar *g = forcing_grammar(&s, TOOLCALL_FMT_QWEN_XML, &gb);
    static const char GOOD[] = "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan <b>Jos\u00e9</b> < 3\n"
                               "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    cr_assert(grammar_sentence(g, GOOD), "%s\n%s", GOOD, gb.p);
    cr_assert(grammar_sentence(g, "<tool_call>\n<function=ping>\n</function>\n</tool_call>\n<tool_call>\n"
                                  "<function=ping>\n</function>\n</tool_call>"), "parallel calls");
    cr_assert(!grammar_sentence(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
                                   "<parameter=days>\n9\n</parameter>\n</function>\n</tool_call>"), "days is 1..7");
    cr_assert(!grammar_sentence(g, "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n"
                                   "</function>\n</tool_call>"), "city is required");
    cr_assert(!grammar_sentence(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\na</parameter>b\n"
                                   "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
              "no </parameter> in a value");
    cr_assert(!grammar_sentence(g, "<tool_call>\n<function=nope>\n</function>\n</tool_call>"));
    cr_assert(!strncmp(GOOD, toolcall_trigger(TOOLCALL_FMT_QWEN_XML), strlen(toolcall_trigger(TOOLCALL_FMT_QWEN_XML))));
    json_t *tools = json_loads("[{\"name\": \"get_weather\", \"parameters\": {\"properties\": {\"city\": {\"type\": "
                               "\"string\"}, \"days\": {\"type\": \"integer\"}}}}]", 0, NULL);
    run_tools = tools;
    parsed out;
    run(GOOD, true, 5, 0, &out);
    cr_assert_eq(out.n_calls, 1);
    cr_assert_str_eq(out.args[0], "{\"city\":\"San <b>Jos\u00e9</b> < 3\",\"days\":3}");
    run_tools = NULL;
    json_decref(tools);
    grammar_unref(g);
    buf_free(&gb);
    toolcall_spec_free(&s);
}

/* GLM's form: <tool_call>NAME, <arg_key>/<arg_value> pairs written tight as GLM-4.7 writes them,
 * strings as free text without </arg_value>, integers under their schema; what it accepts
 * parses back into the call. */
Test(toolcall, the_forcing_grammar_writes_glm_calls) {
    toolcall_spec s;
    tools_spec("\"required\"", &s);
    buf gb = {0};
    grammar *g = forcing_grammar(&s, TOOLCALL_FMT_GLM, &gb);
    static const char GOOD[] = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>San <b>Jos\u00e9</b> < 3"
                               "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>";
    cr_assert(grammar_sentence(g, GOOD), "%s\n%s", GOOD, gb.p);
    cr_assert(grammar_sentence(g, "<tool_call>ping</tool_call><tool_call>ping</tool_call>"), "parallel calls");
    cr_assert(!grammar_sentence(g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value><arg_key>"
                                   "days</arg_key><arg_value>9</arg_value></tool_call>"), "days is 1..7");
    cr_assert(!grammar_sentence(g, "<tool_call>get_weather<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"),
              "city is required");
    cr_assert(!grammar_sentence(g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>a</arg_value>b</arg_value>"
                                   "</tool_call>"), "no </arg_value> in a value");
    cr_assert(!grammar_sentence(g, "<tool_call>nope</tool_call>"));
    cr_assert(!strncmp(GOOD, toolcall_trigger(TOOLCALL_FMT_GLM), strlen(toolcall_trigger(TOOLCALL_FMT_GLM))));
    json_t *tools = json_loads("[{\"name\": \"get_weather\", \"parameters\": {\"properties\": {\"city\": {\"type\": "
                               "\"string\"}, \"days\": {\"type\": \"integer\"}}}}]", 0, NULL);
    run_tools = tools;
    parsed out;
    run(GOOD, true, 5, 0, &out);
    cr_assert_eq(out.n_calls, 1);
    cr_assert_str_eq(out.args[0], "{\"city\":\"San <b>Jos\u00e9</b> < 3\",\"days\":3}");
    run_tools = NULL;
    json_decref(tools);
    grammar_unref(g);
    buf_free(&gb);
    toolcall_spec_free(&s);
}

/* Gemma 4's form: <|tool_call>call:NAME{…}<tool_call|>, strings between <|"|> marks as they are,
 * keys bare and in the template's (sorted) order, integers under their schema, no blanks; what it
 * accepts parses back (toolcall_g4.c) into the call; a named function is the only name. */
Test(toolcall, the_forcing_grammar_writes_gemma4_calls) {
    toolcall_spec s;
    tools_spec("\"required\"", &s);
    buf gb = {0};
    grammar *g = forcing_grammar(&s, TOOLCALL_FMT_GEMMA4, &gb);
    static const char GOOD[] = "<|tool_call>call:get_weather{city:<|\"|>San <b>Jos\u00e9</b>, \"CA\"\n<|\"|>,days:3}"
                               "<tool_call|>";
    cr_assert(grammar_sentence(g, GOOD), "%s\n%s", GOOD, gb.p);
    cr_assert(grammar_sentence(g, "<|tool_call>call:ping{}<tool_call|><|tool_call>call:ping{}<tool_call|>"), "parallel");
    static const char *const BAD[] = {
        "<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>,days:9}<tool_call|>",           /* days is 1..7 */
        "<|tool_call>call:get_weather{days:3}<tool_call|>",                                  /* city is required */
        "<|tool_call>call:get_weather{city:\"Rome\",days:3}<tool_call|>",                     /* JSON's quotes */
        "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>b<|\"|>,days:3}<tool_call|>",         /* a mark inside */
        "<|tool_call>call:get_weather{days:3,city:<|\"|>Rome<|\"|>}<tool_call|>",             /* not sorted */
        "<|tool_call>call:get_weather{city: <|\"|>Rome<|\"|>,days:3}<tool_call|>",            /* a blank */
        "<|tool_call>call:nope{}<tool_call|>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
    };
    for (size_t k = 0; k < ATTND_ARRAY_LEN(BAD); k++) cr_expect(!grammar_sentence(g, BAD[k]), "refuses %s", BAD[k]);
    cr_assert(!strncmp(GOOD, toolcall_trigger(TOOLCALL_FMT_GEMMA4), strlen(toolcall_trigger(TOOLCALL_FMT_GEMMA4))));
    cr_assert(!toolcall_format_uses_tokens(TOOLCALL_FMT_GEMMA4), "the markers are text in Gemma 4's vocabulary");
    json_t *tools = json_loads(strchr(TOOLS, '['), JSON_DISABLE_EOF_CHECK, NULL);
    run_tools = tools;
    parsed *p = check_all_chunkings(GOOD, true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->names[0], "get_weather");
    cr_assert_str_eq(p->args[0], "{\"city\":\"San <b>Jos\u00e9</b>, \\\"CA\\\"\\n\",\"days\":3}");
    grammar_unref(g);
    buf_free(&gb);
    toolcall_spec_free(&s);
    /* a named function: that name only */
    tools_spec("{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}", &s);
    gb = (buf){0};
    g = forcing_grammar(&s, TOOLCALL_FMT_GEMMA4, &gb);
    cr_assert(grammar_sentence(g, "<|tool_call>call:ping{}<tool_call|>"));
    cr_assert(!grammar_sentence(g, "<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>,days:3}<tool_call|>"));
    grammar_unref(g);
    buf_free(&gb);
    toolcall_spec_free(&s);
    run_tools = NULL;
    json_decref(tools);
}

/* Gemma 4's values beyond strings and integers: a nested object (None for null), an array, an
 * enum, a key that is no plain name (between marks), a bounded string; the parser reads back the
 * JSON they stand for. */
Test(toolcall, the_gemma4_grammar_writes_nested_values_as_the_template_does) {
    static const char BODY[] =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"put\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"Tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"meta\":{\"type\":\"object\","
        "\"properties\":{\"b\":{\"type\":\"boolean\"},\"a\":{\"type\":[\"integer\",\"null\"]}},\"required\":[\"a\","
        "\"b\"]},\"mode\":{\"enum\":[\"fast\",\"slow\"]},\"odd key\":{\"type\":\"string\",\"maxLength\":3}},"
        "\"required\":[\"Tags\",\"meta\",\"mode\",\"odd key\"]}}}],\"tool_choice\":\"required\"}";
    toolcall_spec s;
    const char *param = NULL;
    cr_assert_eq(spec_of(BODY, false, &s, &param), ATTND_OK);
    buf gb = {0};
    grammar *g = forcing_grammar(&s, TOOLCALL_FMT_GEMMA4, &gb);
    static const char GOOD[] = "<|tool_call>call:put{meta:{a:None,b:true},mode:<|\"|>fast<|\"|>,<|\"|>odd key<|\"|>:"
                               "<|\"|>x:y<|\"|>,Tags:[<|\"|>t1<|\"|>,<|\"|>t2<|\"|>]}<tool_call|>";
    cr_assert(grammar_sentence(g, GOOD), "%s\n%s", GOOD, gb.p);
    cr_expect(!grammar_sentence(g, "<|tool_call>call:put{meta:{a:None,b:true},mode:<|\"|>fast<|\"|>,<|\"|>odd key"
                                   "<|\"|>:<|\"|>long<|\"|>,Tags:[]}<tool_call|>"), "maxLength 3");
    cr_expect(!grammar_sentence(g, "<|tool_call>call:put{meta:{a:null,b:true},mode:<|\"|>fast<|\"|>,<|\"|>odd key"
                                   "<|\"|>:<|\"|>x<|\"|>,Tags:[]}<tool_call|>"), "null is None");
    cr_expect(!grammar_sentence(g, "<|tool_call>call:put{meta:{a:1,b:true},mode:<|\"|>medium<|\"|>,<|\"|>odd key"
                                   "<|\"|>:<|\"|>x<|\"|>,Tags:[]}<tool_call|>"), "the enum");
    json_t *body = json_loads(BODY, 0, NULL);
    run_tools = json_object_get(body, "tools");
    parsed *p = check_all_chunkings(GOOD, true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->args[0], "{\"meta\":{\"a\":null,\"b\":true},\"mode\":\"fast\",\"odd key\":\"x:y\",\"Tags\":"
                                 "[\"t1\",\"t2\"]}");
    run_tools = NULL;
    json_decref(body);
    grammar_unref(g);
    buf_free(&gb);
    toolcall_spec_free(&s);
}

/* What a model writes under the forcing grammar: the small Gemma 4 fixture (random weights, a
 * byte vocabulary) sampled from a short prompt under g, the sentence closed within max_tokens. */
static void forced_reply(const grammar *g, uint64_t seed, buf *out) {
    g4_spec gs = gemma4_small("gemma4");
    char path[256];
    tiny_tmpname(path, sizeof(path), "gemma4");
    cr_assert_eq(g4_write(path, &gs), 0);
    tiny_rig r;
    tiny_rig_load(&r, path, KV_F32, 8, 1, 16);
    attnd_err err;
    tokenizer *tok;
    grammar_vocab *gv;
    cr_assert_eq(tok_load(&tok, model_gguf(r.m), &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(grammar_vocab_from_tokenizer(&gv, tok, &err), ATTND_OK, "%s", err.msg);
    enum { V = 320, MAX = 120 };
    gen_params gp = {.top_logprobs = -1, .grammar = g, .gvocab = gv, .max_tokens = MAX, .grammar_close = true};
    sampler_params_default(&gp.sp);
    gp.sp.temperature = 1.0f, gp.sp.seed = seed;
    int32_t t = 1; /* <s>, then the sampled tokens one at a time */
    gen *gn;
    cr_assert_eq(gen_create(&gn, &gp, V, tok, &t, 1, &err), ATTND_OK, "%s", err.msg);
    kv_seq *s = tiny_rig_seq(&r);
    static float logits[V];
    stop_reason why = STOP_NONE;
    for (int i = 0; i < MAX && why == STOP_NONE; i++) {
        batch_entry b = {s, t, kv_seq_len(s), true};
        cr_assert_eq(engine_eval(r.e, &b, 1, logits, &err), ATTND_OK, "%s", err.msg);
        gen_token gt;
        why = gen_next(gn, logits, NULL, &gt);
        buf_append(out, gt.text, gt.n_text);
        t = gt.id;
    }
    const char *tail;
    size_t n;
    gen_finish(gn, &tail, &n);
    buf_append(out, tail, n);
    gen_destroy(gn);
    grammar_vocab_destroy(gv);
    tok_destroy(tok);
    tiny_rig_close(&r);
    remove(path);
}

/* Whether args (JSON text) is a sentence of the schema's JSON grammar (json_schema.h): another
 * path through the schema than the Gemma form the model wrote. */
static bool args_fit(const json_t *schema, const char *args) {
    buf gb = {0};
    attnd_err err;
    grammar *g;
    cr_assert_eq(json_schema_to_gbnf(schema, &gb, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(grammar_compile(&g, gb.p, gb.len, &err), ATTND_OK, "%s", err.msg);
    bool ok = grammar_sentence(g, args);
    grammar_unref(g);
    buf_free(&gb);
    return ok;
}

/* tool_choice required and a named function on the Gemma 4 fixture: the reply is Gemma's call
 * syntax, read by the parser as calls and nothing else (no content, none rejected), each naming a
 * tool (the named one when named) with arguments valid under its schema. */
Test(toolcall, a_gemma4_model_forced_to_call_writes_valid_calls_in_its_syntax) {
    static const char *const CHOICES[] = {"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"};
    json_t *tools = json_loads(strchr(TOOLS, '['), JSON_DISABLE_EOF_CHECK, NULL);
    run_tools = tools;
    for (size_t c = 0; c < ATTND_ARRAY_LEN(CHOICES); c++)
        for (uint64_t seed = 1; seed <= 2; seed++) {
            toolcall_spec s;
            tools_spec(CHOICES[c], &s);
            buf gb = {0}, text = {0};
            grammar *g = forcing_grammar(&s, TOOLCALL_FMT_GEMMA4, &gb);
            forced_reply(g, seed, &text);
            cr_assert(text.p && !strncmp(text.p, "<|tool_call>call:", 17), "%s", text.p ? text.p : "");
            parsed p;
            run(text.p, true, 7, 0, &p);
            cr_expect_eq(p.n_rejected, 0, "%s", text.p);
            cr_expect(p.content_null, "only calls: %s", text.p);
            cr_assert_geq(p.n_calls, 1, "%s", text.p);
            for (int k = 0; k < p.n_calls; k++) {
                if (s.choice == TOOLCALL_NAMED) cr_expect_str_eq(p.names[k], "get_weather");
                const json_t *schema = NULL;
                for (size_t i = 0; i < json_array_size(s.tools); i++)
                    if (!strcmp(json_string_value(json_object_get(json_array_get(s.tools, i), "name")), p.names[k]))
                        schema = json_object_get(json_array_get(s.tools, i), "parameters");
                cr_assert(schema, "%s", p.names[k]);
                cr_expect(args_fit(schema, p.args[k]), "%s's arguments %s fit its schema", p.names[k], p.args[k]);
            }
            grammar_unref(g);
            buf_free(&gb), buf_free(&text);
            toolcall_spec_free(&s);
        }
    run_tools = NULL;
    json_decref(tools);
}

/* The grammar and the parser agree on which values are text: a parameter whose schema may be a
 * string (a type list with "string", an enum of strings) is written as free text, in both XML
 * forms, and parses back as that string; a value the parser would read as JSON is JSON in the
 * grammar too. (The grammar once forced JSON for ["string", "null"], which the parser then took
 * as text: the quotes ended up inside the string.) */
Test(toolcall, grammar_and_parser_agree_on_which_values_are_text) {
    static const char BODY[] =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"log\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"since\":{\"type\":[\"string\",\"null\"]},\"level\":{\"enum\":[\"err\",\"warn\"]},"
        "\"n\":{\"type\":\"integer\"}},\"required\":[\"since\",\"level\",\"n\"]}}}],\"tool_choice\":\"required\"}";
    toolcall_spec s;
    const char *param = NULL;
    cr_assert_eq(spec_of(BODY, false, &s, &param), ATTND_OK);
    static const char *const TEXTS[] = {
        "<tool_call>\n<function=log>\n<parameter=since>\nlast week\n</parameter>\n<parameter=level>\nerr\n</parameter>\n"
        "<parameter=n>\n4\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>log<arg_key>since</arg_key><arg_value>last week</arg_value><arg_key>level</arg_key><arg_value>err"
        "</arg_value><arg_key>n</arg_key><arg_value>4</arg_value></tool_call>",
    };
    static const toolcall_format F[] = {TOOLCALL_FMT_QWEN_XML, TOOLCALL_FMT_GLM};
    json_t *tools = json_loads(BODY, 0, NULL);
    run_tools = json_object_get(tools, "tools");
    for (size_t k = 0; k < 2; k++) {
        buf gb = {0};
        grammar *g = forcing_grammar(&s, F[k], &gb);
        cr_assert(grammar_sentence(g, TEXTS[k]), "%s\n%s", TEXTS[k], gb.p);
        parsed out;
        run(TEXTS[k], true, 3, 0, &out);
        cr_assert_eq(out.n_calls, 1);
        cr_assert_str_eq(out.args[0], "{\"since\":\"last week\",\"level\":\"err\",\"n\":4}");
        grammar_unref(g);
        buf_free(&gb);
    }
    run_tools = NULL;
    json_decref(tools);
    toolcall_spec_free(&s);
}

/* A vocabulary of the printable ASCII characters one per token (id = the byte), plus special
 * tokens without bytes named by their text (ids 128 on). */
static const char *const SPECIALS[] = {"<|channel|>", "<|constrain|>", "<|message|>", "<|call|>",
                                       "<|tool_call|>", "<|end|>", "<|start|>"};
static grammar_vocab *char_vocab(void) {
    enum { NV = 128 + ATTND_ARRAY_LEN(SPECIALS) };
    static char chars[128][2];
    const char *bytes[NV], *names[NV];
    size_t lens[NV], nlens[NV];
    for (int i = 0; i < NV; i++) {
        if (i < 128) chars[i][0] = (char)i, bytes[i] = names[i] = chars[i], lens[i] = nlens[i] = i >= 32 || i == '\n';
        else bytes[i] = "", lens[i] = 0, names[i] = SPECIALS[i - 128], nlens[i] = strlen(SPECIALS[i - 128]);
    }
    grammar_vocab *v;
    cr_assert_eq(grammar_vocab_create(&v, NV, bytes, lens, NULL), ATTND_OK);
    cr_assert_eq(grammar_vocab_set_names(v, names, nlens, NULL), ATTND_OK);
    return v;
}

/* Whether g takes the pieces whole: a piece that is a special token's name as that token, any
 * other one character per token. */
static bool takes_pieces(const grammar *g, const grammar_vocab *v, const char *const *pieces, int n) {
    grammar_state *st;
    cr_assert_eq(grammar_state_create(&st, g, NULL), ATTND_OK);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        int special = -1;
        for (size_t k = 0; k < ATTND_ARRAY_LEN(SPECIALS); k++)
            if (!strcmp(pieces[i], SPECIALS[k])) special = 128 + (int)k;
        if (special >= 0) ok = grammar_state_accept_token(st, v, special);
        for (const char *c = pieces[i]; special < 0 && ok && *c; c++) ok = grammar_state_accept_token(st, v, *c);
    }
    ok = ok && grammar_state_complete(st);
    grammar_state_destroy(st);
    return ok;
}

/* Harmony and Granite: their markers are special tokens, which the grammar names as token
 * terminals; the same text spelled in characters is refused. What it takes parses back. */
Test(toolcall, the_forcing_grammar_names_harmony_and_granite_special_tokens) {
    toolcall_spec s;
    tools_spec("\"required\"", &s);
    grammar_vocab *v = char_vocab();
    static const char *const HARMONY[] = {"<|channel|>", "commentary to=functions.get_weather ", "<|constrain|>", "json",
                                          "<|message|>", "{\"city\": \"Rome\", \"days\": 3}", "<|call|>"};
    static const char *const HARMONY_SPELLED[] = {"<|channel|>", "commentary to=functions.get_weather ", "<|constrain|>",
                                                  "json<|message|>", "{\"city\": \"Rome\", \"days\": 3}", "<|call|>"};
    /* reasoning in the analysis channel first, then the call (but not a second analysis) */
    static const char *const HARMONY_THINK[] = {"<|channel|>", "analysis", "<|message|>", "Rome, 3 days: <ask>.",
                                                "<|end|>", "<|start|>", "assistant", "<|channel|>",
                                                "commentary to=functions.get_weather ", "<|constrain|>", "json",
                                                "<|message|>", "{\"city\": \"Rome\", \"days\": 3}", "<|call|>"};
    static const char *const HARMONY_THINK_TWICE[] = {
        "<|channel|>", "analysis", "<|message|>", "a", "<|end|>", "<|start|>", "assistant",
        "<|channel|>", "analysis", "<|message|>", "b", "<|end|>", "<|start|>", "assistant",
        "<|channel|>", "commentary to=functions.get_weather ", "<|constrain|>", "json",
        "<|message|>", "{\"city\": \"Rome\", \"days\": 3}", "<|call|>"};
    static const char *const GRANITE[] = {"<|tool_call|>", "[{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                          "\"Rome\", \"days\": 3}}, {\"name\": \"ping\", \"arguments\": {}}]"};
    static const char *const GRANITE_SPELLED[] = {"<|tool_call", "|>[{\"name\": \"ping\", \"arguments\": {}}]"};
    struct {
        toolcall_format f;
        const char *const *good, *const *bad;
        int n_good, n_bad;
        const char *text; /* what the reply's text is (special tokens without text dropped) */
        int calls;
    } C[] = {
        {TOOLCALL_FMT_HARMONY, HARMONY, HARMONY_SPELLED, 7, 6,
         "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\", \"days\": 3}", 1},
        {TOOLCALL_FMT_GRANITE, GRANITE, GRANITE_SPELLED, 2, 2, NULL, 2},
    };
    for (size_t k = 0; k < ATTND_ARRAY_LEN(C); k++) {
        buf gb = {0};
        grammar *g = forcing_grammar(&s, C[k].f, &gb);
        if (C[k].f == TOOLCALL_FMT_HARMONY) {
            cr_expect(takes_pieces(g, v, HARMONY_THINK, ATTND_ARRAY_LEN(HARMONY_THINK)), "analysis, then the call");
            cr_expect(!takes_pieces(g, v, HARMONY_THINK_TWICE, ATTND_ARRAY_LEN(HARMONY_THINK_TWICE)),
                      "one analysis message, then the call");
        }
        attnd_err err;
        cr_assert_eq(grammar_vocab_check(g, v, &err), ATTND_OK, "%s", err.msg);
        cr_expect(takes_pieces(g, v, C[k].good, C[k].n_good), "format %d takes its call\n%s", C[k].f, gb.p);
        cr_expect(!takes_pieces(g, v, C[k].bad, C[k].n_bad), "format %d refuses the markers spelled out", C[k].f);
        cr_expect(toolcall_format_uses_tokens(C[k].f));
        parsed out;
        run(C[k].text ? C[k].text : C[k].good[1], true, 4, 0, &out);
        cr_expect_eq(out.n_calls, C[k].calls, "format %d parses back", C[k].f);
        cr_expect_str_eq(out.names[0], "get_weather");
        cr_expect_str_eq(out.args[0], "{\"city\":\"Rome\",\"days\":3}");
        grammar_unref(g);
        buf_free(&gb);
    }
    /* Granite's marker, when it does reach the text, opens the array too */
    parsed *p = check_all_chunkings("<|tool_call|>[{\"name\": \"ping\", \"arguments\": {}}]", true);
    cr_assert_eq(p->n_calls, 1);
    cr_assert_str_eq(p->names[0], "ping");
    grammar_vocab_destroy(v);
    toolcall_spec_free(&s);
}

Test(toolcall, history_renders_as_the_model_would_write_it) {
    json_t *calls = json_loads("[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                               "\"{\\\"a\\\": 1}\"}}]", 0, NULL);
    buf b = {0};
    cr_assert_eq(toolcall_render_calls(calls, &b, NULL), ATTND_OK);
    cr_assert_str_eq(b.p, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n</tool_call>");
    buf_clear(&b);
    cr_assert(toolcall_render_result("22 C", &b));
    cr_assert_str_eq(b.p, "<tool_response>\n22 C\n</tool_response>");
    json_decref(calls);
    buf_free(&b);
}

/* Gemma 4: <|tool_call>call:NAME{key:value,...}<tool_call|>, strings between <|"|> marks (quotes,
 * newlines and braces inside them as they are), bare keys, numbers, true / false, None, nesting;
 * its reasoning channel <|channel>thought\n...<channel|>. Whole at every chunking. */
Test(toolcall, gemma4_calls_become_json_arguments) {
    parsed *p = check_all_chunkings(
        "<|channel>thought\nThe user wants weather.<channel|>Let me look.<|tool_call>call:get_weather{city:<|\"|>Paris, "
        "\"FR\"\n{x}<|\"|>,days:3,ratio:-0.5e-3,hourly:true,alerts:None,opts:{units:<|\"|>C<|\"|>,list:[1,<|\"|>a<|\"|>,"
        "[]]}}<tool_call|><|tool_call>call:get_time{}<tool_call|>", true);
    cr_assert_str_eq(p->reasoning, "The user wants weather.");
    cr_assert_str_eq(p->content, "Let me look.");
    cr_assert_eq(p->n_calls, 2);
    cr_assert_str_eq(p->names[0], "get_weather");
    cr_assert_str_eq(p->args[0], "{\"city\":\"Paris, \\\"FR\\\"\\n{x}\",\"days\":3,\"ratio\":-0.5e-3,\"hourly\":true,"
                                 "\"alerts\":null,\"opts\":{\"units\":\"C\",\"list\":[1,\"a\",[]]}}");
    cr_assert_str_eq(p->names[1], "get_time");
    cr_assert_str_eq(p->args[1], "{}");
    cr_assert_eq(p->n_rejected, 0);
}

/* A name not among the tools, a value the template would not write, text after the call, a key
 * twice, an unclosed string or a reply cut inside the block: no call, the block as written. */
Test(toolcall, gemma4_broken_calls_are_content) {
    const char *bad[] = {
        "<|tool_call>call:unknown{a:1}<tool_call|>",  "<|tool_call>call:ping{a:yes}<tool_call|>",
        "<|tool_call>call:ping{a:1} x<tool_call|>",   "<|tool_call>call:ping{a:1,a:2}<tool_call|>",
        "<|tool_call>call:ping{a:<|\"|>x}<tool_call|>", "<|tool_call>call:ping{a:1",
        "<|tool_call>ping{a:1}<tool_call|>",          "<|tool_call>call:ping{a:[1,}<tool_call|>",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        parsed *p = check_all_chunkings(bad[i], true);
        cr_assert_eq(p->n_calls, 0, "%s", bad[i]);
        cr_assert_str_eq(p->content, bad[i], "the block as written");
        cr_assert_eq(p->n_rejected, 1, "%s", bad[i]);
    }
}
