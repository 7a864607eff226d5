/*
 * test_threads.c — the engine's worker pool (engine/threads.h): every task runs exactly once,
 * worker ids stay below the thread count and are never shared by two tasks running at once,
 * a call that finds the pool busy still completes (on its own thread), jobs follow each other
 * without losing or repeating tasks, the contention guard caps the pool at one thread while a
 * worker straggles and lifts the cap once it stops, and the default thread count is within the
 * affinity mask.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "threads.h"

#define MAX_TASKS 5000

typedef struct count_job {
    _Atomic int runs[MAX_TASKS];  /* times each task ran */
    _Atomic int busy[64];         /* tasks running right now on each worker id */
    _Atomic int bad_worker;       /* worker ids out of range, or two tasks on one id at once */
    int n_threads;
} count_job;

static void count_task(void *ctx, int task, int worker) {
    count_job *j = ctx;
    if (worker < 0 || worker >= j->n_threads || worker >= 64) {
        atomic_fetch_add(&j->bad_worker, 1);
        return;
    }
    if (atomic_fetch_add(&j->busy[worker], 1) != 0) atomic_fetch_add(&j->bad_worker, 1);
    volatile double x = 0; /* a little work, so tasks overlap */
    for (int i = 0; i < 200 + task % 7 * 100; i++) x += i;
    atomic_fetch_add(&j->runs[task], 1);
    atomic_fetch_sub(&j->busy[worker], 1);
}

static void check_job(int n_threads, int n_tasks) {
    count_job *j = calloc(1, sizeof(*j));
    cr_assert_not_null(j);
    j->n_threads = n_threads;
    threads_run(n_threads, n_tasks, count_task, j);
    for (int i = 0; i < n_tasks; i++)
        cr_assert_eq(atomic_load(&j->runs[i]), 1, "%d threads, %d tasks: task %d ran %d times", n_threads, n_tasks, i,
                     atomic_load(&j->runs[i]));
    for (int i = n_tasks; i < MAX_TASKS; i++) cr_assert_eq(atomic_load(&j->runs[i]), 0);
    cr_assert_eq(atomic_load(&j->bad_worker), 0, "%d threads: a worker id was out of range or shared", n_threads);
    free(j);
}

Test(threads, every_task_runs_exactly_once) {
    int threads[] = {1, 2, 3, 4, 8};
    int tasks[] = {0, 1, 2, 3, 7, 64, 1000, MAX_TASKS};
    for (size_t a = 0; a < sizeof(threads) / sizeof(threads[0]); a++)
        for (size_t b = 0; b < sizeof(tasks) / sizeof(tasks[0]); b++) check_job(threads[a], tasks[b]);
}

Test(threads, many_small_jobs_in_a_row_lose_nothing) {
    /* what a forward pass does: hundreds of short jobs back to back, workers between spin and sleep */
    for (int r = 0; r < 2000; r++) check_job(2 + r % 3, 1 + r % 17);
}

typedef struct racer {
    int n_threads;
    int ok;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    r->ok = 1;
    for (int k = 0; k < 300; k++) {
        count_job *j = calloc(1, sizeof(*j));
        if (!j) return NULL;
        j->n_threads = r->n_threads;
        threads_run(r->n_threads, 100, count_task, j);
        for (int i = 0; i < 100; i++)
            if (atomic_load(&j->runs[i]) != 1) r->ok = 0;
        if (atomic_load(&j->bad_worker)) r->ok = 0;
        free(j);
    }
    return NULL;
}

Test(threads, concurrent_callers_all_complete) {
    /* two engines on two threads: one gets the pool, the other runs its tasks itself */
    pthread_t t[3];
    racer r[3] = {{2, 0}, {3, 0}, {4, 0}};
    for (int i = 0; i < 3; i++) cr_assert_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) cr_assert_eq(r[i].ok, 1, "caller %d lost or repeated a task", i);
}

/* Jobs whose tasks take a worker long (as when its thread is descheduled mid-task by a busy
 * neighbour: usleep) and the caller ~20 us of work; or, with slow = 0, ~20 us on any thread. */
typedef struct straggle_job {
    int slow;
    _Atomic int on_worker; /* tasks run by a worker (not the caller) */
} straggle_job;

static void straggle_task(void *ctx, int task, int worker) {
    (void)task;
    straggle_job *j = ctx;
    if (worker != 0) atomic_fetch_add(&j->on_worker, 1);
    if (worker != 0 && j->slow) {
        usleep(2000);
        return;
    }
    volatile double x = 0;
    for (int i = 0; i < 20000; i++) x += i;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs 16-task jobs on 2 threads until threads_cap() == want or `limit` seconds pass. */
static int run_until_cap(straggle_job *j, int want, double limit) {
    double t0 = mono_s();
    while (threads_cap() != want && mono_s() - t0 < limit) threads_run(2, 16, straggle_task, j);
    return threads_cap();
}

Test(threads, a_straggling_worker_caps_the_pool_and_the_cap_lifts_when_it_stops) {
    straggle_job j = {.slow = 1};
    cr_assert_eq(threads_cap(), 0, "a fresh pool has no cap");
    cr_assert_eq(run_until_cap(&j, 1, 5.0), 1, "the caller waited on a straggling worker, yet no cap");
    atomic_store(&j.on_worker, 0);
    for (int k = 0; k < 20; k++) threads_run(2, 16, straggle_task, &j);
    cr_assert_eq(atomic_load(&j.on_worker), 0, "capped at one thread, a worker still took tasks");
    /* the neighbour leaves: after the back-off the guard tries two threads again, finds them
     * useful and drops the cap */
    j.slow = 0;
    cr_assert_eq(run_until_cap(&j, 0, 20.0), 0, "the straggling stopped, yet the cap stayed");
}

Test(threads, default_count_is_within_the_affinity_mask) {
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    int n = threads_default();
    cr_assert(n >= 1 && n <= CPU_COUNT(&set), "threads_default() = %d, affinity has %d CPUs", n, CPU_COUNT(&set));
}

Test(threads, default_count_follows_a_narrower_affinity_mask) {
    cpu_set_t old, one;
    cr_assert_eq(sched_getaffinity(0, sizeof(old), &old), 0);
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &old)) first = c;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
    int n = threads_default();
    sched_setaffinity(0, sizeof(old), &old);
    cr_assert_eq(n, 1, "pinned to one CPU, threads_default() = %d", n);
}
