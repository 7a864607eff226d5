/*
 * toolcall.c — a request's tools (see toolcall.h): validating "tools" / "tool_choice" /
 * "parallel_tool_calls", the Hermes-style prompt text that describes them to a built-in chat
 * family, the history's calls and results as text, and the grammar that forces a call.
 */
#include "toolcall.h"

#include <string.h>

#include "json_schema.h"
#include "oai_field.h"

enum { MAX_TOOLS = 128, MAX_NAME = 64, MAX_PARALLEL = 4 };

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > MAX_NAME) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* One tool into {"name", "description", "parameters"} appended to out->tools. */
static attnd_status parse_tool(const json_t *t, size_t i, bool rshape, toolcall_spec *out, const char **param,
                               attnd_err *err) {
    const json_t *type = json_object_get(t, "type");
    if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function"))
        return oai_bad(param, "tools", err, "tools[%zu] must be {\"type\": \"function\", ...}; only function tools are "
                       "supported", i);
    const json_t *f = rshape ? t : json_object_get(t, "function");
    if (!json_is_object(f)) return oai_bad(param, "tools", err, "tools[%zu].function must be an object", i);
    const json_t *name = json_object_get(f, "name"), *desc = oai_field(f, "description"),
                 *params = oai_field(f, "parameters");
    if (!json_is_string(name) || !name_ok(json_string_value(name)))
        return oai_bad(param, "tools", err, "tools[%zu]: 'name' must be 1..%d characters of a-z A-Z 0-9 _ - .", i,
                       MAX_NAME);
    if (desc && !json_is_string(desc)) return oai_bad(param, "tools", err, "tools[%zu]: 'description' must be a string", i);
    if (params && !json_is_object(params))
        return oai_bad(param, "tools", err, "tools[%zu]: 'parameters' must be a JSON Schema object", i);
    for (size_t k = 0; k < json_array_size(out->tools); k++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(out->tools, k), "name")), json_string_value(name)))
            return oai_bad(param, "tools", err, "tools[%zu]: the name '%s' is used twice", i, json_string_value(name));
    json_t *o = json_pack("{s:O}", "name", (json_t *)name);
    if (o && desc) json_object_set(o, "description", (json_t *)desc);
    if (o) json_object_set_new(o, "parameters", params ? json_incref((json_t *)params) : json_pack("{s:s}", "type", "object"));
    if (!o || json_array_append_new(out->tools, o)) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    return ATTND_OK;
}

static attnd_status parse_choice(const json_t *body, bool rshape, toolcall_spec *out, const char **param,
                                 attnd_err *err) {
    const json_t *c = oai_field(body, "tool_choice");
    if (!c) return ATTND_OK;
    if (json_is_string(c)) {
        const char *s = json_string_value(c);
        if (!strcmp(s, "auto")) out->choice = TOOLCALL_AUTO;
        else if (!strcmp(s, "none")) out->choice = TOOLCALL_NONE;
        else if (!strcmp(s, "required")) out->choice = TOOLCALL_REQUIRED;
        else return oai_bad(param, "tool_choice", err, "'tool_choice' must be auto, none, required or a function");
    } else {
        const json_t *f = rshape ? c : json_object_get(c, "function"), *name = json_object_get(f, "name");
        if (!json_is_object(c) || !json_is_string(name))
            return oai_bad(param, "tool_choice", err, "'tool_choice' as an object names a function: %s",
                           rshape ? "{\"type\": \"function\", \"name\": ...}"
                                  : "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        out->choice = TOOLCALL_NAMED;
        for (size_t k = 0; k < json_array_size(out->tools); k++) {
            const json_t *n = json_object_get(json_array_get(out->tools, k), "name");
            if (!strcmp(json_string_value(n), json_string_value(name))) out->name = json_string_value(n);
        }
        if (!out->name)
            return oai_bad(param, "tool_choice", err, "'tool_choice' names '%.64s', which is not in 'tools'",
                           json_string_value(name));
    }
    if ((out->choice == TOOLCALL_REQUIRED || out->choice == TOOLCALL_NAMED) && json_array_size(out->tools) == 0)
        return oai_bad(param, "tool_choice", err, "'tool_choice' asks for a call but there are no 'tools'");
    return ATTND_OK;
}

attnd_status toolcall_parse_spec(const json_t *body, bool rshape, toolcall_spec *out, const char **param,
                                 attnd_err *err) {
    memset(out, 0, sizeof(*out));
    out->parallel = true;
    const json_t *tools = oai_field(body, "tools");
    if (tools && !json_is_array(tools)) return oai_bad(param, "tools", err, "'tools' must be an array");
    if (json_array_size(tools) > MAX_TOOLS)
        return oai_bad(param, "tools", err, "'tools' has %zu entries; at most %d are allowed", json_array_size(tools),
                       MAX_TOOLS);
    if (!(out->tools = json_array())) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    attnd_status st;
    for (size_t i = 0; i < json_array_size(tools); i++)
        if ((st = parse_tool(json_array_get(tools, i), i, rshape, out, param, err)) != ATTND_OK) return st;
    if ((st = parse_choice(body, rshape, out, param, err)) != ATTND_OK) return st;
    return oai_get_bool(body, "parallel_tool_calls", &out->parallel, param, err);
}

void toolcall_spec_free(toolcall_spec *s) {
    if (!s) return;
    json_decref(s->tools);
    memset(s, 0, sizeof(*s));
}

// ---- prompt text --------------------------------------------------------------------------

bool toolcall_system_prompt(const toolcall_spec *s, buf *out) {
    bool ok = buf_puts(out, "\n\n# Tools\n\nYou can call these functions (JSON signatures):\n<tools>\n");
    for (size_t i = 0; ok && i < json_array_size(s->tools); i++) {
        char *t = json_dumps(json_array_get(s->tools, i), JSON_COMPACT | JSON_PRESERVE_ORDER);
        ok = t && buf_puts(out, t) && buf_puts(out, "\n");
        free(t);
    }
    return ok && buf_puts(out, "</tools>\n\nTo call one, answer with its name and arguments as JSON between tags, "
                               "one call per block:\n<tool_call>\n{\"name\": \"function_name\", \"arguments\": "
                               "{\"argument\": \"value\"}}\n</tool_call>");
}

attnd_status toolcall_render_calls(const json_t *calls, buf *out, attnd_err *err) {
    if (!json_is_array(calls)) return attnd_fail(err, ATTND_ERR_INVALID, "'tool_calls' must be an array");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *c = json_array_get(calls, i), *f = json_object_get(c, "function");
        const json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if (!json_is_string(name) || (args && !json_is_string(args) && !json_is_object(args)))
            return attnd_fail(err, ATTND_ERR_INVALID, "'tool_calls[%zu]' must be {\"function\": {\"name\", \"arguments\"}}", i);
        json_t *a = json_is_string(args) ? json_loads(json_string_value(args), JSON_DECODE_ANY, NULL)
                                         : json_incref((json_t *)args);
        if (!a) a = args ? json_incref((json_t *)args) : json_object(); /* not JSON: kept as the string */
        json_t *o = json_pack("{s:O,s:o}", "name", (json_t *)name, "arguments", a);
        char *t = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        bool ok = t && buf_puts(out, i ? "\n<tool_call>\n" : "<tool_call>\n") && buf_puts(out, t) &&
                  buf_puts(out, "\n</tool_call>");
        free(t);
        json_decref(o);
        if (!ok) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    return ATTND_OK;
}

bool toolcall_render_result(const char *content, buf *out) {
    return buf_puts(out, "<tool_response>\n") && buf_puts(out, content) && buf_puts(out, "\n</tool_response>");
}

// ---- the forcing grammar ------------------------------------------------------------------

bool toolcall_format_uses_tokens(toolcall_format f) { return f == TOOLCALL_FMT_HARMONY || f == TOOLCALL_FMT_GRANITE; }

bool toolcall_format_think_ends_at_call(toolcall_format f) { return f == TOOLCALL_FMT_QWEN_XML; }

const char *toolcall_trigger(toolcall_format f) {
    switch (f) {
    case TOOLCALL_FMT_HARMONY: return "<|channel|>";
    case TOOLCALL_FMT_GRANITE: return "<|tool_call|>";
    case TOOLCALL_FMT_LLAMA: return "{\"name\"";
    case TOOLCALL_FMT_MISTRAL: return "[{\"name\"";
    case TOOLCALL_FMT_GEMMA4: return "<|tool_call>";
    default: return "<tool_call>";
    }
}

void toolcall_reasoning_markers(toolcall_format f, const char **open, const char **close) {
    bool g4 = f == TOOLCALL_FMT_GEMMA4;
    *open = g4 ? "<|channel>" : "<think>";
    *close = g4 ? "<channel|>" : "</think>";
}

/* GBNF literals of one call's framing in format f: before the name, between the name and the
 * arguments, after the arguments, between two calls, and around the list. */
typedef struct call_frame {
    const char *open, *mid, *close, *sep, *list_open, *list_close;
} call_frame;

static call_frame frame_of(toolcall_format f) {
    switch (f) {
    case TOOLCALL_FMT_LLAMA: /* Llama 3.1's templates separate parallel calls with "; " */
        return (call_frame){"\"{\\\"name\\\": \"", "\", \\\"parameters\\\": \"", "\"}\"", "\"; \"", "", ""};
    case TOOLCALL_FMT_MISTRAL:
        return (call_frame){"\"{\\\"name\\\": \"", "\", \\\"arguments\\\": \"", "\"}\"", "\", \"", "\"[\" ", " \"]\""};
    case TOOLCALL_FMT_GRANITE: /* the marker is a token terminal */
        return (call_frame){"\"{\\\"name\\\": \"", "\", \\\"arguments\\\": \"", "\"}\"", "\", \"", "<|tool_call|> \"[\" ",
                            " \"]\""};
    default:
        return (call_frame){"\"<tool_call>\\n{\\\"name\\\": \"", "\", \\\"arguments\\\": \"",
                            "\"}\\n</tool_call>\"", "\"\\n\"", "", ""};
    }
}

// ---- the XML-like calls: Qwen3-Coder / Qwen3.5, GLM -------------------------------------------

/* GBNF literals (their text, escaped for inside "...") of one XML-like dialect. */
typedef struct xml_dialect {
    const char *call_open;  /* before the function's name */
    const char *name_close; /* after it */
    const char *p_open, *p_mid, *p_close; /* around a parameter's name, then its value */
    const char *call_close, *sep;         /* after a call's parameters; between two calls */
    const char *text_end;   /* the marker a free-text value never holds (plain text) */
} xml_dialect;

static const xml_dialect QWEN_XML = {"<tool_call>\\n<function=", ">\\n", "<parameter=", ">\\n", "\\n</parameter>\\n",
                                     "</function>\\n</tool_call>", "\\n", "</parameter>"};
static const xml_dialect GLM_XML = {"<tool_call>", "", "<arg_key>", "</arg_key><arg_value>", "</arg_value>",
                                    "</tool_call>", "", "</arg_value>"};

/* Free text that never holds "</parameter>" (nor ends inside what could start it): xs is any
 * character but '<'; after '<' the rules xt1.. follow the marker, and a character off it (not
 * '<', which starts over) returns to xs. */
static bool xml_text_rules(const char *M, buf *out) {
    size_t m = strlen(M);
    bool ok = buf_puts(out, "xv ::= ( [^<] | \"<\" xt1 )*\n");
    for (size_t k = 1; ok && k + 1 < m; k++)
        ok = buf_printf(out, "xt%zu ::= [^%c<] | \"%c\" xt%zu | \"<\" xt1\n", k, M[k], M[k], k + 1);
    return ok && buf_printf(out, "xt%zu ::= [^%c<] | \"<\" xt1\n", m - 1, M[m - 1]);
}

// ---- which parameters are free text --------------------------------------------------------

static bool is_str(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

/* Whether any (all: every) schema of the array a may be a string. */
static bool any_text(const json_t *a, const json_t *params, int depth, bool all) {
    bool some = false;
    for (size_t i = 0; i < json_array_size(a); i++) {
        bool t = toolcall_schema_is_text_at(json_array_get(a, i), params, depth + 1);
        if (t && !all) return true;
        if (!t && all) return false;
        some = true;
    }
    return all && some;
}

/* The schema a local $ref ("#/$defs/X", "#/definitions/X") names inside params, or NULL. */
static const json_t *local_ref(const json_t *params, const char *ref) {
    static const char *const DIRS[] = {"$defs", "definitions"};
    for (size_t k = 0; k < 2; k++) {
        size_t l = strlen(DIRS[k]);
        if (!strncmp(ref, "#/", 2) && !strncmp(ref + 2, DIRS[k], l) && ref[2 + l] == '/')
            return json_object_get(json_object_get(params, DIRS[k]), ref + 3 + l);
    }
    return NULL;
}

/* Whether a string-only keyword (or a string const, enum member or format) says "a string". */
static bool string_keywords(const json_t *s) {
    static const char *const FORMATS[] = {"date", "time", "date-time", "uri", "email", "hostname", "ipv4", "ipv6"};
    if (json_is_string(json_object_get(s, "const"))) return true;
    const json_t *e = json_object_get(s, "enum");
    for (size_t i = 0; i < json_array_size(e); i++)
        if (json_is_string(json_array_get(e, i))) return true;
    if (json_object_get(s, "pattern") || json_object_get(s, "minLength") || json_object_get(s, "maxLength")) return true;
    const char *f = json_string_value(json_object_get(s, "format"));
    for (size_t i = 0; f && i < ATTND_ARRAY_LEN(FORMATS); i++)
        if (!strcmp(f, FORMATS[i])) return true;
    return f && !strncmp(f, "uuid", 4);
}

bool toolcall_schema_is_text_at(const json_t *s, const json_t *params, int depth) {
    if (!json_is_object(s) || depth > 16) return false; /* 16: a $ref loop ends as "not text" */
    const json_t *ref = json_object_get(s, "$ref"), *t = json_object_get(s, "type");
    if (ref) return json_is_string(ref) && toolcall_schema_is_text_at(local_ref(params, json_string_value(ref)), params, depth + 1);
    if (is_str(t, "string")) return true;
    for (size_t i = 0; i < json_array_size(t); i++)
        if (is_str(json_array_get(t, i), "string")) return true;
    return any_text(json_object_get(s, "oneOf"), params, depth, false) ||
           any_text(json_object_get(s, "anyOf"), params, depth, false) ||
           any_text(json_object_get(s, "allOf"), params, depth, true) || string_keywords(s);
}

static bool xml_is_text(const json_t *schema, const json_t *params) { return toolcall_schema_is_text_at(schema, params, 0); }

/* A property's schema with the tool's $defs / definitions beside it, so that its $refs resolve
 * (new reference). */
static json_t *xml_value_schema(const json_t *params, const json_t *prop) {
    json_t *c = json_copy((json_t *)prop);
    const char *keys[] = {"$defs", "definitions"};
    for (size_t k = 0; c && k < 2; k++)
        if (json_object_get(params, keys[k]) && !json_object_get(c, keys[k]))
            json_object_set(c, keys[k], json_object_get(params, keys[k]));
    return c;
}

static bool xml_required(const json_t *params, const char *name) {
    const json_t *req = json_object_get(params, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (json_is_string(json_array_get(req, i)) && !strcmp(json_string_value(json_array_get(req, i)), name)) return true;
    return false;
}

/* Tool i's parameters as rule p<i> (required ones in order, optional ones may be left out);
 * the JSON-typed values are added to vals (schema sK for the K-th). */
static bool xml_params_rule(const xml_dialect *d, const json_t *params, size_t i, json_t *vals, buf *out) {
    bool ok = buf_printf(out, "p%zu ::= \"\"", i);
    const char *name;
    json_t *prop;
    json_object_foreach(json_object_get(params, "properties"), name, prop) {
        bool text = xml_is_text(prop, params), req = xml_required(params, name);
        if (!text) json_array_append_new(vals, xml_value_schema(params, prop));
        /* a property name is written inside a GBNF literal: escaped as JSON escapes it */
        json_t *js = json_string(name);
        char *lit = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        ok = ok && lit && lit[0] == '"';
        if (ok) lit[strlen(lit) - 1] = '\0';
        ok = ok && buf_printf(out, " ( \"%s\" %s%s\" ", d->p_open, lit ? lit : "\"", d->p_mid)
                && (text ? buf_puts(out, "xv") : buf_printf(out, "s%zu", json_array_size(vals) - 1))
                && buf_printf(out, " \"%s\" )%s", d->p_close, req ? "" : "?");
        free(lit);
    }
    return ok && buf_puts(out, "\n");
}

/* One alternative per tool that s allows, joined by " | ": the literal "<open>name<mid><mid2>
 * and then the tool's schema rule s<i>. Tool i's parameters go to schemas[i]. */
static bool tool_alternatives(const toolcall_spec *s, const char *open, const char *mid, const char *mid2,
                              const json_t **schemas, buf *out) {
    bool ok = true, first = true;
    for (size_t i = 0; ok && i < json_array_size(s->tools); i++) {
        const json_t *t = json_array_get(s->tools, i);
        schemas[i] = json_object_get(t, "parameters");
        const char *name = json_string_value(json_object_get(t, "name"));
        if (s->choice == TOOLCALL_NAMED && strcmp(name, s->name)) continue;
        ok = buf_printf(out, "%s\"%s%s%s%s s%zu", first ? "" : " | ", open, name, mid, mid2, i);
        first = false;
    }
    return ok;
}

/* The n schemas as rules s0… after a grammar whose writing ok says succeeded; frees schemas. */
static attnd_status tool_schema_rules(const json_t **schemas, size_t n, bool ok, buf *out, attnd_err *err) {
    attnd_status st = ok ? json_schema_rules(schemas, n, out, err) : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    free(schemas);
    return st;
}

/* An XML-like call grammar (dialect d): <tool_call>, the function, its parameters, </tool_call>. */
static attnd_status xml_grammar(const xml_dialect *d, const toolcall_spec *s, buf *out, attnd_err *err) {
    size_t n = json_array_size(s->tools);
    json_t *vals = json_array();
    buf rules = {0};
    bool ok = vals && (s->parallel ? buf_printf(out, "root ::= \" \"? call ( \"%s\" call ){0,%d}\n", d->sep, MAX_PARALLEL - 1)
                                   : buf_puts(out, "root ::= \" \"? call\n")) &&
              buf_printf(out, "call ::= \"%s\" ( ", d->call_open);
    bool first = true;
    for (size_t i = 0; ok && i < n; i++) {
        const json_t *t = json_array_get(s->tools, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        if (s->choice == TOOLCALL_NAMED && strcmp(name, s->name)) continue;
        ok = buf_printf(out, "%s\"%s%s\" p%zu", first ? "" : " | ", name, d->name_close, i) &&
             xml_params_rule(d, json_object_get(t, "parameters"), i, vals, &rules);
        first = false;
    }
    ok = ok && buf_printf(out, " ) \"%s\"\n", d->call_close) && buf_append(out, rules.p, rules.len) &&
         xml_text_rules(d->text_end, out);
    buf_free(&rules);
    size_t nv = json_array_size(vals);
    const json_t **schemas = calloc(nv ? nv : 1, sizeof(*schemas));
    for (size_t k = 0; schemas && k < nv; k++) schemas[k] = json_array_get(vals, k);
    attnd_status st = tool_schema_rules(schemas, nv, ok && schemas, out, err);
    json_decref(vals);
    return st;
}

/* Harmony: one call per message (<|call|> ends the reply), the name in the channel header, the
 * arguments as the message; the markers are token terminals. The model may first reason in the
 * analysis channel, as gpt-oss is trained to (free text up to <|end|>, which no byte can write),
 * then start the assistant's next message. */
static attnd_status harmony_grammar(const toolcall_spec *s, buf *out, attnd_err *err) {
    size_t n = json_array_size(s->tools);
    const json_t **schemas = calloc(n ? n : 1, sizeof(*schemas));
    bool ok = schemas &&
              buf_puts(out, "root ::= ( <|channel|> \"analysis\" <|message|> .* <|end|> <|start|> \"assistant\" )? "
                            "<|channel|> \"commentary to=functions.\" ( ") &&
              tool_alternatives(s, "", " \" <|constrain|> \"json\" <|message|>", "", schemas, out) &&
              buf_puts(out, " ) <|call|>\n");
    return tool_schema_rules(schemas, n, ok, out, err);
}

/* Gemma 4: <|tool_call>call:NAME{…}<tool_call|>, calls back to back (as its template writes them),
 * the arguments in Gemma's own syntax under each tool's schema. */
static attnd_status gemma4_grammar(const toolcall_spec *s, buf *out, attnd_err *err) {
    size_t n = json_array_size(s->tools);
    const json_t **schemas = calloc(n ? n : 1, sizeof(*schemas));
    bool ok = schemas &&
              (s->parallel ? buf_printf(out, "root ::= call{1,%d}\n", MAX_PARALLEL) : buf_puts(out, "root ::= call\n")) &&
              buf_puts(out, "call ::= \"<|tool_call>call:\" ( ") &&
              /* names are [A-Za-z0-9_.-]: no escaping needed inside the literal */
              tool_alternatives(s, "", "\"", "", schemas, out) && buf_puts(out, " ) \"<tool_call|>\"\n");
    attnd_status st = ok ? json_schema_rules_gemma4(schemas, n, out, err) : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    free(schemas);
    return st;
}

attnd_status toolcall_grammar(const toolcall_spec *s, toolcall_format f, buf *out, attnd_err *err) {
    if (f == TOOLCALL_FMT_GEMMA4) return gemma4_grammar(s, out, err);
    if (f == TOOLCALL_FMT_QWEN_XML) return xml_grammar(&QWEN_XML, s, out, err);
    if (f == TOOLCALL_FMT_GLM) return xml_grammar(&GLM_XML, s, out, err);
    if (f == TOOLCALL_FMT_HARMONY) return harmony_grammar(s, out, err);
    size_t n = json_array_size(s->tools);
    const json_t **schemas = calloc(n ? n : 1, sizeof(*schemas));
    call_frame fr = frame_of(f);
    /* parallel: up to MAX_PARALLEL calls, so a sampling model cannot loop on calls until its
     * length runs out */
    bool ok = schemas &&
              (s->parallel ? buf_printf(out, "root ::= \" \"? %s call ( %s call ){0,%d}%s\n", fr.list_open, fr.sep,
                                        MAX_PARALLEL - 1, fr.list_close)
                           : buf_printf(out, "root ::= \" \"? %s call%s\n", fr.list_open, fr.list_close)) &&
              buf_printf(out, "call ::= %s ( ", fr.open) &&
              /* names are [A-Za-z0-9_.-]: no escaping needed inside the literal */
              tool_alternatives(s, "\\\"", "\\\"", fr.mid + 1, schemas, out) &&
              buf_printf(out, " ) %s\n", fr.close);
    return tool_schema_rules(schemas, n, ok, out, err);
}
