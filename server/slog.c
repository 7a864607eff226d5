/*
 * slog.c — leveled stderr logging for the server (see slog.h). Lines look like
 * "<6>2026-01-01T12:00:00.123Z attnd[info] listening on http://127.0.0.1:8080": the leading
 * syslog priority (<3> error, <4> warning, <6> info, <7> debug) lets journald keep each line's
 * level when the server runs as a systemd service (SyslogLevelPrefix=, on by default).
 */
#include "slog.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static atomic_int g_level = SERVER_LOG_INFO;

void slog_set_level(server_log_level level) { atomic_store(&g_level, (int)level); }

bool slog_enabled(server_log_level level) { return (int)level <= atomic_load(&g_level); }

void slog(server_log_level level, const char *fmt, ...) {
    static const char *NAMES[] = {"error", "warn", "info", "debug"};
    static const int PRIORITY[] = {3, 4, 6, 7};
    if (!slog_enabled(level)) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    /* one fprintf per line so lines from different threads do not interleave */
    fprintf(stderr, "<%d>%s.%03ldZ attnd[%s] %s\n", PRIORITY[level & 3], when, ts.tv_nsec / 1000000,
            NAMES[level & 3], msg);
}
