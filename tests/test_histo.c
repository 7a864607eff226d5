/*
 * test_histo.c — fixed-bucket histograms (server/runtime/histo.c): a value equal to a bound
 * falls in that bound's bucket (Prometheus' `le`), cumulative counts, values past every bound,
 * and NaN ignored. (Their Prometheus rendering: test_server_metrics.c.)
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "histo.h"

static const double LE[] = {0.1, 0.5, 1, 5};

Test(histo, a_value_on_a_bound_counts_as_less_or_equal) {
    histo h;
    histo_init(&h, LE, 4);
    histo_observe(&h, 0.1);
    histo_observe(&h, 0.100001);
    histo_observe(&h, 1);
    cr_assert_eq(histo_cumulative(&h, 0), 1);
    cr_assert_eq(histo_cumulative(&h, 1), 2);
    cr_assert_eq(histo_cumulative(&h, 2), 3);
    cr_assert_eq(h.count, 3);
}

Test(histo, values_past_every_bound_only_reach_inf) {
    histo h;
    histo_init(&h, LE, 4);
    histo_observe(&h, 7);
    histo_observe(&h, -3); /* below every bound: the first bucket */
    histo_observe(&h, NAN);
    cr_assert_eq(histo_cumulative(&h, 3), 1);
    cr_assert_eq(histo_cumulative(&h, 4), 2, "+Inf holds all");
    cr_assert_eq(h.count, 2, "NaN ignored");
    cr_assert_float_eq(h.sum, 4.0, 1e-12);
}

Test(histo, cumulative_counts_never_decrease) {
    histo h;
    histo_init(&h, LE, 4);
    for (int i = 0; i < 1000; i++) histo_observe(&h, (double)((i * 7919) % 1000) / 150.0);
    uint64_t prev = 0;
    for (int i = 0; i <= 4; i++) {
        cr_assert_geq(histo_cumulative(&h, i), prev);
        prev = histo_cumulative(&h, i);
    }
    cr_assert_eq(prev, 1000);
}
