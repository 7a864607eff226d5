/*
 * cmd_template.c — `attnd template`: renders a chat template the way the server does, so a
 * user can see the exact prompt a model gets.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/gguf.h"
#include "attnd/tokenizer.h"
#include "commands.h"
#include "../server/jinja/jinja.h"
#include "../server/jinja/jinja_json.h"
#include "../server/api/chat.h"

static const char *USAGE =
    "usage: attnd template [--model PATH | --template FILE] [--vars FILE] [--now ISO-TIME]\n"
    "\n"
    "Renders a Jinja chat template as Hugging Face's apply_chat_template does and prints the text.\n"
    "  --model PATH      the GGUF file whose tokenizer.chat_template is rendered (default: the\n"
    "                    shipped model); its BOS / EOS text is bos_token / eos_token unless the\n"
    "                    variables give them; a file without one gets the built-in template\n"
    "                    `attnd serve` uses for it (ChatML), named on stderr\n"
    "  --template FILE   render this template file instead\n"
    "  --vars FILE       a JSON object of the template's variables: messages, tools,\n"
    "                    add_generation_prompt, bos_token, eos_token and any others (kwargs such as\n"
    "                    enable_thinking); read from stdin when absent\n"
    "  --now ISO-TIME    the clock strftime_now reads, e.g. 2025-03-14T09:26:53 (default: now)\n"
    "A template error exits 1 with its message.\n";

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    for (size_t k; p && (k = fread(p + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (!attnd_grow(&p, &cap, n + 2, 1, 0)) {
            free(p);
            p = NULL;
        }
    }
    if (p) p[n] = '\0';
    *len = n;
    return p;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *p = read_all(f, len);
    fclose(f);
    return p;
}

/* The model's BOS / EOS token text as bos_token / eos_token, unless the variables give them. */
static void model_tokens(gguf_file *g, json_t *defaults) {
    tokenizer *t = NULL;
    if (tok_load(&t, g, NULL) != ATTND_OK) return;
    const char *bos = tok_bos(t) >= 0 ? tok_piece(t, tok_bos(t)) : NULL, *eos = tok_eos(t) >= 0 ? tok_piece(t, tok_eos(t)) : NULL;
    json_object_set_new(defaults, "bos_token", json_string(bos ? bos : ""));
    json_object_set_new(defaults, "eos_token", json_string(eos ? eos : ""));
    tok_destroy(t);
}

/* A model without tokenizer.chat_template gets what serve gives it (chat.h's order: the built-in
 * family, ChatML): vars' messages (string contents) rendered so, printed. Returns the exit status. */
static int render_builtin(const char *model, const json_t *vars) {
    const json_t *msgs = json_object_get(vars, "messages");
    size_t n = json_array_size(msgs);
    chat_msg *m = calloc(n ? n : 1, sizeof(*m));
    for (size_t i = 0; m && i < n; i++) {
        const json_t *o = json_array_get(msgs, i);
        m[i] = (chat_msg){json_string_value(json_object_get(o, "role")), json_string_value(json_object_get(o, "content"))};
        if (!m[i].role || !m[i].content)
            return fprintf(stderr, "attnd template: message %zu needs a string role and content\n", i), free(m), 1;
    }
    gguf_file *g = NULL;
    tokenizer *t = NULL;
    chat_template ct = {0};
    attnd_err err = {{0}};
    jinja_output out = {0};
    int rc = 1;
    if (m && gguf_open(&g, model, &err) == ATTND_OK && tok_load(&t, g, &err) == ATTND_OK &&
        chat_template_load(&ct, NULL, NULL, NULL, t, &err) == ATTND_OK) {
        fprintf(stderr, "attnd template: %s has no tokenizer.chat_template; the built-in %s template, as serve "
                        "uses\n", model, chat_family_name(ct.family));
        chat_request rq = {m, n, msgs, NULL, NULL, json_is_true(json_object_get(vars, "add_generation_prompt")), NULL};
        if (chat_template_render(&ct, &rq, &out, &err) == ATTND_OK) rc = 0, fwrite(out.text, 1, out.len, stdout);
    }
    if (rc) fprintf(stderr, "attnd template: %s\n", m ? err.msg : "out of memory");
    jinja_output_free(&out);
    chat_template_free(&ct);
    tok_destroy(t);
    gguf_close(g);
    free(m);
    return rc;
}

/* The template source: --template's file or the model's tokenizer.chat_template (then its BOS /
 * EOS text goes into defaults); NULL when the model has none (*builtin = its path, the caller's).
 * Exits 1. */
static char *template_source(const char *model, const char *file, size_t *len, json_t *defaults, char **builtin) {
    if (file) {
        char *s = read_file(file, len);
        if (!s) fprintf(stderr, "attnd template: cannot read %s\n", file), exit(1);
        return s;
    }
    char *dflt;
    model = cli_resolve_model("template", model, &dflt);
    gguf_file *g;
    attnd_err err;
    const char *t = NULL;
    if (gguf_open(&g, model, &err) != ATTND_OK) fprintf(stderr, "attnd template: %s: %s\n", model, err.msg), exit(1);
    if (gguf_get_str(g, "tokenizer.chat_template", &t, NULL) != ATTND_OK || !t || !*t) {
        gguf_close(g);
        if (!(*builtin = strdup(model))) fprintf(stderr, "attnd template: out of memory\n"), exit(1);
        free(dflt);
        return NULL;
    }
    char *s = strdup(t);
    *len = strlen(t);
    model_tokens(g, defaults);
    gguf_close(g);
    free(dflt);
    return s;
}

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *vars_path = NULL, *now = NULL;
    const cli_opt opts[] = {CLI_OPT_STR("--model", &model), CLI_OPT_STR("--template", &file),
                            CLI_OPT_STR("--vars", &vars_path), CLI_OPT_STR("--now", &now)};
    if (!cli_parse_opts("template", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (model && file) cli_usage_error("template", "give --model or --template, not both");
    struct tm tm = {0};
    if (now) {
        const char *end = strptime(now, "%Y-%m-%dT%H:%M:%S", &tm);
        if (!end || *end) cli_usage_error("template", "--now must look like 2025-03-14T09:26:53");
    }
    size_t len = 0, vlen = 0;
    json_t *defaults = json_object();
    char *builtin = NULL;
    char *src = template_source(model, file, &len, defaults, &builtin);
    char *vars_text = vars_path ? read_file(vars_path, &vlen) : read_all(stdin, &vlen);
    if ((!src && !builtin) || !vars_text) fprintf(stderr, "attnd template: cannot read the variables\n"), exit(1);
    json_error_t jerr;
    json_t *vars = json_loadb(vars_text, vlen, 0, &jerr);
    if (!json_is_object(vars)) fprintf(stderr, "attnd template: the variables must be a JSON object (%s)\n", jerr.text), exit(1);
    json_object_update_missing(vars, defaults);
    json_decref(defaults);
    if (builtin) {
        int brc = render_builtin(builtin, vars);
        json_decref(vars);
        free(vars_text);
        free(builtin);
        return brc;
    }
    jinja_template *t = NULL;
    attnd_err err;
    jinja_ctx *c = jinja_ctx_create(NULL);
    jinja_output out = {0};
    int rc = 0;
    if (!c || jinja_parse(src, len, &t, &err) != ATTND_OK) {
        rc = 1;
    } else {
        jinja_set_json_vars(c, vars, JINJA_DATA);
        if (now) jinja_ctx_set_now(c, &tm);
        if (jinja_render(c, t, &out, &err) != ATTND_OK) rc = 1;
        else fwrite(out.text, 1, out.len, stdout);
    }
    if (rc) fprintf(stderr, "attnd template: %s\n", c ? err.msg : "out of memory");
    jinja_output_free(&out);
    jinja_ctx_destroy(c);
    jinja_template_destroy(t);
    json_decref(vars);
    free(vars_text);
    free(src);
    return rc;
}
