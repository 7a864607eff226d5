/*
 * test_server_api_fields.c — the known body fields of each generation endpoint (api_fields.c):
 * what every parser reads is known (no warning for a request the docs show), a misspelt field is
 * named, prefixes cover llama-server's families, and the list of names is cut to fit.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "api_fields.h"

static size_t unknown(const char *label, const char *body, char *out, size_t cap) {
    const api_fields *f = api_fields_of(label);
    cr_assert_not_null(f, "%s has a table", label);
    json_t *b = json_loads(body, 0, NULL);
    cr_assert_not_null(b, "%s", body);
    size_t n = api_fields_unknown(b, f, out, cap);
    json_decref(b);
    return n;
}

static void expect_clean(const char *label, const char *body) {
    char names[200];
    cr_expect_eq(unknown(label, body, names, sizeof names), 0, "%s: %s", label, names);
}

Test(api_fields, what_the_parsers_read_is_known) {
    expect_clean("chat_completions",
                 "{\"model\": \"m\", \"messages\": [], \"max_completion_tokens\": 1, \"temperature\": 0, \"top_p\": 1,"
                 " \"stream\": true, \"stream_options\": {}, \"tools\": [], \"tool_choice\": \"auto\", \"parallel_tool_calls\": true,"
                 " \"response_format\": {}, \"logprobs\": true, \"top_logprobs\": 2, \"seed\": 1, \"user\": \"u\", \"store\": false,"
                 " \"metadata\": {}, \"session_id\": \"s\", \"chat_template_kwargs\": {}, \"ignore_eos\": true, \"n\": 1,"
                 " \"dry_multiplier\": 0, \"dry_base\": 1.75, \"xtc_threshold\": 0.1, \"mirostat_tau\": 5, \"cache_prompt\": true}");
    expect_clean("completions", "{\"prompt\": \"p\", \"echo\": true, \"best_of\": 1, \"suffix\": \"\", \"max_tokens\": 2, \"logit_bias\": {}}");
    expect_clean("llama_completion", "{\"prompt\": \"p\", \"n_predict\": 2, \"return_tokens\": true, \"n_probs\": 0, \"min_keep\": 0}");
    expect_clean("infill", "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": [], \"prompt\": \"\", \"n_predict\": 4}");
    expect_clean("responses", "{\"model\": \"m\", \"input\": \"i\", \"instructions\": \"x\", \"max_output_tokens\": 4, \"text\": {},"
                              " \"reasoning\": {}, \"previous_response_id\": \"r\", \"top_k\": 2, \"truncation\": \"disabled\"}");
    expect_clean("messages", "{\"model\": \"m\", \"system\": \"s\", \"messages\": [], \"max_tokens\": 4, \"thinking\": {},"
                             " \"stop_sequences\": [], \"metadata\": {}, \"tool_choice\": {}, \"top_k\": 1}");
    expect_clean("messages_count_tokens", "{\"model\": \"m\", \"messages\": [], \"tools\": []}");
    expect_clean("ollama_chat", "{\"model\": \"m\", \"messages\": [], \"options\": {}, \"format\": \"json\", \"think\": true,"
                                " \"keep_alive\": \"5m\", \"tools\": [], \"stream\": false}");
    expect_clean("ollama_generate", "{\"model\": \"m\", \"prompt\": \"p\", \"system\": \"s\", \"raw\": true, \"images\": []}");
    cr_expect_null(api_fields_of("tokenize"), "only the generation routes are checked");
}

Test(api_fields, unknown_fields_are_named_in_order) {
    char names[200];
    cr_expect_eq(unknown("chat_completions", "{\"messages\": [], \"temprature\": 0.5, \"dry\": 1, \"prompt\": \"x\"}", names,
                         sizeof names), 3);
    cr_expect_str_eq(names, "temprature, dry, prompt", "\"dry\" is not a dry_* field; chat has no prompt");
    cr_expect_eq(unknown("ollama_chat", "{\"messages\": [], \"num_predict\": 3}", names, sizeof names), 1,
                 "Ollama's num_predict belongs in options");
    cr_expect_str_eq(names, "num_predict");
    cr_expect_eq(unknown("messages", "{\"messages\": [], \"bad\\\"name\\n\": 1}", names, sizeof names), 1);
    cr_expect_str_eq(names, "bad?name?", "a name is printable ASCII without quotes, to sit in a header");
}

Test(api_fields, a_long_list_is_cut_with_a_count) {
    char names[40], body[2048] = "{";
    for (int i = 0; i < 20; i++) snprintf(body + strlen(body), sizeof body - strlen(body), "%s\"field%02d\": 1", i ? ", " : "", i);
    strcat(body, "}");
    cr_expect_eq(unknown("completions", body, names, sizeof names), 20);
    cr_expect_lt(strlen(names), sizeof names);
    cr_expect(strstr(names, "field00, field01") == names, "%s", names);
    cr_expect(strstr(names, " more)"), "%s", names);
}
