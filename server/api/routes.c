/*
 * routes.c — every endpoint of `attnd serve`, once: method, path, handler, metrics label and what
 * the request needs (see routes.h). http.c dispatches through the table the server hands it;
 * docs/server.md's endpoint list is checked against it (scripts/check_layout.py).
 */
#include "routes.h"

#include "endpoints.h"
#include "models_http.h"

const route http_routes[] = {
    {"GET", "/", ep_playground, "playground", ROUTE_OPEN},
    {"GET", "/health", ep_health, "health", ROUTE_OPEN},
    {"GET", "/metrics", ep_metrics, "metrics", 0},
    {"GET", "/v1/models", ep_models, "models", ROUTE_MODEL},
    {"GET", "/models", ep_models, "models", ROUTE_MODEL},
    {"GET", "/v1/models/", ep_model_get, "model", ROUTE_PREFIX | ROUTE_MODEL},
    {"POST", "/v1/completions", ep_completions, "completions", ROUTE_MODEL | ROUTE_GENERATE},
    {"POST", "/completions", ep_completions, "completions", ROUTE_MODEL | ROUTE_GENERATE},
    {"POST", "/completion", ep_llama_completion, "llama_completion", ROUTE_MODEL | ROUTE_GENERATE},
    {"POST", "/infill", ep_infill, "infill", ROUTE_MODEL | ROUTE_GENERATE},
    {"POST", "/v1/chat/completions", ep_chat, "chat_completions", ROUTE_MODEL | ROUTE_GENERATE},
    {"POST", "/chat/completions", ep_chat, "chat_completions", ROUTE_MODEL | ROUTE_GENERATE},
    {"POST", "/v1/attention", ep_attention, "attention", ROUTE_MODEL},
    {"GET", "/v1/heads", ep_heads, "heads", ROUTE_MODEL},
    {"POST", "/attention", ep_attention, "attention", ROUTE_MODEL},
    {"GET", "/props", ep_props, "props", ROUTE_MODEL},
    {"GET", "/slots", ep_slots, "slots", ROUTE_MODEL},
    {"POST", "/apply-template", ep_apply_template, "apply_template", ROUTE_MODEL},
    {"POST", "/tokenize", ep_tokenize, "tokenize", ROUTE_MODEL},
    {"POST", "/detokenize", ep_detokenize, "detokenize", ROUTE_MODEL},
    {"POST", "/v1/sessions", ep_sessions_create, "sessions", ROUTE_MODEL},
    {"GET", "/v1/sessions", ep_sessions_list, "sessions", ROUTE_MODEL},
    {"GET", "/v1/sessions/", ep_session_get, "session", ROUTE_PREFIX | ROUTE_MODEL},
    {"DELETE", "/v1/sessions/", ep_session_delete, "session", ROUTE_PREFIX | ROUTE_MODEL},
    {"POST", "/v1/sessions/{id}/fork", ep_session_fork, "session_fork", ROUTE_SEGMENT | ROUTE_MODEL},
    {"POST", "/v1/responses", ep_responses_create, "responses", ROUTE_MODEL | ROUTE_GENERATE},
    {"GET", "/v1/responses/", ep_response_get, "response", ROUTE_PREFIX | ROUTE_MODEL},
    {"DELETE", "/v1/responses/", ep_response_delete, "response", ROUTE_PREFIX | ROUTE_MODEL},
    {"POST", "/v1/messages", ep_messages, "messages", ROUTE_MODEL | ROUTE_GENERATE | ROUTE_ANTHROPIC},
    {"POST", "/v1/messages/count_tokens", ep_messages_count_tokens, "messages_count_tokens", ROUTE_MODEL | ROUTE_GENERATE | ROUTE_ANTHROPIC},
    {"POST", "/api/chat", ep_ollama_chat, "ollama_chat", ROUTE_MODEL | ROUTE_GENERATE | ROUTE_OLLAMA},
    {"POST", "/api/generate", ep_ollama_generate, "ollama_generate", ROUTE_MODEL | ROUTE_GENERATE | ROUTE_OLLAMA},
    {"GET", "/api/tags", ep_ollama_tags, "ollama_tags", ROUTE_MODEL | ROUTE_OLLAMA},
    {"POST", "/api/show", ep_ollama_show, "ollama_show", ROUTE_MODEL | ROUTE_OLLAMA},
    {"GET", "/api/ps", ep_ollama_ps, "ollama_ps", ROUTE_MODEL | ROUTE_OLLAMA},
    {"POST", "/models/load", ep_models_load, "models_load", ROUTE_MODEL},
    {"POST", "/models/unload", ep_models_unload, "models_unload", ROUTE_MODEL},
    {"GET", "/api/version", ep_ollama_version, "ollama_version", ROUTE_OLLAMA},
    {"POST", "/api/embed", ep_ollama_embed, "ollama_embed", ROUTE_MODEL | ROUTE_OLLAMA | ROUTE_EMBED},
    {"POST", "/api/embeddings", ep_ollama_embeddings, "ollama_embeddings", ROUTE_MODEL | ROUTE_OLLAMA | ROUTE_EMBED},
    {"POST", "/v1/embeddings", ep_embeddings, "embeddings", ROUTE_MODEL | ROUTE_EMBED},
    {"POST", "/embeddings", ep_embeddings, "embeddings", ROUTE_MODEL | ROUTE_EMBED},
    {"POST", "/v1/rerank", ep_rerank, "rerank", ROUTE_MODEL | ROUTE_RANK},
    {"POST", "/rerank", ep_rerank, "rerank", ROUTE_MODEL | ROUTE_RANK},
};
const size_t http_n_routes = ATTND_ARRAY_LEN(http_routes);
