/* The interface of compiler/sema to the driver. */
#ifndef SHARDC_SEMA_API_H
#define SHARDC_SEMA_API_H

#include "../ir/ir.h"

/* Mesh sizes from `--mesh A=4,B=2`, already matched to the program's axis
 * names by the driver; n == 0 means no override. */
typedef struct {
    int n;
    int64_t size[MAX_AXES];
} MeshOverride;

/* Check `prog` and lower it into `m` (module_init first).  Returns 0, or -1
 * after reporting the first error through `diag`. */
int sema_program(Module *m, Diag *diag, const AstProgram *prog, const MeshOverride *ov);

#endif
