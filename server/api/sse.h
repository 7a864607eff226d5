/*
 * sse.h — streamed generation responses (server-private): Server-Sent Events written by the
 * endpoint's writer: OpenAI chunks ("data: {...}\n\n" ... "data: [DONE]\n\n") and llama.cpp's
 * /completion events (completions.c), or the Responses API's semantic events (responses_http.c).
 *
 * One stream loop serves them all: libmicrohttpd pulls the stream from its connection thread;
 * the loop waits on the request's jobs (sched_job_wait, 100 ms ticks), polls the socket between
 * ticks, so a vanished client cancels its sequences within about one decode step, and sends an
 * SSE comment `: keep-alive` while nothing else goes out (sse_keepalive_s). A writer turns the
 * jobs' updates into frames.
 */
#ifndef ATTND_SERVER_SSE_H
#define ATTND_SERVER_SSE_H

#include "attnd/buf.h"
#include "genreq.h"
#include "http.h"

/* What one kind of stream writes, appending SSE bytes to out. The loop calls begin once (may be
 * NULL), update for every update of job k (k < genreq_n_jobs; u->done on its last), and end once
 * after every job's last update (may be NULL); then the stream ends. */
typedef struct sse_writer {
    void (*begin)(req *r, buf *out);
    void (*update)(req *r, int k, const sched_update *u, buf *out);
    void (*end)(req *r, buf *out);
    /* A stream that is not SSE (Ollama's NDJSON): its Content-Type, and what it sends instead of
     * the `: keep-alive` comment (a frame its clients read as nothing new). NULL: SSE's. */
    const char *content_type;
    void (*idle)(req *r, buf *out);
} sse_writer;

/* Queues a streamed response of g's submitted jobs (g: r's generation request, borrowed) written
 * by w (borrowed; a static table). The loop's state is r's REQ_SLOT_STREAM (freed with the
 * request); a writer keeps its own in REQ_SLOT_ENDPOINT. A client that leaves cancels g. */
http_result sse_stream(req *r, genreq *g, const sse_writer *w);
/* Appends the event "data: <json>\n\n" (o stolen; NULL or out of memory: nothing). */
void sse_event(buf *out, json_t *o);

#endif
