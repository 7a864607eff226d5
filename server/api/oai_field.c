/*
 * oai_field.c — one member of a request body, type-checked (see oai_field.h).
 */
#include "oai_field.h"

#include <stdarg.h>

attnd_status oai_bad(const char **param, const char *name, attnd_err *err, const char *fmt, ...) {
    *param = name;
    va_list ap;
    va_start(ap, fmt);
    attnd_vfail(err, ATTND_ERR_INVALID, fmt, ap);
    va_end(ap);
    return ATTND_ERR_INVALID;
}

const json_t *oai_field(const json_t *body, const char *name) {
    const json_t *v = json_object_get(body, name);
    return json_is_null(v) ? NULL : v;
}

attnd_status oai_get_bool(const json_t *body, const char *name, bool *out, const char **param, attnd_err *err) {
    const json_t *v = oai_field(body, name);
    if (!v) return ATTND_OK;
    if (!json_is_boolean(v)) return oai_bad(param, name, err, "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return ATTND_OK;
}

attnd_status oai_get_string(const json_t *body, const char *name, const char **out, const char **param,
                            attnd_err *err) {
    const json_t *v = oai_field(body, name);
    if (!v) return ATTND_OK;
    if (!json_is_string(v)) return oai_bad(param, name, err, "'%s' must be a string", name);
    if (out) *out = json_string_value(v);
    return ATTND_OK;
}
