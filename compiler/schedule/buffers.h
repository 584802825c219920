/* Buffers (buffers.c): every value of a scheduled fn gets one, reusing
 * those of dead values; Fn.peak_bytes is their sum. */
#ifndef SHARDC_BUFFERS_H
#define SHARDC_BUFFERS_H

#include "../ir/ir.h"

/* How many times each value of fn is read, and by which instruction last. */
void count_reads(Arena *a, const Fn *fn, int **uses, int **last_read);
/* Each value's Inst.buffer, concatenates assembled in place, and
 * Fn.peak_bytes and nbuffers. */
void assign_buffers(const Module *m, Fn *fn);
/* Fn.carried_in_place of a scheduled loop body (loop_carried_in_place, ir.h). */
void mark_carried_in_place(Module *m, Fn *body);

#endif
