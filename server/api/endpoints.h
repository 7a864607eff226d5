/*
 * endpoints.h — the handlers behind http.c's route table (server-private). Each one answers
 * its request through http_respond_* and returns what that returned (http_result).
 *
 *   endpoints.c    /health, /metrics, /v1/models, /tokenize, /detokenize, /v1/sessions...
 *   completions.c  /v1/completions, /v1/chat/completions, llama.cpp's /completion
 *   responses_http.c  /v1/responses (OpenAI's Responses API on durable sessions)
 *   attention.c    /v1/attention (attention inspection)
 *   embed_http.c   /v1/embeddings, /v1/rerank, Ollama's /api/embed (through the scheduler)
 *
 * The three generation endpoints share genreq.h (the steps from a body to the scheduler's jobs)
 * and sse.h (the stream loop); each keeps its own stream writer and per-request state.
 */
#ifndef ATTND_SERVER_ENDPOINTS_H
#define ATTND_SERVER_ENDPOINTS_H

#include "http.h"

http_result ep_health(req *r);
http_result ep_metrics(req *r);
http_result ep_models(req *r);
http_result ep_model_get(req *r);
http_result ep_tokenize(req *r);
http_result ep_detokenize(req *r);
http_result ep_sessions_create(req *r);
http_result ep_sessions_list(req *r);
http_result ep_session_get(req *r);
http_result ep_session_delete(req *r);

http_result ep_completions(req *r);
http_result ep_chat(req *r);
http_result ep_llama_completion(req *r);
http_result ep_infill(req *r); /* llama-server's POST /infill: fill-in-the-middle (infill.h) */

http_result ep_responses_create(req *r);
http_result ep_response_get(req *r);
http_result ep_response_delete(req *r);
http_result ep_messages(req *r);              /* anthropic_http.c: POST /v1/messages */
http_result ep_messages_count_tokens(req *r); /* POST /v1/messages/count_tokens */
http_result ep_ollama_chat(req *r);     /* ollama_http.c: POST /api/chat */
http_result ep_ollama_generate(req *r); /* POST /api/generate */
http_result ep_ollama_tags(req *r);     /* GET /api/tags */
http_result ep_ollama_show(req *r);     /* POST /api/show */
http_result ep_ollama_ps(req *r);       /* GET /api/ps */
http_result ep_ollama_version(req *r);  /* GET /api/version */
http_result ep_embeddings(req *r);        /* embed_http.c: POST /v1/embeddings */
http_result ep_rerank(req *r);            /* POST /v1/rerank, /rerank */
http_result ep_ollama_embed(req *r);      /* POST /api/embed */
http_result ep_ollama_embeddings(req *r); /* POST /api/embeddings (Ollama's legacy) */
http_result ep_attention(req *r);   /* attention.c: POST /v1/attention */
http_result ep_heads(req *r);       /* attention.c: GET /v1/heads */
http_result ep_session_fork(req *r); /* sess_fork.c: POST /v1/sessions/{id}/fork */
http_result ep_playground(req *r);  /* endpoints.c: GET /, the web playground */
http_result ep_props(req *r);       /* llama_api.c: GET /props */
http_result ep_slots(req *r);       /* llama_api.c: GET /slots */
http_result ep_apply_template(req *r); /* llama_api.c: POST /apply-template */

#endif
