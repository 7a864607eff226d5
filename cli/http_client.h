/*
 * http_client.h — a minimal HTTP/1.1 client for `attnd chat --url`: one request per connection
 * ("Connection: close"), no TLS, no redirects. Enough for an `attnd serve` on this machine or
 * behind an SSH tunnel, and no new dependency.
 *
 *     hclient c;
 *     if (hclient_request(&c, "127.0.0.1", "8080", "POST", "/v1/chat/completions", NULL, body, &err) == ATTND_OK)
 *         while (hclient_line(&c, &line)) ...   // c.status is the answer's status
 *     hclient_close(&c);
 *
 * The response's body may be chunked, sized by Content-Length, or run to the connection's end;
 * hclient_line undoes the framing and hands out lines (server-sent events are lines). What the
 * server sends is untrusted: a malformed head is an error, a malformed body ends it
 * (tools/fuzz/fuzz_hclient.c reads arbitrary bytes through hclient_read_head and hclient_line).
 */
#ifndef ATTND_CLI_HTTP_CLIENT_H
#define ATTND_CLI_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include "attnd/buf.h"
#include "attnd/common.h"

typedef struct hclient {
    int fd;               /* owned; -1 when closed */
    char buf[8192];       /* bytes read, [pos, len) not yet used */
    size_t pos, len;
    int status;           /* the answer's HTTP status */
    bool chunked;
    long long left;       /* bytes left in the body (Content-Length) or in the chunk; -1 = to the end */
    bool done;
} hclient;

/* Connects to host:port, sends the request (extra_headers: "Name: value\r\n" lines or NULL; body
 * JSON or NULL) and reads the answer's head. c must be closed with hclient_close, also after an
 * error (ATTND_ERR_IO: no connection, or no HTTP answer). A blocking read interrupted by a signal
 * ends the body early. */
attnd_status hclient_request(hclient *c, const char *host, const char *port, const char *method, const char *path,
                             const char *extra_headers, const char *body, attnd_err *err);
/* Reads the answer's status line and headers from fd (owned by c from here on). */
attnd_status hclient_read_head(hclient *c, int fd, attnd_err *err);
/* The next body line, without its line end, into b; false at the body's end with nothing read. */
bool hclient_line(hclient *c, buf *b);
void hclient_close(hclient *c);

#endif
