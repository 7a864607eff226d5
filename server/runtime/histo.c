/*
 * histo.c — fixed-bucket histograms (see histo.h).
 */
#include "histo.h"

#include <math.h>
#include <string.h>

#include "attnd/common.h"

void histo_init(histo *h, const double *le, int n) {
    ATTND_ASSERT(n >= 0 && n <= HISTO_MAX_BUCKETS);
    memset(h, 0, sizeof(*h));
    h->le = le;
    h->n = n;
}

void histo_observe(histo *h, double v) {
    if (isnan(v)) return;
    int lo = 0, hi = h->n; /* the first bound >= v, by bisection; n when v is above them all */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (h->le[mid] >= v) hi = mid;
        else lo = mid + 1;
    }
    h->bucket[lo]++;
    h->count++;
    h->sum += v;
}

uint64_t histo_cumulative(const histo *h, int i) {
    uint64_t c = 0;
    for (int k = 0; k <= i && k <= h->n; k++) c += h->bucket[k];
    return c;
}
