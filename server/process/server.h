/*
 * server.h — `attnd serve`: the HTTP front end (libmicrohttpd) over the scheduler.
 *
 *     server *srv; attnd_err err;
 *     server_create(&srv, &settings, &err);   // binds the port; /health answers 503
 *     server_load(srv, &err);                 // model, tokenizer, sessions, scheduler; ready
 *     ... wait for SIGTERM ...
 *     server_shutdown(srv);                   // stop accepting, finish or cancel, flush sessions
 *     server_destroy(srv);
 *
 * HTTP threads (one per connection) parse, validate, tokenize and stream; they never call the
 * engine. The settings struct is copied; its strings are duplicated.
 */
#ifndef ATTND_SERVER_SERVER_H
#define ATTND_SERVER_SERVER_H

#include "attnd/common.h"
#include "settings.h"

typedef struct server server;

attnd_status server_create(server **out, const server_settings *cfg, attnd_err *err);
/* server_create without the port (no libmicrohttpd daemon): requests reach it only through the
 * request layer's own entry points (http_req_create/run/end in api/http.h), as the tests do. */
attnd_status server_create_unbound(server **out, const server_settings *cfg, attnd_err *err);
/* The port actually bound (useful with port 0). */
int server_port(const server *s);
/* Loads the model and starts serving generation requests; calls hooks.on_ready. */
attnd_status server_load(server *s, attnd_err *err);
/* Graceful stop, bounded by settings.shutdown_timeout_s; calls hooks.on_stopping. */
void server_shutdown(server *s);
void server_destroy(server *s); /* accepts NULL; shuts down first if needed */

#endif
