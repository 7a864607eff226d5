/*
 * toolcall_glm.h — GLM's tool-call block read into its name and raw parameters, for the reply
 * parser (toolcall_parse.c), which types the values by the tool's schema.
 *
 * GLM-4.5 / 4.6 / 4.7's templates write a call as
 *   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
 * (GLM-4.6 puts a newline after the name and after each tag pair; 4.7 writes them tight). The
 * value is the text between its tags, verbatim: a string as it is, anything else as JSON.
 */
#ifndef ATTND_TOOLCALL_GLM_H
#define ATTND_TOOLCALL_GLM_H

#include <stdbool.h>
#include <stddef.h>

/* Called once per parameter in order: the key key[kn] and the value's text v[vn] (both borrowed
 * from the block, not NUL-terminated). */
typedef void (*toolcall_glm_param_fn)(void *ctx, const char *key, size_t kn, const char *v, size_t vn);

/* Reads the call that starts at s[0] (just after <tool_call>) in s[0..n). Returns 1 when it is
 * one whole call: its name into name (NUL-terminated, at most cap - 1 bytes), each parameter to
 * param (which may be NULL, to only measure), *end just past its </tool_call>. Returns -1 when
 * s ends before the call does and more text could still make it one (the caller waits; with
 * final set it never returns -1), and 0 when it is not a call in this syntax: no name, a name
 * with blanks or '<' inside, text between the tags, a </tool_call> missing at the end of text. */
int toolcall_glm_read(const char *s, size_t n, bool final, char *name, size_t cap, toolcall_glm_param_fn param,
                      void *ctx, size_t *end);

#endif
