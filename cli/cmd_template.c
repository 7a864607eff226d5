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

static const char *USAGE =
    "usage: attnd template [--model PATH | --template FILE] [--vars FILE] [--now ISO-TIME]\n"
    "\n"
    "Renders a Jinja chat template as Hugging Face's apply_chat_template does and prints the text.\n"
    "  --model PATH      the GGUF file whose tokenizer.chat_template is rendered (default: the\n"
    "                    shipped model); its BOS / EOS text is bos_token / eos_token unless the\n"
    "                    variables give them\n"
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

/* The template source: --template's file or the model's tokenizer.chat_template (then its BOS /
 * EOS text goes into defaults). Exits 1. */
static char *template_source(const char *model, const char *file, size_t *len, json_t *defaults) {
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
    if (gguf_get_str(g, "tokenizer.chat_template", &t, NULL) != ATTND_OK || !t)
        fprintf(stderr, "attnd template: %s has no tokenizer.chat_template\n", model), exit(1);
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
    char *src = template_source(model, file, &len, defaults);
    char *vars_text = vars_path ? read_file(vars_path, &vlen) : read_all(stdin, &vlen);
    if (!src || !vars_text) fprintf(stderr, "attnd template: cannot read the variables\n"), exit(1);
    json_error_t jerr;
    json_t *vars = json_loadb(vars_text, vlen, 0, &jerr);
    if (!json_is_object(vars)) fprintf(stderr, "attnd template: the variables must be a JSON object (%s)\n", jerr.text), exit(1);
    json_object_update_missing(vars, defaults);
    json_decref(defaults);
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
