/* The sharding search (docs/autoshard.md, "The search"): an entry fn's
 * `@auto` dims (or all of them, --auto) get the shardings whose scheduled
 * program the cost model predicts fastest within the memory per device.
 *
 * candidates.c builds the AutoProblem (problem.h) from the checked module;
 * evaluate.c compiles one plan (a candidate per AutoParam) to the schedule
 * and costs it; search.c evaluates the named plans and the integer
 * program's (ilp.c) and improves the best by coordinate descent, or
 * enumerates a tiny problem; report.c prints what the `autoshard` command
 * shows. */
#ifndef SHARDC_AUTOSHARD_H
#define SHARDC_AUTOSHARD_H

#include "problem.h"

#include "../base/ast.h"

/* The `@auto` dims of parameter i (i < nparams) or result i - nparams. */
static inline unsigned auto_dims(const Fn *fn, int i) { return fn->autod ? fn->autod[i] : 0; }

typedef struct AutoPlanText AutoPlanText;

/* Where plans are compiled: the source checked afresh with the plan
 * written into its syntax (write_plan.c), not yet propagated, each time. */
typedef struct {
    void *ctx;
    /* Returns a handle (NULL: failed) and the module and its diagnostics'
     * state into *m, *diag. */
    void *(*checked)(void *ctx, const AutoPlanText *plan, Module **m, Diag **diag);
    void (*release)(void *handle);
} AutoSource;

/* A plan's predicted cost. */
typedef struct {
    int ok;                      /* compiled (a plan the partitioner rejects is not) */
    double time;                 /* predicted step time, seconds */
    int64_t memory;              /* peak bytes per device: parameters + the schedule's peak */
    double sent;                 /* bytes sent per device */
    int splits;                  /* split dims over the searched parameters (fewer wins ties) */
} AutoScore;

/* One evaluated plan, memoized by its choice. */
typedef struct {
    int *choice;                 /* per AutoParam */
    AutoScore score;
} AutoPlan;

/* The search's state: the problem, where plans compile, the plans so far. */
typedef struct {
    const AutoProblem *p;
    AutoSource src;
    const int *result_tie;       /* per result of the entry fn: the AutoParam whose candidate it takes, or -1 */
    int nresults;
    Arena *a;
    AutoPlan **plans;            /* each allocated once: the pointers stay valid */
    int nplans, cap;
    const AstProgram *ast;       /* the source's syntax, to print records as written; NULL: tensors only */
    void (*progress)(void *ctx, int evaluated, double best);   /* NULL: none */
    void *progress_ctx;
    AutoPlanText *text;          /* the plans' names, made once; each plan sets its shardings */
} AutoEval;

enum { AUTO_NAMED = 4 };         /* data parallel, megatron, fsdp, as written */
extern const char *const auto_named[AUTO_NAMED];

typedef struct {
    const AutoPlan *found;       /* the chosen plan; NULL: none fits the memory cap */
    const AutoPlan *named[AUTO_NAMED];   /* NULL: not applicable (as written when every dim is auto) */
    int enumerated;              /* 1: every plan evaluated (a tiny problem) */
    double candidate_plans;      /* the product of the candidate counts */
    double seconds;
    int ilp_ran;                 /* the integer program ran (the problem was not enumerated) */
    IlpResult ilp;
    const AutoPlan *ilp_plan;    /* its plan, evaluated; NULL: it had none */
    char ilp_why[160];           /* why it had none */
} AutoResult;

/* candidates.c: the problem of `fn` in m (its params' candidates and ties,
 * the results' ties), allocated from a.  Returns the number of searched
 * parameters (0: nothing to search). */
int autoshard_problem(const Module *m, int fn, const Target *t, int64_t device_memory, Arena *a,
                      AutoProblem *p, int **result_tie);
/* Every dim of every parameter and result of fn becomes `@auto` (--auto). */
void autoshard_mark_all(Module *m, int fn);
/* Per AutoParam, 1 for a data parameter (docs/autoshard.md, "Named
 * plans"): not carried; with none carried, the first and the integer ones. */
void autoshard_data_params(const AutoProblem *p, uint8_t *data);
/* write_plan.c: the record declared as `sym`, or NULL; its leaves, as sema
 * lowers it (a nested record's counted through). */
AstTop *autoshard_record(const AstProgram *ast, int sym);
int autoshard_record_leaves(const AstProgram *ast, const AstTop *rec);
/* Number of split dims of a sharding. */
int autoshard_splits(const Sharding *sh, int rank);

/* write_plan.c: a plan by names (the entry fn's lowered parameters, its
 * results, the mesh axes), to write into the syntax of a fresh compile
 * (MeshFlag.plan): the program the printed signature gives. */
struct AutoPlanText {
    const char *entry;
    int n;
    const char **param;          /* lowered names: "x", "p.layers.wq" */
    Sharding *sh;                /* per param, its chosen candidate */
    int nresults;
    const Sharding **result;     /* per lowered result: its tied parameter's, or NULL (left to propagation) */
    unsigned *result_auto;       /* per lowered result: its `@auto` dims (--auto: all), which an untied one leaves open */
    int naxes;
    const char *axis[MAX_AXES];
};
void autoshard_plan_text(const AutoEval *e, const int *choice, Arena *a, AutoPlanText *pt);
/* Another plan into pt, names kept: its shardings only. */
void autoshard_plan_choose(const AutoEval *e, const int *choice, AutoPlanText *pt);
/* Write pt's shardings on the entry fn's parameters, tied results and the
 * fields of the records it takes; an untied result's `@auto` dims read `@?`. */
void autoshard_write_plan(AstProgram *ast, Arena *a, Symtab *syms, const AutoPlanText *pt);
/* The plan's cost, compiled once (memoized). */
const AutoPlan *autoshard_evaluate(AutoEval *e, const int *choice);

/* search.c: the named plans and the integer program's, then the descent
 * (or every plan of a tiny problem).  Returns 0 with r->found set, or -1
 * when no plan fits the memory cap (r->found NULL). */
int autoshard_search(AutoEval *e, AutoResult *r);
/* a is better than b: faster, then fewer bytes sent, then fewer split dims. */
int autoshard_better(const AutoScore *a, const AutoScore *b);

/* report.c: the autoshard command's output (docs/autoshard.md, "Reading
 * the output"); `top` other plans. */
void autoshard_report(FILE *out, const AutoEval *e, const AutoResult *r, int top);
/* The chosen signature as TDSL: the entry fn's header with its shardings. */
void autoshard_print_signature(FILE *out, const AutoEval *e, const int *choice);
/* No plan fits: the error naming the largest tensors of the smallest plan. */
void autoshard_infeasible(FILE *err, const AutoEval *e);
/* "1.25ms", "42 MiB" */
const char *autoshard_time(char *buf, size_t cap, double seconds);
const char *autoshard_bytes(char *buf, size_t cap, double bytes);

#endif
