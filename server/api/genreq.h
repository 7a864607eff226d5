/*
 * genreq.h — the generation request (server-private): one request's prompts, session and
 * scheduler jobs, from a validated body (g->oreq) to the jobs' end. Completions, the Responses
 * API and attention are its users; a new API adds its parser (body → g->oreq) and its writer
 * (jobs' output → its JSON) and reuses everything here.
 *
 *   genreq_create → (the endpoint parses into g->oreq) → genreq_submit_all, or the steps
 *   genreq_prompt_tokens → genreq_fit_context → genreq_acquire_session → genreq_submit
 *   → genreq_wait_all or a stream (sse.h) → genreq_persist before the answer's last bytes
 *   → genreq_end (the request is over) → genreq_destroy.
 *
 * It knows no HTTP: a step that fails returns its attnd_status and fills a genreq_err (the
 * message, the body field it names, what kind of failure it is); the endpoint turns that into
 * its API's error answer in one place (genreq_http.h for the HTTP endpoints). Choices are
 * prompt-major: job k serves prompt k / n, choice k % n (genreq_job).
 *
 * A genreq is used by one thread at a time (the request's); the jobs it holds are shared with the
 * scheduler's thread through sched_job's own lock.
 */
#ifndef ATTND_SERVER_GENREQ_H
#define ATTND_SERVER_GENREQ_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"
#include "completion_body.h"
#include "metrics.h" /* metrics_api */
#include "oai.h"
#include "scheduler.h"
#include "sess.h"
#include "slog.h"

/* What a generation request borrows from the server (valid while the server lives). */
typedef struct genreq_env {
    const server_settings *cfg;   /* default_max_tokens */
    const model *m;               /* the ablate check */
    tokenizer *tok;
    const chat_template *chat;
    sess_store *store;
    sched *sch;
    int n_ctx;
    const atomic_bool *stopping;  /* the server is shutting down; NULL = never */
    const char *model_id;         /* the model's name in answers */
    int n_vocab;
} genreq_env;

/* Who asks (copied at genreq_create), and how to notice that they left. */
typedef struct genreq_who {
    const char *owner;            /* the API key's owner tag ("" = none; sess.h) */
    const char *request_id;       /* for the scheduler's log lines */
    const char *tenant;           /* for fair admission ("key:..." / "addr:...") */
    const char *session_header;   /* the id a session-routing proxy saw (X-Session-Id); NULL = none;
                                     borrowed for the request's life */
    bool (*client_gone)(void *user); /* NULL = never; polled while waiting */
    void *user;
} genreq_who;

/* What kind of failure a step met; an API maps each to its own error (HTTP status, type). */
typedef enum genreq_fail {
    GENREQ_OK = 0,
    GENREQ_BAD_REQUEST,   /* the body asks for what cannot be served (st INVALID) */
    GENREQ_TOO_LONG,      /* the prompt leaves no room in the context (code context_length_exceeded) */
    GENREQ_SESSION,       /* its session cannot be used: st NOT_FOUND, IO / NOMEM (store unreachable,
                             retry), else BUSY (in use by another request) */
    GENREQ_OVERLOADED,    /* no room now: st NOMEM (memory) or BUSY (the queue is full); retry */
    GENREQ_STOPPING,      /* the server is shutting down */
    GENREQ_UNSAVED,       /* the session's turn is not durable: st BUSY (another turn was saved
                             first), IO with no_space (disk full or quota), else IO */
} genreq_fail;

typedef struct genreq_err {
    genreq_fail fail;
    attnd_status st;
    const char *param;    /* the body field at fault (static or g's own strings); NULL = none */
    const char *code;     /* a machine-readable code ("context_length_exceeded"); NULL = none */
    bool no_space;        /* GENREQ_UNSAVED: the file system is full */
    char msg[512];        /* as long as an attnd_err's: a step's message passes on whole */
} genreq_err;

/* One generation request. The endpoint fills oreq (and chat, prompt_param) before submitting;
 * everything else is genreq's. */
typedef struct genreq {
    genreq_env env;
    genreq_who who;               /* its strings point into the copies below */
    char owner[SESS_OWNER_MAX + 1];
    char request_id[SLOG_REQUEST_ID_MAX + 1];
    char tenant[SCHED_TENANT_MAX + 1];
    oai_request oreq;             /* the validated body; owned (oai_request_free) */
    json_t *body;                 /* keeps oreq's borrowed strings alive; owned */
    bool chat;                    /* messages through the chat template, else prompts */
    int api;                      /* metrics_api: which API asked (the histograms' label) */
    const char *prompt_param;     /* the body field prompt errors name; NULL = "messages"/"prompt" */
    char id[48];                  /* the answer's id ("chatcmpl-...", "resp_..."), for the log */
    sched_job *job;               /* owned reference; choice 0 */
    sched_job **extra;            /* (n_extra) owned references: choices 1.. (prompt lists, n > 1) */
    int n_extra;
    int n_prompt;                 /* prompt tokens submitted (every prompt once) */
    char sess_id[SESS_ID_MAX + 1];/* the named session the turn runs on; "" = none */
    uint64_t sess_turn;           /* which acquire of the session this turn is (sess.h) */
    bool cancelled;               /* the client left: every job was cancelled */
    genreq_err unsaved;           /* fail != GENREQ_OK: the turn could not be made durable */
    /* A server of several models, where each model has its own sessions: the model other than
     * this one that holds owner's session id (its name into home, cap bytes), or false; asked when
     * session_id is not found here, to answer with the model it belongs to. NULL = one model. */
    bool (*session_home)(void *user, const char *owner, const char *id, char *home, size_t cap);
    void *home_user;
} genreq;

/* A new request over env and who (both copied). NULL when out of memory. */
genreq *genreq_create(const genreq_env *env, const genreq_who *who);
/* Frees g, its jobs' references and its request (accepts NULL). Call genreq_end first. */
void genreq_destroy(genreq *g);
/* The request is over (completed: its answer went out whole). A request that did not complete,
 * or whose client left, cancels its jobs (logged once, naming what: "POST /v1/..."); a finished
 * turn on a session is saved (again: a no-op when already durable). Returns the tokens generated
 * by every choice. */
int genreq_end(genreq *g, bool completed, const char *what);

/* The job of choice k (0 = g->job); choices are prompt-major: k = prompt * n + i. */
static inline sched_job *genreq_job(const genreq *g, int k) { return k == 0 ? g->job : g->extra[k - 1]; }
static inline int genreq_n_jobs(const genreq *g) { return g->job ? 1 + g->n_extra : 0; }
/* Cancels every job (the client left). */
void genreq_cancel(genreq *g);

/* The body field a prompt error names: g->prompt_param, else "messages" (chat) or "prompt". */
const char *genreq_prompt_param(const genreq *g);
/* Prompt p's tokens into *ids (owned by the caller, NULL on failure): the chat template (g->chat),
 * the text prompt or the token-id prompt of g->oreq. A failure is GENREQ_BAD_REQUEST. */
attnd_status genreq_prompt_tokens(genreq *g, int p, int32_t **ids, size_t *n, genreq_err *e);
/* g->oreq's "ablate" against the model, and against what it cannot be combined with (a
 * session, n > 1): GENREQ_BAD_REQUEST naming "ablate" or "n". */
attnd_status genreq_check_ablate(genreq *g, genreq_err *e);
/* Checks n prompt tokens against the context: *max_tokens = g->oreq.max_tokens (or the
 * default) clamped to the room left. */
attnd_status genreq_fit_context(genreq *g, size_t n, int *max_tokens, genreq_err *e);
/* The named session of g->oreq.session_id, acquired (busy) into *se; *se = NULL when none is
 * asked for. */
attnd_status genreq_acquire_session(genreq *g, sess **se, genreq_err *e);
/* Builds the job (stealing ids and cap, which may be NULL) and submits it as g->job. On failure
 * the session, if any, is given back. */
attnd_status genreq_submit(genreq *g, int32_t *ids, size_t n, int max_tokens, sess *se, attn_capture *cap,
                           genreq_err *e);
/* Tokenizes and submits every choice of g->oreq; on failure what was submitted is cancelled. */
attnd_status genreq_submit_all(genreq *g, genreq_err *e);
/* Waits for every job, then genreq_persist; false: the client left (everything is cancelled). */
bool genreq_wait_all(genreq *g);
/* Makes the request's session history durable (sess_persist_turn) before its answer completes:
 * called once the session's job is done, before the body or the final stream events. No-op
 * (true) without a session or a state directory. false: the turn could not be saved (the
 * session is back to its saved history) and must not be acknowledged: g->unsaved says why
 * (GENREQ_UNSAVED) and stays set, so a later call fails too. */
bool genreq_persist(genreq *g);

/* A job's output as the response builders see it (everything borrowed from o). */
void genreq_view(const sched_output *o, completion_body_gen *out);
/* How many of job output o's generated tokens were reasoning (reasoning.h), the prompt's open
 * <think> (oai_request.open_reasoning) taken into account. */
int genreq_reasoning_tokens(const genreq *g, const sched_output *o);
/* The usage of all of g's choices: every prompt read once (n choices share it), every choice's
 * generated tokens (and, in chat, its reasoning tokens). Only the counts of *sum are set. */
void genreq_usage_sum(const genreq *g, completion_body_gen *sum);
/* A job that ended cut short by its cancellation rather than failed: its answer ends as a normal
 * one whose text was cut ("length", "incomplete"), which clients accept. */
bool genreq_was_cut(const genreq *g, const sched_output *o);
/* A job cut because the server is shutting down: never a normal end a client would take for the
 * whole answer ("stop") or a budget spent ("length"), but a failure (st BUSY, errmsg set), which
 * every API answers in its own error form: a 503 when whole, its error event when streamed. */
bool genreq_shut_down(const genreq *g, const sched_output *o);

#endif
