/*
 * fuzz_jinja.c — (fuzzing only) the Jinja engine on arbitrary templates and variables.
 *
 * Input: template bytes, then optionally a NUL byte and a JSON object of variables. The
 * template is parsed and, when it parses, rendered with the variables (strings as data) under
 * production's limits (jinja_ctx_create(NULL): the server's), so that what the fuzzer finds is
 * what a model file could do to the server. Each render ends by its work budget or its
 * wall-clock cap (1 s), well inside run.sh's -timeout. Checked: no crash, an error always has a
 * message naming a template line, and a rendering's segments cover its text exactly, in order.
 * The corpus holds the audit's hostile templates (corpus/fuzz_jinja/hostile*).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "jinja.h"
#include "jinja_json.h"

static void check_output(const jinja_output *o) {
    size_t at = 0;
    for (size_t i = 0; i < o->n_segs; i++) {
        FUZZ_CHECK(o->segs[i].off == at && o->segs[i].len > 0, "segment %zu at %zu, expected %zu", i, o->segs[i].off, at);
        FUZZ_CHECK(i == 0 || o->segs[i].from_data != o->segs[i - 1].from_data, "adjacent segments not merged");
        at += o->segs[i].len;
    }
    FUZZ_CHECK(at == o->len && o->text[o->len] == '\0', "segments cover %zu of %zu bytes", at, o->len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = nul ? (size_t)(nul - data) : size;
    jinja_template *t = NULL;
    attnd_err err = {{0}};
    attnd_status st = jinja_parse(src, len, &t, &err);
    if (st != ATTND_OK) {
        FUZZ_CHECK(st == ATTND_ERR_NOMEM || strstr(err.msg, "template line ") == err.msg, "parse error: %s", err.msg);
        return 0;
    }
    jinja_ctx *c = jinja_ctx_create(NULL); /* production's limits */
    FUZZ_CHECK(c != NULL, "no context");
    if (nul) {
        json_t *vars = json_loadb((const char *)nul + 1, size - len - 1, 0, NULL);
        jinja_set_json_vars(c, vars, JINJA_DATA);
        json_decref(vars);
    }
    jinja_ctx_set(c, "bos_token", jinja_str(c, "<s>", 3, JINJA_LITERAL));
    struct tm now = {.tm_year = 125, .tm_mon = 2, .tm_mday = 14};
    jinja_ctx_set_now(c, &now);
    jinja_output out;
    st = jinja_render(c, t, &out, &err);
    if (st == ATTND_OK) {
        check_output(&out);
        jinja_output_free(&out);
    } else {
        FUZZ_CHECK(strstr(err.msg, "template line ") == err.msg, "render error: %s", err.msg);
    }
    jinja_ctx_destroy(c);
    jinja_template_destroy(t);
    return 0;
}
