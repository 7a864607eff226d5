/*
 * fuzz_toolcall.c — (fuzzing only) the tool-call output parser on arbitrary text.
 *
 * Byte 0 picks whether calls are parsed (bit 0), whether the output starts inside a reasoning
 * block (bit 7: the prompt ended with an open <think>), the request's tools (bit 6: FUZZ_TOOLS,
 * whose schemas type the values of the XML-like calls, Qwen's and GLM's; else PLAIN_TOOLS;
 * bit 5 as well: none at all), whether a <tool_call> also ends reasoning (bit 1: Qwen3.5's
 * format, toolcall_parser_end_think_at_call) and a chunking seed; the rest is a model's output. The reasoning-token count (reasoning.h) is also taken over the text cut into
 * the same chunks as "tokens": it counts no more tokens than there are, and none without a
 * reasoning marker. The text is parsed whole and in chunks cut by the seed: both must give the same content, reasoning
 * and calls, the streamed deltas must concatenate to them (content, reasoning, and each call's
 * argument fragments to its arguments), and every call is what it claims: a name among the
 * tools (none without tools), arguments that are one JSON object read strictly (no key twice,
 * no raw control character), sent in one fragment once checked. The rejected blocks and the
 * finish_reason they leave are the same however the text is cut, and content is null or text,
 * never "".
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "fuzz_util.h"
#include "reasoning.h"
#include "toolcall.h"

/* Tools whose parameters have every type an XML value can be read as. */
static const char FUZZ_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"properties\": {\"s\": "
    "{\"type\": \"string\"}, \"i\": {\"type\": \"integer\"}, \"b\": {\"type\": \"boolean\"}, \"o\": {\"type\": "
    "\"object\"}, \"a\": {\"type\": \"array\"}, \"n\": {\"type\": [\"number\", \"null\"]}, \"e\": {\"enum\": "
    "[\"x\", 1]}, \"u\": {\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\"}]}, \"t\": {}}}}}, "
    "{\"name\": \"g\"}]";

/* Names the hostile corpus uses, without schemas. */
static const char PLAIN_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}, {\"name\": \"f\"}, {\"name\": \"g\"}, "
    "{\"name\": \"a\"}, {\"name\": \"b\"}, {\"name\": \"s\"}, {\"name\": \"ping\"}]";

typedef struct result {
    char *content, *reasoning, *calls; /* JSON texts (owned) */
    int n_rejected;
    const char *finish;                /* toolcall_parser_finish_reason for a natural "stop" */
    buf streamed_content, streamed_reasoning;
    buf streamed_args[16];
    int n_fragments[16];
} result;

static char *dump(json_t *v) {
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : strdup("null");
    json_decref(v);
    return s;
}

/* A call is what it claims: its name one of tools, its arguments one JSON object read strictly. */
static void check_call(const json_t *tools, const char *name, const char *args) {
    bool known = false;
    for (size_t i = 0; name && i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i), *f = json_object_get(t, "function");
        known = known || !strcmp(json_string_value(json_object_get(f ? f : t, "name")), name);
    }
    FUZZ_CHECK(known, "a call to '%s', which is not a tool", name ? name : "(null)");
    json_t *v = json_loads(args, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, NULL);
    FUZZ_CHECK(json_is_object(v), "a call whose arguments are not one JSON object: %s", args);
    json_decref(v);
}

static void run(const uint8_t *text, size_t n, bool calls, bool open, bool to_call, const json_t *tools, unsigned seed,
                result *r) {
    toolcall_parser *p = toolcall_parser_create(calls);
    json_t *deltas = json_array();
    FUZZ_CHECK(p && deltas, "out of memory");
    if (open) toolcall_parser_start_in_reasoning(p);
    if (to_call) toolcall_parser_end_think_at_call(p);
    toolcall_parser_set_tools(p, tools);
    for (size_t i = 0; i < n;) {
        size_t k = n;
        if (seed) seed = seed * 1103515245u + 12345u, k = 1 + (seed >> 16) % 7;
        if (k > n - i) k = n - i;
        toolcall_parser_feed(p, (const char *)text + i, k, deltas);
        i += k;
    }
    toolcall_parser_finish(p, deltas);
    for (size_t i = 0; i < json_array_size(deltas); i++) {
        json_t *d = json_array_get(deltas, i), *v;
        if ((v = json_object_get(d, "content"))) buf_puts(&r->streamed_content, json_string_value(v));
        if ((v = json_object_get(d, "reasoning_content"))) buf_puts(&r->streamed_reasoning, json_string_value(v));
        json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        json_int_t k = json_integer_value(json_object_get(tc, "index"));
        const char *frag = json_string_value(json_object_get(json_object_get(tc, "function"), "arguments"));
        if (tc && k >= 0 && k < 16 && frag) buf_puts(&r->streamed_args[k], frag), r->n_fragments[k] += *frag != 0;
    }
    json_t *c = toolcall_parser_content(p), *calls_v = toolcall_parser_calls(p);
    const char *ct = json_is_string(c) ? json_string_value(c) : "";
    FUZZ_CHECK(json_is_null(c) || json_string_length(c) > 0, "content is \"\" (null when there is no text)");
    FUZZ_CHECK(!strcmp(ct, r->streamed_content.p ? r->streamed_content.p : ""), "streamed content differs");
    FUZZ_CHECK(tools || !json_array_size(calls_v), "a call without tools");
    for (size_t i = 0; i < json_array_size(calls_v); i++) {
        const json_t *fn = json_object_get(json_array_get(calls_v, i), "function");
        const char *a = json_string_value(json_object_get(fn, "arguments"));
        FUZZ_CHECK(a, "a call without arguments");
        check_call(tools, json_string_value(json_object_get(fn, "name")), a);
        FUZZ_CHECK(i >= 16 || r->n_fragments[i] <= 1, "call %zu came in %d fragments", i, r->n_fragments[i]);
        if (i < 16)
            FUZZ_CHECK(!strcmp(a, r->streamed_args[i].p ? r->streamed_args[i].p : ""),
                       "call %zu's fragments make '%s', its arguments are '%s'", i,
                       r->streamed_args[i].p ? r->streamed_args[i].p : "", a);
    }
    r->n_rejected = toolcall_parser_n_rejected(p);
    r->finish = toolcall_parser_finish_reason(p, "stop");
    r->content = dump(c);
    r->reasoning = dump(toolcall_parser_reasoning(p));
    /* ids are random: compare the calls without them */
    for (size_t i = 0; i < json_array_size(calls_v); i++) json_object_del(json_array_get(calls_v, i), "id");
    r->calls = dump(calls_v);
    json_decref(deltas);
    toolcall_parser_destroy(p);
}

static void result_free(result *r) {
    free(r->content), free(r->reasoning), free(r->calls);
    buf_free(&r->streamed_content), buf_free(&r->streamed_reasoning);
    for (int i = 0; i < 16; i++) buf_free(&r->streamed_args[i]);
}

/* The chunks of seed's cut as tokens: token i is text[at[i], at[i + 1]). */
typedef struct chunks {
    const uint8_t *text;
    size_t at[4097];
} chunks;

static bool chunk_bytes(void *user, int32_t id, const char **p, size_t *n) {
    const chunks *c = user;
    *p = (const char *)c->text + c->at[id];
    *n = c->at[id + 1] - c->at[id];
    return true;
}

static void check_reasoning_count(const uint8_t *text, size_t n, bool open, bool to_call, unsigned seed) {
    static chunks c;
    static int32_t ids[4096];
    int n_tok = 0;
    c.text = text;
    for (size_t i = 0; i < n; n_tok++) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 7;
        c.at[n_tok] = i;
        ids[n_tok] = n_tok;
        i += k < n - i ? k : n - i;
    }
    c.at[n_tok] = n;
    int count = reasoning_count_tokens(ids, n_tok, open, to_call, chunk_bytes, &c);
    FUZZ_CHECK(count >= 0 && count <= n_tok, "%d reasoning tokens of %d", count, n_tok);
    bool marked = open || memmem(text, n, "<think>", 7) || memmem(text, n, "<|channel|>analysis", 19);
    FUZZ_CHECK(marked || count == 0, "%d reasoning tokens without a reasoning marker", count);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    bool calls = data[0] & 1, open = data[0] & 0x80, to_call = data[0] & 2;
    unsigned seed = (unsigned)data[0] >> 1 | 1;
    static json_t *tools, *plain;
    if (!tools) tools = json_loads(FUZZ_TOOLS, 0, NULL), plain = json_loads(PLAIN_TOOLS, 0, NULL);
    const json_t *use = (data[0] & 0x60) == 0x60 ? NULL : data[0] & 0x40 ? tools : plain;
    result whole = {0}, cut = {0};
    run(data + 1, size - 1, calls, open, to_call, use, 0, &whole);
    run(data + 1, size - 1, calls, open, to_call, use, seed, &cut);
    check_reasoning_count(data + 1, size - 1, open, to_call, seed);
    FUZZ_CHECK(!strcmp(whole.content, cut.content), "content depends on chunking: %s vs %s", whole.content, cut.content);
    FUZZ_CHECK(!strcmp(whole.reasoning, cut.reasoning), "reasoning depends on chunking");
    FUZZ_CHECK(!strcmp(whole.calls, cut.calls), "calls depend on chunking: %s vs %s", whole.calls, cut.calls);
    FUZZ_CHECK(whole.n_rejected == cut.n_rejected, "rejected blocks depend on chunking");
    FUZZ_CHECK(!strcmp(whole.finish, cut.finish), "finish_reason depends on chunking");
    result_free(&whole), result_free(&cut);
    return 0;
}
