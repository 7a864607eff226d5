/*
 * threads.c — the engine's worker pool (see threads.h for why it exists and what it promises).
 *
 * State shared by the caller and the workers, all C11 atomics:
 *   gen    — bumped once per job; workers wait for it to change (spin, then futex sleep);
 *   claim  — (job generation, n_tasks, next task) packed in 64 bits. A thread takes a task with a
 *            compare-and-swap, which succeeds only while the word still names the job it read,
 *            so a worker that wakes late can never take a task of a newer job, and the job's
 *            fn/ctx it read stay valid while it holds an unfinished task of that job;
 *   done   — tasks finished in the current job; the one that finishes the last wakes the caller
 *            if it went to sleep.
 * The spin-then-sleep handshakes follow one pattern: the sleeper announces itself (a counter or
 * flag), re-checks the condition, then sleeps with FUTEX_WAIT on the value it saw; the waker
 * changes the value, then wakes if anyone announced. Sequentially consistent atomics make at
 * least one side see the other.
 */
#define _GNU_SOURCE
#include "threads.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long an idle thread spins before it sleeps: long enough to catch the next parallel step of
 * a forward pass (a few microseconds of serial work apart), short enough that a core shared with
 * other work is handed over within a fraction of a scheduler slice. */
#define THREADS_SPIN_NS 50000L
#define MAX_WORKERS 255

/* claim word: generation (24 bits) | n_tasks (20) | next task (20) */
#define CLAIM_IDX_BITS 20
#define CLAIM_N_BITS 20
#define CLAIM_MASK ((UINT64_C(1) << 20) - 1)
#define CLAIM_GEN_MASK 0xffffffu

/*
 * Contention guard. Where the cores are shared with other busy processes, a worker descheduled
 * in the middle of its task makes the caller wait for it, a scheduler slice at a time: two
 * threads beside one busy neighbour decoded ~20% slower than one thread did. So the caller
 * measures, over windows of GUARD_WINDOW_NS of parallel jobs, the share of their time it waited
 * for tasks others held after running out of its own, and how much faster than one thread the
 * jobs ran (one thread's time estimated from the caller's time per task). When it waited more
 * than GUARD_WAIT_SHARE and the speed-up was below GUARD_MIN_SPEEDUP per thread (a quiet machine:
 * 0-10% and ~1.7-1.9 of 2 for decode; the server beside its own HTTP threads and a local client
 * up to 19% waited, and now and then one window more), twice in a row, the pool caps the threads
 * a job may use at one fewer than the window used. After a back-off it tries one more thread for
 * a window: if that runs clean the cap rises (and goes once it holds no job back); contention
 * again soon after the last doubles the back-off, up to GUARD_BACKOFF_MAX_NS. Results do not depend on the thread count (threads.h), so
 * the guard changes only speed.
 */
#define GUARD_WINDOW_NS 50000000L    /* 50 ms of parallel jobs */
#define GUARD_WAIT_SHARE 0.2         /* contention: the caller waited this share of the window, */
#define GUARD_MIN_SPEEDUP 0.65       /* and the jobs ran less than this times `used` faster than one thread */
#define GUARD_BACKOFF_NS 250000000L  /* the first wait before trying one more thread */
#define GUARD_BACKOFF_MAX_NS 4000000000L

typedef struct guard {
    _Atomic int cap;   /* most threads a job may use now; 0: no cap (written under lock, read by
                          threads_cap without it, so a /metrics poll never holds up a job) */
    int probing;       /* this window runs one thread above the cap */
    int strikes;       /* contended windows in a row while uncapped */
    long retry_at;     /* when capped: when to try one more thread */
    long backoff_ns;   /* the current back-off */
    long contended_at; /* the end of the last contended window */
    /* the current window */
    int asked;      /* the most threads a job asked for */
    int used;       /* the most threads a job used */
    long win_ns;    /* parallel job time */
    long wait_ns;   /* of which the caller waited for others' tasks */
    double solo_ns; /* estimated one-thread time of the same jobs */
} guard;

typedef struct pool {
    pthread_mutex_t lock; /* held by the caller of threads_run for the whole job */
    int n_workers;        /* workers started (the caller is not one of them) */
    guard g;              /* under lock */
    /* the current job, written before gen is bumped */
    _Atomic int n_active; /* workers that take part: ids 1..n_active */
    _Atomic(threads_fn) fn;
    _Atomic(void *) ctx;

    _Atomic uint32_t gen;
    _Atomic uint64_t claim;
    _Atomic uint32_t done;
    _Atomic int sleepers;      /* workers asleep (or about to be) on gen */
    _Atomic int caller_asleep; /* the caller sleeps (or is about to) on done */
} pool;

static pool g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void futex_wait(_Atomic uint32_t *addr, uint32_t seen) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spins until *addr != seen or THREADS_SPIN_NS pass; returns the last value read. */
static uint32_t spin_while_equal(_Atomic uint32_t *addr, uint32_t seen) {
    long start = now_ns();
    for (int i = 0;; i++) {
        uint32_t v = atomic_load(addr);
        if (v != seen) return v;
        if ((i & 63) == 63 && now_ns() - start > THREADS_SPIN_NS) return v;
        cpu_relax();
    }
}

static uint64_t claim_word(uint32_t gen, int n_tasks, int next) {
    return (uint64_t)(gen & CLAIM_GEN_MASK) << (CLAIM_IDX_BITS + CLAIM_N_BITS) | (uint64_t)n_tasks << CLAIM_IDX_BITS |
           (uint64_t)next;
}

/* Takes and runs tasks of job `gen` until none is left; returns how many it ran. */
static int run_tasks(pool *p, uint32_t gen, threads_fn fn, void *ctx, int worker) {
    for (int ran = 0;;) {
        uint64_t c = atomic_load(&p->claim);
        int next = (int)(c & CLAIM_MASK), n = (int)(c >> CLAIM_IDX_BITS & CLAIM_MASK);
        if (c >> (CLAIM_IDX_BITS + CLAIM_N_BITS) != (gen & CLAIM_GEN_MASK) || next >= n) return ran;
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue;
        fn(ctx, next, worker);
        ran++;
        if (atomic_fetch_add(&p->done, 1) + 1 == (uint32_t)n && atomic_load(&p->caller_asleep))
            futex_wake_all(&p->done);
    }
}

static void *worker_main(void *arg) {
    pool *p = &g_pool;
    int id = (int)(intptr_t)arg;
    uint32_t seen = atomic_load(&p->gen);
    for (;;) {
        uint32_t g = spin_while_equal(&p->gen, seen);
        if (g == seen) {
            atomic_fetch_add(&p->sleepers, 1);
            if (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            continue;
        }
        seen = g;
        /* fn and ctx were written before gen was bumped; a stale read is harmless, as no task of
         * an older job can be claimed (run_tasks checks the generation in the claim word). */
        threads_fn fn = atomic_load(&p->fn);
        void *ctx = atomic_load(&p->ctx);
        if (id <= atomic_load(&p->n_active)) run_tasks(p, g, fn, ctx, id);
    }
    return NULL;
}

/* Starts workers until there are `want` (under the lock). */
static void grow(pool *p, int want) {
    if (want > MAX_WORKERS) want = MAX_WORKERS;
    while (p->n_workers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(p->n_workers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) return; /* fewer threads: still correct */
        p->n_workers++;
    }
}

/* Waits until `n` tasks of the current job are done: spins, then sleeps on done. */
static void wait_done(pool *p, uint32_t n) {
    for (;;) {
        uint32_t d = atomic_load(&p->done);
        if (d == n) return;
        if (spin_while_equal(&p->done, d) != d) continue;
        atomic_store(&p->caller_asleep, 1);
        if (atomic_load(&p->done) == d) futex_wait(&p->done, d);
        atomic_store(&p->caller_asleep, 0);
    }
}

static void guard_new_window(guard *g) {
    g->asked = g->used = 0;
    g->win_ns = g->wait_ns = 0;
    g->solo_ns = 0;
}

/* The threads a job asked for n_threads may use now (under lock): n_threads, or the guard's cap,
 * raised by one for a probe window once the back-off has passed. */
static int guard_threads(guard *g, int n_threads, long now) {
    if (g->cap && n_threads > g->cap && !g->probing && now >= g->retry_at) {
        g->probing = 1;
        guard_new_window(g);
    }
    g->asked = n_threads > g->asked ? n_threads : g->asked;
    if (!g->cap || n_threads <= g->cap) return n_threads;
    return g->probing ? g->cap + 1 : g->cap;
}

/* Counts a parallel job (threads used, wall time, the caller's wait, the estimated one-thread
 * time) into the window and, at its end, moves the cap (under lock). */
static void guard_count(guard *g, int used, long job_ns, long wait_ns, double solo_ns, long now) {
    if (g->cap && !g->probing) return; /* capped: nothing to learn until the next probe */
    g->used = used > g->used ? used : g->used;
    g->win_ns += job_ns;
    g->wait_ns += wait_ns;
    g->solo_ns += solo_ns;
    if (g->win_ns < GUARD_WINDOW_NS) return;
    int contended = g->wait_ns > GUARD_WAIT_SHARE * g->win_ns && g->solo_ns < GUARD_MIN_SPEEDUP * g->used * g->win_ns;
    /* uncapped, one contended window may be a burst of the process's own other threads (HTTP,
     * a local client): a thread goes only after two in a row */
    if (contended && !g->cap && ++g->strikes < 2) {
        guard_new_window(g);
        return;
    }
    g->strikes = 0;
    if (contended) {
        /* contention again soon after the last: the neighbour stays, so wait longer to retry */
        int again = g->backoff_ns && now - g->contended_at < 4 * g->backoff_ns;
        g->backoff_ns = again ? 2 * g->backoff_ns : GUARD_BACKOFF_NS;
        if (g->backoff_ns > GUARD_BACKOFF_MAX_NS) g->backoff_ns = GUARD_BACKOFF_MAX_NS;
        g->contended_at = now;
        g->cap = g->used - 1 > 1 ? g->used - 1 : 1;
    } else if (g->probing) {
        g->cap++; /* the probe was clean: keep the thread */
    }
    if (g->cap >= g->asked) g->cap = 0; /* holds no job back */
    g->retry_at = now + g->backoff_ns;
    g->probing = 0;
    guard_new_window(g);
}

void threads_run(int n_threads, int n_tasks, threads_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    pool *p = &g_pool;
    if (n_threads <= 1 || n_tasks == 1 || n_tasks > (int)CLAIM_MASK || pthread_mutex_trylock(&p->lock) != 0) {
        for (int i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    long t0 = now_ns();
    n_threads = guard_threads(&p->g, n_threads, t0);
    if (n_threads <= 1) {
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    grow(p, n_threads - 1);
    int n_active = n_threads - 1 < p->n_workers ? n_threads - 1 : p->n_workers;
    atomic_store(&p->n_active, n_active);
    atomic_store(&p->fn, fn);
    atomic_store(&p->ctx, ctx);
    atomic_store(&p->done, 0);
    uint32_t gen = atomic_load(&p->gen) + 1;
    atomic_store(&p->claim, claim_word(gen, n_tasks, 0));
    atomic_store(&p->gen, gen);
    if (atomic_load(&p->sleepers)) futex_wake_all(&p->gen);
    int own = run_tasks(p, gen, fn, ctx, 0);
    long t1 = now_ns();
    wait_done(p, (uint32_t)n_tasks);
    long t2 = now_ns();
    /* one thread's time for the job, estimated from the caller's time per task */
    double solo = own ? (double)(t1 - t0) * n_tasks / own : (double)(t2 - t0);
    guard_count(&p->g, n_active + 1, t2 - t0, t2 - t1, solo, t2);
    pthread_mutex_unlock(&p->lock);
}

int threads_cap(void) { return atomic_load(&g_pool.g.cap); }

/* The quota in cpu.max of the cgroup v2 folder dir, in CPUs rounded up; 0 when unlimited. */
static int cpu_max_of(const char *dir) {
    char path[600];
    snprintf(path, sizeof(path), "%s/cpu.max", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long quota = 0, period = 0;
    char q[32] = "";
    if (fscanf(f, "%31s %ld", q, &period) == 2 && strcmp(q, "max") != 0) quota = atol(q);
    fclose(f);
    return quota > 0 && period > 0 ? (int)((quota + period - 1) / period) : 0;
}

/* The tightest cgroup v2 CPU quota on the way from this process's cgroup up to the root; 0 when
 * there is none. */
static int cgroup_cpus(void) {
    char dir[512] = "/sys/fs/cgroup", line[512];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (line[0] == '0' && line[1] == ':' && line[2] == ':') { /* the v2 hierarchy: "0::/path" */
            line[strcspn(line, "\n")] = 0;
            if (strcmp(line + 3, "/") != 0) snprintf(dir, sizeof(dir), "/sys/fs/cgroup%.400s", line + 3);
        }
    fclose(f);
    int best = 0;
    for (;;) {
        int q = cpu_max_of(dir);
        if (q > 0 && (best == 0 || q < best)) best = q;
        char *slash = strrchr(dir, '/');
        if (!slash || slash - dir < (long)strlen("/sys/fs/cgroup")) break;
        *slash = 0;
    }
    return best;
}

int threads_default(void) {
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int quota = cgroup_cpus();
    if (quota > 0 && quota < n) n = quota;
    return n > 0 ? n : 1;
}
