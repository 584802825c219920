/* The main() of generated programs (shardc_main.h): the command line, then
 * the run: the world made, every process's inputs read and checked
 * (driver_io.c), the processes agreeing before the devices run (--repeat
 * times, timed, when asked; or --steps times, the carried results fed back
 * into their parameters, with progress.c's lines and checkpoint.c's
 * checkpoints), the results written (driver_io.c), and the first error
 * reported where it is needed. */
#include "driver.h"

#include "../../compiler/base/suggest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS_MAX 2000000000L             /* --steps and --log-every: at most this */

void sk_run_fail(Run *r, const char *fmt, ...) {
    if (r->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

/* --steps: each carried result's block becomes its parameter's for the
 * next step, and the parameter's old block takes the next step's result
 * (double buffering: a step reads one while it writes the other). */
static void swap_carried(Run *r, void **params, void **results) {
    for (int i = 0; i < r->p->nresults; i++)
        if (r->carry[i] >= 0) {
            void *old = params[r->carry[i]];
            params[r->carry[i]] = results[i];
            results[i] = old;
        }
}

static void carry_results(Run *r, int d) {
    swap_carried(r, r->params[d], r->results[d]);
    if (r->dev_params)
        swap_carried(r, r->dev_params[d], r->dev_results[d]);
}

/* Device memory apart from the host's (r->dev_params): the parameters'
 * blocks in before a run's first step, and the results (or, after a step,
 * the scalars progress.c prints) out after it. */
static int params_in(Run *r, int d) {
    int rc = 0;
    for (int i = 0; i < r->p->nparams && !rc; i++)
        rc = sk_dev_write(r->ctx[d], r->dev_params[d][i], r->params[d][i], (size_t)sk_local_bytes(&r->p->params[i]));
    return rc;
}

static int results_out(Run *r, int d, int scalars) {
    int rc = 0;
    for (int i = 0; i < r->p->nresults && !rc; i++)
        if (!scalars || r->p->results[i].global.rank == 0)
            rc = sk_dev_read(r->ctx[d], r->results[d][i], r->dev_results[d][i],
                             (size_t)sk_local_bytes(&r->p->results[i]));
    return rc;
}

/* One device's run, on its own thread (or the process's main thread when
 * it is the process's only device): the function once, or with --steps the
 * steps r->from to r->to (all N, or those up to the next checkpoint), the
 * carried results fed back in before each step but the run's first (so
 * that after the last, the results hold the carried values for a
 * checkpoint and the next run).  Each device swaps its
 * own blocks, so the devices need not wait for each other between steps
 * (the collectives of step s + 1 follow those of step s, as two calls of
 * one function in a program do).  OpenMP's thread count is a setting of
 * each calling thread, so every device's thread sets its own share of the
 * cores before its loops and oneDNN's GEMMs run. */
static int body(sc_device *dev, void *arg) {
    Run *r = arg;
    int d = sc_device_id(dev), rc = 0;
    long from = r->steps ? r->from : 1, to = r->steps ? r->to : 1;
    if (r->threads > 0)
        sk_set_threads(r->threads);
    sk_parallel_stats s0 = sk_parallel_stats_get();
    sk_workspace_bind(r->workspace[d]);   /* the device's buffers, kept between runs and steps */
    sc_device_set_ctx(dev, r->ctx ? r->ctx[d] : NULL);
    int apart = r->dev_params != NULL;
    void ***params = apart ? r->dev_params : r->params, ***results = apart ? r->dev_results : r->results;
    if (apart && (!r->steps || from == r->resumed_at + 1))
        rc = params_in(r, d);
    for (long s = from; s <= to && rc == 0; s++) {
        if (r->steps && s > r->resumed_at + 1)     /* the previous step's carried results, in */
            carry_results(r, d);
        rc = r->p->entry(dev, (const void *const *)params[d], results[d]);
        if (rc)
            r->step_failed[d] = s;
        else if (r->steps && d == 0 && !(apart && (rc = results_out(r, d, 1))))
            sk_progress_step(r, s);
    }
    if (apart && !rc)
        rc = results_out(r, d, 0);
    sk_workspace_bind(NULL);
    sk_parallel_stats s1 = sk_parallel_stats_get();
    sk_parallel_stats *st = &r->stats[d];
    st->loops += s1.loops - s0.loops;
    st->kernels += s1.kernels - s0.kernels;
    st->team = s1.team > st->team ? s1.team : st->team;
    if (r->thread_stats)
        r->device_threads[d] = sk_threads();
    return rc;
}

/* ---- the command line ---- */

static void usage(FILE *out, const char *prog) {
    fprintf(out,
            "usage: %s (--in NAME=FILE.npy | --local-in NAME=FILE.npy | --in FILE.npz) ... --out DIR\n"
            "           [--outputs gather|local] [--local-devices L] [--repeat N | --steps N [--log-every K]]\n"
            "           [--checkpoint FILE.npz [--checkpoint-every K]] [--resume FILE.npz] [--cast]\n"
            "  --in: NAME=FILE.npz reads the archive's array NAME, NAME=FILE.npz:KEY its array KEY,\n"
            "        FILE.npz every parameter by name; a record NAME=FILE.npz reads every field\n"
            "  --local-in: FILE holds this process's part of NAME; %%p in FILE is the process index\n"
            "  --out: a path ending in .npz writes one archive (result0, result1, ... and named results)\n"
            "  --cast: convert float64 inputs to f32, bf16 or f16 by rounding, int64 to i32\n"
            "  --steps: run N times, each result named like a parameter becoming it for the next step;\n"
            "           the loss after step 1, every K (--log-every) and the last, progress on stderr\n"
            "  --checkpoint: write the carried parameters and the step every K steps (default\n"
            "           --log-every's) and after the last; --resume: go on from one to step N\n"
            "  --fn NAME: the fn to run, which a program built with several needs; a program of one\n"
            "           takes its own fn's name\n"
            "  options take their value as --opt VALUE or --opt=VALUE\n",
            prog);
    char why[256];
    sk_world_create create = sk_backend_choose(why, sizeof why);
    fprintf(out, "backend of this run: %s (threads, or mpi in a program built with it and started by an MPI\n"
                 "  launcher; SHARDC_BACKEND=threads|mpi decides instead)\n",
            create ? sk_backend_name(create) : why);
}

static int find_param(const sk_program *p, const char *v, int len) {
    for (int k = 0; k < p->nparams; k++)
        if ((int)strlen(p->params[k].name) == len && memcmp(p->params[k].name, v, (size_t)len) == 0)
            return k;
    return -1;
}

/* A .npz archive given alone (--in data.npz): every parameter not named by
 * another --in, by its name. */
static int is_archive(const char *v) {
    size_t n = strlen(v);
    return !strchr(v, '=') && n > 4 && strcmp(v + n - 4, ".npz") == 0;
}

/* --in p=FILE for a record p: its fields' parameters p.wq, p.layer.wq, ...
 * (named so by the compiler), each from the archive by
 * sk_npy_record_file.  The number of fields, 0 when p is no record, -1
 * after an error (in r->err).  The fields' file names live as long as the
 * process. */
static int record_input(Run *r, const char *opt, const char *v, int len) {
    int n = 0;
    for (int k = 0; k < r->p->nparams; k++) {
        const char *p = r->p->params[k].name;
        if ((int)strlen(p) <= len + 1 || memcmp(p, v, (size_t)len) != 0 || p[len] != '.')
            continue;
        char buf[4096], rec[128];
        snprintf(rec, sizeof rec, "%.*s", len < 100 ? len : 100, v);
        int rc = strcmp(opt, "--in") == 0 ? sk_npy_record_file(v + len + 1, rec, p + len + 1, buf, sizeof buf) : -1;
        if (rc == -1) {
            sk_run_fail(r, "%s '%s': '%s' is a record, read from a .npz archive (its fields by name: --in %s=FILE.npz)",
                        opt, v, rec, rec);
            return -1;
        }
        if (rc < 0 || r->file[k] || !(r->file[k] = strdup(buf))) {
            sk_run_fail(r, "%s %s: %s", opt, p, rc < 0 ? "the file name is too long" : r->file[k] ? "given twice" : "out of memory");
            return -1;
        }
        n++;
    }
    return n;
}

/* --in / --local-in NAME=FILE.  0, or 1 for an error (in r->err). */
static int parse_input(Run *r, const char *opt, const char *v) {
    const char *eq = strchr(v, '=');
    int len = eq ? (int)(eq - v) : (int)strlen(v), which = eq ? find_param(r->p, v, len) : -1;
    int fields = which < 0 && eq ? record_input(r, opt, v, len) : 0;
    if (fields)
        return fields < 0;
    if (which < 0) {
        char want[128], hint[160];
        snprintf(want, sizeof want, "%.*s", len < 100 ? len : 100, v);
        Suggest sg = suggest_begin(want);
        for (int k = 0; k < r->p->nparams; k++) {
            const char *dot = strchr(r->p->params[k].name, '.');     /* a record's field: the record too */
            if (dot)
                suggest_add(&sg, r->p->params[k].name, (int)(dot - r->p->params[k].name));
            suggest_add(&sg, r->p->params[k].name, -1);
        }
        sk_run_fail(r, "%s '%s': '%s' has no parameter named '%.*s'%s", opt, v, r->p->fn, len, v,
                    suggest_text(&sg, hint, sizeof hint));
        return 1;
    }
    if (r->file[which]) {
        sk_run_fail(r, "parameter '%s' has two input files (--in or --local-in)", r->p->params[which].name);
        return 1;
    }
    r->file[which] = eq + 1;
    r->local_in[which] = strcmp(opt, "--local-in") == 0;
    return 0;
}

/* A whole number from lo to hi, else -1. */
static long number(const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    return *v && !*end && !errno && n >= lo && n <= hi ? n : -1;
}

/* Before the world exists (--local-devices decides how it is made), so
 * nothing is printed here.  0, 1 for an error (in r->err) or 2 for a usage
 * error. */
static int parse_args(Run *r, int argc, char **argv) {
    static const char *const opts[] = {"--in", "--local-in", "--out", "--outputs", "--repeat", "--local-devices",
                                       "--steps", "--log-every", "--cast", "--checkpoint", "--checkpoint-every",
                                       "--resume", "--fn"};
    const char *archive[16];                   /* --in FILE.npz alone, in order */
    int narchives = 0;
    for (int i = 1; i < argc; i++) {
        char opt[32];
        const char *a = argv[i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t o = 0, len = eq ? (size_t)(eq - a) : strlen(a);
        snprintf(opt, sizeof opt, "%.*s", (int)(len < 31 ? len : 31), a);
        while (o < sizeof opts / sizeof *opts && strcmp(opt, opts[o]))
            o++;
        if (o == sizeof opts / sizeof *opts) {
            char hint[160];
            Suggest sg = suggest_begin(opt);
            for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
                suggest_add(&sg, opts[k], -1);
            sk_run_fail(r, "unknown option '%s'%s", a, suggest_text(&sg, hint, sizeof hint));
            return 2;
        }
        if (o == 8) {                                  /* --cast, a switch */
            r->cast = 1;
            if (eq)
                return 2;
            continue;
        }
        if (!eq && i + 1 == argc)
            return 2;
        const char *v = eq ? eq + 1 : argv[++i];
        if (o == 0 && is_archive(v)) {
            if (narchives == (int)(sizeof archive / sizeof *archive)) {
                sk_run_fail(r, "--in %s: at most %d archives alone", v, narchives);
                return 2;
            }
            archive[narchives++] = v;
            continue;
        }
        if (o <= 1 && parse_input(r, opt, v))
            return 1;
        if (o == 2)
            r->out = v;
        if (o == 3 && strcmp(v, "gather") && strcmp(v, "local"))
            return 2;
        if (o == 3)
            r->local_outputs = strcmp(v, "local") == 0;
        if (o == 4 && (r->repeat = (int)number(v, 1, 1000000)) < 0) {
            sk_run_fail(r, "--repeat '%s': a number of timed runs from 1 to 1000000", v);
            return 2;
        }
        if (o == 5 && (r->local_devices = (int)number(v, 1, SC_MAX_DEVICES)) < 0)
            return 2;
        if (o == 9 || o == 11)
            *(o == 9 ? &r->checkpoint : &r->resume) = v;
        if (o == 12 && strcmp(v, r->p->fn)) {   /* its own name: the command line of a program of several fns */
            sk_run_fail(r, "--fn %s: this program runs fn '%s' only", v, r->p->fn);
            return 2;
        }
        long *count = o == 6 ? &r->steps : o == 7 ? &r->log_every : o == 10 ? &r->checkpoint_every : NULL;
        if (count && (*count = number(v, 1, STEPS_MAX)) < 0) {
            sk_run_fail(r, "%s '%s': a whole number of steps from 1 to %ld", opt, v, STEPS_MAX);
            return 2;
        }
    }
    if (r->log_every && !r->steps) {
        sk_run_fail(r, "--log-every goes with --steps");
        return 2;
    }
    if (r->repeat && r->steps) {
        sk_run_fail(r, "--repeat and --steps do not combine: --repeat times one run of the function");
        return 2;
    }
    if (r->steps && !r->log_every)
        r->log_every = r->steps / 10 > 1 ? r->steps / 10 : 1;     /* about 10 lines */
    int bad = sk_checkpoint_args(r);
    if (bad)
        return bad;
    /* Each parameter not named otherwise: the first archive with its array
     * (--in data.npz --in ck.npz), else the first, whose error lists its arrays. */
    for (int k = 0; narchives && k < r->p->nparams; k++) {
        for (int a = 0; !r->file[k] && a < narchives; a++)
            if (narchives == 1 || sk_npz_has(archive[a], r->p->params[k].name))
                r->file[k] = archive[a];
        r->file[k] = r->file[k] ? r->file[k] : archive[0];
    }
    size_t n = r->out ? strlen(r->out) : 0;
    r->npz_out = n > 4 && strcmp(r->out + n - 4, ".npz") == 0;
    if (r->npz_out && r->local_outputs) {
        sk_run_fail(r, "--out %s writes one archive, which only --outputs gather makes: with --outputs local, "
                       "give a directory", r->out);
        return 2;
    }
    return r->out ? 0 : 2;
}

int sk_same_blocks(const sk_program *p, const sk_arg_desc *a, const sk_arg_desc *b) {
    int same = a->global.dtype == b->global.dtype && a->global.rank == b->global.rank;
    for (int d = 0; same && d < a->global.rank; d++)
        same = a->global.dims[d] == b->global.dims[d] && a->local[d] == b->local[d];
    for (int ax = 0; same && ax < p->mesh.naxes; ax++)
        same = a->dim[ax] == b->dim[ax] && (a->dim[ax] < 0 || a->pos[ax] == b->pos[ax]);
    return same;
}

/* --steps: which parameter each result carries into (r->carry), checked
 * before anything runs: a result named like a parameter needs its global
 * type and sharding, one result at least must carry, and a carried
 * parameter's file DIR/NAME.npy must not be a result's.  0, or 2 (a
 * usage error) with r->err set.  A second result of the same name (return
 * w, w) is not carried: the first is. */
static int check_steps(Run *r) {
    const sk_program *p = r->p;
    int carried = 0;
    for (int i = 0; i < p->nresults; i++) {
        const sk_arg_desc *a = &p->results[i];
        int k = -1;
        for (int j = 0; a->var && j < p->nparams && k < 0; j++)
            k = strcmp(p->params[j].name, a->var) == 0 ? j : -1;
        for (int e = 0; e < i && k >= 0; e++)
            k = r->carry[e] == k ? -1 : k;
        r->carry[i] = r->steps ? k : -1;
        if (!r->steps || k < 0)
            continue;
        const sk_arg_desc *b = &p->params[k];
        if (!sk_same_blocks(p, a, b)) {
            char rt[256], pt[256];
            sk_arg_text(p, a, rt, sizeof rt);
            sk_arg_text(p, b, pt, sizeof pt);
            sk_run_fail(r, "--steps: '%s' returns %s as %s, of type %s, but its parameter %s is %s: a result carried "
                           "into the parameter of its name needs the parameter's type and sharding",
                        p->fn, a->var, a->name, rt, b->name, pt);
            return 2;
        }
        for (int e = 0; e < p->nresults; e++)
            if (strcmp(p->results[e].name, b->name) == 0) {
                sk_run_fail(r, "--steps: parameter '%s' is carried, and its final value would go to %s/%s.npy, "
                               "the file of '%s''s %s", b->name, r->out, b->name, p->fn, b->name);
                return 2;
            }
        carried++;
    }
    if (r->steps && !carried) {
        char names[512] = "";
        for (int j = 0, w = 0; j < p->nparams && w < (int)sizeof names - 64; j++)
            w += snprintf(names + w, sizeof names - (size_t)w, "%s%s", j ? ", " : "", p->params[j].name);
        sk_run_fail(r, "--steps: no result of '%s' is named like one of its parameters (%s), so nothing would carry "
                       "from one step to the next: return the updated parameters by name (return loss, w)",
                    p->fn, p->nparams ? names : "it has none");
        return 2;
    }
    return 0;
}

/* One process on its own runs every device: on the threads backend always,
 * on MPI when mpirun starts one process.  (With more processes, the MPI
 * runtime checks the layout.) */
static int check_local_devices(Run *r) {
    if (!r->local_devices || sc_world_process_count(r->w) > 1 || r->local_devices == r->ndev)
        return 0;
    sk_run_fail(r, "--local-devices %d: this run is one process, which runs all %d devices of the mesh (the threads "
                   "backend always does); --local-devices is for MPI runs of P processes with P x L = %d",
                r->local_devices, r->ndev, r->ndev);
    return 1;
}

/* ---- running ---- */

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

/* Devices that each run GEMMs or loops on every core would oversubscribe
 * them: the machine's cores are shared among the devices running on it
 * (this process's, times the processes mpirun started on this node).
 * OpenBLAS's threads (one setting for the process) are that share unless
 * OPENBLAS_NUM_THREADS or OMP_NUM_THREADS says otherwise; every device's
 * OpenMP threads (a setting of each device's thread, made in body()) are
 * that share unless OMP_NUM_THREADS says otherwise (OpenMP then gives
 * every thread that many). */
static void share_cores(Run *r) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *node = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long processes = node && atol(node) > 0 ? atol(node) : 1, devices = 0;
    for (int d = 0; d < r->ndev; d++)
        devices += sc_world_is_local(r->w, d);
    long share = cores / (devices * processes);
    int n = share > 1 ? (int)share : 1;
    if (!env_set("OPENBLAS_NUM_THREADS") && !env_set("OMP_NUM_THREADS"))
        sk_blas_threads(n);
    r->threads = env_set("OMP_NUM_THREADS") ? 0 : n;
}

/* SHARDC_THREAD_STATS: each process says, per device, how many OpenMP
 * threads its loops had and what ran on several of them. */
static void print_thread_stats(const Run *r) {
    for (int d = 0; d < r->ndev; d++)
        if (sc_world_is_local(r->w, d))
            fprintf(stderr, "threads: device %d: %d OpenMP threads, %lld parallel loops, %lld parallel kernel calls, "
                            "largest team %d\n", d, r->device_threads[d], (long long)r->stats[d].loops,
                    (long long)r->stats[d].kernels, r->stats[d].team);
}

/* A failed sc_run: which step failed, with --steps. */
static int run_failed(Run *r) {
    long step = 0;
    for (int d = 0; d < r->ndev; d++)
        step = r->step_failed[d] && (!step || r->step_failed[d] < step) ? r->step_failed[d] : step;
    if (r->steps && step)
        sk_run_fail(r, "running '%s' (step %ld of %ld): %s", r->p->fn, step, r->steps, sc_world_error(r->w));
    else
        sk_run_fail(r, "running '%s': %s", r->p->fn, sc_world_error(r->w));
    return 1;
}

/* --steps: the steps after r->resumed_at up to N, in one sc_run, or with
 * --checkpoint in runs that end at each multiple of K (so that a resumed
 * run checkpoints at the same steps) and at N, a checkpoint after each. */
static int run_steps(Run *r) {
    long k = r->checkpoint ? r->checkpoint_every : r->steps;
    const char *progress = getenv("SHARDC_PROGRESS");
    r->quiet = progress && strcmp(progress, "0") == 0;
    r->tty = r->root && !r->quiet && isatty(fileno(stderr));
    r->started = sk_seconds();
    for (long s = r->resumed_at; s < r->steps; s = r->to) {
        r->from = s + 1;
        r->to = (s / k + 1) * k < r->steps ? (s / k + 1) * k : r->steps;
        if (sc_run(r->w, body, r) != 0)
            return run_failed(r);
        if (r->checkpoint && sk_checkpoint_write(r, r->to))
            return 1;
    }
    if (r->root && !r->quiet)
        sk_progress_end(r);
    return 0;
}

/* Each local device's context, and with memory apart from the host's,
 * its blocks there. */
static int open_devices(Run *r) {
    const sk_program *p = r->p;
    r->ctx = calloc((size_t)r->ndev, sizeof *r->ctx);
    int apart = r->space != SK_MEM_HOST, rc = !r->ctx;
    if (apart && !rc) {
        r->dev_params = calloc((size_t)r->ndev, sizeof(void **));
        r->dev_results = calloc((size_t)r->ndev, sizeof(void **));
        rc = !r->dev_params || !r->dev_results;
    }
    for (int d = 0; d < r->ndev && !rc; d++) {
        if (!sc_world_is_local(r->w, d))
            continue;
        rc = !(r->ctx[d] = sk_ctx_new(r->space));
        if (!apart || rc)
            continue;
        r->dev_params[d] = calloc((size_t)p->nparams + 1, sizeof(void *));
        r->dev_results[d] = calloc((size_t)p->nresults + 1, sizeof(void *));
        rc = !r->dev_params[d] || !r->dev_results[d];
        for (int i = 0; i < p->nparams && !rc; i++)
            rc = !(r->dev_params[d][i] = sk_dev_alloc(r->ctx[d], (size_t)sk_local_bytes(&p->params[i]) + 1));
        for (int i = 0; i < p->nresults && !rc; i++)
            rc = !(r->dev_results[d][i] = sk_dev_alloc(r->ctx[d], (size_t)sk_local_bytes(&p->results[i]) + 1));
    }
    if (rc)
        sk_run_fail(r, "out of %s memory for the devices' arrays", sk_mem_space_name(r->space));
    return rc;
}

static void close_devices(Run *r) {
    for (int d = 0; r->ctx && d < r->ndev; d++) {
        for (int i = 0; r->dev_params && r->dev_params[d] && i < r->p->nparams; i++)
            sk_dev_free(r->ctx[d], r->dev_params[d][i], (size_t)sk_local_bytes(&r->p->params[i]) + 1);
        for (int i = 0; r->dev_results && r->dev_results[d] && i < r->p->nresults; i++)
            sk_dev_free(r->ctx[d], r->dev_results[d][i], (size_t)sk_local_bytes(&r->p->results[i]) + 1);
        if (r->dev_params)
            free(r->dev_params[d]);
        if (r->dev_results)
            free(r->dev_results[d]);
        sk_ctx_free(r->ctx[d]);
    }
    free(r->dev_params);
    free(r->dev_results);
    free(r->ctx);
    r->ctx = NULL;
    r->dev_params = r->dev_results = NULL;
}

/* Run the devices (r->repeat times, timed, when asked; --steps times). */
int sk_run_devices(Run *r) {
    int n = r->repeat ? r->repeat : 1;
    if (!r->ctx && open_devices(r))
        return 1;
    double *t = calloc((size_t)n, sizeof *t);
    share_cores(r);
    if (!t) {
        sk_run_fail(r, "out of memory");
        return 1;
    }
    for (int k = 0; k < n; k++) {
        if (n > 1)
            sc_world_agree(r->w, 1, NULL);  /* start every process's run together */
        double t0 = sk_seconds();
        if (r->steps ? run_steps(r) : sc_run(r->w, body, r) != 0 && run_failed(r)) {
            free(t);
            return 1;
        }
        t[k] = sk_seconds() - t0;
    }
    if (r->repeat && r->root) {
        qsort(t, (size_t)n, sizeof *t, by_value);
        fprintf(stderr, "time: best %.6f s, median %.6f s over %d run%s\n", t[0], t[n / 2], n, n == 1 ? "" : "s");
        char engine[512];
        sk_gemm_engine(engine, sizeof engine);
        if (r->threads)
            fprintf(stderr, "kernels: %s; %d thread%s per device\n", engine, r->threads, r->threads == 1 ? "" : "s");
        else
            fprintf(stderr, "kernels: %s; threads as OMP_NUM_THREADS and OPENBLAS_NUM_THREADS say\n", engine);
    }
    if (r->thread_stats)
        print_thread_stats(r);
    free(t);
    return 0;
}

/* ---- main ---- */

int sk_run_alloc(Run *r) {
    int np = r->p->nparams, nr = r->p->nresults;
    r->params = calloc((size_t)r->ndev, sizeof(void **));
    r->results = calloc((size_t)r->ndev, sizeof(void **));
    r->stats = calloc((size_t)r->ndev, sizeof *r->stats);
    r->device_threads = calloc((size_t)r->ndev, sizeof *r->device_threads);
    if (!r->borrowed_workspace)
        r->workspace = calloc((size_t)r->ndev, sizeof(sk_workspace *));
    r->step_failed = calloc((size_t)r->ndev, sizeof *r->step_failed);
    int rc = !r->params || !r->results || !r->stats || !r->device_threads || !r->workspace || !r->step_failed;
    for (int d = 0; d < r->ndev && !rc; d++) {
        r->params[d] = calloc((size_t)np + 1, sizeof(void *));
        r->results[d] = calloc((size_t)nr + 1, sizeof(void *));
        if (!r->borrowed_workspace)
            r->workspace[d] = sc_world_is_local(r->w, d) ? sk_workspace_new() : NULL;
        rc = !r->params[d] || !r->results[d] || (sc_world_is_local(r->w, d) && !r->workspace[d]);
    }
    if (rc)
        sk_run_fail(r, "out of memory");
    return rc;
}

void sk_run_free(Run *r) {
    const sk_program *p = r->p;
    for (int d = 0; d < r->ndev; d++) {
        for (int i = 0; r->params && r->params[d] && i < p->nparams; i++)
            free(r->params[d][i]);
        for (int i = 0; r->results && r->results[d] && i < p->nresults; i++)
            free(r->results[d][i]);
        if (r->params)
            free(r->params[d]);
        if (r->results)
            free(r->results[d]);
        if (r->workspace && !r->borrowed_workspace)
            sk_workspace_free(r->workspace[d]);
    }
    if (!r->borrowed_workspace)
        free(r->workspace);
    close_devices(r);
    free(r->params);
    free(r->results);
    free(r->stats);
    free(r->device_threads);
    free(r->step_failed);
    free(r->carry);
    free(r->file);
    free(r->resume_files);
    free(r->local_in);
}

/* Prints r->err where it is needed: on process 0, or on another process
 * whose failure process 0 does not share. */
static int report(Run *r, int rc, int root_ok) {
    if (r->err[0] && r->root)
        fprintf(stderr, "error: %s\n", r->err);
    else if (r->err[0] && root_ok)
        fprintf(stderr, "error: process %d: %s\n", r->process, r->err);
    return rc;
}

/* A switch from the environment: on unless unset, empty or 0. */
static int wanted(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* The world's options: the environment's (sc_options_from_env, and the
 * devices' memory: SHARDC_DEVICE_MEMORY), then the command line's
 * --local-devices, which wins.  A bad variable is an error
 * (in r->err, 1), reported once the world says which process speaks; the
 * world is made with that option's default meanwhile. */
static int world_options(Run *r, sc_options *opt) {
    char err[256];
    int bad = sc_options_from_env(opt, err, sizeof err) != 0;
    if (bad || (bad = sk_mem_space_from_env(&r->space, err, sizeof err) != 0))
        sk_run_fail(r, "%s", err);
    if (r->local_devices)
        opt->local_devices = r->local_devices;
    return bad;
}

/* The world, or NULL after saying why where it is needed: a process that
 * gets no message (on MPI, process 0 speaks for all) says nothing.  After a
 * bad environment variable, r->err (the first cause) is said instead of
 * what went wrong with that variable's default. */
static sc_world *make_world(Run *r, sk_world_create create, const sc_options *opt, int env_bad) {
    char err[512] = "";
    if (!create && !(create = sk_backend_choose(err, sizeof err))) {
        fprintf(stderr, "error: %s\n", err);
        return NULL;
    }
    sc_world *w = create(&r->p->mesh, opt, err, sizeof err);
    if (!w && err[0])
        fprintf(stderr, "error: %s\n", env_bad ? r->err : err);
    return w;
}

int sk_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

int sk_main_on(int argc, char **argv, const sk_program *p, sk_world_create create) {
    if (sk_wants_help(argc, argv)) {
        usage(stdout, argc > 0 ? argv[0] : "prog");
        return 0;
    }
    Run r = {.p = p, .io_stats = wanted("SHARDC_IO_STATS"), .thread_stats = wanted("SHARDC_THREAD_STATS")};
    sc_options opt = {0};
    r.file = calloc((size_t)p->nparams + 1, sizeof(char *));
    r.local_in = calloc((size_t)p->nparams + 1, 1);
    r.carry = calloc((size_t)p->nresults + 1, sizeof *r.carry);
    int rc = !r.file || !r.local_in || !r.carry, root_ok = 1;
    if (rc)
        sk_run_fail(&r, "out of memory");
    rc = rc ? rc : parse_args(&r, argc, argv);
    int env_bad = world_options(&r, &opt);
    rc = rc ? rc : env_bad;
    if (!(r.w = make_world(&r, create, &opt, env_bad))) {
        sk_run_free(&r);
        return 1;
    }
    r.process = sc_world_process(r.w);
    r.root = r.process == 0;
    r.ndev = sc_device_count(r.w);
    if (rc == 2 && r.root)
        usage(stderr, argc > 0 ? argv[0] : "prog");
    rc = rc ? rc : check_steps(&r);
    rc = rc ? rc : sk_resume(&r);
    rc = rc ? rc : sk_checkpoint_probe(&r);
    rc = rc ? rc : check_local_devices(&r);
    rc = rc ? rc : sk_run_alloc(&r);
    rc = rc ? rc : sk_read_inputs(&r);
    rc = rc ? rc : sk_prepare_outputs(&r);
    /* Every process checks its inputs and layout: they agree before any runs
     * (a process that failed says why; the others stop with status 1). */
    if (sc_world_agree(r.w, rc == 0, &root_ok))
        rc = sk_run_devices(&r);
    else if (!rc)
        rc = 1;
    rc = rc ? rc : sk_write_outputs(&r);
    rc = report(&r, rc, root_ok);
    sk_run_free(&r);
    sc_world_destroy(r.w);     /* after a failed run, on MPI: aborts every process */
    return rc;
}
