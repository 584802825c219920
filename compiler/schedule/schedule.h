/* Scheduling: split collectives into start/done and assign buffers. */
#ifndef SHARDC_SCHEDULE_H
#define SHARDC_SCHEDULE_H

#include "../ir/ir.h"

/* Schedule every per-device function of `m` (partitioned fns and spmd fns)
 * in place: each collective starts as soon as its operand exists and is
 * waited for (OP_DONE) just before its first use, so independent compute
 * runs in between; then every value gets a buffer, reusing the buffers of
 * values that are dead, and Fn.peak_bytes is what one device allocates. */
void schedule_module(Module *m);

#endif
