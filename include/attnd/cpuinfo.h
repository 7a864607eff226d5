/*
 * cpuinfo.h — what the engine will use on this machine, for start-up logs and `attnd info`:
 * the thread count a request for N threads becomes, and the instruction set of the kernels.
 */
#ifndef ATTND_CPUINFO_H
#define ATTND_CPUINFO_H

#include <stdbool.h>

/* The threads the engine runs with when asked for n: n itself when n > 0, else every CPU this
 * process may use (its affinity mask, capped by its cgroup CPU quota), as engine_create does. */
int cpuinfo_threads(int n);
/* The instruction set the matrix kernels use ("portable", "avx2", "avx512", "amx", "amx-emu";
 * static string). ATTND_ISA=avx512 (etc.) chooses a lower one. */
const char *cpuinfo_isa(void);
/* True when the CPU has AMX tiles (AMX-TILE and AMX-INT8). */
bool cpuinfo_has_amx(void);
/* The kernel path in words, for start-up logs, `attnd info` and `attnd bench` (static string):
 * e.g. "amx (AMX tiles from 16 tokens: Q8_0, Q4_0, Q4_K, Q6_K; avx512 otherwise)", or "avx512
 * (CPU has AMX: refused by the OS)". */
const char *cpuinfo_kernels(void);

#endif /* ATTND_CPUINFO_H */
