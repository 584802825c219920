/* The front end as one call: parse, check and lower a source text to a
 * verified module.  Shared by the shardc driver and the fuzz target. */
#ifndef SHARDC_FRONTEND_H
#define SHARDC_FRONTEND_H

#include "../base/parse.h"
#include "../sema/sema_api.h"

typedef struct {
    int n;
    char name[MAX_AXES][64];
    int64_t size[MAX_AXES];
    int nconsts;                /* --const N=64,EPS=1e-3 as written */
    char const_name[MAX_CONST_OVERRIDES][64];
    double const_value[MAX_CONST_OVERRIDES];
    int64_t const_int[MAX_CONST_OVERRIDES];       /* the value when const_is_int: exact past 2^53 */
    uint8_t const_is_int[MAX_CONST_OVERRIDES];
    int64_t device_memory;      /* --device-memory in bytes, 0: unlimited (Module.device_memory) */
    int reshard_candidates;     /* --reshard-candidates (Module.reshard_candidates) */
    /* The sharding search (compiler/autoshard) on the entry fn's `@auto` dims: */
    const char *entry;          /* --fn: the entry fn; NULL: none (then `@auto` is an error) */
    int auto_all;               /* --auto: every dim of the entry fn's parameters and results is `@auto` */
    const char *target;         /* --target: the machine the plan is for (NULL: the default) */
    FILE *auto_report;          /* the autoshard command: print the search's report here */
    int auto_top;               /* --top: other plans in the report */
    int auto_verbose;           /* -v: print the chosen signature to stderr */
    const struct AutoPlanText *plan;   /* a plan to write into the syntax before sema (the search's) */
} MeshFlag;                     /* --mesh A=4,B=2 as written, and the other flags that change the program */

typedef struct {
    Arena arena;
    Symtab syms;
    Diag diag;
    AstProgram ast;
    Module module;
    Arena replaced;             /* the arena of the compile the search's plan replaced: it may hold the source text */
} Compilation;

/* The stages of spec section 6 that exist so far, in pipeline order. */
typedef enum { STAGE_PARSED, STAGE_SHARDED, STAGE_PARTITIONED, STAGE_SCHEDULED } Stage;

enum { FRONTEND_OK = 0, FRONTEND_USER_ERROR = 1, FRONTEND_USAGE_ERROR = 2, FRONTEND_INTERNAL_ERROR = 3 };

/* Compile up to `stage`, verifying the IR after every pass.  `c` must be
 * zeroed; `text` must stay alive and be NUL-terminated at len.  Diagnostics
 * go to `diag_out` (NULL: silent).  Returns a FRONTEND_ code. */
int frontend_compile(Compilation *c, const char *path, const char *text, size_t len,
                     FILE *diag_out, const MeshFlag *mesh, Stage stage);
void compilation_free(Compilation *c);
/* The checked module (parsed, checked, differentiated, `@auto` dims
 * marked), silently: the sharding search compiles each plan from it. */
int frontend_checked(Compilation *c, const char *path, const char *text, size_t len, const MeshFlag *mesh);
/* compiler/driver/autoshard_stage.c: between grad and propagation, choose
 * the shardings of the entry fn's `@auto` dims (the search, or the plan
 * chosen before for this text), or report `@auto` where it is not allowed.
 * Returns a FRONTEND_ code; *plan: the plan chosen, which the caller
 * compiles afresh (MeshFlag.plan), or NULL when there was nothing to search. */
int autoshard_stage(Compilation *c, const char *path, const char *text, size_t len, FILE *diag_out,
                    const MeshFlag *mesh, Stage stage, const struct AutoPlanText **plan);
/* Call fn(stage, ctx) as each stage of frontend_compile ends ("parsed",
 * "checked", "propagated", "partitioned", "scheduled"), for the progress
 * report of build and run; NULL: none. */
void frontend_set_progress(void (*fn)(const char *stage, void *ctx), void *ctx);
/* Report a step within a stage (the sharding search's plans) the same way;
 * returns 0 when no report is set. */
int frontend_progress(const char *stage);

#endif
