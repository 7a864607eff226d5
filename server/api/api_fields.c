/*
 * api_fields.c — the known top-level fields of each generation endpoint's body (api_fields.h),
 * as its parser reads them (oai.c, toolcall.c, responses.c, anthropic.c, ollama.c, infill.c):
 * a field added to a parser is added here, or requests that send it get a warning.
 */
#include "api_fields.h"

#include <stdio.h>
#include <string.h>

/* oai_parse's, on every endpoint that runs it (completions, chat, /completion, /infill); "store"
 * and "metadata" are sent by OpenAI clients and mean nothing here (docs/server.md), llama-server's
 * "cache_prompt" asks for what attnd always does (the prefix cache). */
static const char *const OAI[] = {
    "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k", "min_p", "typical_p",
    "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty", "seed", "stop", "logit_bias", "n",
    "user", "session_id", "draft_max", "draft_min_p", "ignore_eos", "grammar", "json_schema", "response_format",
    "logprobs", "ablate", "store", "metadata", "n_probs", "min_keep", "dry_*", "xtc_*", "mirostat*",
    "cache_prompt", "reasoning_budget_tokens", "close_within_budget", NULL};
static const char *const COMPLETION[] = {"prompt", "echo", "suffix", "best_of", NULL};
static const char *const CHAT[] = {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                                   "parallel_tool_calls", "chat_template_kwargs", "functions", "function_call",
                                   "modalities", "audio", NULL};
/* llama-server's /completion */
static const char *const LLAMA[] = {"prompt", "n_predict", "return_tokens", NULL};
static const char *const INFILL[] = {"input_prefix", "input_suffix", "input_extra", NULL};
static const char *const RESPONSES[] = {
    "model", "input", "instructions", "previous_response_id", "store", "stream", "max_output_tokens", "user",
    "metadata", "text", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "background", "include",
    "top_logprobs", "truncation", "conversation", "prompt", "context_management", "max_tool_calls", "temperature",
    "top_p", "seed", "top_k", "min_p", "typical_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
    "repeat_last_n", "logit_bias", "stop", "draft_max", "draft_min_p", "grammar", "json_schema", "ignore_eos",
    "n_probs", "min_keep", "dry_*", "xtc_*", "mirostat*", "session_id", "reasoning_budget_tokens", "close_within_budget", NULL};
static const char *const MESSAGES[] = {
    "model", "messages", "system", "tools", "tool_choice", "max_tokens", "thinking", "stop_sequences", "stream",
    "metadata", "temperature", "top_p", "top_k", "seed", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
    "presence_penalty", "frequency_penalty", "grammar", "json_schema", "session_id", "draft_max", "draft_min_p", NULL};
static const char *const OLLAMA[] = {"model", "stream", "options", "format", "think", "tools", "keep_alive", "images", NULL};
static const char *const OLLAMA_GENERATE[] = {"prompt", "system", "raw", "template", "suffix", "context", NULL};

static const char *const OLLAMA_CHAT[] = {"messages", NULL};

/* The generation routes by their metrics label (routes.c). */
static const struct {
    const char *label;
    api_fields fields;
} BY_ROUTE[] = {
    {"completions", {{OAI, COMPLETION}}},
    {"chat_completions", {{OAI, CHAT}}},
    {"llama_completion", {{OAI, LLAMA}}},
    {"infill", {{OAI, LLAMA, INFILL}}},
    {"responses", {{RESPONSES}}},
    {"messages", {{MESSAGES}}},
    {"messages_count_tokens", {{MESSAGES}}},
    {"ollama_chat", {{OLLAMA, OLLAMA_CHAT}}},
    {"ollama_generate", {{OLLAMA, OLLAMA_GENERATE}}},
};

const api_fields *api_fields_of(const char *label) {
    for (size_t i = 0; label && i < sizeof(BY_ROUTE) / sizeof(BY_ROUTE[0]); i++)
        if (!strcmp(BY_ROUTE[i].label, label)) return &BY_ROUTE[i].fields;
    return NULL;
}

bool api_fields_known(const api_fields *f, const char *name) {
    for (size_t l = 0; l < 4 && f->lists[l]; l++)
        for (const char *const *p = f->lists[l]; *p; p++) {
            size_t n = strlen(*p);
            if ((*p)[n - 1] == '*' ? !strncmp(*p, name, n - 1) : !strcmp(*p, name)) return true;
        }
    return false;
}

/* Appends name to out (used bytes *len of cap) as printable ASCII; false when it does not fit. */
static bool append_name(char *out, size_t cap, size_t *len, const char *name, bool first) {
    char clean[48];
    size_t k = 0;
    for (const char *c = name; *c && k < sizeof(clean) - 1; c++) clean[k++] = *c > ' ' && *c < 127 && *c != '"' && *c != '\\' ? *c : '?';
    clean[k] = 0;
    int w = snprintf(out + *len, cap - *len, "%s%s", first ? "" : ", ", clean);
    if (w < 0 || (size_t)w + 12 >= cap - *len) { /* room kept for " (+N more)" */
        out[*len] = 0;
        return false;
    }
    *len += (size_t)w;
    return true;
}

size_t api_fields_unknown(const json_t *body, const api_fields *f, char *out, size_t cap) {
    size_t n = 0, shown = 0, len = 0;
    bool full = false;
    const char *key;
    const json_t *v;
    out[0] = 0;
    json_object_foreach((json_t *)body, key, v) {
        if (api_fields_known(f, key)) continue;
        n++;
        if (!full && append_name(out, cap, &len, key, shown == 0)) shown++;
        else full = true;
    }
    if (n > shown && cap > len) snprintf(out + len, cap - len, " (+%zu more)", n - shown);
    return n;
}
