/*
 * test_server_chat.c — chat-template recognition and rendering (server/chat.c): each family's
 * characteristic markers are detected, and the rendered prompt has the family's layout.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

static const chat_msg CONVO[] = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Name a color."},
};

static char *render(chat_family f, const chat_msg *m, size_t n) {
    char *out = NULL;
    attnd_err err;
    cr_assert_eq(chat_render(f, m, n, &out, &err), ATTND_OK, "%s", err.msg);
    return out;
}

Test(chat, detects_each_family_from_its_markers) {
    struct { const char *tmpl; chat_family want; } cases[] = {
        {"{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}", CHAT_LLAMA3},
        {"{% for m in messages %}<|im_start|>{{ m.role }}\n{% endfor %}", CHAT_CHATML},
        {"{{ '<start_of_turn>' + role }}", CHAT_GEMMA},
        {"{{ '<|user|>\n' + m.content + '<|end|>\n' }}", CHAT_PHI3},
        {"{{ '<|user|>\n' + m.content + eos_token }}", CHAT_ZEPHYR},
        {"{{ '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>' }}", CHAT_LLAMA2},
        {"{{ '[INST] ' + m.content + ' [/INST]' }}", CHAT_MISTRAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        chat_family f;
        cr_assert(chat_detect(cases[i].tmpl, &f), "case %zu not recognised", i);
        cr_assert_eq(f, cases[i].want, "case %zu: got %s", i, chat_family_name(f));
    }
}

Test(chat, unknown_or_missing_template_falls_back_to_chatml) {
    chat_family f = CHAT_GEMMA;
    cr_assert_not(chat_detect("{{ messages }}", &f));
    cr_assert_eq(f, CHAT_CHATML);
    cr_assert_not(chat_detect(NULL, &f));
    cr_assert_not(chat_detect("", &f));
}

Test(chat, family_names_round_trip_and_unknown_names_are_refused) {
    for (int i = 0; i < CHAT_FAMILY_COUNT; i++) {
        chat_family f;
        cr_assert_eq(chat_family_from_name(chat_family_name((chat_family)i), &f, NULL), ATTND_OK);
        cr_assert_eq(f, (chat_family)i);
    }
    chat_family f;
    attnd_err err;
    cr_assert_eq(chat_family_from_name("vicuna", &f, &err), ATTND_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "vicuna") && strstr(err.msg, "chatml"));
}

Test(chat, chatml_renders_every_turn_and_opens_the_assistant_turn) {
    char *s = render(CHAT_CHATML, CONVO, 4);
    cr_assert_str_eq(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nName a color.<|im_end|>\n"
                        "<|im_start|>assistant\n");
    free(s);
}

Test(chat, llama3_uses_header_ids_and_eot) {
    char *s = render(CHAT_LLAMA3, CONVO + 1, 1);
    cr_assert_str_eq(s, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
}

Test(chat, llama2_puts_the_system_prompt_inside_the_first_inst) {
    char *s = render(CHAT_LLAMA2, CONVO, 4);
    cr_assert_str_eq(s, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello!</s><s>[INST] Name a color. [/INST]");
    free(s);
}

Test(chat, mistral_has_no_system_role_and_merges_it_into_the_user_turn) {
    char *s = render(CHAT_MISTRAL, CONVO, 2);
    cr_assert_str_eq(s, "[INST] Be brief.\n\nHi [/INST]");
    free(s);
}

Test(chat, gemma_calls_the_assistant_model) {
    char *s = render(CHAT_GEMMA, CONVO, 3);
    cr_assert_str_eq(s, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                        "<start_of_turn>model\n");
    free(s);
}

Test(chat, zephyr_and_phi3_differ_in_the_turn_terminator) {
    char *z = render(CHAT_ZEPHYR, CONVO + 1, 1), *p = render(CHAT_PHI3, CONVO + 1, 1);
    cr_assert_str_eq(z, "<|user|>\nHi</s>\n<|assistant|>\n");
    cr_assert_str_eq(p, "<|user|>\nHi<|end|>\n<|assistant|>\n");
    free(z);
    free(p);
}

Test(chat, unknown_role_and_empty_list_are_refused_naming_the_problem) {
    chat_msg bad[] = {{"user", "a"}, {"tool", "b"}};
    char *out = (char *)1;
    attnd_err err;
    cr_assert_eq(chat_render(CHAT_CHATML, bad, 2, &out, &err), ATTND_ERR_INVALID);
    cr_assert_null(out);
    cr_assert(strstr(err.msg, "messages[1]") && strstr(err.msg, "tool") && strstr(err.msg, "developer"), "%s", err.msg);
    cr_assert_eq(chat_render(CHAT_CHATML, bad, 0, &out, &err), ATTND_ERR_INVALID);
}

Test(chat, each_family_names_its_end_of_turn_marker) {
    cr_assert_str_eq(chat_end_marker(CHAT_CHATML), "<|im_end|>");
    cr_assert_str_eq(chat_end_marker(CHAT_LLAMA3), "<|eot_id|>");
    cr_assert_str_eq(chat_end_marker(CHAT_GEMMA), "<end_of_turn>");
    cr_assert_str_eq(chat_end_marker(CHAT_PHI3), "<|end|>");
    cr_assert_str_eq(chat_end_marker(CHAT_MISTRAL), "</s>");
}
