/*
 * test_server_anthropic.c — Anthropic's Messages API shapes (server/api/anthropic.c): a body
 * becomes the chat body attnd runs (and oai_parse accepts it), what cannot be served is refused
 * naming the block, the Message has Anthropic's fields and blocks, and the stream's events come
 * in the documented order and rebuild the same Message at any chunking.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "anthropic.h"
#include "attnd/buf.h"
#include "oai.h"

static server_settings cfg;
static void setup(void) { server_settings_default(&cfg); }
TestSuite(anthropic, .init = setup);

static json_t *load(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j, "test JSON is bad: %s", je.text);
    return j;
}

/* Translates text (which must succeed) into r; returns the body. */
static json_t *parse_ok(const char *text, bool count_only, anthropic_request *r) {
    json_t *b = load(text);
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(anthropic_parse(b, &cfg, count_only, r, &param, &err), ATTND_OK, "%s: %s", text, err.msg);
    return b;
}

static void expect_bad(const char *text, const char *want_param) {
    json_t *b = load(text);
    anthropic_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(anthropic_parse(b, &cfg, false, &r, &param, &err), ATTND_ERR_INVALID, "accepted: %s", text);
    cr_expect(param && !strcmp(param, want_param), "%s: param %s, want %s", text, param ? param : "(null)", want_param);
    cr_expect(err.msg[0], "no message for %s", text);
    anthropic_request_free(&r);
    json_decref(b);
}

/* The chat body oai_parse must accept as it stands. */
static void expect_oai_accepts(const json_t *chat) {
    oai_request q;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(oai_parse(chat, true, &cfg, 32000, &q, &param, &err), ATTND_OK, "oai_parse refused (%s): %s",
                 param ? param : "-", err.msg);
    oai_request_free(&q);
}

static const char *msg_field(const json_t *chat, size_t i, const char *key) {
    return json_string_value(json_object_get(json_array_get(json_object_get(chat, "messages"), i), key));
}

Test(anthropic, system_blocks_and_a_user_string_become_chat_messages) {
    anthropic_request r;
    json_t *b = parse_ok("{\"model\":\"m\",\"max_tokens\":20,\"system\":[{\"type\":\"text\",\"text\":\"Be terse.\"},"
                         "{\"type\":\"text\",\"text\":\"Be kind.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
                         "\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"temperature\":0,\"top_p\":0.5,"
                         "\"top_k\":7,\"stop_sequences\":[\"END\"],\"metadata\":{\"user_id\":\"u1\"},\"stream\":true}",
                         false, &r);
    json_t *c = r.chat_body;
    cr_assert_str_eq(msg_field(c, 0, "role"), "system");
    cr_assert_str_eq(msg_field(c, 0, "content"), "Be terse.\nBe kind.");
    cr_assert_str_eq(msg_field(c, 1, "role"), "user");
    cr_assert_str_eq(msg_field(c, 1, "content"), "Hello");
    cr_assert_eq(json_integer_value(json_object_get(c, "max_tokens")), 20);
    cr_assert_eq(json_integer_value(json_object_get(c, "top_k")), 7);
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(c, "stop"), 0)), "END");
    cr_assert(r.stream);
    cr_assert_not(r.clamped);
    expect_oai_accepts(c);
    anthropic_request_free(&r);
    json_decref(b);
}

Test(anthropic, max_tokens_above_the_cap_is_clamped_not_refused) {
    anthropic_request r;
    json_t *b = parse_ok("{\"max_tokens\":32000000,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", false, &r);
    cr_assert(r.clamped);
    cr_assert_eq(json_integer_value(json_object_get(r.chat_body, "max_tokens")), cfg.max_tokens_cap);
    expect_oai_accepts(r.chat_body);
    anthropic_request_free(&r);
    json_decref(b);
}

Test(anthropic, count_tokens_needs_no_max_tokens_and_never_streams) {
    anthropic_request r;
    json_t *b = parse_ok("{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", true, &r);
    cr_assert_not(r.stream);
    cr_assert_null(json_object_get(r.chat_body, "max_tokens"));
    anthropic_request_free(&r);
    json_decref(b);
}

Test(anthropic, tool_history_and_thinking_become_tool_calls_tool_messages_and_reasoning) {
    anthropic_request r;
    json_t *b = parse_ok(
        "{\"max_tokens\":50,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"w\",\"input_schema\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"}}}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Look it up.\",\"signature\":\"s\"},"
        "{\"type\":\"redacted_thinking\",\"data\":\"xx\"},{\"type\":\"text\",\"text\":\"Checking.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"is_error\":true,"
        "\"content\":[{\"type\":\"text\",\"text\":\"timeout\"}]},{\"type\":\"text\",\"text\":\"Try again.\"}]}]}",
        false, &r);
    json_t *c = r.chat_body;
    cr_assert_str_eq(msg_field(c, 1, "role"), "assistant");
    cr_assert_str_eq(msg_field(c, 1, "content"), "Checking.");
    cr_assert_str_eq(msg_field(c, 1, "reasoning_content"), "Look it up.");
    json_t *call = json_array_get(json_object_get(json_array_get(json_object_get(c, "messages"), 1), "tool_calls"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(call, "id")), "toolu_1");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"city\":\"Paris\"}");
    cr_assert_str_eq(msg_field(c, 2, "role"), "tool");
    cr_assert_str_eq(msg_field(c, 2, "tool_call_id"), "toolu_1");
    cr_assert_str_eq(msg_field(c, 2, "content"), "Error: timeout");
    cr_assert_str_eq(msg_field(c, 3, "role"), "user");
    cr_assert_str_eq(msg_field(c, 3, "content"), "Try again.");
    cr_assert(json_is_true(json_object_get(json_object_get(c, "chat_template_kwargs"), "enable_thinking")));
    json_t *fn = json_object_get(json_array_get(json_object_get(c, "tools"), 0), "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "name")), "get_weather");
    cr_assert(json_is_object(json_object_get(fn, "parameters")));
    expect_oai_accepts(c);
    anthropic_request_free(&r);
    json_decref(b);
}

static const char *TOOLS = "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]";

static json_t *tool_choice_of(const char *choice) {
    char text[512];
    snprintf(text, sizeof(text), "{\"max_tokens\":5,%s,\"tool_choice\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
             TOOLS, choice);
    anthropic_request r;
    json_t *b = parse_ok(text, false, &r);
    expect_oai_accepts(r.chat_body);
    json_t *out = json_pack("{s:O*, s:O*}", "tool_choice", json_object_get(r.chat_body, "tool_choice"), "parallel",
                            json_object_get(r.chat_body, "parallel_tool_calls"));
    anthropic_request_free(&r);
    json_decref(b);
    return out;
}

Test(anthropic, tool_choice_maps_to_openai_choices) {
    json_t *t = tool_choice_of("{\"type\":\"any\",\"disable_parallel_tool_use\":true}");
    cr_assert_str_eq(json_string_value(json_object_get(t, "tool_choice")), "required");
    cr_assert(json_is_false(json_object_get(t, "parallel")));
    json_decref(t);
    t = tool_choice_of("{\"type\":\"tool\",\"name\":\"f\"}");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(t, "tool_choice"), "function"), "name")), "f");
    cr_assert_null(json_object_get(t, "parallel"));
    json_decref(t);
    t = tool_choice_of("{\"type\":\"none\"}");
    cr_assert_str_eq(json_string_value(json_object_get(t, "tool_choice")), "none");
    json_decref(t);
    t = tool_choice_of("{\"type\":\"auto\"}");
    cr_assert_str_eq(json_string_value(json_object_get(t, "tool_choice")), "auto");
    json_decref(t);
}

Test(anthropic, what_cannot_be_served_is_refused_naming_the_field) {
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens");
    expect_bad("{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens");
    expect_bad("{\"max_tokens\":5,\"messages\":[]}", "messages");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
               "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AA\"}}]}]}",
               "messages[0].content[1]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"r\"}]}]}",
               "messages[0].content[0]");
    expect_bad("{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\"}]}]}",
               "messages[0].content[0]");
    expect_bad("{\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
               "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "tools[0]");
    expect_bad("{\"max_tokens\":5,\"tool_choice\":{\"type\":\"tool\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               "tool_choice");
    expect_bad("{\"max_tokens\":5,\"thinking\":{\"type\":\"sometimes\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               "thinking");
    expect_bad("{\"max_tokens\":5,\"stop_sequences\":\"END\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               "stop_sequences");
    expect_bad("{\"max_tokens\":5,\"metadata\":[],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "metadata");
    expect_bad("{\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               "system");
}

// ---- the reply ------------------------------------------------------------------------------

static const char *WEATHER_TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}]";

/* A reply read without tools (call ids from the message's id, as the endpoint sets them), and
 * one read for calls of tools. */
static const toolcall_reading PLAIN = {.id_base = "msg_abc"};
static toolcall_reading calls_of(const json_t *tools) {
    return (toolcall_reading){.calls = tools != NULL, .tools = tools, .id_base = "msg_abc"};
}

static anthropic_result result(const char *stop_reason) {
    return (anthropic_result){.id = "msg_abc", .model = "attnd-sotu", .stop_reason = stop_reason,
                              .input_tokens = 9, .cache_read_tokens = 3, .output_tokens = 5};
}

Test(anthropic, a_text_reply_is_one_text_block_with_usage) {
    anthropic_result res = result("end_turn");
    json_t *m = anthropic_message(&res, "Hello there", 11, &PLAIN);
    cr_assert_str_eq(json_string_value(json_object_get(m, "type")), "message");
    cr_assert_str_eq(json_string_value(json_object_get(m, "role")), "assistant");
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "end_turn");
    cr_assert(json_is_null(json_object_get(m, "stop_sequence")));
    json_t *c = json_object_get(m, "content");
    cr_assert_eq(json_array_size(c), 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 0), "text")), "Hello there");
    json_t *u = json_object_get(m, "usage");
    cr_assert_eq(json_integer_value(json_object_get(u, "input_tokens")), 9);
    cr_assert_eq(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 3);
    cr_assert_eq(json_integer_value(json_object_get(u, "output_tokens")), 5);
    json_decref(m);
    res = result("stop_sequence");
    res.stop_sequence = "END";
    m = anthropic_message(&res, "x", 1, &PLAIN);
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_sequence")), "END");
    json_decref(m);
}

static const char *CALL_REPLY = "<think>Need weather.</think>Let me check.\n<tool_call>\n{\"name\": \"get_weather\", "
                                "\"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>";

Test(anthropic, reasoning_text_and_a_call_become_thinking_text_and_tool_use_blocks) {
    json_t *tools = load(WEATHER_TOOLS);
    const toolcall_reading how = calls_of(tools);
    anthropic_result res = result("end_turn");
    json_t *m = anthropic_message(&res, CALL_REPLY, strlen(CALL_REPLY), &how);
    json_t *c = json_object_get(m, "content");
    cr_assert_eq(json_array_size(c), 3, "%s", json_dumps(m, 0));
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 0), "type")), "thinking");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 0), "thinking")), "Need weather.");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 1), "type")), "text");
    json_t *use = json_array_get(c, 2);
    cr_assert_str_eq(json_string_value(json_object_get(use, "type")), "tool_use");
    cr_assert_str_eq(json_string_value(json_object_get(use, "name")), "get_weather");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(use, "input"), "city")), "Paris");
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "tool_use");
    json_decref(m);
    res = result("max_tokens"); /* a cut reply keeps its cause */
    m = anthropic_message(&res, CALL_REPLY, strlen(CALL_REPLY), &how);
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "max_tokens");
    json_decref(m);
    json_decref(tools);
}

/* The events of an SSE text, in order ("event" lines), and each frame's data as parsed JSON. */
static json_t *frames_of(const char *sse) {
    json_t *out = json_array();
    for (const char *p = sse; (p = strstr(p, "event: ")) != NULL;) {
        const char *nl = strchr(p, '\n'), *data = nl ? strstr(nl, "data: ") : NULL;
        cr_assert(nl && data == nl + 1, "a frame without its data line: %.80s", p);
        const char *end = strstr(data, "\n\n");
        cr_assert_not_null(end);
        json_error_t je;
        json_t *d = json_loadb(data + 6, (size_t)(end - data - 6), 0, &je);
        cr_assert_not_null(d, "frame data is not JSON: %.80s", data);
        char ev[64];
        snprintf(ev, sizeof(ev), "%.*s", (int)(nl - p - 7), p + 7);
        cr_assert_str_eq(json_string_value(json_object_get(d, "type")), ev, "the data's type is its event's");
        json_array_append_new(out, d);
        p = end;
    }
    return out;
}

/* Streams text in chunks of `chunk` bytes, read as how says; returns the frames. */
static json_t *stream_frames(const char *text, size_t chunk, const toolcall_reading *how) {
    anthropic_stream st;
    cr_assert(anthropic_stream_init(&st, how));
    anthropic_result res = result(NULL);
    buf out;
    buf_init(&out);
    anthropic_stream_begin(&st, &res, &out);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += chunk) anthropic_stream_delta(&st, text + i, n - i < chunk ? n - i : chunk, &out);
    res = result("end_turn");
    anthropic_stream_end(&st, &res, &out);
    json_t *f = frames_of(out.p);
    buf_free(&out);
    anthropic_stream_free(&st);
    return f;
}

static const char *type_of(const json_t *frames, size_t i) {
    return json_string_value(json_object_get(json_array_get(frames, i), "type"));
}

/* The content blocks rebuilt from a stream's frames f (start / delta / stop) as a client does
 * (new reference). */
static json_t *rebuild_blocks(const json_t *f) {
    size_t n = json_array_size(f);
    json_t *blocks = json_array(), *partial = json_array();
    int open = -1;
    for (size_t i = 2; i < n - 2; i++) {
        json_t *e = json_array_get(f, i);
        const char *t = type_of(f, i);
        int index = (int)json_integer_value(json_object_get(e, "index"));
        if (!strcmp(t, "content_block_start")) {
            cr_assert_eq(open, -1, "a block starts inside another");
            cr_assert_eq(index, (int)json_array_size(blocks), "block indexes count up");
            json_array_append(blocks, json_object_get(e, "content_block"));
            json_array_append_new(partial, json_string(""));
            open = index;
        } else if (!strcmp(t, "content_block_delta")) {
            cr_assert_eq(index, open, "a delta of a block that is not open");
            json_t *d = json_object_get(e, "delta"), *b = json_array_get(blocks, (size_t)index);
            const char *dt = json_string_value(json_object_get(d, "type"));
            const char *key = !strcmp(dt, "text_delta") ? "text" : !strcmp(dt, "thinking_delta") ? "thinking" : "partial_json";
            json_t *into = !strcmp(key, "partial_json") ? json_array_get(partial, (size_t)index) : json_object_get(b, key);
            buf joined;
            buf_init(&joined);
            cr_assert(buf_printf(&joined, "%s%s", json_string_value(into), json_string_value(json_object_get(d, key))));
            json_string_set(into, joined.p);
            buf_free(&joined);
        } else {
            cr_assert_str_eq(t, "content_block_stop");
            cr_assert_eq(index, open);
            json_t *b = json_array_get(blocks, (size_t)index);
            if (!strcmp(json_string_value(json_object_get(b, "type")), "tool_use"))
                json_object_set_new(b, "input", json_loads(json_string_value(json_array_get(partial, (size_t)index)), 0, NULL));
            open = -1;
        }
    }
    json_decref(partial);
    return blocks;
}

Test(anthropic, the_stream_follows_the_documented_order_and_rebuilds_the_message_at_any_chunking) {
    json_t *tools = load(WEATHER_TOOLS);
    const toolcall_reading how = calls_of(tools);
    anthropic_result whole_res = result("end_turn");
    json_t *whole = anthropic_message(&whole_res, CALL_REPLY, strlen(CALL_REPLY), &how);
    for (size_t chunk = 1; chunk <= strlen(CALL_REPLY); chunk += chunk < 8 ? 1 : 13) {
        json_t *f = stream_frames(CALL_REPLY, chunk, &how);
        size_t n = json_array_size(f);
        cr_assert_str_eq(type_of(f, 0), "message_start");
        cr_assert_str_eq(type_of(f, 1), "ping");
        cr_assert_str_eq(type_of(f, n - 2), "message_delta");
        cr_assert_str_eq(type_of(f, n - 1), "message_stop");
        cr_assert_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(f, n - 2), "delta"), "stop_reason")),
                         "tool_use");
        json_t *blocks = rebuild_blocks(f);
        cr_assert(json_equal(blocks, json_object_get(whole, "content")), "chunk %zu: streamed %s, whole %s", chunk,
                  json_dumps(blocks, 0), json_dumps(json_object_get(whole, "content"), 0));
        json_decref(blocks);
        json_decref(f);
    }
    json_decref(whole);
    json_decref(tools);
}

Test(anthropic, a_failure_after_the_start_is_an_error_event) {
    anthropic_stream st;
    cr_assert(anthropic_stream_init(&st, &PLAIN));
    buf out;
    buf_init(&out);
    anthropic_stream_error(&st, 503, "the server is shutting down", &out);
    json_t *f = frames_of(out.p);
    cr_assert_eq(json_array_size(f), 1);
    json_t *e = json_object_get(json_array_get(f, 0), "error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "type")), "overloaded_error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "message")), "the server is shutting down");
    json_decref(f);
    buf_free(&out);
    anthropic_stream_free(&st);
}

Test(anthropic, errors_have_anthropic_types_by_status) {
    static const struct { int status; const char *type; } cases[] = {
        {400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
        {404, "not_found_error"}, {413, "request_too_large"}, {429, "rate_limit_error"},
        {503, "overloaded_error"}, {500, "api_error"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *e = anthropic_error(cases[i].status, "m");
        cr_assert_str_eq(json_string_value(json_object_get(e, "type")), "error");
        cr_assert_str_eq(json_string_value(json_object_get(json_object_get(e, "error"), "type")), cases[i].type);
        json_decref(e);
    }
}

Test(anthropic, parallel_calls_are_tool_use_blocks_and_blanks_between_them_no_text_block) {
    json_t *tools = load("[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\"}}},"
                         "{\"type\":\"function\",\"function\":{\"name\":\"b\",\"parameters\":{\"type\":\"object\"}}}]");
    const char *reply = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n\n"
                        "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
    const toolcall_reading how = calls_of(tools);
    anthropic_result res = result("end_turn");
    json_t *m = anthropic_message(&res, reply, strlen(reply), &how);
    json_t *c = json_object_get(m, "content");
    cr_assert_eq(json_array_size(c), 2, "%s", json_dumps(c, 0));
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 0), "name")), "a");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 1), "name")), "b");
    cr_assert_str_neq(json_string_value(json_object_get(json_array_get(c, 0), "id")),
                      json_string_value(json_object_get(json_array_get(c, 1), "id")));
    json_decref(m);
    for (size_t chunk = 1; chunk < 12; chunk++) { /* streamed: the same two blocks, nothing between */
        json_t *f = stream_frames(reply, chunk, &how);
        int starts = 0;
        for (size_t i = 0; i < json_array_size(f); i++) starts += !strcmp(type_of(f, i), "content_block_start");
        cr_assert_eq(starts, 2, "chunk %zu: %d blocks", chunk, starts);
        json_decref(f);
    }
    json_decref(tools);
}

Test(anthropic, text_that_starts_with_blanks_keeps_them) {
    anthropic_result res = result("end_turn");
    json_t *m = anthropic_message(&res, "\n  Hello", 8, &PLAIN);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(m, "content"), 0), "text")), "\n  Hello");
    json_decref(m);
    m = anthropic_message(&res, " \n", 2, &PLAIN);
    cr_assert_eq(json_array_size(json_object_get(m, "content")), 0, "a reply of blanks only has no text block");
    json_decref(m);
}

/* Qwen3.5 / 3.6 (qwen35, qwen35moe) may open a call inside their unclosed thinking: the prompt
 * ends with "<think>\n" and the reply is "… <tool_call> … </tool_call>" with no "</think>". A
 * request bound to their call format reads as the chat completions endpoint reads it
 * (oai_reply_reading): a thinking block that stops before the call, then the call as a tool_use
 * block, whole and streamed at every chunking. Bound to a format that does not end reasoning at
 * a call (Hermes), the same text stays thinking. */
static const char QWEN35_REPLY[] = "The user wants Paris.\n<tool_call>\n<function=get_weather>\n"
                                   "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>";

/* The Message for QWEN35_REPLY of a request with a get_weather tool whose template writes calls
 * in format f and opened the reasoning; streamed at every chunking, it must rebuild the same. */
static json_t *qwen35_message(toolcall_format f) {
    anthropic_request rq;
    json_t *b = parse_ok("{\"model\":\"m\",\"max_tokens\":64,\"tools\":[{\"name\":\"get_weather\",\"input_schema\":"
                         "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],"
                         "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]}", false, &rq);
    oai_request q;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(oai_parse(rq.chat_body, true, &cfg, 32000, &q, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(oai_bind_template(&q, true, f, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(oai_open_reasoning(&q, &err), ATTND_OK, "%s", err.msg);
    const toolcall_reading how = oai_reply_reading(&q, "msg_abc");
    anthropic_result res = result("end_turn");
    json_t *m = anthropic_message(&res, QWEN35_REPLY, strlen(QWEN35_REPLY), &how);
    cr_assert_not_null(m);
    for (size_t chunk = 1; chunk <= sizeof(QWEN35_REPLY); chunk += chunk < 12 ? 1 : 17) {
        json_t *fr = stream_frames(QWEN35_REPLY, chunk, &how), *blocks = rebuild_blocks(fr);
        cr_assert(json_equal(blocks, json_object_get(m, "content")), "chunk %zu: streamed %s, whole %s", chunk,
                  json_dumps(blocks, 0), json_dumps(json_object_get(m, "content"), 0));
        json_decref(blocks);
        json_decref(fr);
    }
    oai_request_free(&q);
    anthropic_request_free(&rq);
    json_decref(b);
    return m;
}

Test(anthropic, a_qwen35_call_inside_unclosed_thinking_is_a_tool_use_block) {
    json_t *m = qwen35_message(TOOLCALL_FMT_QWEN_XML);
    json_t *c = json_object_get(m, "content");
    cr_assert_eq(json_array_size(c), 2, "%s", json_dumps(m, 0));
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 0), "type")), "thinking");
    const char *thinking = json_string_value(json_object_get(json_array_get(c, 0), "thinking"));
    cr_assert_str_eq(thinking, "The user wants Paris.\n");
    cr_assert_null(strstr(thinking, "tool_call"), "the call is not thinking text");
    json_t *use = json_array_get(c, 1);
    cr_assert_str_eq(json_string_value(json_object_get(use, "type")), "tool_use");
    cr_assert_str_eq(json_string_value(json_object_get(use, "name")), "get_weather");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(use, "input"), "city")), "Paris");
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "tool_use");
    json_decref(m);

    m = qwen35_message(TOOLCALL_FMT_HERMES); /* reasoning ends only at </think> there */
    c = json_object_get(m, "content");
    cr_assert_eq(json_array_size(c), 1, "%s", json_dumps(m, 0));
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 0), "thinking")), QWEN35_REPLY);
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "end_turn");
    json_decref(m);
}
