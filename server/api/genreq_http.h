/*
 * genreq_http.h — the generation request (genreq.h) of an HTTP request (server-private): made on
 * first use in the request's REQ_SLOT_GENREQ, with the end hook the completed callback runs
 * (cancel what a vanished client left running, save the session's turn, count the tokens for the
 * access log), and its failures as HTTP answers: the one place a genreq_err becomes a status.
 */
#ifndef ATTND_SERVER_GENREQ_HTTP_H
#define ATTND_SERVER_GENREQ_HTTP_H

#include "genreq.h"
#include "http.h"
#include "mreg.h"

/* What REQ_SLOT_GENREQ holds: the genreq, and the model it runs on when the server has several. */
typedef struct genreq_http_slot {
    genreq *g;            /* owned; NULL until made */
    mreg *reg;            /* NULL = one model */
    mreg_ref ref;         /* the request's model, released after g is destroyed */
} genreq_http_slot;

/* Starts r's generation request: 503 while the server shuts down, else the body parsed as a JSON
 * object (kept in g->body, *body borrows it) and the genreq made in REQ_SLOT_GENREQ over the
 * server and r's caller; on a server of several models, over the model the body's "model" names
 * (models_http_route: loaded first when needed, held until the request ends). NULL: the error answer is queued, *ret its result. */
genreq *genreq_http_begin(req *r, json_t **body, http_result *ret);
/* r's generation request; NULL before genreq_http_begin. */
static inline genreq *genreq_http_get(const req *r) {
    const genreq_http_slot *slot = req_get(r, REQ_SLOT_GENREQ);
    return slot ? slot->g : NULL;
}

/* The HTTP status of a failure: bad request and too long 400, a session 404 / 409 / 503
 * (http_status_of's HTTP_CTX_ACQUIRE), overloaded 429 (queue full) or 503, stopping 503, unsaved
 * 507 (no space), 409 (another turn saved first) or 503. */
int genreq_http_status(const genreq_err *e);
/* Queues e's error answer (OpenAI's error object; the context error carries its code). */
http_result genreq_http_respond(req *r, const genreq_err *e);
/* e's error object, for a stream's last event (new reference). */
json_t *genreq_http_error(const genreq_err *e);

#endif
