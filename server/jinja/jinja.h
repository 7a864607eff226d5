/*
 * jinja.h — a sandboxed Jinja template engine for chat templates, rendering what Hugging Face's
 * apply_chat_template renders (jinja2's ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, keep_trailing_newline off, HF's tojson, raise_exception and strftime_now).
 *
 *     jinja_template *t;
 *     if (jinja_parse(src, strlen(src), &t, &err) != ATTND_OK) ... err.msg names the line ...
 *     jinja_ctx *c = jinja_ctx_create(NULL);                  // one render: its values and limits
 *     jinja_value *msgs = jinja_list(c);
 *     jinja_value *m = jinja_dict(c);
 *     jinja_dict_set(c, m, "role", jinja_str(c, "user", 4, JINJA_DATA));
 *     jinja_list_push(c, msgs, m);
 *     jinja_ctx_set(c, "messages", msgs);
 *     jinja_output out;
 *     if (jinja_render(c, t, &out, &err) == ATTND_OK) use(out.text, out.len, out.segs, out.n_segs);
 *     jinja_output_free(&out);
 *     jinja_ctx_destroy(c);
 *     jinja_template_destroy(t);
 *
 * Provenance. Every string remembers which of its bytes came from the caller's data (JINJA_DATA:
 * message content, tool arguments...) and which from the template or trusted values
 * (JINJA_LITERAL: template text, bos_token). Concatenation, slicing, filters and string methods
 * carry that mark byte by byte; an operation that cannot track it (case mapping of non-ASCII
 * text, number parsing...) marks its whole result as data when any input was data, the safe side.
 * The output is a list of segments {offset, length, from_data}, so a tokenizer can parse control
 * tokens only where the template put them.
 *
 * Sandbox and bounds: templates see only the variables the caller set, cannot mutate them
 * (except namespace() objects they create), and each render is bounded (jinja_limits): one
 * budget of steps counts every loop iteration, call and expression, and every operation's work
 * by what it touches (a step per item, a step per 64 bytes: searching, joining, replacing,
 * slicing, printing); sizes are checked before the work (repeat, concatenation); values nest at
 * most max_depth deep, so printing, tojson and comparing recurse no deeper; and a render has a
 * wall-clock cap. Every error, from parsing or rendering, has a message starting "template line
 * N: "; raise_exception(msg) gives "template line N: <msg>". Not thread-safe per ctx; a parsed
 * template is immutable and may be rendered by many ctxs on many threads at once.
 */
#ifndef ATTND_SERVER_JINJA_H
#define ATTND_SERVER_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "attnd/common.h"

typedef struct jinja_template jinja_template;
typedef struct jinja_ctx jinja_ctx;
typedef struct jinja_value jinja_value;

enum { JINJA_LITERAL = 0, JINJA_DATA = 1 };

typedef struct jinja_limits {
    size_t max_output;      /* bytes of rendered text, and of any one string (default 8 MiB) */
    size_t max_memory;      /* bytes of values one render may allocate (default 64 MiB) */
    uint64_t max_steps;     /* the work budget: iterations, calls, expressions, items and
                             * 64-byte runs touched, in all (default 4,000,000) */
    int max_depth;          /* nested macro calls, and how deep values nest (default 64) */
    int max_time_ms;        /* wall-clock cap of one render (default 1000) */
} jinja_limits;

/* Parses a template (len bytes, need not be NUL-terminated). *out is owned by the caller
 * (jinja_template_destroy). Errors: ATTND_ERR_FORMAT naming the line, ATTND_ERR_NOMEM. */
attnd_status jinja_parse(const char *src, size_t len, jinja_template **out, attnd_err *err);
void jinja_template_destroy(jinja_template *t); /* accepts NULL */

/* One render's context: its variables, values and limits (lim NULL = the defaults). NULL when
 * out of memory. Values made with it live until jinja_ctx_destroy. */
jinja_ctx *jinja_ctx_create(const jinja_limits *lim);
void jinja_ctx_destroy(jinja_ctx *c); /* accepts NULL */
/* Binds a variable (name copied). A later binding of the same name replaces it. */
void jinja_ctx_set(jinja_ctx *c, const char *name, jinja_value *v);
/* Replaces the clock the wall-clock cap reads (milliseconds, any origin; tests step it). */
void jinja_ctx_set_clock(jinja_ctx *c, double (*now_ms)(void *user), void *user);
/* Fixes strftime_now's clock (local time of the caller's choosing); the default is the wall
 * clock in local time. */
void jinja_ctx_set_now(jinja_ctx *c, const struct tm *now);

/* Values owned by c. Each returns NULL when out of memory (the render then fails with
 * ATTND_ERR_NOMEM); passing NULL to the container functions is allowed and ignored. */
jinja_value *jinja_none(jinja_ctx *c);
jinja_value *jinja_bool(jinja_ctx *c, bool b);
jinja_value *jinja_int(jinja_ctx *c, int64_t i);
jinja_value *jinja_float(jinja_ctx *c, double f);
jinja_value *jinja_str(jinja_ctx *c, const char *s, size_t n, int provenance); /* bytes copied */
jinja_value *jinja_list(jinja_ctx *c);
jinja_value *jinja_dict(jinja_ctx *c);
void jinja_list_push(jinja_ctx *c, jinja_value *list, jinja_value *v);
void jinja_dict_set(jinja_ctx *c, jinja_value *dict, const char *key, jinja_value *v); /* key is literal */
/* Sets dict[key] for any key value (a string with its own provenance); false when out of memory. */
bool jinja_dict_set_value(jinja_ctx *c, jinja_value *dict, jinja_value *key, jinja_value *v);

/* A rendering: text (NUL-terminated, malloc'd) cut into segments that cover it in order. */
typedef struct jinja_seg {
    size_t off, len;
    bool from_data;
} jinja_seg;
typedef struct jinja_output {
    char *text;
    size_t len;
    jinja_seg *segs;
    size_t n_segs;
} jinja_output;

/* Renders t with c's variables. On success *out is the caller's (jinja_output_free); on error
 * *out is empty and err names the template line. ATTND_ERR_FORMAT: the template raised or did
 * something Python refuses; ATTND_ERR_NOMEM: the render ran out of memory or of one of its
 * bounds (steps, time, output or string size, depth). A ctx renders once. */
attnd_status jinja_render(jinja_ctx *c, const jinja_template *t, jinja_output *out, attnd_err *err);
void jinja_output_free(jinja_output *o); /* accepts NULL */

#endif
