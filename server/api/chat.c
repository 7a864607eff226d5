/*
 * chat.c — the chat template of a server (see chat.h): choosing it, the table of built-in
 * families, the mapping from a chat request to Hugging Face's template variables, and
 * tokenization that lets only the template's own text hold special tokens.
 *
 * The built-in layouts follow each family's published template: where a family has no system
 * role (Mistral, Gemma, Llama 2) the system text is folded into the first user message, as those
 * templates do.
 */
#include "chat.h"

#include "attnd/buf.h"
#include "jinja_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// ---- the built-in families, as data ------------------------------------------------------------

enum { R_SYSTEM, R_USER, R_ASSISTANT };

typedef struct family_spec {
    const char *name;
    const char *end_marker;
    const char *open[3], *close[3]; /* markup around a turn's content, by role */
    const char *gen_prompt;         /* the opening of the assistant's turn */
    bool fold_system;               /* no system role: its text opens the next user turn */
    const char *sys_open, *sys_close;
    const char *user_again;         /* before every user turn but the first (its own <s>) */
    const char *prefix;             /* written once before the first turn (NULL: none) */
} family_spec;

#define TURNS(s, u, a) {s, u, a}
static const family_spec FAMILIES[CHAT_FAMILY_COUNT] = {
    [CHAT_CHATML] = {.name = "chatml", .end_marker = "<|im_end|>",
                     .open = TURNS("<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"),
                     .close = TURNS("<|im_end|>\n", "<|im_end|>\n", "<|im_end|>\n"), .gen_prompt = "<|im_start|>assistant\n"},
    [CHAT_LLAMA2] = {.name = "llama2", .end_marker = "</s>", .open = TURNS("", "[INST] ", " "),
                     .close = TURNS("", " [/INST]", "</s>"), .gen_prompt = "", .fold_system = true,
                     .sys_open = "<<SYS>>\n", .sys_close = "\n<</SYS>>\n\n", .user_again = "<s>"},
    [CHAT_LLAMA3] = {.name = "llama3", .end_marker = "<|eot_id|>",
                     .open = TURNS("<|start_header_id|>system<|end_header_id|>\n\n",
                                   "<|start_header_id|>user<|end_header_id|>\n\n",
                                   "<|start_header_id|>assistant<|end_header_id|>\n\n"),
                     .close = TURNS("<|eot_id|>", "<|eot_id|>", "<|eot_id|>"),
                     .gen_prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    [CHAT_MISTRAL] = {.name = "mistral", .end_marker = "</s>", .open = TURNS("", "[INST] ", ""),
                      .close = TURNS("", " [/INST]", "</s>"), .gen_prompt = "", .fold_system = true, .sys_open = "",
                      .sys_close = "\n\n", .user_again = "<s>"},
    [CHAT_ZEPHYR] = {.name = "zephyr", .end_marker = "</s>", .open = TURNS("<|system|>\n", "<|user|>\n", "<|assistant|>\n"),
                     .close = TURNS("</s>\n", "</s>\n", "</s>\n"), .gen_prompt = "<|assistant|>\n"},
    [CHAT_GEMMA] = {.name = "gemma", .end_marker = "<end_of_turn>",
                    .open = TURNS("", "<start_of_turn>user\n", "<start_of_turn>model\n"),
                    .close = TURNS("", "<end_of_turn>\n", "<end_of_turn>\n"), .gen_prompt = "<start_of_turn>model\n",
                    .fold_system = true, .sys_open = "", .sys_close = "\n\n"},
    [CHAT_PHI3] = {.name = "phi3", .end_marker = "<|end|>", .open = TURNS("<|system|>\n", "<|user|>\n", "<|assistant|>\n"),
                   .close = TURNS("<|end|>\n", "<|end|>\n", "<|end|>\n"), .gen_prompt = "<|assistant|>\n"},
    /* Gemma 4: the model's turn opens with an empty thought, as its templates open it with thinking off */
    [CHAT_GEMMA4] = {.name = "gemma4", .end_marker = "<turn|>",
                     .open = TURNS("<|turn>system\n", "<|turn>user\n", "<|turn>model\n"),
                     .close = TURNS("<turn|>\n", "<turn|>\n", "<turn|>\n"),
                     .gen_prompt = "<|turn>model\n<|channel>thought\n<channel|>"},
    /* GLM-4.7: turns are only their role markers, opened by "[gMASK]<sop>" (its templates write
     * it; llama.cpp adds no BOS to glm4 vocabularies); the model's turn opens with "</think>", as
     * the template writes past turns and the prompt with thinking off */
    [CHAT_GLM] = {.name = "glm", .end_marker = "<|user|>", .prefix = "[gMASK]<sop>",
                  .open = TURNS("<|system|>", "<|user|>", "<|assistant|></think>"), .close = TURNS("", "", ""),
                  .gen_prompt = "<|assistant|></think>"},
};
#undef TURNS

/* Recognition by characteristic markers, most specific first (Phi-3 and Zephyr share <|user|>). */
static const struct { const char *a, *b; chat_family f; } DETECT[] = {
    {"<|turn>", "<turn|>", CHAT_GEMMA4},        {"<|start_header_id|>", NULL, CHAT_LLAMA3}, {"<|im_start|>", NULL, CHAT_CHATML},
    {"<start_of_turn>", NULL, CHAT_GEMMA},      {"[gMASK]<sop>", "<|assistant|>", CHAT_GLM},
    {"<|user|>", "<|end|>", CHAT_PHI3},
    {"<|user|>", NULL, CHAT_ZEPHYR},            {"[INST]", "<<SYS>>", CHAT_LLAMA2},
    {"[INST]", NULL, CHAT_MISTRAL},
};

const char *chat_family_name(chat_family f) { return (unsigned)f < CHAT_FAMILY_COUNT ? FAMILIES[f].name : "?"; }

attnd_status chat_family_from_name(const char *name, chat_family *out, attnd_err *err) {
    for (int i = 0; i < CHAT_FAMILY_COUNT; i++)
        if (name && !strcasecmp(name, FAMILIES[i].name)) {
            *out = (chat_family)i;
            return ATTND_OK;
        }
    return attnd_fail(err, ATTND_ERR_NOT_FOUND,
                      "unknown chat template '%s' (known: chatml, llama2, llama3, mistral, zephyr, gemma, phi3, gemma4, glm)",
                      name ? name : "(null)");
}

bool chat_detect(const char *t, chat_family *out) {
    *out = CHAT_CHATML;
    if (!t || !*t) return false;
    for (size_t i = 0; i < ATTND_ARRAY_LEN(DETECT); i++)
        if (strstr(t, DETECT[i].a) && (!DETECT[i].b || strstr(t, DETECT[i].b))) {
            *out = DETECT[i].f;
            return true;
        }
    return false;
}

const char *chat_end_marker(chat_family f) {
    return (unsigned)f < CHAT_FAMILY_COUNT ? FAMILIES[f].end_marker : FAMILIES[CHAT_CHATML].end_marker;
}

// ---- the prompt being rendered -----------------------------------------------------------

typedef struct sbuf {
    buf text;
    bool oom;             /* latched: an append failed, the text is incomplete */
    tok_span *spans;      /* (n_spans) where the template's own markers are: sorted, merged */
    size_t n_spans, cap_spans;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (!b->oom && !buf_append(&b->text, s, n)) b->oom = true;
}

/* Appends template markup, recording it as a span (merged with a span it continues). */
static void sb_mark(sbuf *b, const char *s) {
    size_t start = b->text.len;
    sb_put(b, s, strlen(s));
    if (b->oom || start == b->text.len) return;
    if (b->n_spans && b->spans[b->n_spans - 1].end == start) {
        b->spans[b->n_spans - 1].end = b->text.len;
        return;
    }
    if (!attnd_grow(&b->spans, &b->cap_spans, b->n_spans + 1, sizeof(*b->spans), 16)) {
        b->oom = true;
        return;
    }
    b->spans[b->n_spans++] = (tok_span){start, b->text.len};
}

/* Appends message content: plain text, never a marker. */
static void sb_text(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static int role_of(const char *r) {
    if (!r) return -1;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) return R_SYSTEM;
    if (!strcmp(r, "user")) return R_USER;
    if (!strcmp(r, "assistant")) return R_ASSISTANT;
    return -1;
}

static attnd_status check_roles(const chat_msg *msgs, size_t n, attnd_err *err) {
    if (n == 0) return attnd_fail(err, ATTND_ERR_INVALID, "'messages' must not be empty");
    for (size_t i = 0; i < n; i++)
        if (role_of(msgs[i].role) < 0)
            return attnd_fail(err, ATTND_ERR_INVALID,
                              "messages[%zu].role '%s' is not supported; the roles are system, developer, user, "
                              "assistant", i, msgs[i].role ? msgs[i].role : "(null)");
    return ATTND_OK;
}

/* Renders family f from its table row into b (text and marker spans). */
static attnd_status render(chat_family f, const chat_msg *msgs, size_t n, sbuf *out, attnd_err *err) {
    if ((unsigned)f >= CHAT_FAMILY_COUNT) return attnd_fail(err, ATTND_ERR_INVALID, "unknown chat family %d", (int)f);
    attnd_status st = check_roles(msgs, n, err);
    if (st != ATTND_OK) return st;
    const family_spec *fs = &FAMILIES[f];
    sbuf b = {0};
    const char *pending_sys = NULL; /* families without a system role fold it into the next user turn */
    if (fs->prefix) sb_mark(&b, fs->prefix);
    for (size_t i = 0; i < n; i++) {
        int r = role_of(msgs[i].role);
        const char *c = msgs[i].content ? msgs[i].content : "";
        if (r == R_SYSTEM && fs->fold_system) {
            pending_sys = c;
            continue;
        }
        if (r == R_USER && fs->user_again && b.text.len) sb_mark(&b, fs->user_again);
        sb_mark(&b, fs->open[r]);
        if (r == R_USER && pending_sys) {
            sb_mark(&b, fs->sys_open);
            sb_text(&b, pending_sys);
            sb_mark(&b, fs->sys_close);
            pending_sys = NULL;
        }
        sb_text(&b, c);
        sb_mark(&b, fs->close[r]);
    }
    sb_mark(&b, fs->gen_prompt);
    if (!b.text.p) sb_put(&b, "", 0); /* e.g. only a system message under Llama 2 */
    if (b.oom) {
        buf_free(&b.text);
        free(b.spans);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory rendering the chat prompt");
    }
    *out = b;
    return ATTND_OK;
}

attnd_status chat_render(chat_family f, const chat_msg *msgs, size_t n, char **out, attnd_err *err) {
    *out = NULL;
    sbuf b = {0};
    attnd_status st = render(f, msgs, n, &b, err);
    if (st != ATTND_OK) return st;
    free(b.spans);
    *out = b.text.p; /* the buffer's storage, now the caller's */
    return ATTND_OK;
}

attnd_status chat_encode(const tokenizer *tok, chat_family f, const chat_msg *msgs, size_t n, int32_t **ids,
                         size_t *n_ids, attnd_err *err) {
    *ids = NULL;
    *n_ids = 0;
    sbuf b = {0};
    attnd_status st = render(f, msgs, n, &b, err);
    if (st != ATTND_OK) return st;
    /* a family whose prefix writes the BOS token (GLM's "[gMASK]" when the file names it BOS) gets
     * no second one from the tokenizer, as a template that writes bos_token gets none */
    const char *bos;
    size_t bl = 0;
    bool has_bos = tok_add_bos(tok) && tok_token_bytes(tok, tok_bos(tok), true, &bos, &bl) && bl && b.n_spans &&
                   b.spans[0].start == 0 && b.spans[0].end >= bl && b.text.len >= bl && !memcmp(b.text.p, bos, bl);
    st = tok_encode_marked(tok, b.text.p, b.text.len, !has_bos, b.spans, b.n_spans, ids, n_ids, err);
    buf_free(&b.text);
    free(b.spans);
    return st;
}

// ---- choosing the server's template ----------------------------------------------------------------

const char *chat_source_str(const chat_template *ct) {
    switch (ct->source) {
    case CHAT_SRC_GGUF: return "Jinja from tokenizer.chat_template";
    case CHAT_SRC_FILE: return "Jinja from chat_template_file";
    case CHAT_SRC_CONFIGURED: return "built-in, configured by chat_template";
    case CHAT_SRC_DETECTED: return "built-in, recognised in tokenizer.chat_template";
    default: return "built-in fallback";
    }
}

static char *token_text(const tokenizer *tok, int32_t id) {
    const char *p = tok && id >= 0 ? tok_piece(tok, id) : NULL;
    return strdup(p ? p : "");
}


/* Keeps a probe's failure when it ran out of the engine's bounds (ATTND_ERR_NOMEM: steps, time,
 * size, depth, memory): such a template is refused at load. Other errors are expected (many
 * templates raise on a shape they do not take) and ignored. The first failure is kept. */
static void probe_status(attnd_status got, const attnd_err *e, attnd_status *st, attnd_err *err) {
    if (got != ATTND_ERR_NOMEM || *st != ATTND_OK) return;
    *st = got;
    if (err) *err = *e;
}

/* Whether the template shows a text part's text when content comes as parts. */
static bool reads_parts(const chat_template *ct, attnd_status *st, attnd_err *err) {
    static const char *PROBE = "attnd-probe-7f3a";
    json_t *raw = json_pack("[{s:s,s:[{s:s,s:s}]}]", "role", "user", "content", "type", "text", "text", PROBE);
    const chat_msg m = {"user", ""};
    chat_request rq = {&m, 1, raw, NULL, NULL, true, NULL};
    chat_template probe = *ct;
    probe.content_parts = true;
    jinja_output o = {0};
    attnd_err e = {{0}};
    attnd_status got = raw ? chat_template_render(&probe, &rq, &o, &e) : ATTND_ERR_NOMEM;
    bool yes = got == ATTND_OK && strstr(o.text, PROBE);
    probe_status(got, &e, st, err);
    jinja_output_free(&o);
    json_decref(raw);
    return yes;
}

/* The probe tool and a history that calls it, as OpenAI clients send them (HF's shapes). */
#define PROBE_FN "attnd_probe_fn_7f3a"
static const char PROBE_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"" PROBE_FN "\", \"description\": \"probe\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"attnd_probe_arg\": {\"type\": \"integer\"}}}}}]";
static const char PROBE_HISTORY[] =
    "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": "
    "[{\"id\": \"a1b2c3d4e\", \"type\": \"function\", \"function\": {\"name\": \"" PROBE_FN "\", \"arguments\": "
    "{\"attnd_probe_arg\": 1}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"a1b2c3d4e\", \"name\": \"" PROBE_FN "\", "
    "\"content\": \"ok\"}]";

/* Renders the first n_msgs of the probe history with the probe tool and appends the text to
 * out (nothing when the template raises: many refuse a shape they do not expect). */
static void probe_render(const chat_template *ct, size_t n_msgs, buf *out, attnd_status *st, attnd_err *err) {
    static const char *const ROLES[] = {"user", "assistant", "tool"};
    static const char *const CONTENT[] = {"hi", "", "ok"};
    json_t *tools = json_loads(PROBE_TOOLS, 0, NULL), *raw = json_loads(PROBE_HISTORY, 0, NULL);
    chat_msg m[3];
    for (size_t i = 0; i < 3; i++) m[i] = (chat_msg){ROLES[i], CONTENT[i]};
    json_t *head = raw ? json_array() : NULL;
    for (size_t i = 0; head && i < n_msgs; i++) json_array_append(head, json_array_get(raw, i));
    chat_request rq = {m, n_msgs, head, tools, NULL, true, NULL};
    jinja_output o = {0};
    attnd_err e = {{0}};
    attnd_status got = tools && head ? chat_template_render(ct, &rq, &o, &e) : ATTND_ERR_NOMEM;
    if (got == ATTND_OK) buf_puts(out, o.text);
    probe_status(got, &e, st, err);
    jinja_output_free(&o);
    json_decref(head);
    json_decref(raw);
    json_decref(tools);
}

/* Whether the template shows the request's tools, and how its model writes a call: found by
 * rendering a probe tool and a history that calls it. */
static void probe_tools(chat_template *ct, attnd_status *st, attnd_err *err) {
    buf b = {0};
    probe_render(ct, 1, &b, st, err);
    ct->takes_tools = b.p && strstr(b.p, PROBE_FN);
    if (*st == ATTND_OK) probe_render(ct, 3, &b, st, err); /* ends on the tool turn: templates that check turn order accept it */
    const char *t = b.p ? b.p : "";
    if (strstr(t, "to=functions." PROBE_FN)) ct->tool_format = TOOLCALL_FMT_HARMONY;
    else if (strstr(t, "<|tool_call|>")) ct->tool_format = TOOLCALL_FMT_GRANITE;
    else if (strstr(t, "<|tool_call>call:" PROBE_FN "{")) ct->tool_format = TOOLCALL_FMT_GEMMA4;
    else if (strstr(t, "<function=" PROBE_FN ">") && strstr(t, "<parameter=attnd_probe_arg>"))
        ct->tool_format = TOOLCALL_FMT_QWEN_XML;
    else if (strstr(t, "<tool_call>" PROBE_FN) && strstr(t, "<arg_key>attnd_probe_arg</arg_key>"))
        ct->tool_format = TOOLCALL_FMT_GLM;
    else if (strstr(t, "<tool_call>")) ct->tool_format = TOOLCALL_FMT_HERMES;
    else if (strstr(t, "[TOOL_CALLS]")) ct->tool_format = TOOLCALL_FMT_MISTRAL;
    else if (strstr(t, "\"parameters\": {\"attnd_probe_arg\"")) ct->tool_format = TOOLCALL_FMT_LLAMA;
    else ct->tool_format = TOOLCALL_FMT_HERMES;
    buf_free(&b);
}

/* Probes a parsed template (content parts, tools, its call format). A template that runs out
 * of the engine's bounds on the probes is refused (freed, ATTND_ERR_NOMEM and its error in
 * err): each probe stops at the render's wall-clock cap, so a hostile template delays start-up
 * by a few seconds at most and never hangs it. */
static attnd_status loaded_jinja(chat_template *ct, chat_source src, attnd_err *err) {
    attnd_status st = ATTND_OK;
    ct->source = src;
    ct->content_parts = reads_parts(ct, &st, err);
    if (st == ATTND_OK) probe_tools(ct, &st, err);
    if (st == ATTND_OK) return ATTND_OK;
    jinja_template_destroy(ct->jinja);
    ct->jinja = NULL;
    return st;
}

static attnd_status load_file(chat_template *ct, const char *path, attnd_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return attnd_fail(err, ATTND_ERR_IO, "chat_template_file %s: cannot open", path);
    buf b = {0};
    char chunk[8192];
    size_t k;
    bool ok = true;
    while (ok && (k = fread(chunk, 1, sizeof(chunk), f)) > 0) ok = buf_append(&b, chunk, k);
    fclose(f);
    if (!ok) return buf_free(&b), attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    attnd_err e;
    attnd_status st = jinja_parse(b.p ? b.p : "", b.len, &ct->jinja, &e);
    if (st == ATTND_OK && !(ct->text = strndup(b.p ? b.p : "", b.len))) st = attnd_fail(&e, ATTND_ERR_NOMEM, "out of memory");
    buf_free(&b);
    if (st == ATTND_OK) st = loaded_jinja(ct, CHAT_SRC_FILE, &e);
    if (st != ATTND_OK) return attnd_fail(err, st, "chat_template_file %s: %s", path, e.msg);
    return ATTND_OK;
}

attnd_status chat_template_load(chat_template *ct, const char *gguf_jinja, const char *file_path,
                                const char *family_name, const tokenizer *tok, attnd_err *err) {
    *ct = (chat_template){0};
    ct->bos = token_text(tok, tok ? tok_bos(tok) : -1);
    ct->eos = token_text(tok, tok ? tok_eos(tok) : -1);
    if (!ct->bos || !ct->eos) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    bool have_family = family_name && *family_name;
    attnd_status st = have_family ? chat_family_from_name(family_name, &ct->family, err) : ATTND_OK;
    if (st != ATTND_OK) return st;
    bool detected = chat_detect(gguf_jinja, &ct->family) || have_family;
    if (have_family) chat_family_from_name(family_name, &ct->family, NULL);
    /* a whole template named by the operator replaces the model's (a broken or outdated one) */
    if (file_path && *file_path) return load_file(ct, file_path, err);
    attnd_err e = {{0}};
    const char *what = "does not parse";
    if (gguf_jinja && *gguf_jinja) {
        if (jinja_parse(gguf_jinja, strlen(gguf_jinja), &ct->jinja, &e) == ATTND_OK) {
            if (loaded_jinja(ct, CHAT_SRC_GGUF, &e) == ATTND_OK)
                return (ct->text = strdup(gguf_jinja)) ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
            what = "fails at load";
        }
        if (e.msg[0] == '\0') snprintf(e.msg, sizeof(e.msg), "out of memory");
    }
    if (have_family) {
        ct->source = CHAT_SRC_CONFIGURED;
    } else {
        ct->source = detected ? CHAT_SRC_DETECTED : CHAT_SRC_FALLBACK;
        if (!gguf_jinja || !*gguf_jinja) snprintf(ct->why, sizeof(ct->why), "the model has no chat template");
        else snprintf(ct->why, sizeof(ct->why), "the model's chat template %s: %s", what, e.msg);
    }
    return ATTND_OK;
}

void chat_template_free(chat_template *ct) {
    if (!ct) return;
    jinja_template_destroy(ct->jinja);
    free(ct->text);
    free(ct->bos);
    free(ct->eos);
    *ct = (chat_template){0};
}

// ---- a request as Hugging Face's template variables: the one place they are made ------------------

/* OpenAI sends a tool call's arguments as a JSON string; HF templates expect the object. */
static jinja_value *tool_calls_value(jinja_ctx *c, const json_t *calls) {
    json_t *copy = json_deep_copy(calls);
    size_t i;
    json_t *call;
    json_array_foreach(copy, i, call) {
        json_t *fn = json_object_get(call, "function"), *args = json_object_get(fn, "arguments");
        json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
        if (json_is_object(parsed)) json_object_set(fn, "arguments", parsed);
        json_decref(parsed);
    }
    jinja_value *v = jinja_from_json(c, copy, JINJA_DATA);
    json_decref(copy);
    return v;
}

/* One message: role ('developer' as 'system', as the built-in families render it), content as a
 * string, and the fields a template may read when the client sent them. All of it is data. */
static jinja_value *message_value(jinja_ctx *c, const chat_msg *m, const json_t *raw, bool parts) {
    static const char *const PASS[] = {"tool_call_id", "name", "reasoning_content"};
    jinja_value *d = jinja_dict(c);
    const char *role = !strcmp(m->role, "developer") ? "system" : m->role;
    const char *content = m->content ? m->content : "";
    jinja_dict_set(c, d, "role", jinja_str(c, role, strlen(role), JINJA_DATA));
    const json_t *sent = json_object_get(raw, "content");
    if (parts && json_is_array(sent)) jinja_dict_set(c, d, "content", jinja_from_json(c, sent, JINJA_DATA));
    else jinja_dict_set(c, d, "content", jinja_str(c, content, strlen(content), JINJA_DATA));
    if (!json_is_object(raw)) return d;
    const json_t *calls = json_object_get(raw, "tool_calls");
    if (json_is_array(calls)) jinja_dict_set(c, d, "tool_calls", tool_calls_value(c, calls));
    for (size_t i = 0; i < ATTND_ARRAY_LEN(PASS); i++) {
        const json_t *v = json_object_get(raw, PASS[i]);
        if (v && !json_is_null(v)) jinja_dict_set(c, d, PASS[i], jinja_from_json(c, v, JINJA_DATA));
    }
    return d;
}

/* messages, tools, add_generation_prompt, bos_token, eos_token, and the request's
 * chat_template_kwargs (which cannot replace the others). */
static void set_vars(jinja_ctx *c, const chat_template *ct, const chat_request *rq) {
    if (json_is_object(rq->kwargs)) jinja_set_json_vars(c, rq->kwargs, JINJA_DATA);
    jinja_value *msgs = jinja_list(c);
    for (size_t i = 0; i < rq->n_msgs; i++) jinja_list_push(c, msgs, message_value(c, &rq->msgs[i], json_array_get(rq->raw, i), ct->content_parts));
    jinja_ctx_set(c, "messages", msgs);
    if (json_is_array(rq->tools) && json_array_size(rq->tools))
        jinja_ctx_set(c, "tools", jinja_from_json(c, rq->tools, JINJA_DATA));
    jinja_ctx_set(c, "add_generation_prompt", jinja_bool(c, rq->add_generation_prompt));
    jinja_ctx_set(c, "bos_token", jinja_str(c, ct->bos, strlen(ct->bos), JINJA_LITERAL));
    jinja_ctx_set(c, "eos_token", jinja_str(c, ct->eos, strlen(ct->eos), JINJA_LITERAL));
}

/* A built-in family's rendering as segments: its marker spans literal, the rest data. */
static attnd_status family_output(const chat_template *ct, const chat_request *rq, jinja_output *out, attnd_err *err) {
    sbuf b = {0};
    attnd_status st = render(ct->family, rq->msgs, rq->n_msgs, &b, err);
    if (st != ATTND_OK) return st;
    out->segs = malloc((2 * b.n_spans + 1) * sizeof(*out->segs));
    if (!out->segs) return buf_free(&b.text), free(b.spans), attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i <= b.n_spans; i++) {
        size_t start = i < b.n_spans ? b.spans[i].start : b.text.len;
        if (start > at) out->segs[out->n_segs++] = (jinja_seg){at, start - at, true};
        if (i < b.n_spans) out->segs[out->n_segs++] = (jinja_seg){start, b.spans[i].end - start, false};
        if (i < b.n_spans) at = b.spans[i].end;
    }
    free(b.spans);
    out->text = b.text.p, out->len = b.text.len;
    return ATTND_OK;
}

attnd_status chat_template_render(const chat_template *ct, const chat_request *rq, jinja_output *out,
                                  attnd_err *err) {
    *out = (jinja_output){0};
    if (!ct->jinja) return family_output(ct, rq, out, err);
    if (rq->n_msgs == 0) return attnd_fail(err, ATTND_ERR_INVALID, "'messages' must not be empty");
    for (size_t i = 0; i < rq->n_msgs; i++) /* the template decides which roles it takes */
        if (!rq->msgs[i].role) return attnd_fail(err, ATTND_ERR_INVALID, "messages[%zu] has no role", i);
    attnd_status st;
    jinja_ctx *c = jinja_ctx_create(NULL);
    if (!c) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    set_vars(c, ct, rq);
    if (ct->now) jinja_ctx_set_now(c, ct->now);
    st = jinja_render(c, ct->jinja, out, err);
    jinja_ctx_destroy(c);
    return st;
}

/* The rendering ends with "<think>" (then blanks) that the template wrote, not the client. */
static bool ends_in_open_think(const jinja_output *o) {
    static const char OPEN[] = "<think>";
    size_t n = o->len, l = sizeof(OPEN) - 1;
    while (n && strchr(" \n\r\t", o->text[n - 1]) && o->text[n - 1]) n--;
    if (n < l || memcmp(o->text + n - l, OPEN, l)) return false;
    for (size_t i = 0; i < o->n_segs; i++) /* every byte of the marker is the template's */
        if (o->segs[i].from_data && o->segs[i].off < n && o->segs[i].off + o->segs[i].len > n - l) return false;
    return true;
}

attnd_status chat_template_encode(const chat_template *ct, const tokenizer *tok, const chat_request *rq,
                                  int32_t **ids, size_t *n_ids, attnd_err *err) {
    *ids = NULL, *n_ids = 0;
    jinja_output o;
    attnd_status st = chat_template_render(ct, rq, &o, err);
    if (st != ATTND_OK) return st;
    if (rq->opens_reasoning) *rq->opens_reasoning = ends_in_open_think(&o);
    tok_span *spans = malloc((o.n_segs + 1) * sizeof(*spans));
    size_t n = 0;
    for (size_t i = 0; spans && i < o.n_segs; i++)
        if (!o.segs[i].from_data) spans[n++] = (tok_span){o.segs[i].off, o.segs[i].off + o.segs[i].len};
    /* a template that writes bos_token itself gets no second one from the tokenizer */
    size_t bl = strlen(ct->bos);
    bool has_bos = bl && n && spans[0].start == 0 && spans[0].end >= bl && !memcmp(o.text, ct->bos, bl);
    if (!spans) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    else st = tok_encode_marked(tok, o.text, o.len, !has_bos, spans, n, ids, n_ids, err);
    free(spans);
    jinja_output_free(&o);
    return st;
}
