/*
 * cpushare.h — the CPU threads of a server of several models, shared fairly by the models that
 * have work. Each model's scheduler has an engine of its own `threads`; left alone, two busy
 * models would each run that many workers on the same cores and slow each other down by more
 * than half. Instead a scheduler says when it works and when it rests, and before each step
 * runs with total / (models working) threads (at least 1, at most its own).
 *
 *     cpushare_init(&cs, 8);                       // the server's threads
 *     bool on = false;
 *     cpushare_mark(&cs, &on, true);               // a scheduler with work
 *     engine_set_threads(e, cpushare_threads(&cs, own));
 *     cpushare_mark(&cs, &on, false);              // resting
 *
 * Thread-safety: any thread; a scheduler's `on` flag is its own (one thread marks it).
 */
#ifndef ATTND_SERVER_CPUSHARE_H
#define ATTND_SERVER_CPUSHARE_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct cpushare {
    int total;            /* the threads shared (>= 1) */
    atomic_int working;   /* schedulers marked working */
} cpushare;

/* total <= 0: the CPUs this process may run on. The caller owns the storage. */
void cpushare_init(cpushare *cs, int total);
/* Marks a scheduler working or resting; *on is its state (changed here). */
void cpushare_mark(cpushare *cs, bool *on, bool working);
/* The threads one working scheduler may use now: total / working (at least 1), at most own. */
int cpushare_threads(cpushare *cs, int own);
/* Schedulers working now. */
int cpushare_working(cpushare *cs);

#endif
