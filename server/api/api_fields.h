/*
 * api_fields.h — the top-level body fields each generation endpoint knows (server-private): a
 * field no parser reads is ignored, as OpenAI ignores it, but never silently: http.c names it in
 * a Warning header and a log line (a misspelt "temprature" would otherwise pass for a default).
 * A route finds its table by its metrics label (routes.c); a table is a few NULL-ended lists of
 * names, where a name ending in '*' covers every field it starts (llama-server's "dry_*"). Pure:
 * no HTTP.
 */
#ifndef ATTND_SERVER_API_FIELDS_H
#define ATTND_SERVER_API_FIELDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct api_fields {
    const char *const *lists[4]; /* NULL-ended lists; unused entries NULL */
} api_fields;

/* The known fields of the route whose metrics label is label; NULL = its body is not checked. */
const api_fields *api_fields_of(const char *label);

/* Whether f knows the field name. */
bool api_fields_known(const api_fields *f, const char *name);
/* The fields of body (an object) that f does not know, as "a, b" into out (cap bytes, always
 * NUL-terminated; names are cut to printable ASCII, and "(+N more)" ends a list that does not
 * fit). Returns how many there are (0: out is ""). */
size_t api_fields_unknown(const json_t *body, const api_fields *f, char *out, size_t cap);

#endif
