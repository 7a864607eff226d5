/*
 * deltanet.h — (engine-private) the Gated DeltaNet token mixer of Qwen3.5's linear-attention
 * layers, for engine.c (step_deltanet), after the layer's projections and before its output
 * projection.
 *
 * Per entry t of a sequence, with x_t = W_qkv xn_t (conv_dim = 2 H_k d_k + H_v d_v channels):
 *   c_t     = silu(causal depthwise conv1d of x over the last K inputs), the last tap on x_t;
 *   q, k, v = c_t split as H_k heads of d_k, H_k heads of d_k, H_v heads of d_v; q and k
 *             L2-normalised per head as x / max(|x|, eps);
 *   beta    = sigmoid(b_t), g = a * softplus(alpha_t + dt_bias) (a = ssm_a = -exp(A_log) <= 0);
 *   per value head h (reading key head h mod H_k, or h / (H_v / H_k) when grouped), with the
 *   d_k x d_v state S:
 *             S <- e^g S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T q / sqrt(d_k);
 *   out     = RMSNorm(o) * ssm_norm * silu(z_t), per value head.
 * Entries of one sequence run in order, one at a time (the sequential form) or by chunks of 64
 * (the chunked form, deltanet.c: the same recurrence as matrix products within a chunk; long runs
 * take it, dn_form); the work is split across (sequence, value head) pairs on the engine's pool.
 *
 * A batch may copy a sequence's state as it is after some of its entries (dn_job.snap: the
 * checkpoints of kv_state.c), or keep what rebuilds it after each (dn_job.steps: a speculative
 * verify), in the same pass.
 *
 * State of one layer of one sequence (f32): the conv tail (K - 1, conv_dim), inputs oldest first,
 * then S of each value head stored transposed, (H_v, d_v, d_k): row j of head h is S[:, j].
 */
#ifndef ATTND_DELTANET_H
#define ATTND_DELTANET_H

#include <stddef.h>

#include "attnd/engine.h"

typedef struct dn_dims {
    int K;         /* conv kernel taps (ssm.conv_kernel) */
    int hk, hv;    /* key heads (ssm.group_count), value heads (ssm.time_step_rank) */
    int dk, dv;    /* key head size (ssm.state_size), value head size (ssm.inner_size / hv) */
    int conv_dim;  /* 2 hk dk + hv dv */
    float eps;     /* the model's RMS epsilon: L2 norms' floor and the gated norm's epsilon */
    bool grouped;  /* value head h reads key head h / (hv / hk); false: h mod hk */
} dn_dims;

/* Floats of one layer's state of one sequence: the conv tail and S. */
size_t dn_state_floats(const dn_dims *d);

/* Copies of a run's state inside a batch: the layer's state after entries order[at .. at + n)
 * into dst, dst + stride, ... (dst NULL: none). A state checkpoint is one state (kv_state.c). */
#define DN_SNAPS 1
typedef struct dn_snap {
    float *dst; /* this layer's part of the first state (the layout of the sequence's state) */
    int at, n;
} dn_snap;

/* A speculative verify's record of a run (kv_seq_keep_steps), from which the layer's state after
 * any of the entries order[at .. at + n) is rebuilt bit for bit (dn_replay), where a copy of the
 * whole state after each would cost a state's bytes per entry: the state before entry at (before,
 * the state's layout), and per entry i (at log + (i - at) * log_stride, dn_log_floats) the conv
 * tail after it, then per value head the step's decay e^g, u (dv) and k (dk): S after the entry
 * is e^g S + k u^T of S before it. */
typedef struct dn_steps {
    float *before, *log; /* this layer's part; NULL: none kept */
    int at, n;
} dn_steps;

/* Floats of one entry's record of one layer in a dn_steps log. */
size_t dn_log_floats(const dn_dims *d);

/* state (one layer's, the sequence's layout) <- the state after the first k >= 1 entries a
 * dn_steps record logged: its before, then the k logged steps, each with the sequential form's
 * arithmetic (the same bits as a run that ended there). */
void dn_replay(const dn_dims *d, float *state, const float *before, const float *log, size_t log_stride, int k);

/* Floats of per-thread scratch the chunked form needs (dn_job.scratch holds one per thread). */
size_t dn_scratch_floats(const dn_dims *d);

/* How the recurrence runs a sequence's entries. A run that keeps a verify's record (dn_steps) is
 * sequential; any other goes by segments that end where a snap
 * copies the state (a checkpoint), each in the form asked for, or with AUTO the chunked form from
 * DN_CHUNKED_MIN entries (deltanet.c, from the measurements in docs/engine.md), else the
 * sequential one. So a checkpoint taken inside a batch is bit for bit the state of a batch that
 * ended there. */
typedef enum dn_form { DN_FORM_AUTO, DN_FORM_SEQUENTIAL, DN_FORM_CHUNKED } dn_form;

/* One layer's evaluation on a batch (all pointers borrowed for the call). */
typedef struct dn_job {
    const dn_dims *d;
    int n;                 /* entries */
    const int *order;      /* (n) entry indices grouped by sequence, positions increasing */
    const int *run_start;  /* (n_runs + 1) run r is order[run_start[r] .. run_start[r + 1]) */
    int n_runs;
    float *const *state;   /* (n_runs) the layer's state of run r's sequence (dn_state_floats) */
    float *qkv;            /* (n, conv_dim) the projection; overwritten by the conv's output */
    const float *z;        /* (n, hv dv) the gate projection */
    const float *beta;     /* (n, hv) W_beta xn, before the sigmoid */
    const float *alpha;    /* (n, hv) W_alpha xn */
    const float *conv_w;   /* (conv_dim, K) */
    const float *dt_bias, *ssm_a; /* (hv) */
    const float *norm_w;   /* (dv) */
    float *out;            /* (n, hv dv) the gated, normalised output (raw: before the gated norm) */
    bool raw;              /* out is left as o = S^T q / sqrt(d_k), for an inspection to read;
                              dn_gate_out then applies the gated norm as dn_forward would have */
    const struct dn_snap *snap; /* (n_runs, DN_SNAPS) copies of run r's state to take, or NULL: none */
    size_t snap_stride;    /* floats between the consecutive states of one dn_snap */
    const dn_steps *steps; /* (n_runs) a verify's record of run r to keep, or NULL: none */
    size_t log_stride;     /* floats between the consecutive entries of a dn_steps log */
    float *scratch;        /* (n_threads, dn_scratch_floats) for the chunked form, or NULL: sequential only */
    dn_form form;
    int n_threads;
} dn_job;

void dn_forward(const dn_job *j);

/* Each entry's gates as the recurrence takes them: beta (n, hv) = sigmoid(b), g (n, hv) the log
 * decay. beta and g may be j->beta and j->alpha themselves (each is read before it is written). */
void dn_gates(const dn_job *j, float *beta, float *g);

/* After a raw dn_forward: out <- RMSNorm(out) * norm_w * silu(z) per value head, in place (the
 * same arithmetic as the pass's own). */
void dn_gate_out(const dn_job *j);

#endif /* ATTND_DELTANET_H */
