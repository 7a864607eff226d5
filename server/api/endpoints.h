/*
 * endpoints.h — the handlers behind http.c's route table (server-private). Each one answers
 * its request through http_respond_* and returns what MHD_queue_response returned.
 *
 *   endpoints.c    /health, /metrics, /v1/models, /tokenize, /detokenize, /v1/sessions...
 *   completions.c  /v1/completions, /v1/chat/completions, llama.cpp's /completion
 *   responses_http.c  /v1/responses (OpenAI's Responses API on durable sessions)
 *   attention.c    /v1/attention (attention inspection)
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
/* Makes the request's session history durable (sess_persist) before its response completes:
 * called once the session's job is done, before the body or the final stream events. No-op
 * without a session or a state directory; a failure is logged (the reply still goes out). */
void gen_persist(req *r);
/* waiting: lifts the connection's idle timeout (request_timeout_s) while the request waits for
 * the scheduler (queue, prefill), which is the server's slowness, not the client's; a vanished
 * client is still noticed by polling (http_client_gone). false: puts it back. */
void gen_hold_connection(req *r, bool waiting);

/* A job's output as the response builders see it (everything borrowed from o). */
void gen_view(const sched_output *o, oai_gen *g);
/* The usage of all of r's choices: every prompt read once (n choices share it), every choice's
 * generated tokens. Only the counts of *sum are set. */
void gen_usage_sum(const req *r, oai_gen *sum);

// ---- the steps of a generation request (completions.c), shared with attention.c ----
/* The prompt's tokens into *ids (owned by the caller), from the chat template (r->chat), the
 * text prompt or the token-id prompt of r->oreq. */
attnd_status gen_prompt_tokens(req *r, int32_t **ids, size_t *n, attnd_err *err);
/* Checks n prompt tokens against the context; returns r->oreq.max_tokens (or the default)
 * clamped to the room left, or -1 with the 400 queued in *ret. */
int gen_fit_context(req *r, size_t n, enum MHD_Result *ret);
/* The named session of r->oreq.session_id, acquired (busy) into *se; NULL when none is asked
 * for. false: an error response is queued. */
bool gen_acquire_session(req *r, sess **se, enum MHD_Result *ret);
/* Builds the job (stealing ids and cap, which may be NULL) and submits it as r->job. false: an
 * error response is queued (the session, if any, is given back). */
bool gen_submit(req *r, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap, enum MHD_Result *ret);
/* Blocks until r->job is done; false when the client left (the job is cancelled). */
bool gen_wait_done(req *r);

enum MHD_Result ep_attention(req *r);   /* attention.c: POST /v1/attention */
enum MHD_Result ep_playground(req *r);  /* endpoints.c: GET /, the web playground */

#endif
