/*
 * http_client.c — the minimal HTTP/1.1 client of `attnd chat --url` (see http_client.h): a
 * buffered reader over the connection, the answer's head, and the body's framing undone (chunked,
 * Content-Length, or to the end) one byte at a time, which is plenty for a chat's stream.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "http_client.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* One byte of the raw stream; -1 at its end, on an error or on a signal. */
static int raw_byte(hclient *c) {
    if (c->pos == c->len) {
        ssize_t k = read(c->fd, c->buf, sizeof(c->buf));
        if (k <= 0) return -1;
        c->pos = 0, c->len = (size_t)k;
    }
    return (unsigned char)c->buf[c->pos++];
}

/* A line of the raw stream without its CR LF into line (cut at cap - 1); false at the end with
 * nothing read. */
static bool raw_line(hclient *c, char *line, size_t cap) {
    size_t n = 0;
    int ch;
    bool any = false;
    while ((ch = raw_byte(c)) >= 0 && ch != '\n') {
        any = true;
        if (n + 1 < cap) line[n++] = (char)ch;
    }
    if (n && line[n - 1] == '\r') n--;
    line[n] = '\0';
    return ch >= 0 || any;
}

/* The size line of the next chunk (after the CR LF that ends the previous one); false at the
 * last chunk or a malformed size. */
static bool next_chunk(hclient *c) {
    char line[64];
    if (!raw_line(c, line, sizeof(line))) return false;
    if (!line[0] && !raw_line(c, line, sizeof(line))) return false;
    char *end;
    errno = 0;
    long long n = strtoll(line, &end, 16);
    if (end == line || errno || n <= 0 || (*end && *end != ';' && *end != ' ')) return false;
    c->left = n;
    return true;
}

/* One byte of the body, its framing undone; -1 at its end. */
static int body_byte(hclient *c) {
    if (c->done) return -1;
    if ((c->chunked && c->left == 0 && !next_chunk(c)) || c->left == 0) {
        c->done = true;
        return -1;
    }
    int ch = raw_byte(c);
    if (ch < 0) {
        c->done = true;
        return -1;
    }
    if (c->left > 0) c->left--;
    return ch;
}

bool hclient_line(hclient *c, buf *b) {
    buf_clear(b);
    int ch;
    bool any = false;
    while ((ch = body_byte(c)) >= 0 && ch != '\n') {
        any = true;
        char k = (char)ch;
        if (k != '\r' && !buf_append(b, &k, 1)) return false;
    }
    return ch >= 0 || any;
}

attnd_status hclient_read_head(hclient *c, int fd, attnd_err *err) {
    *c = (hclient){.fd = fd, .left = -1};
    char line[1024];
    if (!raw_line(c, line, sizeof(line)) || sscanf(line, "HTTP/%*s %d", &c->status) != 1 || c->status < 100 ||
        c->status > 999)
        return attnd_fail(err, ATTND_ERR_IO, "the server did not answer HTTP");
    while (raw_line(c, line, sizeof(line)) && line[0]) {
        if (!strncasecmp(line, "transfer-encoding:", 18) && strcasestr(line + 18, "chunked")) {
            c->chunked = true;
            c->left = 0;
        } else if (!strncasecmp(line, "content-length:", 15) && !c->chunked) {
            char *end;
            long long n = strtoll(line + 15, &end, 10);
            c->left = n >= 0 && end != line + 15 ? n : 0;
        }
    }
    return ATTND_OK;
}

static int dial(const char *host, const char *port, attnd_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int e = getaddrinfo(host, port, &hints, &res);
    if (e) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", host, gai_strerror(e)), -1;
    int fd = -1, why = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            why = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) attnd_fail(err, ATTND_ERR_IO, "cannot connect to %s:%s: %s", host, port, strerror(why));
    return fd;
}

attnd_status hclient_request(hclient *c, const char *host, const char *port, const char *method, const char *path,
                             const char *extra_headers, const char *body, attnd_err *err) {
    *c = (hclient){.fd = dial(host, port, err), .left = -1};
    if (c->fd < 0) return ATTND_ERR_IO;
    buf req;
    buf_init(&req);
    size_t n_body = body ? strlen(body) : 0;
    buf_printf(&req, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\nAccept: application/json, "
                     "text/event-stream\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n",
               method, path, host, port, n_body, extra_headers ? extra_headers : "");
    if (body) buf_append(&req, body, n_body);
    bool sent = req.p && send(c->fd, req.p, req.len, MSG_NOSIGNAL) == (ssize_t)req.len;
    buf_free(&req);
    if (!sent) return attnd_fail(err, ATTND_ERR_IO, "%s:%s: cannot send the request", host, port);
    attnd_status st = hclient_read_head(c, c->fd, err);
    if (st != ATTND_OK) attnd_fail(err, st, "%s:%s did not answer HTTP", host, port);
    return st;
}

void hclient_close(hclient *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}
