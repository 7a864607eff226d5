/*
 * test_server_reasoning.c — counting a reply's reasoning tokens (server/api/reasoning.c) on
 * scripted replies: each case lists its tokens with whether the test holds it to be reasoning,
 * and the count must equal the number so marked.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "reasoning.h"

typedef struct tokcase {
    const char *bytes; /* NULL: a token without bytes */
    int reasoning;     /* the test's own verdict */
} tokcase;

static bool case_bytes(void *user, int32_t id, const char **p, size_t *n) {
    const tokcase *t = (const tokcase *)user + id;
    if (!t->bytes) return false;
    *p = t->bytes, *n = strlen(t->bytes);
    return true;
}

/* The count over the case's tokens, and the count the case marks. */
static void check(const tokcase *t, int n, bool in_reasoning, bool to_call, const char *what) {
    int32_t ids[64];
    int want = 0;
    for (int i = 0; i < n; i++) ids[i] = i, want += t[i].reasoning;
    int got = reasoning_count_tokens(ids, n, in_reasoning, to_call, case_bytes, (void *)t);
    cr_expect_eq(got, want, "%s: %d reasoning tokens, want %d", what, got, want);
}

#define CHECK_TO(arr, open, to_call) check(arr, (int)(sizeof(arr) / sizeof(*arr)), open, to_call, #arr)
#define CHECK(arr, open) CHECK_TO(arr, open, false)

Test(reasoning, a_think_block_counts_its_tokens_markers_included) {
    static const tokcase T[] = {{"<think>", 1}, {"\nThe", 1}, {" user", 1}, {" wants", 1}, {"</think>", 1},
                                {"\n\n", 0},    {"Paris", 0}, {NULL, 0}};
    CHECK(T, false);
    /* markers split across tokens, and a token that carries the close and the answer */
    static const tokcase U[] = {{"Hi ", 0}, {"<th", 1},  {"ink>", 1}, {"a", 1},   {"</", 1},
                                {"think", 1}, {">Ok", 1}, {" then", 0}, {"<think", 1}, {">b</think>", 1}};
    CHECK(U, false);
}

Test(reasoning, a_reply_without_reasoning_counts_none) {
    static const tokcase T[] = {{"The", 0}, {" answer", 0}, {" is", 0}, {" <thin", 0}, {"k", 0}, {NULL, 0}};
    CHECK(T, false);
    static const tokcase E[] = {{NULL, 0}};
    CHECK(E, false);
    cr_expect_eq(reasoning_count_tokens(NULL, 0, true, false, case_bytes, NULL), 0);
}

Test(reasoning, an_open_think_in_the_prompt_counts_from_the_first_token) {
    static const tokcase T[] = {{"so", 1}, {" it", 1}, {" is", 1}, {"</think>", 1}, {"It", 0}, {" is.", 0}};
    CHECK(T, true);
    static const tokcase C[] = {{"cut", 1}, {" off", 1}, {NULL, 0}}; /* never closed; the end is not inside */
    CHECK(C, true);
    /* the same text without the open prompt: "</think>" alone opens nothing */
    static const tokcase N[] = {{"so", 0}, {"</think>", 0}, {"It", 0}};
    CHECK(N, false);
}

Test(reasoning, harmony_analysis_channels_count_and_final_does_not) {
    static const tokcase T[] = {
        {"<|channel|>", 1}, {"analysis", 1},  {"<|message|>", 1}, {"Need", 1},     {" weather", 1},
        {"<|end|>", 1},     {"<|start|>", 0}, {"assistant", 0},   {"<|channel|>", 0}, {"final", 0},
        {"<|message|>", 0}, {"Sunny", 0},     {"<|return|>", 0},
    };
    CHECK(T, false);
    static const tokcase C[] = {{"<|channel|>", 1}, {"analysis", 1}, {"<|message|>", 1}, {"x", 1}, {"<|call|>", 1},
                                {"<|start|>", 0}};
    CHECK(C, false);
}

Test(reasoning, tokens_without_bytes_count_only_strictly_inside) {
    static const tokcase T[] = {{NULL, 0}, {"<think>", 1}, {NULL, 1}, {"x", 1}, {"</think>", 1}, {NULL, 0}, {"y", 0}};
    CHECK(T, false);
}

/* Qwen3.5 may open a call without closing its thinking: with to_call the <tool_call> ends the
 * block (the call's tokens are not reasoning); without it the block runs to the reply's end. */
Test(reasoning, a_tool_call_ends_an_unclosed_think_when_the_format_says_so) {
    static const tokcase T[] = {{"check", 1}, {" it\n", 1}, {"<tool_call>", 0}, {"\n<function=f>", 0},
                                {"</function>", 0}, {"</tool_call>", 0}};
    CHECK_TO(T, true, true);
    static const tokcase U[] = {{"<think>", 1}, {"a", 1}, {"\n<tool_call>", 1}, {"x", 0}, {"<think>", 1}, {"b", 1},
                                {"</think>", 1}, {"c", 0}};
    CHECK_TO(U, false, true);
    static const tokcase V[] = {{"check", 1}, {"<tool_call>", 1}, {"x", 1}, {"</tool_call>", 1}};
    CHECK_TO(V, true, false);
    /* a </think> first still closes the block as usual */
    static const tokcase W[] = {{"a", 1}, {"</think>", 1}, {"<tool_call>", 0}, {"b", 0}};
    CHECK_TO(W, true, true);
}
