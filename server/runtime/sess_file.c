/*
 * sess_file.c — the session file format (see sess_file.h): jansson in, jansson out.
 */
#include "sess_file.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/common.h"

char *sess_file_encode(const char *id, const char *owner, const char *model_tag, int64_t created_ms,
                       int64_t last_use_ms, const int32_t *tokens, int n_tokens) {
    json_t *root = json_object(), *toks = json_array();
    json_object_set_new(root, "format", json_string("attnd-session"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "id", json_string(id));
    json_object_set_new(root, "model", json_string(model_tag));
    if (owner && *owner) json_object_set_new(root, "owner", json_string(owner));
    json_object_set_new(root, "created", json_integer(created_ms));
    json_object_set_new(root, "last_used", json_integer(last_use_ms));
    for (int i = 0; i < n_tokens; i++) json_array_append_new(toks, json_integer(tokens[i]));
    json_object_set_new(root, "tokens", toks);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

static sess_file_result damaged(sess_file *out, const char *why) {
    snprintf(out->why, sizeof(out->why), "%s", why);
    free(out->tokens);
    out->tokens = NULL;
    out->n_tokens = 0;
    return SESS_FILE_DAMAGED;
}

/* The "tokens" array into out->tokens. */
static sess_file_result decode_tokens(const json_t *toks, sess_file *out) {
    size_t n = json_array_size(toks);
    if (n > SESS_FILE_MAX_TOKENS) return damaged(out, "too many tokens");
    out->tokens = malloc((n ? n : 1) * sizeof(*out->tokens));
    if (!out->tokens) return damaged(out, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return damaged(out, "a token is not a non-negative integer");
        out->tokens[i] = (int32_t)json_integer_value(t);
    }
    out->n_tokens = (int)n;
    return SESS_FILE_OK;
}

sess_file_result sess_file_decode(const char *text, size_t len, const char *model_tag, sess_file *out) {
    memset(out, 0, sizeof(*out));
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) return damaged(out, je.text);
    sess_file_result r = SESS_FILE_OK;
    json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
    json_t *model = json_object_get(root, "model"), *toks = json_object_get(root, "tokens");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "attnd-session") || !json_is_integer(ver) ||
        json_integer_value(ver) != 1 || !json_is_array(toks))
        r = damaged(out, "not an attnd-session v1 file");
    else if (!json_is_string(model) || strcmp(json_string_value(model), model_tag)) r = SESS_FILE_OTHER_MODEL;
    else r = decode_tokens(toks, out);
    if (r == SESS_FILE_OK) {
        json_t *c = json_object_get(root, "created"), *u = json_object_get(root, "last_used");
        out->created_ms = json_is_integer(c) ? json_integer_value(c) : (int64_t)attnd_unix_ms();
        out->last_use_ms = json_is_integer(u) ? json_integer_value(u) : out->created_ms;
        json_t *id = json_object_get(root, "id"), *owner = json_object_get(root, "owner");
        if (json_is_string(id) && strlen(json_string_value(id)) < sizeof(out->id))
            snprintf(out->id, sizeof(out->id), "%s", json_string_value(id));
        if (json_is_string(owner) && strlen(json_string_value(owner)) < sizeof(out->owner))
            snprintf(out->owner, sizeof(out->owner), "%s", json_string_value(owner));
    }
    json_decref(root);
    return r;
}
