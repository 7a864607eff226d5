/*
 * endpoints.h — the handlers behind http.c's route table (server-private). Each one answers
 * its request through http_respond_* and returns what MHD_queue_response returned.
 *
 *   endpoints.c    /health, /metrics, /v1/models, /tokenize, /detokenize, /v1/sessions...
 *   completions.c  /v1/completions, /v1/chat/completions, llama.cpp's /completion
 *   responses_http.c  /v1/responses (OpenAI's Responses API on durable sessions)
 */
#ifndef ATTND_SERVER_ENDPOINTS_H
#define ATTND_SERVER_ENDPOINTS_H

#include "http.h"
#include "oai_resp.h"

enum MHD_Result ep_health(req *r);
enum MHD_Result ep_metrics(req *r);
enum MHD_Result ep_models(req *r);
enum MHD_Result ep_model_get(req *r);
enum MHD_Result ep_tokenize(req *r);
enum MHD_Result ep_detokenize(req *r);
enum MHD_Result ep_sessions_create(req *r);
enum MHD_Result ep_sessions_list(req *r);
enum MHD_Result ep_session_get(req *r);
enum MHD_Result ep_session_delete(req *r);

enum MHD_Result ep_completions(req *r);
enum MHD_Result ep_chat(req *r);
enum MHD_Result ep_llama_completion(req *r);

enum MHD_Result ep_responses_create(req *r);
enum MHD_Result ep_response_get(req *r);
enum MHD_Result ep_response_delete(req *r);
void rsp_state_free(rsp_state *st); /* accepts NULL */

/* The generation machinery of completions.c, shared with /v1/responses: tokenizes and submits
 * every choice of r->oreq (false: an error response is queued), and waits for all of them
 * (false: the client left; everything is cancelled). */
bool gen_submit_all(req *r, enum MHD_Result *ret);
bool gen_wait_all(req *r);

/* A job's output as the response builders see it (everything borrowed from o). */
void gen_view(const sched_output *o, oai_gen *g);
/* The usage of all of r's choices: every prompt read once (n choices share it), every choice's
 * generated tokens. Only the counts of *sum are set. */
void gen_usage_sum(const req *r, oai_gen *sum);

#endif
