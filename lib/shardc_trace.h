/* shardc_trace.h: timing the calls of `on` functions (pipeline stages) in
 * generated programs, for SHARDC_TRACE (docs/codegen.md, "Tracing").
 *
 * When the environment variable SHARDC_TRACE=PATH is set, every call that
 * generated code makes to a function placed on a submesh is recorded per
 * device with its begin and end time (CLOCK_MONOTONIC, nanoseconds), and at
 * exit the records are written to PATH, one line per call:
 *
 *     device begin end name
 *
 * in the order the calls ended.  When the world has more than one process
 * (MPI), process N writes PATH.pN instead.  Unset, a call costs one load and
 * a branch: sk_trace_begin returns -1 and sk_trace_end returns at once. */
#ifndef SHARDC_TRACE_H
#define SHARDC_TRACE_H

#include "shardc_rt.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The time a call begins, or -1 when tracing is off. */
int64_t sk_trace_begin(void);
/* Records the call of `name` (a string that outlives the program, such as a
 * literal) on dev that began at `begin`; nothing when begin is -1. */
void sk_trace_end(sc_device *dev, const char *name, int64_t begin);

#ifdef __cplusplus
}
#endif

#endif
