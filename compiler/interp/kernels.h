/* Internals of the reference interpreter: the per-op kernels (kernels.c)
 * that interp.c runs on each device in turn. */
#ifndef SHARDC_KERNELS_H
#define SHARDC_KERNELS_H

#include "../ir/ir.h"

/* The replica groups of one collective (ir_replica_groups). */
typedef struct {
    int64_t size;                /* devices per group */
    const int64_t *members;      /* every device once, group after group */
    const int64_t *slot;         /* device -> its index in members */
} Groups;

/* One op on one device.  val[v][d] is value v on device d: kernels read
 * their operands on `dev`, and collectives those of the whole group. */
typedef struct {
    const Module *m;
    const Fn *fn;
    const Inst *in;
    double *const *const *val;
    const Groups *groups;        /* collectives and axis-index only */
    int64_t dev;
    char *err;
    size_t errlen;
} Kernel;

/* Compute the op's result on k->dev into `out` (shape_elems(&in->type)
 * elements, zeroed).  The caller rounds it to the dtype unless the op only
 * moves elements (OPF_MOVES).  Returns 0, or -1 with a message in k->err. */
int kernel_run(const Kernel *k, double *out);

/* Copy a box of `dims` elements: dst[sum i_d * dstride_d] = src[sum i_d * sstride_d]. */
void copy_box(double *dst, const int64_t *dstride, const double *src, const int64_t *sstride, int rank,
              const int64_t *dims);

#endif
