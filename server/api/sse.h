/*
 * sse.h — streamed generation responses (server-private): Server-Sent Events carrying OpenAI
 * chunks ("data: {...}\n\n" ... "data: [DONE]\n\n"), llama.cpp's /completion events, or (with
 * the writer of responses_http.c) the Responses API's semantic events.
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
#include "http.h"

/* What one kind of stream writes, appending SSE bytes to out. The loop calls begin once (may be
 * NULL), update for every update of job k (k < req_n_jobs; u->done on its last), and end once
 * after every job's last update (may be NULL); then the stream ends. */
typedef struct sse_writer {
    void (*begin)(req *r, buf *out);
    void (*update)(req *r, int k, const sched_update *u, buf *out);
    void (*end)(req *r, buf *out);
} sse_writer;

/* Queues a streamed response of r's submitted jobs written by w (borrowed; a static table).
 * The stream state is owned by r and freed by sse_free (from the completed callback). */
enum MHD_Result sse_stream(req *r, const sse_writer *w);
/* sse_stream with the OpenAI chunk writer, or llama.cpp's for /completion (r->llama). */
enum MHD_Result sse_respond(req *r);
/* A job that ended cut short (cancelled, server shutdown) rather than failed: its stream ends
 * as a normal one whose text was cut ("length", "incomplete"), which clients accept. */
bool sse_was_cut(const sched_output *o);
void sse_free(sse_state *st); /* accepts NULL */

#endif
