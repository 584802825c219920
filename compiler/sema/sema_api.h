/* The interface of compiler/sema to the driver. */
#ifndef SHARDC_SEMA_API_H
#define SHARDC_SEMA_API_H

#include "../ir/ir.h"

enum { MAX_CONST_OVERRIDES = 32 };

/* What the command line changes: mesh sizes from `--mesh A=4,B=2`, already
 * matched to the program's axis names (n == 0: none), and constants from
 * `--const N=64,EPS=1e-3`, matched to the program's constants. */
typedef struct {
    int n;
    int64_t size[MAX_AXES];
    int nconsts;
    int const_sym[MAX_CONST_OVERRIDES];
    double const_value[MAX_CONST_OVERRIDES];
    int64_t const_int[MAX_CONST_OVERRIDES];       /* the value when const_is_int: exact past 2^53 */
    uint8_t const_is_int[MAX_CONST_OVERRIDES];
} MeshOverride;

/* Check `prog` and lower it into `m` (module_init first).  Returns 0, or -1
 * after reporting the first error through `diag`. */
int sema_program(Module *m, Diag *diag, const AstProgram *prog, const MeshOverride *ov);

#endif
