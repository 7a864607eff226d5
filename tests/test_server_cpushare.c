/*
 * test_server_cpushare.c — the threads of a server of several models, shared by the models that
 * work (server/runtime/cpushare.c).
 */
#include <criterion/criterion.h>

#include "cpushare.h"

Test(cpushare, one_working_model_takes_every_thread_up_to_its_own) {
    cpushare cs;
    cpushare_init(&cs, 8);
    bool a = false;
    cpushare_mark(&cs, &a, true);
    cr_assert_eq(cpushare_threads(&cs, 8), 8);
    cr_assert_eq(cpushare_threads(&cs, 3), 3, "never more than its own engine has");
    cr_assert_eq(cpushare_threads(&cs, 0), 8, "0 = no own limit");
}

Test(cpushare, working_models_split_the_threads_and_get_them_back) {
    cpushare cs;
    cpushare_init(&cs, 8);
    bool a = false, b = false, c = false;
    cpushare_mark(&cs, &a, true);
    cpushare_mark(&cs, &b, true);
    cr_assert_eq(cpushare_threads(&cs, 8), 4);
    cpushare_mark(&cs, &c, true);
    cr_assert_eq(cpushare_threads(&cs, 8), 2, "8 / 3 rounds down: never more threads than cores");
    cpushare_mark(&cs, &b, false);
    cpushare_mark(&cs, &b, false); /* marking twice counts once */
    cr_assert_eq(cpushare_working(&cs), 2);
    cr_assert_eq(cpushare_threads(&cs, 8), 4);
    cpushare_mark(&cs, &a, false);
    cpushare_mark(&cs, &c, false);
    cr_assert_eq(cpushare_working(&cs), 0);
}

Test(cpushare, more_models_than_threads_still_get_one_each) {
    cpushare cs;
    cpushare_init(&cs, 2);
    bool on[3] = {false, false, false};
    for (int i = 0; i < 3; i++) cpushare_mark(&cs, &on[i], true);
    cr_assert_eq(cpushare_threads(&cs, 2), 1);
}

Test(cpushare, no_total_means_the_cpus) {
    cpushare cs;
    cpushare_init(&cs, 0);
    cr_assert_geq(cs.total, 1);
}
