/* The sharding search's problem, shared by its parts (docs/autoshard.md,
 * "The search"): the entry fn's searched parameters, each with its
 * candidate shardings, on a target with a memory cap.  search.c builds it
 * and ranks plans by the real pipeline's predicted time (cost_fn on the
 * scheduled candidate); ilp.c proposes a plan from an integer program over
 * the same candidates, in the manner of Alpa's intra-operator pass. */
#ifndef SHARDC_AUTOSHARD_PROBLEM_H
#define SHARDC_AUTOSHARD_PROBLEM_H

#include "../base/base.h"
#include "../cost/cost.h"
#include "../ir/ir.h"

#include <stdio.h>

typedef struct {
    int param;                   /* its index in Fn.params of the entry fn */
    int ncand;
    const Sharding *cand;        /* whole shardings: dims not searched keep what was written */
    int tie;                     /* -1, or an earlier AutoParam whose candidate index it must take */
} AutoParam;

typedef struct {
    const Module *m;             /* after sema and grad, before propagation */
    int fn;                      /* the entry fn */
    const Target *t;
    int64_t device_memory;       /* bytes per device the plan must fit */
    int nparams;
    const AutoParam *params;
} AutoProblem;

typedef enum { ILP_OPTIMAL, ILP_FEASIBLE, ILP_INFEASIBLE, ILP_FAILED } IlpStatus;

typedef struct {
    IlpStatus status;            /* ILP_FEASIBLE: the time limit ended it with a plan */
    int *choice;                 /* per AutoParam, the index of its chosen candidate */
    double objective;            /* the integer program's predicted seconds */
    int nvars, nrows;            /* its size, for the report */
    double seconds;              /* time spent building and solving */
} IlpResult;

/* The name of parameter i of fn (its OP_PARAMETER's symbol: "x",
 * "p.layers.wq"), or "" (candidates.c). */
const char *autoshard_param_name(const Module *m, const Fn *fn, int i);

/* Propose a plan with an integer program (GLPK).  `choice` is allocated
 * from `a`.  Returns 0 with r->status OPTIMAL or FEASIBLE, or -1 (status
 * INFEASIBLE or FAILED, a one-line reason printed to err). */
int ilp_solve(const AutoProblem *p, Arena *a, IlpResult *r, FILE *err);

#endif
