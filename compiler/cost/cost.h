/* The roofline cost model (docs/autoshard.md): a machine description (a
 * Target, read from a .target file) and the predicted time of each
 * instruction and function of a scheduled module.  The API is what a
 * sharding search calls: cost_fn on a candidate's scheduled module. */
#ifndef SHARDC_COST_H
#define SHARDC_COST_H

#include "../ir/ir.h"

#include <stdio.h>

enum { TARGET_MAX_LINKS = 16, TARGET_NAME_MAX = 64, DOT_EFF_DIMS = 8, DOT_EFF_MAX = 512 };

typedef struct {
    double bw;                   /* bytes per second one device sends */
    double latency;              /* seconds per ring step */
} Link;

/* A GEMM's efficiency by shape (`dot_efficiency [LAYOUT] M N K EFF` lines,
 * compiler/cost/dot_eff.c): the fraction of peak_flops a product of
 * [M,K] by [K,N] reaches, given on a grid of M, N and K values,
 * interpolated in log space between them and clamped at the grid's edges.
 * nentries == 0: no table, every dot at efficiency 1. */
typedef struct {
    int nentries;
    double entry[DOT_EFF_MAX][4];              /* M N K EFF, as the lines give them */
    int n[3];                                  /* the grid: values on the M, N, K axes, ascending */
    double at[3][DOT_EFF_DIMS];
    double eff[DOT_EFF_DIMS][DOT_EFF_DIMS][DOT_EFF_DIMS];
} DotEff;

/* How BLAS reads a dot's operands, as its transa and transb: `t` for an
 * lhs whose contracted dims come first (a weight gradient's x^T dy) or an
 * rhs whose contracted dims come last.  A target may give a grid per
 * layout; a layout without one reads nn's. */
enum { DOT_NN, DOT_NT, DOT_TN, DOT_TT, DOT_LAYOUTS };
extern const char *const dot_layout_name[DOT_LAYOUTS];

/* After the last entry (no shape given twice: the reader checks): builds
 * the grid of a layout; 0, or -1 with msg saying what is wrong, naming the
 * layout (an axis with too many values, or a shape of the grid the entries
 * span without an entry). */
int dot_eff_build(DotEff *e, const char *layout, char *msg, size_t cap);
/* The efficiency of an [M,K] x [K,N] product (1 without a table). */
double dot_eff_at(const DotEff *e, double m, double n, double k);

typedef struct {
    char name[TARGET_NAME_MAX];
    char source[512];            /* the file it was read from, or "built-in" */
    double peak_flops[DT_COUNT]; /* per dtype; 0: not given (f32's is used) */
    double mem_bw;               /* bytes per second */
    double libm_rate;            /* elements per second of an op calling <math.h>; 0: one FLOP each */
    int64_t mem_per_device;      /* bytes */
    Link intra, inter;           /* within a node, between nodes */
    int64_t node_devices;        /* devices per node; 0: one node holds the whole mesh */
    int nlinks;                  /* links named for one mesh axis (override the levels) */
    char link_axis[TARGET_MAX_LINKS][TARGET_NAME_MAX];
    Link link[TARGET_MAX_LINKS];
    DotEff dot_eff[DOT_LAYOUTS];
} Target;

/* Parse a target description (text, NUL-terminated); `file` names it in
 * errors.  Returns 0, or -1 after printing "file:line: error: ..." to err. */
int target_parse(Target *t, const char *text, const char *file, FILE *err);
/* --target FILE|NAME: a path (it has a '/' or ends in .target), else a
 * shipped target (targets/NAME.target beside the build tree, or
 * PREFIX/share/shardc/targets), or `cpu`, built in.  NULL: the default,
 * host.target beside the binary (written by make bench) if present, else
 * `cpu`.  Returns 0 or -1 after printing an error. */
int target_load(Target *t, const char *spec, FILE *err);

/* The link a collective over `axes` runs on: an axis's own link if named,
 * else inter-node when its group spans more than one node, else intra. */
Link target_link(const Target *t, const Module *m, const int64_t *axes, int naxes);

typedef enum { BOUND_NONE, BOUND_COMPUTE, BOUND_MEMORY, BOUND_COMM } Bound;
extern const char *const bound_name[];

typedef struct {
    double flops;                /* per device */
    double bytes;                /* read + written from memory, per device */
    double sent;                 /* bytes sent per device (collectives) */
    double time;                 /* seconds */
    Bound bound;
} InstCost;

typedef struct {
    double time;                 /* predicted step time with the schedule's overlap */
    double compute, memory, comm;   /* time of the instructions each bounds (sum, no overlap) */
    double hidden;               /* communication time overlapped by compute */
    double flops, bytes, sent;   /* totals per device, calls and loops included */
} FnCost;

/* The queries on one module: each fn's cost is computed once and kept
 * (memo[f].time < 0: not yet), so a dump asking for every instruction and
 * fn, or a chain of calls, costs the module's size, not the product of its
 * fan-outs.  cost_end frees it. */
typedef struct {
    const Target *t;
    const Module *m;
    FnCost *memo;
    double **fused;              /* per fn: each instruction's bytes in a fused loop (roofline.c), made when first asked */
} Cost;

Cost cost_begin(const Target *t, const Module *m);
void cost_end(Cost *c);
/* One instruction of a scheduled fn (a call or loop: its callee's whole
 * time, trip count times). */
InstCost cost_inst(Cost *c, int fn, int v);
/* A scheduled fn. */
const FnCost *cost_fn(Cost *c, int fn);

/* The formulas on their own, for a search that costs instructions under
 * shardings it has not built (compiler/autoshard/ilp.c): an instruction's
 * FLOPs and memory bytes on the shapes it has; the roofline time of `flops`
 * and `bytes` of instruction `in` (its dtype's peak, libm_rate); a ring
 * collective `op` over mesh `axes` sending `sent` bytes per device. */
double cost_inst_flops(const Fn *fn, const Inst *in);
double cost_inst_bytes(const Fn *fn, const Inst *in);
double cost_roofline(const Target *t, const Fn *fn, const Inst *in, double flops, double bytes, Bound *bound);
double cost_collective_time(const Target *t, const Module *m, int op, const int64_t *axes, int naxes, double sent);

/* dump --stage scheduled --cost: the dump with each instruction's comment
 * `  # flops=.. bytes=.. sent=.. t=.. bound=..` and each fn's summary lines,
 * after a line naming the target; show --fn F --cost: that line and F's
 * summary. */
void cost_dump(const Module *m, FILE *out, int only_fn_sym, const Target *t);
void cost_show(const Module *m, FILE *out, int fn, const Target *t);

#endif
