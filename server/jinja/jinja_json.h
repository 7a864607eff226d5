/*
 * jinja_json.h — the bridge from JSON (jansson) to template values, kept out of the engine's
 * core so that jinja.h needs no JSON library.
 */
#ifndef ATTND_SERVER_JINJA_JSON_H
#define ATTND_SERVER_JINJA_JSON_H

#include <jansson.h>

#include "jinja.h"

/* The value of j (borrowed; copied into c). Strings, object keys included, get provenance
 * prov (JINJA_DATA for what a client sent, JINJA_LITERAL for trusted text such as bos_token).
 * NULL when out of memory or nested deeper than 64. */
jinja_value *jinja_from_json(jinja_ctx *c, const json_t *j, int prov);

/* Binds every member of the object vars as a variable (strings as prov). */
void jinja_set_json_vars(jinja_ctx *c, const json_t *vars, int prov);

#endif
