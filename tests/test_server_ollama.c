/*
 * test_server_ollama.c — Ollama's API shapes (server/api/ollama.c): /api/chat and /api/generate
 * bodies become the chat or completion body attnd runs (and oai_parse accepts it), what cannot be
 * served is refused naming the field, and the reply becomes Ollama's answer and NDJSON lines that
 * join to it.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "attnd/gguf.h"
#include "infill.h"
#include "oai.h"
#include "ollama.h"

static server_settings cfg;
static void setup(void) { server_settings_default(&cfg); }
TestSuite(ollama, .init = setup);

static json_t *load(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j, "test JSON is bad: %s", je.text);
    return j;
}

static json_t *parse_ok(const char *text, bool chat_api, ollama_request *r) {
    json_t *b = load(text);
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(ollama_parse(b, chat_api, &cfg, r, &param, &err), ATTND_OK, "%s: %s", text, err.msg);
    oai_request q;
    cr_expect_eq(oai_parse(r->body, r->chat, &cfg, 32000, &q, &param, &err), ATTND_OK, "oai_parse refused (%s): %s",
                 param ? param : "-", err.msg);
    oai_request_free(&q);
    return b;
}

static void expect_bad(const char *text, bool chat_api, const char *want_param) {
    json_t *b = load(text);
    ollama_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(ollama_parse(b, chat_api, &cfg, &r, &param, &err), ATTND_ERR_INVALID, "accepted: %s", text);
    cr_expect(param && !strcmp(param, want_param), "%s: param %s, want %s", text, param ? param : "(null)", want_param);
    ollama_request_free(&r);
    json_decref(b);
}

static const char *msg_field(const json_t *body, size_t i, const char *key) {
    return json_string_value(json_object_get(json_array_get(json_object_get(body, "messages"), i), key));
}

Test(ollama, chat_options_format_and_history_become_the_chat_body) {
    ollama_request r;
    json_t *b = parse_ok("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
                         "{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\"look\",\"tool_calls\":[{\"function\":"
                         "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]},"
                         "{\"role\":\"tool\",\"content\":\"sunny\",\"tool_name\":\"get_weather\"}],"
                         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}],"
                         "\"options\":{\"num_predict\":7,\"temperature\":0.5,\"top_k\":3,\"stop\":[\"END\"],\"num_ctx\":4096},"
                         "\"format\":{\"type\":\"object\"},\"think\":true,\"keep_alive\":\"5m\",\"stream\":false}",
                         true, &r);
    json_t *c = r.body;
    cr_assert(r.chat);
    cr_assert_not(r.stream);
    cr_assert_str_eq(msg_field(c, 1, "reasoning_content"), "look");
    json_t *call = json_array_get(json_object_get(json_array_get(json_object_get(c, "messages"), 1), "tool_calls"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"city\":\"Paris\"}");
    cr_assert_str_eq(msg_field(c, 2, "role"), "tool");
    cr_assert_str_eq(msg_field(c, 2, "name"), "get_weather");
    cr_assert_eq(json_integer_value(json_object_get(c, "max_tokens")), 7);
    cr_assert_eq(json_integer_value(json_object_get(c, "top_k")), 3);
    cr_assert_null(json_object_get(c, "num_ctx"));
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "response_format"), "type")), "json_schema");
    cr_assert(json_is_true(json_object_get(json_object_get(c, "chat_template_kwargs"), "enable_thinking")));
    ollama_request_free(&r);
    json_decref(b);
}

Test(ollama, generate_is_a_chat_turn_unless_raw_and_no_prompt_only_loads) {
    ollama_request r;
    json_t *b = parse_ok("{\"model\":\"m\",\"prompt\":\"Hi\",\"system\":\"Be brief.\",\"format\":\"json\"}", false, &r);
    cr_assert(r.chat);
    cr_assert(r.stream);
    cr_assert_str_eq(msg_field(r.body, 0, "content"), "Be brief.");
    cr_assert_str_eq(msg_field(r.body, 1, "content"), "Hi");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(r.body, "response_format"), "type")), "json_object");
    ollama_request_free(&r);
    json_decref(b);
    b = parse_ok("{\"model\":\"m\",\"prompt\":\"Once\",\"raw\":true,\"options\":{\"num_predict\":-1}}", false, &r);
    cr_assert_not(r.chat);
    cr_assert_str_eq(json_string_value(json_object_get(r.body, "prompt")), "Once");
    cr_assert_null(json_object_get(r.body, "max_tokens"), "num_predict -1: the server's limit");
    ollama_request_free(&r);
    json_decref(b);
    b = parse_ok("{\"model\":\"m\"}", false, &r);
    cr_assert(r.load_only);
    ollama_request_free(&r);
    json_decref(b);
}

Test(ollama, what_cannot_be_served_is_refused_naming_the_field) {
    expect_bad("{\"messages\":[]}", true, "model");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"images\":[\"AA\"]}]}", true, "messages[0]");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":3}]}", true, "messages[0]");
    expect_bad("{\"model\":\"m\",\"messages\":[],\"format\":\"yaml\"}", true, "format");
    expect_bad("{\"model\":\"m\",\"messages\":[],\"think\":\"maybe\"}", true, "think");
    expect_bad("{\"model\":\"m\",\"messages\":[],\"options\":{\"num_predict\":\"x\"}}", true, "options.num_predict");
    expect_bad("{\"model\":\"m\",\"prompt\":\"x\",\"template\":\"{{ range .Messages }}{{ end }}\"}", false, "template");
    expect_bad("{\"model\":\"m\",\"prompt\":\"x\",\"template\":7}", false, "template");
    expect_bad("{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":3}", false, "suffix");
    expect_bad("{\"model\":\"m\",\"prompt\":\"x\",\"images\":[\"AA\"]}", false, "images");
    expect_bad("{\"model\":\"m\",\"prompt\":\"x\",\"tools\":[]}", false, "tools");
}

/* template: Ollama's Go template (gotmpl.h) filled with system and prompt, or with a suffix
 * prompt and suffix; the text runs as a completion; raw: true ignores it */
Test(ollama, a_template_writes_the_prompt_text_as_ollama_fills_it) {
    ollama_request r;
    json_t *b = parse_ok("{\"model\":\"m\",\"prompt\":\"Hi\",\"system\":\"Be brief.\",\"template\":"
                         "\"{{ if .System }}<|system|>{{ .System }}\\n{{ end }}<|user|>{{ .Prompt }}\\n<|assistant|>{{ .Response }}<|end|>\"}",
                         false, &r);
    cr_assert(!r.chat && !r.fim);
    cr_expect_str_eq(json_string_value(json_object_get(r.body, "prompt")), "<|system|>Be brief.\n<|user|>Hi\n<|assistant|>");
    ollama_request_free(&r);
    json_decref(b);
    b = parse_ok("{\"model\":\"m\",\"prompt\":\"a\",\"suffix\":\"c\",\"system\":\"s\",\"template\":"
                 "\"{{ .System }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>\"}", false, &r);
    cr_assert(!r.chat && !r.fim && r.suffix, "a suffix still needs FIM tokens");
    cr_expect_str_eq(json_string_value(json_object_get(r.body, "prompt")), "<PRE> a <SUF>c <MID>");
    ollama_request_free(&r);
    json_decref(b);
    b = parse_ok("{\"model\":\"m\",\"prompt\":\"a\",\"raw\":true,\"template\":\"{{ range }}\"}", false, &r);
    cr_expect_str_eq(json_string_value(json_object_get(r.body, "prompt")), "a");
    ollama_request_free(&r);
    json_decref(b);
}

// ---- suffix: fill-in-the-middle ------------------------------------------------------------

static tokenizer *tokenizer_of(const char *file) {
    char path[512];
    snprintf(path, sizeof(path), "%s/tokenizers/%s", ATTND_DATA_DIR, file);
    gguf_file *f;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open(&f, path, &err), ATTND_OK, "%s", err.msg);
    tokenizer *t = NULL;
    cr_assert_eq(tok_load(&t, f, &err), ATTND_OK, "%s", err.msg);
    gguf_close(f);
    return t;
}

/* Parses an /api/generate body that must be accepted (oai_parse is not run: a fim body's prompt
 * is laid out first). */
static json_t *parse_generate(const char *text, ollama_request *r) {
    json_t *b = load(text);
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(ollama_parse(b, false, &cfg, r, &param, &err), ATTND_OK, "%s: %s", text, err.msg);
    return b;
}

/* As Ollama fills a FIM template with only .Prompt and .Suffix: the prompt is the prefix of
 * /infill's layout (token ids, the middle token last) and system is dropped; the answer's room
 * is num_predict's. */
Test(ollama, generate_with_a_suffix_runs_the_infill_layout_of_prompt_and_suffix) {
    tokenizer *q = tokenizer_of("qwen2-bpe.gguf");
    ollama_request r;
    json_t *b = parse_generate("{\"model\":\"m\",\"prompt\":\"def add(a, b):\\n    return \",\"suffix\":\"\\n\\nprint(add(1, 2))\\n\","
                               "\"system\":\"ignored\",\"options\":{\"num_predict\":9,\"temperature\":0}}", &r);
    cr_assert(r.fim && !r.chat);
    cr_assert_null(json_object_get(r.body, "messages"), "no chat turn: system is not in a FIM prompt");
    attnd_err err = {{0}};
    cr_assert_eq(ollama_fim_prompt(&r, q, 512, 16, &err), ATTND_OK, "%s", err.msg);
    const char *param = NULL;
    oai_request oq;
    cr_assert_eq(oai_parse(r.body, r.chat, &cfg, 200000, &oq, &param, &err), ATTND_OK, "%s", err.msg);
    oai_request_free(&oq);
    infill_input in = {.prefix = "def add(a, b):\n    return ", .suffix = "\n\nprint(add(1, 2))\n", .prompt = ""};
    int32_t *ids;
    size_t n;
    cr_assert_eq(infill_layout(q, &in, 512, 9, &ids, &n, &err), ATTND_OK);
    const json_t *got = json_object_get(r.body, "prompt");
    cr_assert_eq(json_array_size(got), n, "%zu ids, want the layout's %zu", json_array_size(got), n);
    for (size_t i = 0; i < n; i++) cr_assert_eq(json_integer_value(json_array_get(got, i)), ids[i], "id %zu", i);
    cr_expect_eq(ids[n - 1], tok_fim(q, TOK_FIM_MID));
    size_t pre = 0, suf = 0; /* Qwen2's layout begins with its repository line: find the markers */
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == tok_fim(q, TOK_FIM_PRE)) pre = i;
        if (ids[i] == tok_fim(q, TOK_FIM_SUF)) suf = i;
    }
    cr_expect(pre > 0 && suf > pre + 1, "prefix token at %zu, suffix token at %zu", pre, suf);
    free(ids);
    ollama_request_free(&r);
    json_decref(b);
    /* raw: the prompt as it stands, the suffix ignored (Ollama's); an empty suffix: a chat turn */
    b = parse_generate("{\"model\":\"m\",\"prompt\":\"x = \",\"suffix\":\"1\",\"raw\":true}", &r);
    cr_assert(!r.fim && !r.chat && r.suffix);
    cr_assert_eq(ollama_fim_prompt(&r, q, 512, 16, &err), ATTND_OK, "%s", err.msg);
    cr_expect_str_eq(json_string_value(json_object_get(r.body, "prompt")), "x = ");
    ollama_request_free(&r);
    json_decref(b);
    b = parse_generate("{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"\"}", &r);
    cr_expect(r.chat && !r.fim && !r.suffix);
    ollama_request_free(&r);
    json_decref(b);
    tok_destroy(q);
}

/* Ollama checks the model's insert capability before anything, raw or not: here its FIM tokens,
 * named in the error. */
Test(ollama, a_suffix_on_a_model_without_fim_tokens_is_refused_naming_them) {
    tokenizer *t = tokenizer_of("llama-spm.gguf");
    static const char *const BODIES[] = {"{\"model\":\"m\",\"prompt\":\"a\",\"suffix\":\"b\"}",
                                         "{\"model\":\"m\",\"prompt\":\"a\",\"suffix\":\"b\",\"raw\":true}",
                                         "{\"model\":\"m\",\"suffix\":\"b\"}"};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(BODIES); i++) {
        ollama_request r;
        json_t *b = parse_generate(BODIES[i], &r);
        attnd_err err = {{0}};
        cr_expect_eq(ollama_fim_prompt(&r, t, 512, 16, &err), ATTND_ERR_UNSUPPORTED, "%s", BODIES[i]);
        cr_expect_not_null(strstr(err.msg, "prefix, suffix, middle"), "%s", err.msg);
        ollama_request_free(&r);
        json_decref(b);
    }
    tok_destroy(t);
}

static const char *REPLY = "<think>Need weather.</think>Checking.<tool_call>\n{\"name\": \"get_weather\", "
                           "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

static ollama_result result(const char *done_reason) {
    return (ollama_result){.model = "m:latest", .created_at = "2026-12-07T00:00:00.000000000Z", .done_reason = done_reason,
                           .prompt_eval_count = 9, .eval_count = 5, .total_ns = 1000, .prompt_ns = 300, .eval_ns = 600};
}

Test(ollama, a_chat_reply_splits_thinking_content_and_tool_calls_with_timings) {
    json_t *tools = load("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}]");
    const toolcall_reading how = {.calls = true, .tools = tools, .id_base = "x"};
    ollama_result res = result("stop");
    json_t *a = ollama_answer(&res, REPLY, strlen(REPLY), true, &how);
    json_t *m = json_object_get(a, "message");
    cr_assert_str_eq(json_string_value(json_object_get(m, "role")), "assistant");
    cr_assert_str_eq(json_string_value(json_object_get(m, "thinking")), "Need weather.");
    cr_assert_str_eq(json_string_value(json_object_get(m, "content")), "Checking.");
    json_t *f = json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "function");
    cr_assert_str_eq(json_string_value(json_object_get(f, "name")), "get_weather");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(f, "arguments"), "city")), "Paris");
    cr_assert(json_is_true(json_object_get(a, "done")));
    cr_assert_str_eq(json_string_value(json_object_get(a, "done_reason")), "stop");
    cr_assert_eq(json_integer_value(json_object_get(a, "eval_count")), 5);
    cr_assert_eq(json_integer_value(json_object_get(a, "prompt_eval_duration")), 300);
    json_decref(a);
    json_decref(tools);
}

/* Streams text (read as how says) at many chunkings: the /api/chat lines must join to the whole
 * answer (content, thinking, calls), the last one done with done_reason "length". Returns the
 * whole answer (new reference). */
static json_t *check_lines_join(const char *text, const toolcall_reading *how) {
    ollama_result done = result("length");
    json_t *whole = ollama_answer(&done, text, strlen(text), true, how);
    cr_assert_not_null(whole);
    for (size_t chunk = 1; chunk < strlen(text); chunk += 7) {
        ollama_stream st;
        cr_assert(ollama_stream_init(&st, true, how));
        buf out;
        buf_init(&out);
        ollama_result run = result(NULL);
        for (size_t i = 0; i < strlen(text); i += chunk)
            ollama_stream_delta(&st, &run, text + i, strlen(text) - i < chunk ? strlen(text) - i : chunk, &out);
        ollama_stream_end(&st, &done, &out);
        buf content, thinking;
        buf_init(&content);
        buf_init(&thinking);
        json_t *calls = json_array(), *last = NULL;
        for (char *line = out.p, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
            json_decref(last);
            last = json_loadb(line, (size_t)(nl - line), 0, NULL);
            cr_assert_not_null(last, "a line is not JSON: %.60s", line);
            json_t *m = json_object_get(last, "message");
            buf_puts(&content, json_string_value(json_object_get(m, "content")));
            if (json_object_get(m, "thinking")) buf_puts(&thinking, json_string_value(json_object_get(m, "thinking")));
            if (json_object_get(m, "tool_calls")) json_array_extend(calls, json_object_get(m, "tool_calls"));
        }
        json_t *wm = json_object_get(whole, "message");
        cr_assert(json_is_true(json_object_get(last, "done")) && !strcmp(json_string_value(json_object_get(last, "done_reason")), "length"));
        cr_assert_str_eq(content.p ? content.p : "", json_string_value(json_object_get(wm, "content")), "chunk %zu", chunk);
        cr_assert_str_eq(thinking.p ? thinking.p : "", json_string_value(json_object_get(wm, "thinking")), "chunk %zu", chunk);
        json_t *wc = json_object_get(wm, "tool_calls"); /* absent when there are none */
        cr_assert(wc ? json_equal(calls, wc) : json_array_size(calls) == 0, "chunk %zu: calls differ", chunk);
        json_decref(last);
        json_decref(calls);
        buf_free(&content);
        buf_free(&thinking);
        buf_free(&out);
        ollama_stream_free(&st);
    }
    return whole;
}

Test(ollama, ndjson_lines_join_to_the_whole_answer_at_any_chunking) {
    json_t *tools = load("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}]");
    const toolcall_reading how = {.calls = true, .tools = tools, .id_base = "x"};
    json_t *whole = check_lines_join(REPLY, &how);
    cr_assert_eq(json_array_size(json_object_get(json_object_get(whole, "message"), "tool_calls")), 1);
    json_decref(whole);
    json_decref(tools);
}

Test(ollama, a_raw_generate_reply_is_the_text_as_it_stands) {
    ollama_result res = result("stop");
    json_t *a = ollama_answer(&res, "<think>x</think>y", 17, false, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(a, "response")), "<think>x</think>y");
    cr_assert_null(json_object_get(a, "message"));
    cr_assert_null(json_object_get(a, "thinking"));
    json_decref(a);
}

Test(ollama, a_raw_reply_cut_inside_a_character_streams_whole_characters) {
    const char *text = "caf\xc3\xa9 \xe2\x82\xac\xff!"; /* é and € cut by 1-byte pieces; a stray 0xFF byte */
    ollama_stream st;
    cr_assert(ollama_stream_init(&st, false, NULL));
    ollama_result run = result(NULL), done = result("stop");
    buf out;
    buf_init(&out);
    for (size_t i = 0; i < strlen(text); i++) ollama_stream_delta(&st, &run, text + i, 1, &out);
    ollama_stream_end(&st, &done, &out);
    buf joined;
    buf_init(&joined);
    for (char *line = out.p, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        json_t *o = json_loadb(line, (size_t)(nl - line), 0, NULL);
        cr_assert(json_is_string(json_object_get(o, "response")), "a line without its response: %.*s", (int)(nl - line), line);
        buf_puts(&joined, json_string_value(json_object_get(o, "response")));
        json_decref(o);
    }
    json_t *whole = ollama_answer(&done, text, strlen(text), false, NULL);
    cr_assert_str_eq(joined.p, json_string_value(json_object_get(whole, "response")));
    cr_assert_str_eq(joined.p, "caf\xc3\xa9 \xe2\x82\xac\xef\xbf\xbd!", "the stray byte is U+FFFD, the characters whole");
    json_decref(whole);
    buf_free(&joined);
    buf_free(&out);
    ollama_stream_free(&st);
}

/* Qwen3.5 / 3.6 (qwen35, qwen35moe) may open a call inside their unclosed thinking: the prompt
 * ends with "<think>\n" and the reply is "… <tool_call> … </tool_call>" with no "</think>". An
 * /api/chat request bound to their call format reads as the chat completions endpoint reads it
 * (oai_reply_reading): thinking that stops before the call, the call in tool_calls, whole and in
 * NDJSON lines. Bound to a format that does not end reasoning at a call (Hermes), the same text
 * stays thinking. */
static const char QWEN35_REPLY[] = "The user wants Paris.\n<tool_call>\n<function=get_weather>\n"
                                   "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>";

static json_t *qwen35_answer(toolcall_format f) {
    ollama_request r;
    json_t *b = parse_ok("{\"model\":\"m\",\"stream\":false,\"tools\":[{\"type\":\"function\",\"function\":"
                         "{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
                         "{\"city\":{\"type\":\"string\"}}}}}],"
                         "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]}", true, &r);
    cr_assert(r.chat);
    oai_request q;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(oai_parse(r.body, true, &cfg, 32000, &q, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(oai_bind_template(&q, true, f, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(oai_open_reasoning(&q, &err), ATTND_OK, "%s", err.msg);
    const toolcall_reading how = oai_reply_reading(&q, "x");
    json_t *whole = check_lines_join(QWEN35_REPLY, &how);
    oai_request_free(&q);
    ollama_request_free(&r);
    json_decref(b);
    return whole;
}

Test(ollama, a_qwen35_call_inside_unclosed_thinking_is_a_tool_call) {
    json_t *a = qwen35_answer(TOOLCALL_FMT_QWEN_XML);
    json_t *m = json_object_get(a, "message");
    const char *thinking = json_string_value(json_object_get(m, "thinking"));
    cr_assert_str_eq(thinking, "The user wants Paris.\n", "%s", json_dumps(a, 0));
    cr_assert_null(strstr(thinking, "tool_call"), "the call is not thinking text");
    cr_assert_str_eq(json_string_value(json_object_get(m, "content")), "");
    json_t *calls = json_object_get(m, "tool_calls");
    cr_assert_eq(json_array_size(calls), 1, "%s", json_dumps(a, 0));
    json_t *fn = json_object_get(json_array_get(calls, 0), "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "name")), "get_weather");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(fn, "arguments"), "city")), "Paris");
    json_decref(a);

    a = qwen35_answer(TOOLCALL_FMT_HERMES); /* reasoning ends only at </think> there */
    m = json_object_get(a, "message");
    cr_assert_str_eq(json_string_value(json_object_get(m, "thinking")), QWEN35_REPLY);
    cr_assert_eq(json_array_size(json_object_get(m, "tool_calls")), 0);
    json_decref(a);
}
