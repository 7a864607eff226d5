/*
 * jinja_json.c — JSON to template values (see jinja_json.h).
 */
#include "jinja_json.h"

#include "jinja_internal.h"

#include <string.h>

static jinja_value *from_json(jinja_ctx *c, const json_t *j, int prov, int depth) {
    if (depth > 64) return NULL;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jinja_value *d = jinja_dict(c);
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            jinja_value *x = from_json(c, v, prov, depth + 1);
            if (!x || !d) return NULL;
            /* a client's keys are its data too (they reach the prompt through tojson); JSON's
             * keys are distinct, so each is appended without a lookup */
            jinja_value *key = jinja_str(c, k, strlen(k), prov);
            if (!key || !jv_dict_append(c, d, key, x)) return NULL;
        }
        return d;
    }
    case JSON_ARRAY: {
        jinja_value *l = jinja_list(c);
        size_t i;
        const json_t *v;
        json_array_foreach(j, i, v) {
            jinja_value *x = from_json(c, v, prov, depth + 1);
            if (!x || !l) return NULL;
            jinja_list_push(c, l, x);
        }
        return l;
    }
    case JSON_STRING: return jinja_str(c, json_string_value(j), json_string_length(j), prov);
    case JSON_INTEGER: return jinja_int(c, (int64_t)json_integer_value(j));
    case JSON_REAL: return jinja_float(c, json_real_value(j));
    case JSON_TRUE: return jinja_bool(c, true);
    case JSON_FALSE: return jinja_bool(c, false);
    default: return jinja_none(c);
    }
}

jinja_value *jinja_from_json(jinja_ctx *c, const json_t *j, int prov) { return j ? from_json(c, j, prov, 0) : NULL; }

void jinja_set_json_vars(jinja_ctx *c, const json_t *vars, int prov) {
    const char *k;
    const json_t *v;
    if (!json_is_object(vars)) return;
    json_object_foreach((json_t *)vars, k, v) jinja_ctx_set(c, k, jinja_from_json(c, v, prov));
}
