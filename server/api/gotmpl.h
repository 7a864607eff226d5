/*
 * gotmpl.h — the small part of Go's text/template that Ollama's /api/generate `template` field
 * uses for a one-turn prompt, rendered to text; everything else is refused by name.
 *
 * Understood: text; {{ .System }}, {{ .Prompt }}, {{ .Response }}, {{ .Suffix }};
 * {{ if .X }} ... {{ else if .Y }} ... {{ else }} ... {{ end }} (a field is true when not empty),
 * nested up to GOTMPL_MAX_DEPTH; comments (an action between slash-star and star-slash); and
 * the trim markers "{{- " and " -}}", which remove the white space (space, tab, CR, LF) before
 * or after the action, as Go does. {{ if .Response }} is false (the response is still to come).
 * As Ollama renders a prompt, the template stops at {{ .Response }}: what follows is checked but
 * not written (the model writes the response).
 * Refused (ATTND_ERR_INVALID, the message quoting the action): every other action (range, with,
 * define, template, block, variables, pipelines, functions such as eq or and, .Messages, .Tools),
 * an {{ else }} or {{ end }} without its {{ if }}, an {{ if }} left open, an unclosed "{{".
 */
#ifndef ATTND_SERVER_GOTMPL_H
#define ATTND_SERVER_GOTMPL_H

#include <stddef.h>

#include "attnd/buf.h"
#include "attnd/common.h"

#define GOTMPL_MAX_DEPTH 16

/* The fields a template reads (borrowed; NULL reads as ""). */
typedef struct gotmpl_values {
    const char *system, *prompt, *suffix;
} gotmpl_values;

/* Renders tmpl[n] with v, appending to out (initialised by the caller, who frees it, also after
 * an error). Errors: ATTND_ERR_INVALID (what is malformed or not supported, and where),
 * ATTND_ERR_NOMEM. Pure: no state, any thread. */
attnd_status gotmpl_render(const char *tmpl, size_t n, const gotmpl_values *v, buf *out, attnd_err *err);

#endif
