/*
 * test_server_responses.c — OpenAI's Responses API shapes (server/api/responses.c): requests become the
 * chat body attnd runs, what is not text generation is refused naming the field, the Response
 * object and the streamed events have OpenAI's fields and order.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"
#include "attnd/buf.h"
#include "responses.h"

static server_settings cfg;
static void setup(void) { server_settings_default(&cfg); }
TestSuite(responses, .init = setup);

static json_t *load(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j, "test JSON is bad: %s", je.text);
    return j;
}

static void expect_bad(const char *text, const char *want_param) {
    json_t *b = load(text);
    responses_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(responses_parse(b, &cfg, &r, &param, &err), ATTND_ERR_INVALID, "accepted: %s", text);
    cr_expect(param && !strcmp(param, want_param), "%s: param %s, want %s", text, param ? param : "(null)", want_param);
    cr_expect(err.msg[0], "no message for %s", text);
    responses_request_free(&r);
    json_decref(b);
}

/* Parses the body text into *r, which must succeed; returns the body, which r borrows from. */
static json_t *parse_ok(const char *text, responses_request *r) {
    json_t *b = load(text);
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(responses_parse(b, &cfg, r, &param, &err), ATTND_OK, "%s: %s", text, err.msg);
    return b;
}

static responses_result result(const responses_request *q, const char *status, const char *text, bool cut) {
    return (responses_result){.id = "resp_abc", .msg_id = "msg_abc", .model = "attnd-sotu", .created_at = 1700000000,
                              .status = status, .text = text, .text_len = strlen(text), .cut_short = cut,
                              .input_tokens = 12, .cached_tokens = 4, .output_tokens = 5, .req = q,
                              .temperature = 1, .top_p = 1};
}

Test(responses, a_string_input_becomes_one_user_message_after_the_instructions) {
    responses_request r;
    json_t *b = parse_ok("{\"model\":\"m\",\"input\":\"Hello\",\"instructions\":\"Be terse.\",\"max_output_tokens\":9,"
                       "\"temperature\":0,\"top_p\":0.5,\"seed\":3,\"store\":false,\"metadata\":{\"k\":\"v\"}}", &r);
    cr_assert_str_eq(r.instructions, "Be terse.");
    cr_assert_not(r.store);
    cr_assert_eq(r.max_output_tokens, 9);
    json_t *chat = responses_chat_body(&r, NULL);
    json_t *msgs = json_object_get(chat, "messages");
    cr_assert_eq(json_array_size(msgs), 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 0), "role")), "system");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 1), "content")), "Hello");
    cr_assert_eq(json_integer_value(json_object_get(chat, "max_tokens")), 9);
    /* the chat body validates like any chat completion */
    oai_request q;
    const char *param;
    attnd_err err;
    cr_assert_eq(oai_parse(chat, true, &cfg, 512, &q, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(q.max_tokens, 9);
    cr_assert_eq(q.sp.temperature, 0);
    cr_assert_eq(q.sp.seed, 3);
    cr_assert_eq(q.n_msgs, 2);
    oai_request_free(&q);
    json_decref(chat);
    responses_request_free(&r);
    json_decref(b);
}

Test(responses, message_items_with_text_parts_follow_the_earlier_conversation) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":[{\"role\":\"developer\",\"content\":\"d\"},"
                       "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
                       "{\"type\":\"input_text\",\"text\":\"b\"}]}],\"previous_response_id\":\"resp_1\"}", &r);
    cr_assert(r.store, "store defaults to true");
    cr_assert_str_eq(r.previous_id, "resp_1");
    json_t *earlier = load("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"r\"}]");
    json_t *chat = responses_chat_body(&r, earlier);
    json_t *msgs = json_object_get(chat, "messages");
    cr_assert_eq(json_array_size(msgs), 4);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 1), "content")), "r");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 2), "role")), "developer");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 3), "content")), "ab");
    responses_result res = result(&r, "completed", "reply", false);
    json_t *conv = responses_conversation(&res, earlier);
    cr_assert_eq(json_array_size(conv), 5);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(conv, 4), "role")), "assistant");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(conv, 4), "content")), "reply");
    json_decref(conv);
    json_decref(chat);
    json_decref(earlier);
    responses_request_free(&r);
    json_decref(b);
}

Test(responses, what_is_not_text_generation_is_refused_naming_the_field) {
    expect_bad("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools");
    expect_bad("{\"input\":\"x\",\"tool_choice\":\"required\"}", "tool_choice");
    expect_bad("{\"input\":\"x\",\"reasoning\":{\"effort\":\"high\"}}", "reasoning");
    expect_bad("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\"}}}", "text.format");
    expect_bad("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", "text.format");
    expect_bad("{\"input\":\"x\",\"background\":true}", "background");
    expect_bad("{\"input\":\"x\",\"truncation\":\"auto\"}", "truncation");
    expect_bad("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
               "{\"type\":\"input_image\",\"image_url\":\"http://x\"}]}]}",
               "input[0].content[1]");
    expect_bad("{\"input\":[{\"role\":\"user\",\"content\":\"a\"},{\"type\":\"function_call_output\",\"call_id\":7,"
               "\"output\":\"o\"}]}",
               "input[1]");
    expect_bad("{\"input\":[{\"role\":\"tool\",\"content\":\"a\"}]}", "input[0]");
    expect_bad("{\"input\":[]}", "input");
    expect_bad("{\"instructions\":\"x\"}", "input");
    expect_bad("{\"input\":\"x\",\"max_output_tokens\":-1}", "max_output_tokens");
    expect_bad("{\"input\":\"x\",\"max_output_tokens\":100000000}", "max_output_tokens");
    expect_bad("{\"input\":\"x\",\"metadata\":{\"k\":1}}", "metadata");
    expect_bad("{\"input\":\"x\",\"store\":\"yes\"}", "store");
    /* harmless defaults that clients send are accepted */
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"tools\":[],\"tool_choice\":\"auto\",\"reasoning\":null,\"truncation\":"
                       "\"disabled\",\"text\":{\"format\":{\"type\":\"text\"}},\"parallel_tool_calls\":true,\"include\":[]}",
                         &r);
    responses_request_free(&r);
    json_decref(b);
}

Test(responses, the_response_object_has_openai_fields) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"instructions\":\"i\",\"metadata\":{\"k\":\"v\"}}", &r);
    responses_result res = result(&r, "completed", "Hi there", false);
    json_t *o = responses_object(&res);
    cr_assert_str_eq(json_string_value(json_object_get(o, "object")), "response");
    cr_assert_str_eq(json_string_value(json_object_get(o, "status")), "completed");
    cr_assert_str_eq(json_string_value(json_object_get(o, "instructions")), "i");
    cr_assert(json_is_null(json_object_get(o, "incomplete_details")));
    json_t *msg = json_array_get(json_object_get(o, "output"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(msg, "type")), "message");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    json_t *part = json_array_get(json_object_get(msg, "content"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(part, "type")), "output_text");
    cr_assert_str_eq(json_string_value(json_object_get(part, "text")), "Hi there");
    json_t *u = json_object_get(o, "usage");
    cr_assert_eq(json_integer_value(json_object_get(u, "input_tokens")), 12);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens")), 4);
    cr_assert_eq(json_integer_value(json_object_get(u, "output_tokens")), 5);
    cr_assert_eq(json_integer_value(json_object_get(u, "total_tokens")), 17);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "metadata"), "k")), "v");
    json_decref(o);

    res = result(&r, "incomplete", "Hi", true);
    o = responses_object(&res);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "incomplete_details"), "reason")),
                     "max_output_tokens");
    json_decref(o);
    o = responses_deleted("resp_abc");
    cr_assert(json_is_true(json_object_get(o, "deleted")));
    cr_assert_str_eq(json_string_value(json_object_get(o, "object")), "response.deleted");
    json_decref(o);
    responses_request_free(&r);
    json_decref(b);
}

/* Splits SSE text into its events' JSON; checks each frame's event line matches its type. */
static int events(const char *sse, json_t **out, int max) {
    int n = 0;
    const char *p = sse;
    while (*p && n < max) {
        cr_assert_eq(strncmp(p, "event: ", 7), 0, "frame starts with its event line: %.40s", p);
        const char *nl = strchr(p, '\n');
        char type[64];
        snprintf(type, sizeof(type), "%.*s", (int)(nl - p - 7), p + 7);
        cr_assert_eq(strncmp(nl + 1, "data: ", 6), 0);
        const char *end = strstr(nl + 1, "\n\n");
        cr_assert_not_null(end);
        json_error_t je;
        out[n] = json_loadb(nl + 7, (size_t)(end - nl - 7), 0, &je);
        cr_assert_not_null(out[n], "bad event JSON: %s", je.text);
        cr_assert_str_eq(json_string_value(json_object_get(out[n], "type")), type);
        n++;
        p = end + 2;
    }
    return n;
}

Test(responses, the_stream_has_openai_event_order_and_increasing_sequence_numbers) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"stream\":true}", &r);
    responses_stream st = {0};
    responses_result res = result(&r, "in_progress", "", false);
    char *parts[4];
    parts[0] = responses_stream_begin(&st, &res);
    parts[1] = responses_stream_delta(&st, &res, "Hel", 3);
    parts[2] = responses_stream_delta(&st, &res, "lo", 2);
    res = result(&r, "completed", "Hello", false);
    parts[3] = responses_stream_end(&st, &res);
    size_t total = 1;
    for (int i = 0; i < 4; i++) total += strlen(parts[i]);
    char *all = calloc(1, total);
    for (int i = 0; i < 4; i++) strcat(all, parts[i]), free(parts[i]);
    json_t *ev[16];
    int n = events(all, ev, 16);
    const char *want[] = {"response.created", "response.in_progress", "response.output_item.added",
                          "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                          "response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"};
    cr_assert_eq(n, 10);
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(json_string_value(json_object_get(ev[i], "type")), want[i]);
        cr_assert_eq(json_integer_value(json_object_get(ev[i], "sequence_number")), i);
    }
    json_t *created = json_object_get(ev[0], "response");
    cr_assert_str_eq(json_string_value(json_object_get(created, "status")), "in_progress");
    cr_assert_eq(json_array_size(json_object_get(created, "output")), 0);
    cr_assert_str_eq(json_string_value(json_object_get(ev[4], "delta")), "Hel");
    cr_assert_str_eq(json_string_value(json_object_get(ev[4], "item_id")), "msg_abc");
    cr_assert_eq(json_integer_value(json_object_get(ev[4], "content_index")), 0);
    cr_assert_str_eq(json_string_value(json_object_get(ev[6], "text")), "Hello");
    json_t *done = json_object_get(ev[9], "response");
    cr_assert_str_eq(json_string_value(json_object_get(done, "status")), "completed");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(done, "usage"), "output_tokens")), 5);
    for (int i = 0; i < n; i++) json_decref(ev[i]);
    free(all);

    /* cut short by max_output_tokens: the last event is response.incomplete */
    res = result(&r, "incomplete", "He", true);
    char *end = responses_stream_end(&st, &res);
    cr_assert(strstr(end, "event: response.incomplete\n"), "%s", end);
    cr_assert_null(strstr(end, "response.completed"));
    free(end);
    responses_stream_free(&st);
    responses_request_free(&r);
    json_decref(b);
}

Test(responses, a_failed_generation_ends_the_stream_with_response_failed) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"stream\":true}", &r);
    responses_stream st = {.seq = 5};
    responses_result res = result(&r, "failed", "", false);
    char *sse = responses_stream_failed(&st, &res, "KV cache budget exhausted");
    json_t *ev[2];
    cr_assert_eq(events(sse, ev, 2), 1);
    cr_assert_str_eq(json_string_value(json_object_get(ev[0], "type")), "response.failed");
    cr_assert_eq(json_integer_value(json_object_get(ev[0], "sequence_number")), 5);
    json_t *resp = json_object_get(ev[0], "response");
    cr_assert_str_eq(json_string_value(json_object_get(resp, "status")), "failed");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(resp, "error"), "message")),
                     "KV cache budget exhausted");
    json_decref(ev[0]);
    free(sse);
    responses_request_free(&r);
    json_decref(b);
}

/* With a function tool the reply streams through the tool-call parser: the text as the message,
 * the call as a function_call item whose arguments arrive in fragments; whatever the chunking,
 * they concatenate to the arguments of the .done event and of the final response object, under
 * the same ids. */
Test(responses, a_streamed_function_call_has_its_item_and_argument_events) {
    static const char TEXT[] = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                               "\"days\": [1, 2]}}\n</tool_call>";
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"stream\":true,\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\","
                         "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}]}", &r);
    cr_assert(r.tools);
    for (size_t chunk = 1; chunk <= 9; chunk += 4) {
        responses_stream st = {0};
        responses_result res = result(&r, "in_progress", "", false);
        buf all = {0};
        char *f = responses_stream_begin(&st, &res);
        buf_puts(&all, f), free(f);
        for (size_t i = 0; i < strlen(TEXT); i += chunk) {
            size_t k = strlen(TEXT) - i < chunk ? strlen(TEXT) - i : chunk;
            f = responses_stream_delta(&st, &res, TEXT + i, k);
            buf_puts(&all, f), free(f);
        }
        res = result(&r, "completed", TEXT, false);
        f = responses_stream_end(&st, &res);
        buf_puts(&all, f), free(f);
        responses_stream_free(&st);
        json_t *ev[256];
        int n = events(all.p, ev, 256);
        char text[256] = "", args[256] = "", item[128] = "";
        int n_arg_deltas = 0, added_call = -1, done_call = -1;
        const json_t *final = NULL, *done_args = NULL;
        for (int i = 0; i < n; i++) {
            const char *type = json_string_value(json_object_get(ev[i], "type"));
            cr_assert_eq(json_integer_value(json_object_get(ev[i], "sequence_number")), i);
            const json_t *it = json_object_get(ev[i], "item");
            if (!strcmp(type, "response.output_text.delta")) strcat(text, json_string_value(json_object_get(ev[i], "delta")));
            if (!strcmp(type, "response.output_item.added") && !strcmp(json_string_value(json_object_get(it, "type")), "function_call")) {
                added_call = i;
                snprintf(item, sizeof(item), "%s", json_string_value(json_object_get(it, "id")));
                cr_assert_str_eq(json_string_value(json_object_get(it, "name")), "get_weather");
                cr_assert_str_eq(json_string_value(json_object_get(it, "status")), "in_progress");
                cr_assert_eq(json_integer_value(json_object_get(ev[i], "output_index")), 1);
            }
            if (!strcmp(type, "response.function_call_arguments.delta")) {
                cr_assert_str_eq(json_string_value(json_object_get(ev[i], "item_id")), item);
                strcat(args, json_string_value(json_object_get(ev[i], "delta")));
                n_arg_deltas++;
            }
            if (!strcmp(type, "response.function_call_arguments.done")) done_call = i, done_args = json_object_get(ev[i], "arguments");
            if (!strcmp(type, "response.completed")) final = json_object_get(ev[i], "response");
        }
        cr_assert_str_eq(text, "Let me check.", "chunks of %zu", chunk);
        cr_assert(added_call > 0 && done_call > added_call);
        cr_assert_str_eq(args, "{\"city\":\"Paris\",\"days\":[1,2]}", "chunks of %zu", chunk);
        cr_assert_str_eq(json_string_value(done_args), args);
        cr_assert_eq(n_arg_deltas, 1, "the arguments come once the call is whole and checked (%d deltas)", n_arg_deltas);
        cr_assert(final);
        const json_t *out = json_object_get(final, "output"), *call = json_array_get(out, 1);
        cr_assert_eq(json_array_size(out), 2);
        cr_assert_str_eq(json_string_value(json_object_get(json_array_get(out, 0), "type")), "message");
        cr_assert_str_eq(json_string_value(json_object_get(call, "type")), "function_call");
        cr_assert_str_eq(json_string_value(json_object_get(call, "id")), item, "the same item id");
        cr_assert_str_eq(json_string_value(json_object_get(call, "arguments")), args);
        cr_assert(!strncmp(json_string_value(json_object_get(call, "call_id")), "call_resp_abc_", 14));
        for (int i = 0; i < n; i++) json_decref(ev[i]);
        buf_free(&all);
    }
    responses_request_free(&r);
    json_decref(b);
}

// ---- reasoning ----------------------------------------------------------------------------

/* The whole event stream of a reply text cut into chunks of `chunk` bytes (open: the prompt
 * ended inside <think>); returns the number of events in ev. */
static int stream_events(const responses_request *r, const char *text, size_t chunk, bool open, json_t **ev, int max) {
    responses_stream st = {0};
    responses_result res = result(r, "in_progress", "", false);
    res.open_reasoning = open;
    buf all = {0};
    char *f = responses_stream_begin(&st, &res);
    cr_assert_not_null(f);
    buf_puts(&all, f), free(f);
    for (size_t i = 0; i < strlen(text); i += chunk) {
        size_t k = strlen(text) - i < chunk ? strlen(text) - i : chunk;
        f = responses_stream_delta(&st, &res, text + i, k);
        cr_assert_not_null(f);
        buf_puts(&all, f), free(f);
    }
    res = result(r, "completed", text, false);
    res.open_reasoning = open;
    f = responses_stream_end(&st, &res);
    buf_puts(&all, f), free(f);
    responses_stream_free(&st);
    int n = events(all.p, ev, max);
    buf_free(&all);
    return n;
}

/* What a client rebuilds from the stream is the final object: sequence numbers count up, items
 * are added at the next output_index, each item's .done equals the final output item, and each
 * item's deltas join to its .done text. Returns the final response (borrowed from ev). */
static const json_t *check_stream(json_t **ev, int n) {
    const json_t *final = json_object_get(ev[n - 1], "response");
    const json_t *out = json_object_get(final, "output");
    int added = 0;
    buf joined[8] = {{0}};
    for (int i = 0; i < n; i++) {
        const char *type = json_string_value(json_object_get(ev[i], "type"));
        json_int_t at = json_integer_value(json_object_get(ev[i], "output_index"));
        cr_assert_eq(json_integer_value(json_object_get(ev[i], "sequence_number")), i);
        if (!strcmp(type, "response.output_item.added")) cr_assert_eq(at, added++, "items are added in order");
        if (!strcmp(type, "response.output_item.done"))
            cr_assert(json_equal(json_object_get(ev[i], "item"), json_array_get(out, (size_t)at)),
                      "item %lld's .done is the final object's", (long long)at);
        const json_t *d = json_object_get(ev[i], "delta");
        if (json_is_string(d) && at < 8) buf_puts(&joined[at], json_string_value(d));
        const json_t *t = json_object_get(ev[i], !strcmp(type, "response.function_call_arguments.done") ? "arguments" : "text");
        if (strstr(type, ".done") && json_is_string(t) && at < 8)
            cr_assert_str_eq(joined[at].p ? joined[at].p : "", json_string_value(t), "%s: the deltas make the text", type);
    }
    cr_assert_eq((size_t)added, json_array_size(out), "every final item was streamed");
    for (int i = 0; i < 8; i++) buf_free(&joined[i]);
    return final;
}

static const char *item_type(const json_t *out, size_t i) {
    return json_string_value(json_object_get(json_array_get(out, i), "type"));
}

static const char *reasoning_text_of(const json_t *item) {
    return json_string_value(json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
}

Test(responses, reasoning_becomes_a_reasoning_item_before_the_message) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\"}", &r);
    responses_result res = result(&r, "completed", "<think>\nplan it\n</think>\n\nHello there", false);
    json_t *o = responses_object(&res);
    const json_t *out = json_object_get(o, "output"), *rs = json_array_get(out, 0);
    cr_assert_eq(json_array_size(out), 2);
    cr_assert_str_eq(item_type(out, 0), "reasoning");
    cr_assert_str_eq(json_string_value(json_object_get(rs, "id")), "rs_abc");
    cr_assert_str_eq(json_string_value(json_object_get(rs, "status")), "completed");
    cr_assert(json_is_array(json_object_get(rs, "summary")) && json_array_size(json_object_get(rs, "summary")) == 0);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(rs, "content"), 0), "type")),
                     "reasoning_text");
    cr_assert_str_eq(reasoning_text_of(rs), "\nplan it\n");
    cr_assert_str_eq(item_type(out, 1), "message");
    const json_t *part = json_array_get(json_object_get(json_array_get(out, 1), "content"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(part, "text")), "Hello there", "no reasoning in output_text");
    json_decref(o);

    /* the prompt ended with an open <think>: the reply starts as reasoning */
    res = result(&r, "completed", "plan it</think>Hello there", false);
    res.open_reasoning = true;
    o = responses_object(&res);
    out = json_object_get(o, "output");
    cr_assert_eq(json_array_size(out), 2);
    cr_assert_str_eq(reasoning_text_of(json_array_get(out, 0)), "plan it");
    part = json_array_get(json_object_get(json_array_get(out, 1), "content"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(part, "text")), "Hello there");
    json_decref(o);

    /* cut off while reasoning: the reasoning item is incomplete, the message empty */
    res = result(&r, "incomplete", "<think>still going", true);
    o = responses_object(&res);
    out = json_object_get(o, "output");
    cr_assert_eq(json_array_size(out), 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(out, 0), "status")), "incomplete");
    cr_assert_str_eq(reasoning_text_of(json_array_get(out, 0)), "still going");
    part = json_array_get(json_object_get(json_array_get(out, 1), "content"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(part, "text")), "");
    json_decref(o);
    responses_request_free(&r);
    json_decref(b);
}

Test(responses, reasoning_then_a_call_are_two_items_and_no_message) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}]}", &r);
    responses_result res = result(&r, "completed", "<think>call f</think>\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", false);
    json_t *o = responses_object(&res);
    const json_t *out = json_object_get(o, "output");
    cr_assert_eq(json_array_size(out), 2);
    cr_assert_str_eq(item_type(out, 0), "reasoning");
    cr_assert_str_eq(reasoning_text_of(json_array_get(out, 0)), "call f");
    cr_assert_str_eq(item_type(out, 1), "function_call");
    json_decref(o);
    json_t *ev[64];
    int n = stream_events(&r, res.text, 3, false, ev, 64);
    const json_t *final = check_stream(ev, n);
    cr_assert_eq(json_array_size(json_object_get(final, "output")), 2);
    for (int i = 0; i < n; i++) json_decref(ev[i]);
    responses_request_free(&r);
    json_decref(b);
}

/* Qwen3.5's XML calls and GLM's <arg_key> calls, after the reasoning their templates open the
 * reply in, are function_call items with arguments typed by the tool's schema, whole and
 * streamed at every chunk size alike. */
Test(responses, qwen35_and_glm_calls_are_function_call_items) {
    static const char *const TEXTS[] = {
        "plan\n</think>\n\n<tool_call>\n<function=f>\n<parameter=city>\n12\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n</function>\n</tool_call>",
        "plan</think><tool_call>f<arg_key>city</arg_key><arg_value>12</arg_value><arg_key>days</arg_key><arg_value>3"
        "</arg_value></tool_call>",
    };
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":"
                         "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}]}", &r);
    for (size_t k = 0; k < ATTND_ARRAY_LEN(TEXTS); k++) {
        responses_result res = result(&r, "completed", TEXTS[k], false);
        res.open_reasoning = true;
        json_t *o = responses_object(&res);
        const json_t *out = json_object_get(o, "output");
        cr_assert_eq(json_array_size(out), 2, "%s", TEXTS[k]);
        cr_assert_str_eq(item_type(out, 0), "reasoning");
        cr_assert_str_eq(item_type(out, 1), "function_call");
        cr_assert_str_eq(json_string_value(json_object_get(json_array_get(out, 1), "arguments")), "{\"city\":\"12\",\"days\":3}");
        for (size_t chunk = 1; chunk <= 7; chunk += 3) {
            json_t *ev[256];
            int n = stream_events(&r, TEXTS[k], chunk, true, ev, 256);
            const json_t *final = check_stream(ev, n);
            cr_assert(json_equal(json_object_get(final, "output"), (json_t *)out), "chunks of %zu", chunk);
            for (int i = 0; i < n; i++) json_decref(ev[i]);
        }
        json_decref(o);
    }
    responses_request_free(&r);
    json_decref(b);
}

/* Reasoning streams as its own item before the message, whatever the chunking: its events are
 * output_item.added, content_part.added (reasoning_text), reasoning_text.delta …, .done,
 * content_part.done, output_item.done, and the stream rebuilds the final object. */
Test(responses, streamed_reasoning_has_its_item_and_text_events) {
    static const char TEXT[] = "<think>\nfirst, \xc3\xa9tude</think>\n\nThe answer<think>again</think> is 4.";
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"stream\":true}", &r);
    for (size_t chunk = 1; chunk <= 13; chunk += 3) {
        json_t *ev[512];
        int n = stream_events(&r, TEXT, chunk, false, ev, 512);
        const json_t *final = check_stream(ev, n), *out = json_object_get(final, "output");
        cr_assert_eq(json_array_size(out), 3, "reasoning, message, reasoning (chunks of %zu)", chunk);
        cr_assert_str_eq(item_type(out, 0), "reasoning");
        cr_assert_str_eq(reasoning_text_of(json_array_get(out, 0)), "\nfirst, \xc3\xa9tude");
        cr_assert_str_eq(item_type(out, 1), "message");
        cr_assert_str_eq(item_type(out, 2), "reasoning");
        cr_assert_str_eq(json_string_value(json_object_get(json_array_get(out, 2), "id")), "rs_abc_1");
        cr_assert_str_eq(reasoning_text_of(json_array_get(out, 2)), "again");
        const json_t *part = json_array_get(json_object_get(json_array_get(out, 1), "content"), 0);
        cr_assert_str_eq(json_string_value(json_object_get(part, "text")), "The answer is 4.");
        const char *want[] = {"response.created", "response.in_progress", "response.output_item.added",
                              "response.content_part.added", "response.reasoning_text.delta"};
        for (int i = 0; i < 5; i++) cr_assert_str_eq(json_string_value(json_object_get(ev[i], "type")), want[i]);
        cr_assert_str_eq(json_string_value(json_object_get(json_object_get(ev[2], "item"), "type")), "reasoning");
        cr_assert_str_eq(json_string_value(json_object_get(json_object_get(ev[3], "part"), "type")), "reasoning_text");
        cr_assert_str_eq(json_string_value(json_object_get(ev[4], "item_id")), "rs_abc");
        int first_text = -1, rs_done = -1;
        for (int i = 0; i < n; i++) {
            const char *type = json_string_value(json_object_get(ev[i], "type"));
            if (first_text < 0 && !strcmp(type, "response.output_text.delta")) first_text = i;
            if (rs_done < 0 && !strcmp(type, "response.output_item.done")) rs_done = i;
        }
        cr_assert(rs_done > 0 && rs_done < first_text, "the reasoning item is done before the answer streams");
        for (int i = 0; i < n; i++) json_decref(ev[i]);
    }
    /* an open <think> in the prompt: the stream starts with the reasoning item */
    json_t *ev[128];
    int n = stream_events(&r, "plan</think>Done.", 2, true, ev, 128);
    const json_t *out = json_object_get(check_stream(ev, n), "output");
    cr_assert_eq(json_array_size(out), 2);
    cr_assert_str_eq(reasoning_text_of(json_array_get(out, 0)), "plan");
    for (int i = 0; i < n; i++) json_decref(ev[i]);
    responses_request_free(&r);
    json_decref(b);
}

/* Reasoning items sent back (explicitly, or as the stored conversation) are the assistant's
 * reasoning_content, for a template that renders it; never a 400. */
Test(responses, reasoning_items_in_the_input_go_to_the_next_assistant_turn) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
                         "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"because\"}]},"
                         "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"a\"}]},"
                         "{\"type\":\"reasoning\",\"id\":\"rs_2\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"s\"}],"
                         "\"encrypted_content\":\"xyz\"},"
                         "{\"type\":\"reasoning\",\"id\":\"rs_3\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"lost\"}]},"
                         "{\"role\":\"user\",\"content\":\"next\"},"
                         "{\"type\":\"reasoning\",\"id\":\"rs_4\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"call\"}]},"
                         "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
                         "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"4\"}]}", &r);
    cr_assert_eq(json_array_size(r.input), 5, "reasoning items are no messages of their own");
    const json_t *a = json_array_get(r.input, 1), *u = json_array_get(r.input, 2), *c = json_array_get(r.input, 3);
    cr_assert_str_eq(json_string_value(json_object_get(a, "content")), "a");
    cr_assert_str_eq(json_string_value(json_object_get(a, "reasoning_content")), "because");
    cr_assert_str_eq(json_string_value(json_object_get(u, "role")), "user");
    cr_assert_null(json_object_get(u, "reasoning_content"), "reasoning before a user turn is dropped");
    cr_assert_str_eq(json_string_value(json_object_get(c, "reasoning_content")), "call");
    cr_assert(json_is_array(json_object_get(c, "tool_calls")));
    responses_request_free(&r);
    json_decref(b);
}

/* The stored conversation keeps the reply split as its items are: a follow-up's template gets
 * reasoning_content and tool_calls, not the raw text. */
Test(responses, the_stored_reply_is_split_into_content_reasoning_and_calls) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}]}", &r);
    responses_result res = result(&r, "completed", "<think>why</think>Sure.<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>", false);
    json_t *conv = responses_conversation(&res, NULL);
    const json_t *m = json_array_get(conv, 1), *call = json_array_get(json_object_get(m, "tool_calls"), 0);
    cr_assert_eq(json_array_size(conv), 2);
    cr_assert_str_eq(json_string_value(json_object_get(m, "role")), "assistant");
    cr_assert_str_eq(json_string_value(json_object_get(m, "content")), "Sure.");
    cr_assert_str_eq(json_string_value(json_object_get(m, "reasoning_content")), "why");
    cr_assert_str_eq(json_string_value(json_object_get(call, "id")), "call_resp_abc_0", "the call_id the client saw");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"a\":1}");
    json_decref(conv);
    json_t *chat = NULL;
    res = result(&r, "completed", "plain", false);
    conv = responses_conversation(&res, NULL);
    m = json_array_get(conv, 1);
    cr_assert_str_eq(json_string_value(json_object_get(m, "content")), "plain");
    cr_assert_null(json_object_get(m, "reasoning_content"));
    cr_assert_null(json_object_get(m, "tool_calls"));
    chat = responses_chat_body(&r, conv);
    cr_assert_not_null(chat);
    json_decref(chat);
    json_decref(conv);
    responses_request_free(&r);
    json_decref(b);
}

Test(responses, speculative_decoding_fields_reach_the_chat_body) {
    responses_request r;
    json_t *b = parse_ok("{\"input\":\"Hi\",\"draft_max\":6,\"draft_min_p\":0.25}", &r);
    json_t *chat = responses_chat_body(&r, NULL);
    oai_request q;
    const char *param;
    attnd_err err;
    cr_assert_eq(oai_parse(chat, true, &cfg, 512, &q, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(q.draft_max, 6);
    cr_assert_float_eq(q.draft_min_p, 0.25f, 1e-9, "draft_min_p is passed on as chat's");
    oai_request_free(&q);
    json_decref(chat);
    responses_request_free(&r);
    json_decref(b);
    b = parse_ok("{\"input\":\"Hi\",\"draft_min_p\":1.5}", &r);
    chat = responses_chat_body(&r, NULL);
    cr_assert_eq(oai_parse(chat, true, &cfg, 512, &q, &param, &err), ATTND_ERR_INVALID);
    cr_assert(param && !strcmp(param, "draft_min_p"), "refused naming %s", param ? param : "(null)");
    oai_request_free(&q);
    json_decref(chat);
    responses_request_free(&r);
    json_decref(b);
}
