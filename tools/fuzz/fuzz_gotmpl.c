/*
 * fuzz_gotmpl.c — (fuzzing only) Ollama's prompt templates (server/api/gotmpl.c) on arbitrary
 * bytes.
 *
 * Input: the template. It is rendered twice, with every field empty and with every field set:
 * whether it is accepted must not depend on the values; a refusal has a message; with empty
 * fields the text is never longer than the template (actions and trimmed space only shrink it);
 * a template without "{{" renders to itself.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "gotmpl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *t = (const char *)data;
    static const gotmpl_values EMPTY = {0}, FULL = {.system = "sys {{ .Prompt }}", .prompt = "p", .suffix = "s"};
    buf a, b;
    buf_init(&a), buf_init(&b);
    attnd_err ea = {{0}}, eb = {{0}};
    attnd_status sa = gotmpl_render(t, size, &EMPTY, &a, &ea), sb = gotmpl_render(t, size, &FULL, &b, &eb);
    FUZZ_CHECK(sa == sb, "accepted with one set of values and not the other (%d, %d)", sa, sb);
    FUZZ_CHECK(sa == ATTND_OK || (sa == ATTND_ERR_INVALID && ea.msg[0] && eb.msg[0]), "a refusal without a message");
    FUZZ_CHECK(sa != ATTND_OK || a.len <= size, "empty fields rendered %zu bytes from %zu", a.len, size);
    bool plain = true;
    for (size_t i = 0; i + 1 < size; i++)
        if (t[i] == '{' && t[i + 1] == '{') plain = false;
    FUZZ_CHECK(!plain || (sa == ATTND_OK && a.len == size && (!size || !memcmp(a.p, t, size))), "plain text changed");
    buf_free(&a), buf_free(&b);
    return 0;
}
