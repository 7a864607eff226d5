/*
 * common.h — status codes, error messages and assertions shared by every attnd module.
 *
 * Library code never exits: a function that can fail returns an attnd_status (0 = ok,
 * negative = error) and, when the caller passes an attnd_err, writes a one-line message
 * saying what was wrong ("tensor 'blk.3.attn_q.weight': data extends past end of file").
 * Broken invariants (bugs, not bad input) hit ATTND_ASSERT, which prints file:line and aborts.
 */
#ifndef ATTND_COMMON_H
#define ATTND_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum attnd_status {
    ATTND_OK = 0,
    ATTND_ERR_IO = -1,          /* open/read/mmap/write failed */
    ATTND_ERR_FORMAT = -2,      /* a file or message is malformed */
    ATTND_ERR_NOMEM = -3,       /* allocation failed, or a memory budget is exhausted */
    ATTND_ERR_UNSUPPORTED = -4, /* well-formed, but not something attnd computes */
    ATTND_ERR_INVALID = -5,     /* a caller-supplied argument is out of range */
    ATTND_ERR_NOT_FOUND = -6,   /* a key, tensor, id or session does not exist */
    ATTND_ERR_BUSY = -7,        /* the resource is in use or a queue is full */
} attnd_status;

/* An error message buffer. Callers may pass NULL wherever an attnd_err * is taken. */
typedef struct attnd_err {
    char msg[512];
} attnd_err;

/* Formats into err (if non-NULL) and returns st, so callers can write
 * `return attnd_fail(err, ATTND_ERR_FORMAT, "bad %s", what);`. */
attnd_status attnd_fail(attnd_err *err, attnd_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* attnd_fail with a va_list, for functions that add their own bookkeeping. */
attnd_status attnd_vfail(attnd_err *err, attnd_status st, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

// ---- time ---------------------------------------------------------------------------------

struct timespec;
/* Seconds on the monotonic clock (for durations; the origin is arbitrary). */
double attnd_now_s(void);
/* Milliseconds since the Unix epoch (wall clock: for timestamps that outlive the process). */
long long attnd_unix_ms(void);
/* Moves both clocks above forward by ms, for every thread: the clock the tests move, so that
 * session and response TTLs, the systemd watchdog's interval and the like are tested without
 * waiting for time to pass. Production code never calls it (the offset stays 0). Timed waits
 * (attnd_deadline) keep real time: a test that moves the clock wakes what it wants to run. */
void attnd_clock_advance_ms(long long ms);
/* The CLOCK_REALTIME instant timeout_ms from now, as pthread_cond_timedwait wants it. */
void attnd_deadline(struct timespec *ts, int timeout_ms);

// ---- threads --------------------------------------------------------------------------------

/* Stops a worker thread th whose loop waits on wake under mu until *stop: sets *stop under mu,
 * wakes every waiter on wake and joins th. The caller then owns what the thread owned. */
void attnd_thread_stop(pthread_t th, pthread_mutex_t *mu, pthread_cond_t *wake, bool *stop);

// ---- randomness -----------------------------------------------------------------------------

/* n bytes from the kernel's random source (rand() if that fails: ids stay usable). */
void attnd_random(void *buf, size_t n);
/* "<prefix><24 hex digits>" (96 random bits) into out, truncated to n bytes. */
void attnd_random_id(char *out, size_t n, const char *prefix);

/*
 * Growable arrays: makes room for need elements of elem bytes in the array *arr (a T **, passed
 * as void *) of capacity *cap, which doubles from `first`. False when out of memory or when the
 * size overflows (then *arr and *cap are unchanged). The caller keeps the element count:
 *     if (!attnd_grow(&v->items, &v->cap, v->n + 1, sizeof(*v->items), 16)) ... out of memory ...
 */
bool attnd_grow(void *arr, size_t *cap, size_t need, size_t elem, size_t first);

#define ATTND_ASSERT(cond)                                                              \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                    \
        }                                                                               \
    } while (0)

#define ATTND_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* ATTND_COMMON_H */
