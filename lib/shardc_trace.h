/* shardc_trace.h: timing every kernel, loop, collective and call of a
 * generated program, for SHARDC_TRACE (docs/codegen.md, "Tracing").
 *
 * Generated code times each instruction that does work with
 *
 *     int64_t t0 = sk_trace_begin();
 *     ... the kernel call, loop, collective start or done, or fn call ...
 *     sk_trace_end(dev, "dot f32 [32,128]x[128,64]", 8192, t0);
 *
 * (the TRY_TRACED macro of the generated file wraps a call this way).  The
 * name is a string literal naming what ran; bytes is the size of what it
 * wrote (a collective: of what it sends).  The environment variable
 * SHARDC_TRACE=PATH, read once when the program starts, turns timing on;
 * each thread appends its records (CLOCK_MONOTONIC, nanoseconds) to a
 * buffer of its own, without a lock, and at exit they are written to PATH:
 *
 *   - PATH ending in ".json": Chrome's Trace Event Format, for
 *     https://ui.perfetto.dev or chrome://tracing: one "X" event per
 *     record, pid the process, tid the device, ts and dur in microseconds,
 *     and an async span ("b", "e") from each collective start to its done;
 *   - any other PATH: one line per record, "device begin end name".
 *
 * When the world has more than one process (MPI), process N writes
 * PATH.pN, or for PATH = BASE.json, BASE.pN.json (tools/merge-traces
 * joins those).  Off, sk_trace_begin is one load and a branch, and
 * sk_trace_end one more branch on its result. */
#ifndef SHARDC_TRACE_H
#define SHARDC_TRACE_H

#include "shardc_rt.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nonzero when SHARDC_TRACE was set when the program started; never
 * written after that. */
extern int sk_trace_on;

/* The clock and the recording behind the inline functions below. */
int64_t sk_trace_now(void);
void sk_trace_record(sc_device *dev, const char *name, int64_t bytes, int64_t begin);

/* The time a call begins, or -1 when tracing is off.  Compiled with
 * -DSHARDC_NO_TRACE, always -1, and the compiler drops the timing: the
 * baseline that the cost of tracing off is measured against. */
#ifdef SHARDC_NO_TRACE
static inline int64_t sk_trace_begin(void) { return -1; }
#else
static inline int64_t sk_trace_begin(void) { return sk_trace_on ? sk_trace_now() : -1; }
#endif

/* Records that `name` (a string that outlives the program, such as a
 * literal) ran on dev from `begin` until now, writing `bytes`; nothing when
 * begin is -1. */
static inline void sk_trace_end(sc_device *dev, const char *name, int64_t bytes, int64_t begin) {
    if (begin >= 0)
        sk_trace_record(dev, name, bytes, begin);
}

#ifdef __cplusplus
}
#endif

#endif
