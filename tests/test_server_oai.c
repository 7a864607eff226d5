/*
 * test_server_oai.c — validation of OpenAI-style request bodies and the error shape
 * (server/api/oai.c): every field's wrong type or range is refused with the field named; valid
 * bodies become the expected C values; invalid UTF-8 never reaches JSON unescaped.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "oai.h"

static server_settings cfg;

static void setup(void) { server_settings_default(&cfg); }
TestSuite(oai, .init = setup);

/* Parses text; returns the status and leaves param/message for inspection. */
static attnd_status parse(const char *text, bool chat, oai_request *r, const char **param, attnd_err *err) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j, "test JSON is bad: %s", je.text);
    attnd_status st = oai_parse(j, chat, &cfg, 512, r, param, err);
    /* borrowed strings (prompt, session_id) die with j: only check them before this point */
    json_decref(j);
    return st;
}

static void expect_bad(const char *text, bool chat, const char *want_param) {
    oai_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    attnd_status st = parse(text, chat, &r, &param, &err);
    cr_expect_eq(st, ATTND_ERR_INVALID, "accepted: %s", text);
    if (want_param) cr_expect(param && !strcmp(param, want_param), "%s: param %s, want %s", text, param ? param : "(null)", want_param);
    cr_expect(err.msg[0], "no message for %s", text);
    oai_request_free(&r);
}

Test(oai, completion_fields_become_c_values) {
    json_t *j = json_loads("{\"prompt\":\"hi\",\"max_tokens\":7,\"temperature\":0,\"top_p\":0.5,\"top_k\":3,"
                           "\"min_p\":0.1,\"stop\":[\"\\n\",\"END\"],\"seed\":42,\"logprobs\":2,\"echo\":true,"
                           "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repeat_penalty\":1.1,"
                           "\"logit_bias\":{\"5\":-100,\"7\":2.5},\"n\":1,\"user\":\"u\",\"session_id\":\"s1\","
                           "\"draft_max\":6,\"draft_min_p\":0.25}", 0, NULL);
    oai_request r;
    const char *param;
    attnd_err err;
    cr_assert_eq(oai_parse(j, false, &cfg, 512, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_str_eq(r.prompts[0].text, "hi");
    cr_assert_eq(r.n, 1);
    cr_assert_eq(r.max_tokens, 7);
    cr_assert_float_eq(r.sp.temperature, 0.0f, 1e-9);
    cr_assert_float_eq(r.sp.top_p, 0.5f, 1e-6);
    cr_assert_eq(r.sp.top_k, 3);
    cr_assert_eq(r.n_stops, 2);
    cr_assert_str_eq(r.stops[1], "END");
    cr_assert_eq(r.sp.seed, 42u);
    cr_assert_eq(r.logprobs, 2);
    cr_assert(r.echo);
    cr_assert_eq(r.n_bias, 2);
    bool banned = false;
    for (int i = 0; i < r.n_bias; i++)
        if (r.bias[i].id == 5) banned = isinf(r.bias[i].bias) && r.bias[i].bias < 0;
    cr_assert(banned, "-100 bans the token");
    cr_assert_str_eq(r.session_id, "s1");
    cr_assert_eq(r.draft_max, 6);
    cr_assert_float_eq(r.draft_min_p, 0.25f, 1e-9);
    oai_request_free(&r);
    json_decref(j);
    /* without the field, the server's setting (-1) */
    j = json_loads("{\"prompt\":\"hi\"}", 0, NULL);
    cr_assert_eq(oai_parse(j, false, &cfg, 512, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(r.draft_max, -1);
    cr_assert_eq(r.draft_min_p, -1, "and the server's draft_min_p");
    oai_request_free(&r);
    json_decref(j);
}

Test(oai, token_id_prompts_are_accepted_flat_or_nested_once) {
    oai_request r;
    const char *param;
    cr_assert_eq(parse("{\"prompt\":[1,2,3]}", false, &r, &param, NULL), ATTND_OK);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_eq(r.prompts[0].n_ids, 3);
    oai_request_free(&r);
    cr_assert_eq(parse("{\"prompt\":[[1,2]]}", false, &r, &param, NULL), ATTND_OK);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_eq(r.prompts[0].n_ids, 2);
    oai_request_free(&r);
    cr_assert_eq(parse("{\"prompt\":[[1],[2]],\"n\":3}", false, &r, &param, NULL), ATTND_OK);
    cr_assert_eq(r.n_prompts, 2);
    cr_assert_eq(r.n, 3);
    oai_request_free(&r);
    expect_bad("{\"prompt\":[1,512]}", false, "prompt");
    expect_bad("{\"prompt\":[]}", false, "prompt");
}

Test(oai, wrong_types_and_ranges_name_the_field) {
    expect_bad("{}", false, "prompt");
    expect_bad("{\"prompt\":5}", false, "prompt");
    expect_bad("{\"prompt\":\"x\",\"max_tokens\":-1}", false, "max_tokens");
    expect_bad("{\"prompt\":\"x\",\"max_tokens\":1e3}", false, "max_tokens");
    expect_bad("{\"prompt\":\"x\",\"max_tokens\":9223372036854775807}", false, "max_tokens");
    expect_bad("{\"prompt\":\"x\",\"temperature\":\"hot\"}", false, "temperature");
    expect_bad("{\"prompt\":\"x\",\"temperature\":-1}", false, "temperature");
    expect_bad("{\"prompt\":\"x\",\"top_p\":0}", false, "top_p");
    expect_bad("{\"prompt\":\"x\",\"top_p\":1.5}", false, "top_p");
    expect_bad("{\"prompt\":\"x\",\"top_k\":-2}", false, "top_k");
    expect_bad("{\"prompt\":\"x\",\"draft_max\":33}", false, "draft_max");
    expect_bad("{\"prompt\":\"x\",\"draft_max\":-1}", false, "draft_max");
    expect_bad("{\"prompt\":\"x\",\"draft_min_p\":1.5}", false, "draft_min_p");
    expect_bad("{\"prompt\":\"x\",\"draft_min_p\":\"high\"}", false, "draft_min_p");
    expect_bad("{\"prompt\":\"x\",\"n\":0}", false, "n");
    expect_bad("{\"prompt\":\"x\",\"n\":17}", false, "n");
    expect_bad("{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"n\":16}", false, "n");
    expect_bad("{\"prompt\":\"x\",\"stop\":7}", false, "stop");
    expect_bad("{\"prompt\":\"x\",\"stop\":[\"\"]}", false, "stop");
    expect_bad("{\"prompt\":\"x\",\"seed\":1.5}", false, "seed");
    expect_bad("{\"prompt\":\"x\",\"stream\":\"yes\"}", false, "stream");
    expect_bad("{\"prompt\":\"x\",\"logprobs\":21}", false, "logprobs");
    expect_bad("{\"prompt\":\"x\",\"echo\":1}", false, "echo");
    expect_bad("{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", false, "logit_bias");
    expect_bad("{\"prompt\":\"x\",\"logit_bias\":{\"600\":1}}", false, "logit_bias");
    expect_bad("{\"prompt\":\"x\",\"logit_bias\":{\"1\":500}}", false, "logit_bias");
    expect_bad("{\"prompt\":\"x\",\"presence_penalty\":3}", false, "presence_penalty");
    expect_bad("{\"prompt\":\"x\",\"session_id\":1}", false, "session_id");
    expect_bad("{\"prompt\":\"x\",\"user\":[]}", false, "user");
    expect_bad("{\"prompt\":\"x\",\"model\":3}", false, "model");
}

Test(oai, max_tokens_above_the_server_cap_is_refused_with_the_numbers) {
    oai_request r;
    const char *param;
    attnd_err err;
    cfg.max_tokens_cap = 100;
    cr_assert_eq(parse("{\"prompt\":\"x\",\"max_tokens\":101}", false, &r, &param, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "101") && strstr(err.msg, "100"), "%s", err.msg);
    oai_request_free(&r);
}

Test(oai, a_request_asking_more_than_max_request_tokens_in_all_is_refused_naming_the_cap) {
    oai_request r;
    const char *param;
    attnd_err err;
    cfg.max_request_tokens = 1000;
    /* 4 prompts x n 2 x 200 = 1600 > 1000 */
    cr_assert_eq(parse("{\"prompt\":[\"a\",\"b\",\"c\",\"d\"],\"n\":2,\"max_tokens\":200}", false, &r, &param, &err),
                 ATTND_ERR_INVALID);
    cr_assert_str_eq(param, "max_tokens");
    cr_assert(strstr(err.msg, "max_request_tokens") && strstr(err.msg, "1000") && strstr(err.msg, "1600"), "%s", err.msg);
    oai_request_free(&r);
    /* without max_tokens the configured default counts: 4 x 300 = 1200 */
    cfg.default_max_tokens = 300;
    cr_assert_eq(parse("{\"prompt\":[\"a\",\"b\",\"c\",\"d\"]}", false, &r, &param, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "1200"), "%s", err.msg);
    oai_request_free(&r);
    /* at the cap: accepted */
    cr_assert_eq(parse("{\"prompt\":[\"a\",\"b\"],\"n\":2,\"max_tokens\":250}", false, &r, &param, &err), ATTND_OK,
                 "%s", err.msg);
    oai_request_free(&r);
}

Test(oai, chat_messages_are_validated) {
    expect_bad("{\"messages\":[]}", true, "messages");
    expect_bad("{\"messages\":\"hi\"}", true, "messages");
    expect_bad("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", true, "messages");
    expect_bad("{\"messages\":[{\"content\":\"x\"}]}", true, "messages");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", true, "messages");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", true, "top_logprobs");
    oai_request r;
    const char *param;
    attnd_err err;
    cr_assert_eq(parse("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
                       "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                       "{\"role\":\"assistant\",\"content\":null}],\"logprobs\":true,\"top_logprobs\":3,"
                       "\"max_completion_tokens\":9}", true, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(r.n_msgs, 3);
    cr_assert_str_eq(r.msgs[1].content, "ab");
    cr_assert_str_eq(r.msgs[2].content, "");
    cr_assert_eq(r.logprobs, 3);
    cr_assert_eq(r.max_tokens, 9);
    oai_request_free(&r);
}

Test(oai, stream_options_and_echo_with_stream) {
    oai_request r;
    const char *param;
    cr_assert_eq(parse("{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", false, &r, &param, NULL), ATTND_OK);
    cr_assert(r.stream && r.include_usage);
    oai_request_free(&r);
    expect_bad("{\"prompt\":\"x\",\"stream\":true,\"echo\":true}", false, "echo");
}

Test(oai, error_bodies_have_the_openai_shape) {
    json_t *e = oai_error(400, "bad 'x'", "x");
    json_t *in = json_object_get(e, "error");
    cr_assert_str_eq(json_string_value(json_object_get(in, "message")), "bad 'x'");
    cr_assert_str_eq(json_string_value(json_object_get(in, "type")), "invalid_request_error");
    cr_assert_str_eq(json_string_value(json_object_get(in, "param")), "x");
    cr_assert(json_is_string(json_object_get(in, "code")));
    json_decref(e);
    e = oai_error(503, "loading", NULL);
    in = json_object_get(e, "error");
    cr_assert(json_is_null(json_object_get(in, "param")));
    cr_assert_str_eq(json_string_value(json_object_get(in, "type")), "unavailable_error");
    json_decref(e);
    cr_assert_str_eq(oai_error_type(401), "authentication_error");
    cr_assert_str_eq(oai_error_type(429), "rate_limit_error");
}

Test(oai, invalid_utf8_becomes_replacement_characters) {
    json_t *s = oai_string("a\xff" "b\xe2\x82", 5);
    cr_assert_not_null(s);
    cr_assert_str_eq(json_string_value(s), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
    json_decref(s);
    s = oai_string("h\xc3\xa9", 3);
    cr_assert_str_eq(json_string_value(s), "h\xc3\xa9");
    json_decref(s);
    s = oai_string("\xed\xa0\x80", 3); /* a UTF-16 surrogate is not UTF-8 */
    cr_assert_eq(strlen(json_string_value(s)), 9);
    json_decref(s);
}

Test(oai, context_overflow_and_unknown_model_carry_openai_codes) {
    json_t *e = oai_error_context_length(5000, 4096, 1, "messages");
    json_t *in = json_object_get(e, "error");
    cr_assert_str_eq(json_string_value(json_object_get(in, "code")), "context_length_exceeded");
    cr_assert_str_eq(json_string_value(json_object_get(in, "type")), "invalid_request_error");
    cr_assert_str_eq(json_string_value(json_object_get(in, "param")), "messages");
    const char *msg = json_string_value(json_object_get(in, "message"));
    cr_assert(strstr(msg, "maximum context length is 4096 tokens") && strstr(msg, "5000"), "%s", msg);
    json_decref(e);
    e = oai_error_model_not_found("gpt-9");
    in = json_object_get(e, "error");
    cr_assert_str_eq(json_string_value(json_object_get(in, "code")), "model_not_found");
    cr_assert_str_eq(json_string_value(json_object_get(in, "param")), "model");
    cr_assert(strstr(json_string_value(json_object_get(in, "message")), "'gpt-9'"));
    json_decref(e);
    e = oai_error(429, "queue full", NULL);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(e, "error"), "code")), "rate_limit_exceeded");
    json_decref(e);
}

Test(oai, an_unsupported_role_is_refused_listing_the_accepted_ones) {
    oai_request r;
    const char *param;
    attnd_err err;
    cr_assert_eq(parse("{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", true, &r, &param, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "'function'") && strstr(err.msg, "system, developer, user, assistant, tool"), "%s", err.msg);
    oai_request_free(&r);
    cr_assert_eq(parse("{\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}]}", true, &r, &param, &err), ATTND_OK);
    oai_request_free(&r);
}

/* Parses a "prompt" value with oai_parse_prompts. */
static attnd_status prompts(const char *text, oai_prompt **ps, int *n, attnd_err *err, json_t **keep) {
    json_error_t je;
    *keep = json_loads(text, JSON_DECODE_ANY, &je);
    cr_assert_not_null(*keep, "test JSON is bad: %s", je.text);
    return oai_parse_prompts(*keep, 512, 4, ps, n, err);
}

Test(oai, prompt_lists_hold_strings_or_token_id_arrays_in_order) {
    oai_prompt *ps;
    int n;
    attnd_err err;
    json_t *j;
    cr_assert_eq(prompts("\"one\"", &ps, &n, &err, &j), ATTND_OK);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(ps[0].text, "one");
    oai_prompts_free(ps, n), json_decref(j);
    cr_assert_eq(prompts("[5, 6, 7]", &ps, &n, &err, &j), ATTND_OK, "%s", err.msg);
    cr_assert_eq(n, 1, "a flat id array is one prompt");
    cr_assert_eq(ps[0].n_ids, 3);
    cr_assert_eq(ps[0].ids[2], 7);
    oai_prompts_free(ps, n), json_decref(j);
    cr_assert_eq(prompts("[\"a\", [1, 2], \"c\"]", &ps, &n, &err, &j), ATTND_OK, "%s", err.msg);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(ps[0].text, "a");
    cr_assert_null(ps[1].text);
    cr_assert_eq(ps[1].n_ids, 2);
    cr_assert_eq(ps[1].ids[1], 2);
    cr_assert_str_eq(ps[2].text, "c");
    oai_prompts_free(ps, n), json_decref(j);
}

Test(oai, bad_prompt_lists_are_refused_naming_the_element) {
    oai_prompt *ps = (oai_prompt *)1;
    int n = 9;
    attnd_err err;
    json_t *j;
    const char *cases[][2] = {
        {"[]", "empty"},
        {"[\"a\", 5]", "prompt[1]"},
        {"[\"a\", []]", "prompt[1]"},
        {"[[1], [2, 600]]", "prompt[1][1]"},
        {"[1, 600]", "prompt[1]"},
        {"[\"a\",\"b\",\"c\",\"d\",\"e\"]", "at most 4"},
        {"{}", "must be a string"},
        {"null", "required"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert_eq(prompts(cases[i][0], &ps, &n, &err, &j), ATTND_ERR_INVALID, "accepted %s", cases[i][0]);
        cr_assert(strstr(err.msg, cases[i][1]), "%s: %s", cases[i][0], err.msg);
        cr_assert_null(ps);
        cr_assert_eq(n, 0);
        json_decref(j);
    }
    oai_prompts_free(NULL, 0);
}

Test(oai, unsupported_features_are_refused_by_name_not_ignored) {
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char body[512];
    static const struct { const char *field, *value; } bad[] = {
        {"tools", "[{\"type\":\"code_interpreter\"}]"},
        {"tool_choice", "\"required\""},
        {"tool_choice", "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"},
        {"functions", "[{\"name\":\"f\"}]"},
        {"function_call", "\"auto\""},
        {"response_format", "{\"type\":\"xml\"}"},
        {"response_format", "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"not\":{}}}}"},
        {"grammar", "\"root ::= nothing\""},
        {"json_schema", "{\"type\":\"number\",\"multipleOf\":0.3}"},
        {"modalities", "[\"text\",\"audio\"]"},
        {"audio", "{\"voice\":\"x\"}"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        snprintf(body, sizeof(body), "{%s,\"%s\":%s}", msgs, bad[i].field, bad[i].value);
        expect_bad(body, true, bad[i].field);
    }
    expect_bad("{\"prompt\":\"a\",\"suffix\":\"b\"}", false, "suffix");
    expect_bad("{\"prompt\":\"a\",\"best_of\":2}", false, "best_of");

    /* the "off" forms and harmless fields official clients send are accepted */
    snprintf(body, sizeof(body),
             "{%s,\"tools\":[],\"tool_choice\":\"none\",\"functions\":null,\"response_format\":{\"type\":\"text\"},"
             "\"modalities\":[\"text\"],\"user\":\"u1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
             "\"metadata\":{\"k\":\"v\"},\"store\":false,\"parallel_tool_calls\":true}", msgs);
    oai_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(parse(body, true, &r, &param, &err), ATTND_OK, "%s (param %s)", err.msg, param ? param : "-");
    oai_request_free(&r);
    cr_expect_eq(parse("{\"prompt\":\"a\",\"best_of\":1,\"suffix\":\"\"}", false, &r, &param, &err), ATTND_OK, "%s",
                 err.msg);
    oai_request_free(&r);
}

Test(oai, chat_template_kwargs_and_the_messages_reach_the_template) {
    json_t *j = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"name\": \"bob\"}], "
                           "\"chat_template_kwargs\": {\"enable_thinking\": false}}", 0, NULL);
    oai_request r = {0};
    const char *param = NULL;
    attnd_err err;
    cr_assert_eq(oai_parse(j, true, &cfg, 512, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_expect(json_is_false(json_object_get(r.template_kwargs, "enable_thinking")));
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(r.messages_json, 0), "name")), "bob");
    oai_request_free(&r);
    json_decref(j);
    expect_bad("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": [1]}", true,
               "chat_template_kwargs");
}

Test(oai, structured_output_fields_compile_into_a_grammar) {
    static const struct { const char *fields; oai_format f; } ok[] = {
        {"\"response_format\":{\"type\":\"json_object\"}", OAI_FORMAT_JSON_OBJECT},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
         "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}",
         OAI_FORMAT_JSON_SCHEMA},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}", OAI_FORMAT_JSON_SCHEMA},
        {"\"json_schema\":{\"type\":\"string\"}", OAI_FORMAT_JSON_SCHEMA},
        {"\"grammar\":\"root ::= [a-z]+\"", OAI_FORMAT_GRAMMAR},
        {"\"grammar\":\"\"", OAI_FORMAT_TEXT},
        {"\"response_format\":{\"type\":\"text\"}", OAI_FORMAT_TEXT},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++) {
        char body[600];
        snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}", ok[i].fields);
        oai_request r;
        const char *param = NULL;
        attnd_err err = {{0}};
        cr_assert_eq(parse(body, true, &r, &param, &err), ATTND_OK, "%s: %s", ok[i].fields, err.msg);
        cr_expect_eq(r.format, ok[i].f, "%s", ok[i].fields);
        cr_expect_eq(r.grammar != NULL, ok[i].f != OAI_FORMAT_TEXT, "%s", ok[i].fields);
        oai_request_free(&r);
    }
    expect_bad("{\"prompt\":\"a\",\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}}", false, "grammar");
    expect_bad("{\"prompt\":\"a\",\"grammar\":7}", false, "grammar");
    expect_bad("{\"prompt\":\"a\",\"response_format\":\"json\"}", false, "response_format");
}

Test(oai, an_unsupported_schema_keyword_is_named_in_the_400) {
    oai_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(parse("{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
                       "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"multipleOf\":500}}}}}}",
                       false, &r, &param, &err),
                 ATTND_ERR_INVALID);
    cr_assert_str_eq(param, "response_format");
    cr_assert(strstr(err.msg, "'multipleOf'") && strstr(err.msg, "/properties/n"), "%s", err.msg);
    oai_request_free(&r);
}

Test(oai, tools_are_described_and_history_rendered) {
    oai_request r;
    const char *param = NULL;
    attnd_err err = {{0}};
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"c\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}}]}";
    cr_assert_eq(parse(body, true, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(r.n_fmsgs, 4, "a system message describing the tools comes first");
    cr_assert_str_eq(r.fmsgs[0].role, "system");
    cr_assert(strstr(r.fmsgs[0].content, "<tools>") && strstr(r.fmsgs[0].content, "\"name\":\"w\""), "%s", r.fmsgs[0].content);
    cr_assert_str_eq(r.fmsgs[2].content, "<tool_call>\n{\"name\":\"w\",\"arguments\":{\"c\":1}}\n</tool_call>");
    cr_assert_str_eq(r.fmsgs[3].role, "user");
    cr_assert_str_eq(r.fmsgs[3].content, "<tool_response>\nsunny\n</tool_response>");
    cr_assert_null(r.grammar, "auto: no grammar");
    oai_request_free(&r);

    cr_assert_eq(parse("{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\"}}],\"tool_choice\":\"required\"}",
                       true, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(r.n_fmsgs, 2);
    cr_assert_eq(r.n_msgs, 2);
    cr_assert_str_eq(r.msgs[0].content, "Be brief.", "the messages as sent stay as they were");
    cr_assert(!strncmp(r.fmsgs[0].content, "Be brief.\n\n# Tools", 18), "%s", r.fmsgs[0].content);
    cr_assert_eq(r.format, OAI_FORMAT_TOOL_CALL);
    cr_assert_not_null(r.grammar);
    oai_request_free(&r);
    expect_bad("{\"prompt\":\"x\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\"}}]}", false, "tools");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":"
               "{\"name\":\"w\"}}],\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
               true, "tool_choice");
}

// ---- tools through the model's own template ----------------------------------------------------

static json_t *load_json_file(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    cr_assert_not_null(j, "%s: %s", path, je.text);
    return j;
}

/* The case as an OpenAI client sends it: a call's arguments as a JSON string, not an object. */
static json_t *as_openai_body(const json_t *vars) {
    json_t *body = json_pack("{s:O,s:O}", "messages", json_object_get(vars, "messages"), "tools",
                             json_object_get(vars, "tools"));
    json_t *msgs = json_deep_copy(json_object_get(body, "messages"));
    size_t i, k;
    json_t *m, *call;
    json_array_foreach(msgs, i, m) {
        json_array_foreach(json_object_get(m, "tool_calls"), k, call) {
            json_t *fn = json_object_get(call, "function");
            char *args = json_dumps(json_object_get(fn, "arguments"), JSON_PRESERVE_ORDER);
            json_object_set_new(fn, "arguments", json_string(args));
            free(args);
        }
    }
    json_object_set_new(body, "messages", msgs);
    return body;
}

/* body through the server's path (oai_parse, oai_bind_template, oai_chat_input) and ct: the
 * rendering in *o (the caller's). */
static void render_request(const chat_template *ct, const json_t *body, jinja_output *o) {
    oai_request r;
    const char *param;
    attnd_err err;
    cr_assert_eq(oai_parse(body, true, &cfg, 512, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(oai_bind_template(&r, ct->takes_tools, ct->tool_format, &err), ATTND_OK, "%s", err.msg);
    chat_request cr;
    oai_chat_input(&r, &cr);
    cr_assert_eq(chat_template_render(ct, &cr, o, &err), ATTND_OK, "%s", err.msg);
    oai_request_free(&r);
}

/* The server's path (oai_parse, oai_bind_template, oai_chat_input, the template) gives the
 * rendering jinja2 gives the same conversation in Hugging Face's shape (expected.json, made by
 * tests/data/templates/render_reference.py): the template itself shows the tools and writes the
 * tool_calls and the role "tool" turn, no Hermes text added. */
Test(oai, tool_aware_templates_get_the_tools_and_turns_as_sent) {
    static const struct {
        const char *name;
        toolcall_format f;
        bool history; /* the tool_call_and_result case renders (some templates refuse its ids) */
    } T[] = {
        {"qwen2_5", TOOLCALL_FMT_HERMES, true},      {"qwen3", TOOLCALL_FMT_HERMES, true},
        {"qwen3-coder_30b", TOOLCALL_FMT_QWEN_XML, true}, {"llama3_2", TOOLCALL_FMT_LLAMA, true},
        {"llama4_latest", TOOLCALL_FMT_LLAMA, true},  {"mistral_nemo", TOOLCALL_FMT_MISTRAL, false},
        {"granite3.3_2b", TOOLCALL_FMT_GRANITE, true}, {"qwen3.5_4b", TOOLCALL_FMT_QWEN_XML, true},
        {"glm4.7_flash", TOOLCALL_FMT_GLM, true},    {"glm4.6", TOOLCALL_FMT_GLM, true},
        {"gemma4_31b", TOOLCALL_FMT_GEMMA4, true},
    };
    json_t *meta = load_json_file(ATTND_DATA_DIR "/templates/templates.json");
    json_t *cases = load_json_file(ATTND_DATA_DIR "/templates/cases.json");
    json_t *expected = load_json_file(ATTND_DATA_DIR "/templates/expected.json");
    for (size_t t = 0; t < ATTND_ARRAY_LEN(T); t++) {
        char path[512];
        snprintf(path, sizeof(path), ATTND_DATA_DIR "/templates/%s.jinja", T[t].name);
        FILE *f = fopen(path, "rb");
        cr_assert(f, "%s", path);
        static char text[1 << 16];
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = '\0';
        chat_template ct;
        attnd_err err;
        cr_assert_eq(chat_template_load(&ct, text, NULL, NULL, NULL, &err), ATTND_OK, "%s: %s", T[t].name, err.msg);
        const json_t *m = json_object_get(meta, T[t].name);
        free(ct.bos), free(ct.eos);
        ct.bos = strdup(json_string_value(json_object_get(m, "bos_token")));
        ct.eos = strdup(json_string_value(json_object_get(m, "eos_token")));
        struct tm now = {.tm_year = 125, .tm_mon = 2, .tm_mday = 14, .tm_hour = 9, .tm_min = 26, .tm_sec = 53};
        ct.now = &now; /* render_reference.py's clock */
        cr_expect(ct.takes_tools, "%s shows tools", T[t].name);
        cr_expect_eq(ct.tool_format, T[t].f, "%s: call format %d, want %d", T[t].name, ct.tool_format, T[t].f);
        for (int c = 0; c < (T[t].history ? 2 : 1); c++) {
            const char *cname = c ? "tool_call_and_result" : "tools";
            json_t *body = as_openai_body(json_object_get(cases, cname));
            jinja_output o;
            render_request(&ct, body, &o);
            const char *want = json_string_value(json_object_get(json_object_get(json_object_get(expected, T[t].name), cname), "text"));
            cr_assert(want, "expected.json has %s/%s", T[t].name, cname);
            cr_expect_str_eq(o.text, want, "%s / %s", T[t].name, cname);
            jinja_output_free(&o);
            json_decref(body);
        }
        chat_template_free(&ct);
    }
    json_decref(meta);
    json_decref(cases);
    json_decref(expected);
}

/* A template that knows nothing of tools keeps the Hermes description in its system message
 * and the tool turns as text (the only way its model hears of them). */
Test(oai, other_templates_get_the_hermes_description) {
    static const char TPL[] = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}";
    chat_template ct;
    attnd_err err;
    cr_assert_eq(chat_template_load(&ct, TPL, NULL, NULL, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_expect(!ct.takes_tools);
    json_t *cases = load_json_file(ATTND_DATA_DIR "/templates/cases.json");
    json_t *body = as_openai_body(json_object_get(cases, "tool_call_and_result"));
    jinja_output o;
    render_request(&ct, body, &o);
    cr_expect(strstr(o.text, "<|system|>\n\n# Tools") || strstr(o.text, "<|system|># Tools"), "%s", o.text);
    cr_expect(strstr(o.text, "<tool_call>\n{\"name\":\"get_weather\""), "%s", o.text);
    cr_expect(strstr(o.text, "<|user|><tool_response>\n{\"temperature\": 18"), "%s", o.text);
    jinja_output_free(&o);
    json_decref(body);
    json_decref(cases);
    chat_template_free(&ct);
}

/* A prompt that ended inside <think>: the reply starts as reasoning, and a JSON format's lazy
 * grammar starts inside the skipped block, so it constrains only after </think>. A GBNF grammar
 * stays as given. */
Test(oai, an_open_think_in_the_prompt_starts_the_grammar_inside_the_reasoning) {
    oai_request r;
    const char *param = NULL;
    attnd_err err;
    cr_assert_eq(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
                       true, &r, &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(oai_bind_template(&r, false, TOOLCALL_FMT_HERMES, &err), ATTND_OK, "%s", err.msg);
    cr_assert_not_null(grammar_get_lazy(r.grammar).skip_close);
    cr_assert(!grammar_get_lazy(r.grammar).skip_inside);
    cr_assert_eq(oai_open_reasoning(&r, &err), ATTND_OK, "%s", err.msg);
    cr_assert(r.open_reasoning);
    grammar_lazy lz = grammar_get_lazy(r.grammar);
    cr_assert(lz.skip_inside);
    cr_assert_str_eq(lz.skip_close, "</think>");
    oai_request_free(&r);

    cr_assert_eq(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"grammar\":\"root ::= \\\"a\\\"\"}", true, &r,
                       &param, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(oai_bind_template(&r, false, TOOLCALL_FMT_HERMES, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(oai_open_reasoning(&r, &err), ATTND_OK, "%s", err.msg);
    cr_assert(r.open_reasoning);
    cr_assert(!grammar_get_lazy(r.grammar).skip_inside, "a GBNF grammar applies as given");
    oai_request_free(&r);
}

/* Qwen3.5's calls end reasoning (think_to_call): a call grammar, forced or auto, also begins at a
 * "<tool_call>" written inside the unclosed <think> (skip_break), so that call is constrained
 * too. A JSON format's grammar does not (a call's text in the reasoning is no answer), nor a
 * format whose reasoning ends only at </think>. */
Test(oai, a_qwen35_call_grammar_begins_at_a_call_inside_the_reasoning) {
    static const char *const BODIES[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\",\"tools\":"
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":"
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
    };
    static const struct { toolcall_format f; int body; bool breaks; } C[] = {
        {TOOLCALL_FMT_QWEN_XML, 0, true},  {TOOLCALL_FMT_QWEN_XML, 1, true}, {TOOLCALL_FMT_QWEN_XML, 2, false},
        {TOOLCALL_FMT_HERMES, 0, false},   {TOOLCALL_FMT_GLM, 0, false},
    };
    for (size_t i = 0; i < ATTND_ARRAY_LEN(C); i++) {
        oai_request r;
        const char *param = NULL;
        attnd_err err;
        cr_assert_eq(parse(BODIES[C[i].body], true, &r, &param, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(oai_bind_template(&r, true, C[i].f, &err), ATTND_OK, "%zu: %s", i, err.msg);
        cr_assert_eq(oai_open_reasoning(&r, &err), ATTND_OK, "%s", err.msg);
        cr_assert_not_null(r.grammar, "%zu: no grammar", i);
        grammar_lazy lz = grammar_get_lazy(r.grammar);
        cr_assert(lz.skip_inside, "%zu", i);
        if (C[i].breaks) cr_assert_str_eq(lz.skip_break ? lz.skip_break : "(none)", "<tool_call>", "%zu", i);
        else cr_assert_null(lz.skip_break, "%zu: %s", i, lz.skip_break);
        oai_request_free(&r);
    }
}
