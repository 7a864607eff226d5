/*
 * sse.h — streamed generation responses (server-private): Server-Sent Events carrying OpenAI
 * chunks ("data: {...}\n\n" ... "data: [DONE]\n\n") or llama.cpp's /completion events.
 *
 * libmicrohttpd pulls the stream from its connection thread; the reader waits on the job
 * (sched_job_wait, 100 ms ticks) and polls the socket between ticks, so a vanished client
 * cancels its sequence within about one decode step.
 */
#ifndef ATTND_SERVER_SSE_H
#define ATTND_SERVER_SSE_H

#include "http.h"

/* Queues the streamed response for r's submitted job (r->job). The stream state is owned by
 * r and freed by sse_free (from the completed callback). */
enum MHD_Result sse_respond(req *r);
void sse_free(sse_state *st); /* accepts NULL */

#endif
