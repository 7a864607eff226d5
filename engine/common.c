/* common.c — status names, the error-message helper, the clocks and the worker-thread stop declared
 * in attnd/common.h. */
#include "attnd/common.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

attnd_status attnd_vfail(attnd_err *err, attnd_status st, const char *fmt, va_list ap) {
    if (err) vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    return st;
}

attnd_status attnd_fail(attnd_err *err, attnd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    attnd_vfail(err, st, fmt, ap);
    va_end(ap);
    return st;
}

static _Atomic long long clock_offset_ms; /* attnd_clock_advance_ms: tests only */

void attnd_clock_advance_ms(long long ms) {
    if (ms > 0) atomic_fetch_add(&clock_offset_ms, ms);
}

double attnd_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (double)atomic_load(&clock_offset_ms) * 1e-3;
}

long long attnd_unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + atomic_load(&clock_offset_ms);
}

void attnd_deadline(struct timespec *ts, int timeout_ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    if (timeout_ms < 0) timeout_ms = 0;
    long ns = ts->tv_nsec + (long)(timeout_ms % 1000) * 1000000L;
    ts->tv_sec += timeout_ms / 1000 + ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
}

void attnd_thread_stop(pthread_t th, pthread_mutex_t *mu, pthread_cond_t *wake, bool *stop) {
    pthread_mutex_lock(mu);
    *stop = true;
    pthread_cond_broadcast(wake);
    pthread_mutex_unlock(mu);
    pthread_join(th, NULL);
}

void attnd_random(void *buf, size_t n) {
    if (getrandom(buf, n, 0) == (ssize_t)n) return;
    for (size_t i = 0; i < n; i++) ((unsigned char *)buf)[i] = (unsigned char)rand();
}

void attnd_random_id(char *out, size_t n, const char *prefix) {
    unsigned char rnd[12];
    attnd_random(rnd, sizeof(rnd));
    int o = snprintf(out, n, "%s", prefix);
    for (size_t i = 0; i < sizeof(rnd) && o >= 0 && (size_t)o + 2 < n; i++) o += snprintf(out + o, n - (size_t)o, "%02x", rnd[i]);
}

bool attnd_grow(void *arr, size_t *cap, size_t need, size_t elem, size_t first) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : (first ? first : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2) return false;
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem) return false;
    void *old, *p;
    memcpy(&old, arr, sizeof(old)); /* *arr is some T *: read and written as bytes, no aliasing */
    if (!(p = realloc(old, c * elem))) return false;
    memcpy(arr, &p, sizeof(p));
    *cap = c;
    return true;
}
