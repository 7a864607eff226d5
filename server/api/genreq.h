/*
 * genreq.h — the generation request (server-private), shared by completions.c, responses_http.c
 * and attention.c as peers: the steps from a validated body (r->oreq) to the scheduler's jobs and
 * back.
 *
 *   genreq_prompt_tokens → genreq_fit_context → genreq_acquire_session → genreq_submit
 *   (one job), or genreq_submit_all (every prompt and choice of r->oreq), then genreq_wait_all or
 *   a stream (sse.h), and genreq_persist before the last bytes of the answer.
 *
 * Choices are prompt-major: job k serves prompt k / n, choice k % n (req_job). Every function that
 * can fail queues the error response itself and returns false (or -1), with *ret its result.
 */
#ifndef ATTND_SERVER_GENREQ_H
#define ATTND_SERVER_GENREQ_H

#include "http.h"
#include "completion_body.h"

/* The body field a prompt error names: r->prompt_param, else "messages" (chat) or "prompt". */
const char *genreq_prompt_param(const req *r);
/* Prompt p's tokens into *ids (owned by the caller): the chat template (r->chat), the text
 * prompt or the token-id prompt of r->oreq. */
attnd_status genreq_prompt_tokens(req *r, int p, int32_t **ids, size_t *n, attnd_err *err);
/* r->oreq's "ablate" against the model, and against what it cannot be combined with (a
 * session, n > 1): false with the 400 queued in *ret (naming "ablate" or "n"). */
bool genreq_check_ablate(req *r, enum MHD_Result *ret);
/* Checks n prompt tokens against the context; returns r->oreq.max_tokens (or the default)
 * clamped to the room left, or -1 with the 400 queued in *ret. */
int genreq_fit_context(req *r, size_t n, enum MHD_Result *ret);
/* The named session of r->oreq.session_id, acquired (busy) into *se; NULL when none is asked
 * for. false: an error response is queued. */
bool genreq_acquire_session(req *r, sess **se, enum MHD_Result *ret);
/* Builds the job (stealing ids and cap, which may be NULL) and submits it as r->job. false: an
 * error response is queued (the session, if any, is given back). */
bool genreq_submit(req *r, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap,
                   enum MHD_Result *ret);
/* Tokenizes and submits every choice of r->oreq (false: an error response is queued and what was
 * submitted is cancelled). */
bool genreq_submit_all(req *r, enum MHD_Result *ret);
/* Waits for every job, then genreq_persist; false: the client left (everything is cancelled). */
bool genreq_wait_all(req *r);
/* Makes the request's session history durable (sess_persist_turn) before its response completes:
 * called once the session's job is done, before the body or the final stream events. No-op
 * (true) without a session or a state directory. false: the turn could not be saved (the
 * session is back to its saved history) and must not be acknowledged: r->unsaved holds the
 * status (507 for a full disk or quota, 409 when the shared session store holds another turn
 * saved since this one read it, else 503) and stays set, so a later call fails too. */
bool genreq_persist(req *r);
/* The error answer of an unsaved turn (genreq_persist false): 507, or 503 with Retry-After. */
enum MHD_Result genreq_respond_unsaved(req *r);
/* Its error object, for a stream's last event (new reference). */
json_t *genreq_unsaved_error(const req *r);
/* waiting: lifts the connection's idle timeout (request_timeout_s) while the request waits for
 * the scheduler (queue, prefill), which is the server's slowness, not the client's; a vanished
 * client is still noticed by polling (http_client_gone). false: puts it back. */
void genreq_hold_connection(req *r, bool waiting);

/* A job's output as the response builders see it (everything borrowed from o). */
void genreq_view(const sched_output *o, oai_gen *g);
/* How many of job output o's generated tokens were reasoning (reasoning.h), the prompt's open
 * <think> (oai_request.open_reasoning) taken into account. */
int genreq_reasoning_tokens(const req *r, const sched_output *o);
/* The usage of all of r's choices: every prompt read once (n choices share it), every choice's
 * generated tokens (and, in chat, its reasoning tokens). Only the counts of *sum are set. */
void genreq_usage_sum(const req *r, oai_gen *sum);
/* A job that ended cut short (cancelled, server shutdown) rather than failed: its answer ends as
 * a normal one whose text was cut ("length", "incomplete"), which clients accept. */
bool genreq_was_cut(const sched_output *o);

#endif
