/*
 * routes.h — the route table (server-private): the server gives it to http.c (struct server's
 * routes), which matches requests against it; the handlers are endpoints.h's.
 */
#ifndef ATTND_SERVER_ROUTES_H
#define ATTND_SERVER_ROUTES_H

#include "http.h"

extern const route http_routes[];
extern const size_t http_n_routes;

#endif
