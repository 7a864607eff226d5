/*
 * histo.h — a fixed-bucket histogram (Prometheus' cumulative `le` buckets are computed when it
 * is rendered; here each bucket counts its own range). Plain data: copying one copies a
 * snapshot, and nothing is allocated.
 * Thread-safety: none; the owner serialises observe, merge and copy (the scheduler does it under
 * its mutex).
 */
#ifndef ATTND_SERVER_HISTO_H
#define ATTND_SERVER_HISTO_H

#include <stdint.h>

#define HISTO_MAX_BUCKETS 16

typedef struct histo {
    const double *le;                      /* (n) ascending upper bounds, static storage */
    int n;
    uint64_t bucket[HISTO_MAX_BUCKETS + 1]; /* bucket[i]: le[i-1] < v <= le[i]; bucket[n]: above le[n-1] */
    uint64_t count;
    double sum;
} histo;

/* Empties h and gives it the bounds le[0..n) (borrowed: static storage; n <= HISTO_MAX_BUCKETS). */
void histo_init(histo *h, const double *le, int n);
/* Counts one value (NaN is ignored). */
void histo_observe(histo *h, double v);
/* Observations with v <= le[i] (Prometheus' cumulative bucket count); i >= n counts them all. */
uint64_t histo_cumulative(const histo *h, int i);

#endif
