/*
 * test_server_gotmpl.c — Ollama's prompt templates (server/api/gotmpl.c): the fields, if / else
 * if / else / end, comments and Go's trim markers render as text/template renders them; the
 * prompt stops at .Response; everything else is refused naming the action.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "gotmpl.h"

static const gotmpl_values V = {.system = "Be brief.", .prompt = "Hi", .suffix = NULL};

/* tmpl rendered with v must be want. */
static void expect_render(const char *tmpl, const gotmpl_values *v, const char *want) {
    buf b;
    buf_init(&b);
    attnd_err err = {{0}};
    cr_assert_eq(gotmpl_render(tmpl, strlen(tmpl), v, &b, &err), ATTND_OK, "%s: %s", tmpl, err.msg);
    cr_expect_str_eq(b.p ? b.p : "", want, "%s", tmpl);
    buf_free(&b);
}

static void expect_refused(const char *tmpl, const char *says) {
    buf b;
    buf_init(&b);
    attnd_err err = {{0}};
    cr_expect_eq(gotmpl_render(tmpl, strlen(tmpl), &V, &b, &err), ATTND_ERR_INVALID, "accepted: %s", tmpl);
    cr_expect_not_null(strstr(err.msg, says), "%s: '%s' lacks '%s'", tmpl, err.msg, says);
    buf_free(&b);
}

Test(gotmpl, fields_and_branches_render_as_go_does) {
    expect_render("{{ .System }}|{{.Prompt}}|{{ .Suffix }}.", &V, "Be brief.|Hi|.");
    expect_render("{{ if .System }}S:{{ .System }} {{ end }}U:{{ .Prompt }}", &V, "S:Be brief. U:Hi");
    gotmpl_values none = {.prompt = "Hi"};
    expect_render("{{ if .System }}S {{ else }}none {{ end }}U", &none, "none U");
    expect_render("{{ if .Suffix }}F{{ else if .System }}S{{ else if .Prompt }}P{{ else }}E{{ end }}", &none, "P");
    expect_render("{{ if .Prompt }}{{ if .System }}a{{ else }}b{{ end }}c{{ end }}", &none, "bc");
    expect_render("{{ if .System }}x{{ if .Prompt }}y{{ end }}{{ else }}z{{ end }}", &none, "z");
    expect_render("a{{/* a comment */}}b", &V, "ab");
    expect_render("no actions at all", &V, "no actions at all");
    expect_render("", &V, "");
}

/* "{{- " eats the white space before, " -}}" after, newlines included; "{{-3}}" would be a
 * number in Go, not a marker */
Test(gotmpl, trim_markers_remove_the_white_space_beside_the_action) {
    expect_render("<s>  \n {{- .Prompt -}} \n\t </s>", &V, "<s>Hi</s>");
    expect_render("{{- if .System }}\n[SYS] {{ .System }}\n{{- end }}\n[USER] {{ .Prompt }}", &V, "\n[SYS] Be brief.\n[USER] Hi");
    expect_render("a {{- /* c */ -}} b", &V, "ab");
    expect_refused("{{-3}}", "not supported");
}

/* Ollama renders the prompt up to .Response: what follows is for the model to write */
Test(gotmpl, the_prompt_stops_at_the_response) {
    expect_render("<|user|>{{ .Prompt }}<|end|><|assistant|>{{ .Response }}<|end|>", &V, "<|user|>Hi<|end|><|assistant|>");
    expect_render("{{ if .Response }}r{{ else }}n{{ end }}", &V, "n");
    expect_refused("{{ .Prompt }}{{ .Response }}{{ range .Messages }}{{ end }}", "{{ range .Messages }} at byte 28");
}

Test(gotmpl, what_it_does_not_render_is_refused_naming_the_action) {
    expect_refused("{{ range .Messages }}{{ .Content }}{{ end }}", "{{ range .Messages }} at byte 0 is not supported");
    expect_refused("{{ if eq .System \"x\" }}a{{ end }}", "not supported");
    expect_refused("{{ $x := .Prompt }}", "not supported");
    expect_refused("{{ .Prompt | printf \"%q\" }}", "not supported");
    expect_refused("{{ .Tools }}", "not supported");
    expect_refused("{{}}", "not supported");
    expect_refused("{{ end }}", "no {{ if }} to close");
    expect_refused("{{ else }}", "no {{ if }} to continue");
    expect_refused("{{ if .System }}a{{ else }}b{{ else }}c{{ end }}", "no {{ if }} to continue");
    expect_refused("{{ if .System }}a{{ else }}b{{ else if .Prompt }}c{{ end }}", "no {{ if }} to continue");
    expect_refused("{{ if .System }}open", "never closed with {{ end }}");
    expect_refused("text {{ .Prompt ", "byte 5 is never closed");
    char deep[16 * 20 + 1] = "";
    for (int i = 0; i <= GOTMPL_MAX_DEPTH; i++) strcat(deep, "{{ if .Prompt }}");
    expect_refused(deep, "too deep");
}
