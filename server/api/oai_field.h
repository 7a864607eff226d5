/*
 * oai_field.h — reading one member of a request body with its type checked, for every request
 * parser of the API layer (oai.c, responses.c, toolcall.c): a leaf module, so that the parsers
 * can share it without depending on each other.
 */
#ifndef ATTND_SERVER_OAI_FIELD_H
#define ATTND_SERVER_OAI_FIELD_H

#include <jansson.h>
#include <stdbool.h>

#include "attnd/common.h"

/* Reading one member of a request body, for the request parsers (oai.c, responses.c, toolcall.c):
 * a member that is absent or JSON null counts as not given. oai_field returns it borrowed from
 * o, or NULL. oai_bad sets *param = name (a static string) and err->msg, and returns
 * ATTND_ERR_INVALID. oai_get_bool / oai_get_string leave *out alone when the member is not
 * given, refuse another type (naming it), else set *out (a string borrowed from body; out may
 * be NULL to only check it). */
const json_t *oai_field(const json_t *o, const char *name);
attnd_status oai_bad(const char **param, const char *name, attnd_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
attnd_status oai_get_bool(const json_t *body, const char *name, bool *out, const char **param, attnd_err *err);
attnd_status oai_get_string(const json_t *body, const char *name, const char **out, const char **param,
                            attnd_err *err);

#endif
