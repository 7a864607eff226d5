/*
 * cpushare.c — the threads of a server of several models, shared by the models that work
 * (see cpushare.h). One counter: no lock, no thread of its own.
 */
#include "cpushare.h"

#include <unistd.h>

void cpushare_init(cpushare *cs, int total) {
    if (total <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        total = n > 0 ? (int)n : 1;
    }
    cs->total = total;
    atomic_init(&cs->working, 0);
}

void cpushare_mark(cpushare *cs, bool *on, bool working) {
    if (*on == working) return;
    atomic_fetch_add(&cs->working, working ? 1 : -1);
    *on = working;
}

int cpushare_threads(cpushare *cs, int own) {
    int n = atomic_load(&cs->working);
    int share = cs->total / (n > 1 ? n : 1);
    if (share < 1) share = 1;
    return own > 0 && own < share ? own : share;
}

int cpushare_working(cpushare *cs) { return atomic_load(&cs->working); }
