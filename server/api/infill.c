/*
 * infill.c — llama-server's POST /infill without HTTP (see infill.h): the request's fields, and
 * the fill-in-the-middle prompt laid out with the model's FIM tokens and trimmed to the context.
 */
#include "infill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "oai_field.h"

/* llama-server's batch, the window its prefix and suffix are cut to (3:1). */
#define INFILL_WINDOW 2048
/* What separates input_extra chunks when the model has no file-separator token. */
static const char SNIPPET[] = "\n\n--- snippet ---\n\n";

// ---- the request --------------------------------------------------------------------------

static attnd_status required_string(const json_t *body, const char *name, const char **out, const char **param,
                                    attnd_err *err) {
    attnd_status st = oai_get_string(body, name, out, param, err);
    if (st == ATTND_OK && !*out) return oai_bad(param, name, err, "'%s' is required (a string)", name);
    return st;
}

/* input_extra[i] into *x. */
static attnd_status parse_chunk(const json_t *c, infill_extra *x, const char **param, attnd_err *err) {
    if (!json_is_object(c))
        return oai_bad(param, "input_extra", err, "'input_extra' must be an array of {\"filename\": string, \"text\": string}");
    x->filename = "tmp";
    attnd_status st = oai_get_string(c, "filename", &x->filename, param, err);
    if (st == ATTND_OK) st = oai_get_string(c, "text", &x->text, param, err);
    if (st == ATTND_OK && !x->text) return oai_bad(param, "input_extra", err, "every 'input_extra' chunk needs a \"text\" string");
    if (st != ATTND_OK) *param = "input_extra";
    return st;
}

attnd_status infill_parse(const json_t *body, infill_input *out, const char **param, attnd_err *err) {
    *out = (infill_input){.prompt = ""};
    *param = NULL;
    attnd_status st = required_string(body, "input_prefix", &out->prefix, param, err);
    if (st == ATTND_OK) st = required_string(body, "input_suffix", &out->suffix, param, err);
    if (st == ATTND_OK) st = oai_get_string(body, "prompt", &out->prompt, param, err);
    if (st != ATTND_OK) return st;
    const json_t *extra = oai_field(body, "input_extra");
    if (!extra) return ATTND_OK;
    if (!json_is_array(extra))
        return oai_bad(param, "input_extra", err, "'input_extra' must be an array of {\"filename\": string, \"text\": string}");
    size_t n = json_array_size(extra);
    if (n && !(out->extra = calloc(n, sizeof(*out->extra)))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (; out->n_extra < n; out->n_extra++)
        if ((st = parse_chunk(json_array_get(extra, out->n_extra), &out->extra[out->n_extra], param, err)) != ATTND_OK)
            return st;
    return ATTND_OK;
}

void infill_input_free(infill_input *in) {
    if (!in) return;
    free(in->extra);
    *in = (infill_input){0};
}

attnd_status infill_check_model(const tokenizer *tok, attnd_err *err) {
    static const char *const NAMES[] = {"prefix", "suffix", "middle"};
    char missing[64] = "";
    for (int r = TOK_FIM_PRE; r <= TOK_FIM_MID; r++)
        if (tok_fim(tok, (tok_fim_role)r) < 0)
            snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s", missing[0] ? ", " : "",
                     NAMES[r]);
    if (!missing[0]) return ATTND_OK;
    return attnd_fail(err, ATTND_ERR_UNSUPPORTED,
                      "this model cannot fill in the middle: its vocabulary has no FIM token for: %s "
                      "(tokenizer.ggml.fim_pre_token_id, fim_suf_token_id, fim_mid_token_id, or tokens such as "
                      "<|fim_prefix|>); serve a code model trained for infilling",
                      missing);
}

// ---- the layout ---------------------------------------------------------------------------

/* A growing token list in a byte buffer (buf.h). */
static bool push(buf *b, const int32_t *ids, size_t n) { return !n || buf_append(b, ids, n * sizeof(*ids)); }
static bool push1(buf *b, int32_t id) { return push(b, &id, 1); }
static size_t n_ids(const buf *b) { return b->len / sizeof(int32_t); }
static const int32_t *ids_of(const buf *b) { return (const int32_t *)(const void *)b->p; }
/* Appends the first (head) or the last k tokens of src. */
static bool push_part(buf *b, const buf *src, size_t k, bool head) {
    return !k || push(b, ids_of(src) + (head ? 0 : n_ids(src) - k), k);
}

/* Appends the tokens of text (its special tokens are tokens only with special). */
static attnd_status push_text(buf *b, const tokenizer *tok, const char *text, bool special, attnd_err *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    attnd_status st = tok_encode(tok, text, strlen(text), false, special, &ids, &n, err);
    if (st == ATTND_OK && !push(b, ids, n)) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    free(ids);
    return st;
}

/* "{name}\n" after the file separator. */
static attnd_status push_file_line(buf *b, const tokenizer *tok, const char *name, attnd_err *err) {
    buf line = {0};
    attnd_status st = buf_printf(&line, "%s\n", name) ? push_text(b, tok, line.p, false, err)
                                                      : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    buf_free(&line);
    return st;
}

/* The repository-level context before the FIM prefix (infill.h), whole. */
static attnd_status extra_context(const tokenizer *tok, const infill_input *in, buf *x, attnd_err *err) {
    int32_t rep = tok_fim(tok, TOK_FIM_REP), sep = tok_fim(tok, TOK_FIM_SEP);
    attnd_status st = ATTND_OK;
    if (rep >= 0) st = push1(x, rep) ? push_text(x, tok, "myproject\n", false, err) : ATTND_ERR_NOMEM;
    for (size_t i = 0; st == ATTND_OK && i < in->n_extra; i++) {
        if (sep >= 0) st = push1(x, sep) ? push_file_line(x, tok, in->extra[i].filename, err) : ATTND_ERR_NOMEM;
        else st = push_text(x, tok, SNIPPET, false, err);
        if (st == ATTND_OK) st = push_text(x, tok, in->extra[i].text, false, err);
    }
    if (st == ATTND_OK && sep >= 0) st = push1(x, sep) ? push_file_line(x, tok, "filename", err) : ATTND_ERR_NOMEM;
    if (st == ATTND_ERR_NOMEM) attnd_fail(err, st, "out of memory");
    return st;
}

static size_t min_z(size_t a, long long b) { return b <= 0 ? 0 : (size_t)b < a ? (size_t)b : a; }

attnd_status infill_layout(const tokenizer *tok, const infill_input *in, int n_ctx, int n_predict, int32_t **ids,
                           size_t *n, attnd_err *err) {
    buf pre = {0}, suf = {0}, prompt = {0}, x = {0}, out = {0};
    *ids = NULL, *n = 0;
    attnd_status st = push_text(&pre, tok, in->prefix, false, err);
    if (st == ATTND_OK) st = push_text(&suf, tok, in->suffix, false, err);
    if (st == ATTND_OK) st = push_text(&prompt, tok, in->prompt, true, err);
    if (st == ATTND_OK) st = extra_context(tok, in, &x, err);
    if (st == ATTND_OK) {
        /* the answer's room: what it asks for, but never more than half the context */
        long long reserve = n_predict < 1 ? 1 : n_predict > n_ctx / 2 ? n_ctx / 2 : n_predict;
        long long markers = 3 + (tok_add_bos(tok) ? 1 : 0), room = n_ctx - reserve - markers;
        long long w = room < INFILL_WINDOW ? room : INFILL_WINDOW;
        size_t take_pre = min_z(n_ids(&pre), 3 * (w / 4));
        size_t take_suf = min_z(n_ids(&suf), w / 4 - (long long)n_ids(&prompt));
        size_t core = take_pre + n_ids(&prompt) + take_suf;
        size_t take_x = min_z(n_ids(&x), room - (long long)core);
        bool ok = !tok_add_bos(tok) || push1(&out, tok_bos(tok));
        ok = ok && push_part(&out, &x, take_x, false);
        ok = ok && push1(&out, tok_fim(tok, TOK_FIM_PRE)) && push_part(&out, &pre, take_pre, false);
        ok = ok && push_part(&out, &prompt, n_ids(&prompt), true);
        ok = ok && push1(&out, tok_fim(tok, TOK_FIM_SUF)) && push_part(&out, &suf, take_suf, true);
        ok = ok && push1(&out, tok_fim(tok, TOK_FIM_MID));
        if (!ok) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    if (st == ATTND_OK) {
        *ids = (int32_t *)(void *)out.p, *n = n_ids(&out);
        out = (buf){0};
    }
    buf_free(&pre), buf_free(&suf), buf_free(&prompt), buf_free(&x), buf_free(&out);
    return st;
}

attnd_status infill_prompt_ids(const tokenizer *tok, const infill_input *in, int n_ctx, long long max_tokens,
                               json_t **prompt, attnd_err *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    *prompt = NULL;
    attnd_status st = infill_check_model(tok, err);
    if (st == ATTND_OK) st = infill_layout(tok, in, n_ctx, max_tokens > n_ctx ? n_ctx : (int)max_tokens, &ids, &n, err);
    json_t *arr = st == ATTND_OK ? json_array() : NULL;
    bool ok = arr != NULL;
    for (size_t i = 0; ok && i < n; i++) ok = !json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    if (st != ATTND_OK) return st;
    if (!ok) {
        json_decref(arr);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    *prompt = arr;
    return ATTND_OK;
}
