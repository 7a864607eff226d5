/*
 * chat.c — recognising and rendering the common chat-template families (see chat.h).
 *
 * The layouts follow each family's published template (as found in the models' GGUF
 * tokenizer.chat_template): where a family has no system role (Mistral, Gemma) the system text
 * is prepended to the first user message, as those templates do.
 */
#include "chat.h"

#include "attnd/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *NAMES[CHAT_FAMILY_COUNT] = {"chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3"};

const char *chat_family_name(chat_family f) { return (unsigned)f < CHAT_FAMILY_COUNT ? NAMES[f] : "?"; }

attnd_status chat_family_from_name(const char *name, chat_family *out, attnd_err *err) {
    for (int i = 0; i < CHAT_FAMILY_COUNT; i++)
        if (name && !strcasecmp(name, NAMES[i])) {
            *out = (chat_family)i;
            return ATTND_OK;
        }
    return attnd_fail(err, ATTND_ERR_NOT_FOUND,
                      "unknown chat template '%s' (known: chatml, llama2, llama3, mistral, zephyr, gemma, phi3)",
                      name ? name : "(null)");
}

bool chat_detect(const char *t, chat_family *out) {
    *out = CHAT_CHATML;
    if (!t || !*t) return false;
    /* Order matters: more specific markers first (Phi-3 and Zephyr share <|user|>). */
    if (strstr(t, "<|start_header_id|>")) *out = CHAT_LLAMA3;
    else if (strstr(t, "<|im_start|>")) *out = CHAT_CHATML;
    else if (strstr(t, "<start_of_turn>")) *out = CHAT_GEMMA;
    else if (strstr(t, "<|user|>") && strstr(t, "<|end|>")) *out = CHAT_PHI3;
    else if (strstr(t, "<|user|>")) *out = CHAT_ZEPHYR;
    else if (strstr(t, "[INST]") && strstr(t, "<<SYS>>")) *out = CHAT_LLAMA2;
    else if (strstr(t, "[INST]")) *out = CHAT_MISTRAL;
    else return false;
    return true;
}

const char *chat_end_marker(chat_family f) {
    switch (f) {
    case CHAT_LLAMA3: return "<|eot_id|>";
    case CHAT_GEMMA: return "<end_of_turn>";
    case CHAT_PHI3: return "<|end|>";
    case CHAT_ZEPHYR: case CHAT_LLAMA2: case CHAT_MISTRAL: return "</s>";
    default: return "<|im_end|>";
    }
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

/* Records [start, b->text.len) as template markup (merged with a span it continues). */
static void sb_mark(sbuf *b, size_t start) {
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

/* Appends n strings of template markup. */
static void sb_cat(sbuf *b, int n, ...) {
    size_t start = b->text.len;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *s = va_arg(ap, const char *);
        sb_put(b, s, strlen(s));
    }
    va_end(ap);
    sb_mark(b, start);
}

/* Appends message content: plain text, never a marker. */
static void sb_text(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

// ---- rendering ----------------------------------------------------------------------------

enum { R_SYSTEM, R_USER, R_ASSISTANT };

static int role_of(const char *r) {
    if (!r) return -1;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) return R_SYSTEM;
    if (!strcmp(r, "user")) return R_USER;
    if (!strcmp(r, "assistant")) return R_ASSISTANT;
    return -1;
}

/* Renders into b (text and marker spans); on error b holds nothing to free. */
static attnd_status render(chat_family f, const chat_msg *msgs, size_t n, sbuf *out, attnd_err *err) {
    if (n == 0) return attnd_fail(err, ATTND_ERR_INVALID, "'messages' must not be empty");
    for (size_t i = 0; i < n; i++)
        if (role_of(msgs[i].role) < 0)
            return attnd_fail(err, ATTND_ERR_INVALID,
                              "messages[%zu].role '%s' is not supported; the roles are system, developer, user, "
                              "assistant", i, msgs[i].role ? msgs[i].role : "(null)");
    sbuf b = {0};
    const char *pending_sys = NULL; /* families without a system role merge it into the next user turn */
    for (size_t i = 0; i < n; i++) {
        int r = role_of(msgs[i].role);
        const char *c = msgs[i].content ? msgs[i].content : "";
        switch (f) {
        case CHAT_CHATML:
            sb_cat(&b, 3, "<|im_start|>", r == R_SYSTEM ? "system" : r == R_USER ? "user" : "assistant", "\n");
            sb_text(&b, c);
            sb_cat(&b, 1, "<|im_end|>\n");
            break;
        case CHAT_LLAMA3:
            sb_cat(&b, 3, "<|start_header_id|>", r == R_SYSTEM ? "system" : r == R_USER ? "user" : "assistant",
                   "<|end_header_id|>\n\n");
            sb_text(&b, c);
            sb_cat(&b, 1, "<|eot_id|>");
            break;
        case CHAT_ZEPHYR:
        case CHAT_PHI3: {
            const char *end = f == CHAT_PHI3 ? "<|end|>\n" : "</s>\n";
            sb_cat(&b, 1, r == R_SYSTEM ? "<|system|>\n" : r == R_USER ? "<|user|>\n" : "<|assistant|>\n");
            sb_text(&b, c);
            sb_cat(&b, 1, end);
            break;
        }
        case CHAT_GEMMA:
            if (r == R_SYSTEM) {
                pending_sys = c;
                break;
            }
            sb_cat(&b, 3, "<start_of_turn>", r == R_USER ? "user" : "model", "\n");
            if (r == R_USER && pending_sys) {
                sb_text(&b, pending_sys);
                sb_cat(&b, 1, "\n\n");
                pending_sys = NULL;
            }
            sb_text(&b, c);
            sb_cat(&b, 1, "<end_of_turn>\n");
            break;
        case CHAT_LLAMA2:
        case CHAT_MISTRAL:
            if (r == R_SYSTEM) {
                pending_sys = c;
                break;
            }
            if (r == R_USER) {
                /* every user turn but the first opens a new <s>: the first BOS comes from the tokenizer */
                if (b.text.len) sb_cat(&b, 1, "<s>");
                sb_cat(&b, 1, "[INST] ");
                if (pending_sys) {
                    if (f == CHAT_LLAMA2) sb_cat(&b, 1, "<<SYS>>\n");
                    sb_text(&b, pending_sys);
                    sb_cat(&b, 1, f == CHAT_LLAMA2 ? "\n<</SYS>>\n\n" : "\n\n");
                    pending_sys = NULL;
                }
                sb_text(&b, c);
                sb_cat(&b, 1, " [/INST]");
            } else {
                sb_cat(&b, 1, f == CHAT_LLAMA2 ? " " : "");
                sb_text(&b, c);
                sb_cat(&b, 1, "</s>");
            }
            break;
        default:
            buf_free(&b.text);
            free(b.spans);
            return attnd_fail(err, ATTND_ERR_INVALID, "unknown chat family %d", (int)f);
        }
    }
    /* the opening of the assistant's turn */
    switch (f) {
    case CHAT_CHATML: sb_cat(&b, 1, "<|im_start|>assistant\n"); break;
    case CHAT_LLAMA3: sb_cat(&b, 1, "<|start_header_id|>assistant<|end_header_id|>\n\n"); break;
    case CHAT_ZEPHYR:
    case CHAT_PHI3: sb_cat(&b, 1, "<|assistant|>\n"); break;
    case CHAT_GEMMA: sb_cat(&b, 1, "<start_of_turn>model\n"); break;
    default: break; /* Llama 2 / Mistral: the model answers right after [/INST] */
    }
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
    st = tok_encode_marked(tok, b.text.p, b.text.len, true, b.spans, b.n_spans, ids, n_ids, err);
    buf_free(&b.text);
    free(b.spans);
    return st;
}
