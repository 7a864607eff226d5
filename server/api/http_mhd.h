/*
 * http_mhd.h — libmicrohttpd's entry points into the request layer (http.c), for the process that
 * starts the daemon (server.c) only: the endpoints see http.h, which knows no libmicrohttpd.
 */
#ifndef ATTND_SERVER_HTTP_MHD_H
#define ATTND_SERVER_HTTP_MHD_H

#include <microhttpd.h>

#include "http.h"

/* libmicrohttpd's access handler and completed callback (cls = the server). */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                const char *version, const char *upload, size_t *upload_size, void **con_cls);
void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);

#endif
