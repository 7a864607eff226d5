/*
 * origin.h — who may talk to the server from a browser: the CORS origin list, cross-site POSTs
 * (Origin) and DNS rebinding (Host). Pure functions of header values and settings, so every
 * rule is unit-testable; http.c applies them before a request's body is read.
 *
 *   - a state-changing request (anything but GET, HEAD, OPTIONS) that carries an Origin header
 *     must come from the server's own origin (http(s)://<Host>) or one listed in cors_origins:
 *     else 403. Clients that send no Origin (curl, SDKs) are not affected.
 *   - a server bound to a loopback address answers only Host names that are loopback too
 *     (localhost, *.localhost, 127.0.0.0/8, ::1) or listed in allowed_hosts: else 421. A web
 *     page whose DNS name was re-pointed at 127.0.0.1 still sends its own name as Host.
 */
#ifndef ATTND_SERVER_ORIGIN_H
#define ATTND_SERVER_ORIGIN_H

#include <stdbool.h>
#include <stddef.h>

/* True when item (n bytes) is an entry of the comma-separated list (spaces around entries
 * ignored, case-sensitive), or the list is "*" and star_matches. NULL list = empty. */
bool origin_list_has(const char *list, const char *item, size_t n, bool star_matches);

/* True for a bind address that only loopback clients can reach ("127.0.0.1", "::1",
 * "localhost"). */
bool origin_bind_is_loopback(const char *bind_host);

/* The Host header check for a loopback-bound server: true when host (a Host header, with or
 * without ":port", IPv6 in brackets) names the loopback interface or is listed in
 * allowed_hosts (names without port, case-insensitive). NULL host (HTTP/1.0) passes. */
bool origin_host_ok(const char *host, const char *allowed_hosts);

/* The Origin check for a state-changing request: true when origin is NULL (not a browser
 * request), the server's own origin ("http://" or "https://" + host), or in cors
 * (comma-separated, "*" = any). */
bool origin_request_ok(const char *origin, const char *host, const char *cors);

#endif
