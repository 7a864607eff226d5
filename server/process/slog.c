/*
 * slog.c — leveled stderr logging for the server (see slog.h). Lines look like
 * "2026-01-01T12:00:00.123Z attnd[info] listening on http://127.0.0.1:8080". When stderr is the
 * systemd journal (JOURNAL_STREAM names stderr's device and inode), each line starts with its
 * syslog priority (<3> error, <4> warning, <6> info, <7> debug) so journald keeps the level
 * (SyslogLevelPrefix=, on by default); on a terminal or in a file the prefix would be clutter.
 *
 * A line is always one line: control characters in the message (a request path, a header, a
 * file name a client chose) are written as \xNN, so no client can end a line early and forge
 * another ("GET /x%0A<3>... attnd[error] ...").
 */
#include "slog.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

static atomic_int g_level = SERVER_LOG_INFO;
static _Thread_local const char *t_request; /* slog_set_request */

void slog_set_request(const char *id) { t_request = id && *id ? id : NULL; }

bool slog_request_id_valid(const char *id) {
    size_t n = 0;
    for (const char *p = id; *p; p++, n++) {
        char c = *p;
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                  c == ':' || c == '-';
        if (!ok || n >= SLOG_REQUEST_ID_MAX) return false;
    }
    return n > 0;
}

void slog_set_level(server_log_level level) { atomic_store(&g_level, (int)level); }

bool slog_enabled(server_log_level level) { return (int)level <= atomic_load(&g_level); }

/* journald sets JOURNAL_STREAM=<device>:<inode> of the stream it connects to a service's stdout
 * and stderr; stderr is the journal only if it is still that stream (not redirected). */
static bool stderr_is_journal(void) {
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) != 0) return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

size_t slog_escape(char *out, size_t cap, const char *in) {
    static const char HEX[] = "0123456789abcdef";
    size_t k = 0;
    if (!cap) return 0;
    for (; *in; in++) {
        unsigned char c = (unsigned char)*in;
        bool ctl = c < 0x20 || c == 0x7f;
        if (k + (ctl ? 4 : 1) >= cap) break;
        if (ctl) {
            out[k++] = '\\', out[k++] = 'x', out[k++] = HEX[c >> 4], out[k++] = HEX[c & 15];
        } else {
            out[k++] = (char)c;
        }
    }
    out[k] = '\0';
    return k;
}

void slog(server_log_level level, const char *fmt, ...) {
    static const char *NAMES[] = {"error", "warn", "info", "debug"};
    static const int PRIORITY[] = {3, 4, 6, 7};
    if (!slog_enabled(level)) return;
    char raw[1024], msg[4 * sizeof(raw)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    slog_escape(msg, sizeof(msg), raw);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    static atomic_int journal = -1; /* -1: not looked at yet */
    if (atomic_load(&journal) < 0) atomic_store(&journal, stderr_is_journal());
    char prio[8] = "";
    if (atomic_load(&journal)) snprintf(prio, sizeof(prio), "<%d>", PRIORITY[level & 3]);
    /* one fprintf per line so lines from different threads do not interleave */
    if (t_request)
        fprintf(stderr, "%s%s.%03ldZ attnd[%s] req=%s %s\n", prio, when, ts.tv_nsec / 1000000, NAMES[level & 3],
                t_request, msg);
    else fprintf(stderr, "%s%s.%03ldZ attnd[%s] %s\n", prio, when, ts.tv_nsec / 1000000, NAMES[level & 3], msg);
}
