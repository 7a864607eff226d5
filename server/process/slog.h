/*
 * slog.h — the server's one way to write to stderr: leveled, timestamped lines.
 * Library code in server/ logs only through slog(); the level is process-wide and set once
 * at start-up (slog_set_level). Thread-safe: each line is written with a single fprintf.
 */
#ifndef ATTND_SERVER_SLOG_H
#define ATTND_SERVER_SLOG_H

#include <stddef.h>

#include "settings.h"

void slog_set_level(server_log_level level);
bool slog_enabled(server_log_level level);
/* Writes one line; control characters in the formatted message are escaped (see slog.c). */
void slog(server_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies in to out (cap bytes, NUL-terminated) with bytes < 0x20 and 0x7f as \xNN; stops
 * before a character that would not fit. Returns the length written. */
size_t slog_escape(char *out, size_t cap, const char *in);
/* The request this thread works for now: every line it writes until the next call carries
 * "req=<id>" (id borrowed until then; NULL clears it). Thread-local: an HTTP callback or the
 * scheduler sets it around the work it does for one request. */
void slog_set_request(const char *id);
/* A request id a client sent is used when it is 1..SLOG_REQUEST_ID_MAX characters of
 * A-Z a-z 0-9 and . _ : - (so it can go into a log line and a header as it is). */
#define SLOG_REQUEST_ID_MAX 64
bool slog_request_id_valid(const char *id);

#define slog_error(...) slog(SERVER_LOG_ERROR, __VA_ARGS__)
#define slog_warn(...) slog(SERVER_LOG_WARN, __VA_ARGS__)
#define slog_info(...) slog(SERVER_LOG_INFO, __VA_ARGS__)
#define slog_debug(...) slog(SERVER_LOG_DEBUG, __VA_ARGS__)

#endif
