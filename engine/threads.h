/*
 * threads.h — (engine-private) the engine's worker pool: runs n_tasks independent tasks on up to
 * n_threads threads, the calling thread being one of them, and returns when all are done.
 *
 * Why not OpenMP: libgomp's waiting threads spin (for up to ~300k iterations by default, and the
 * policy can only be changed through the environment, read before main), and its static loops and
 * barriers make every thread wait for the slowest. On a machine whose cores are shared with other
 * work, one descheduled thread then stalls the others while they burn the core it needs: decode at
 * 2 threads fell below half the quiet 1-thread speed with one busy neighbour process. Here:
 *   - tasks are claimed one at a time from a shared counter, so a thread that is descheduled
 *     delays at most the one task it holds, and the caller takes whatever nobody claimed;
 *   - idle workers spin for a bounded time (THREADS_SPIN_NS) and then sleep on a futex, as does
 *     the caller while it waits for tasks in flight, so their core goes to whoever needs it;
 *   - a contention guard (threads.c) caps the threads of a job at one fewer while the caller
 *     spends much of its time waiting for descheduled workers, and retries after a back-off:
 *     beside one busy process, one thread decodes faster than two that keep waiting for each other.
 *
 * One process-wide pool, created on first use, grows to the largest n_threads asked for. Calls
 * from different threads are serialised: a call that finds the pool busy runs its tasks on the
 * calling thread alone (correct, just not parallel). Tasks must not call threads_run themselves.
 */
#ifndef ATTND_THREADS_H
#define ATTND_THREADS_H

/* One task: `task` in [0, n_tasks); `worker` in [0, n_threads) is distinct among the threads
 * running at one time (0 = the caller), for per-thread scratch. */
typedef void (*threads_fn)(void *ctx, int task, int worker);

/* Runs fn(ctx, i, w) for every i in [0, n_tasks) on up to n_threads threads (fewer when the pool
 * is busy or a thread cannot be started) and returns when all have returned. */
void threads_run(int n_threads, int n_tasks, threads_fn fn, void *ctx);

/* The number of CPUs this process may use: those in its affinity mask, capped by its cgroup v2
 * CPU quota (cpu.max, rounded up) when one is set. At least 1. */
int threads_default(void);

/* The contention guard's cap on the threads of a job now (threads.c), 0 when there is none. */
int threads_cap(void);

#endif /* ATTND_THREADS_H */
