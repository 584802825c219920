/* driver.h: what the two halves of sk_main share, and the sessions of the
 * global API (not installed).  driver.c parses the command line and runs
 * the devices; driver_io.c maps arrays to device blocks and moves them
 * between .npy files, or global arrays in memory, and those blocks;
 * session.c keeps a world and a Run per function across calls.  All work
 * on a Run, and report errors into it. */
#ifndef SHARDC_DRIVER_H
#define SHARDC_DRIVER_H

#include "shardc_main.h"

typedef struct {
    const sk_program *p;
    sc_world *w;
    int ndev, root, process, repeat, local_devices, local_outputs, io_stats;
    int threads;                     /* each device's share of the cores; 0: the user's OMP_NUM_THREADS */
    const char **file, *out;         /* per parameter: --in or --local-in FILE; the output directory */
    uint8_t *local_in;               /* per parameter: 1 for --local-in */
    void ***params, ***results;      /* [device][i]: local devices (results: all on process 0) */
    int thread_stats;                /* SHARDC_THREAD_STATS: print stats[] after the run */
    sk_parallel_stats *stats;        /* [device]: what ran on several threads, over every --repeat */
    int *device_threads;             /* [device]: the OpenMP threads its loops had */
    sk_workspace **workspace;        /* [device]: local devices' buffers, kept between runs */
    sk_mem_space space;              /* SHARDC_DEVICE_MEMORY: where the devices' arrays live */
    sk_ctx **ctx;                    /* [device]: local devices' contexts (sk_run_devices) */
    void ***dev_params, ***dev_results; /* [device][i]: local blocks in device memory; NULL: host's */
    int borrowed_workspace;          /* workspace is a session's, which frees it (sk_run_free does not) */
    long steps, log_every;           /* --steps N (0: one run, nothing carried), --log-every K */
    long resumed_at;                 /* --resume: the checkpoint's step (the run starts after it); else 0 */
    long from, to;                   /* with --steps: the steps the current sc_run takes (progress.c) */
    const char *checkpoint, *resume; /* --checkpoint FILE.npz, --resume FILE.npz (checkpoint.c) */
    char *resume_files;              /* with --resume: the carried parameters' files, FILE.npz:NAME */
    long checkpoint_every;           /* --checkpoint-every K (default: --log-every's) */
    int tty;                         /* standard error is a terminal: progress is one rewritten line */
    int quiet;                       /* SHARDC_PROGRESS=0: no progress on standard error */
    double started, drawn;           /* the steps' start; the progress line's last drawing, 0: none shown */
    int *carry;                      /* [result]: with --steps, the parameter it becomes, or -1 */
    long *step_failed;               /* [device]: the step whose run failed, or 0 */
    int cast;                        /* --cast: round float64 inputs to the parameters' float dtypes */
    int npz_out;                     /* --out FILE.npz: one archive instead of a directory */
    char err[1024];
} Run;

/* Sets r->err unless an earlier error did: the first cause is the one
 * reported. */
void sk_run_fail(Run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "f32[8@X, 4]", "i32[6@(X,Y)]": an argument's global type and sharding
 * as the language writes them, for messages. */
void sk_arg_text(const sk_program *p, const sk_arg_desc *a, char *buf, size_t n);

/* --help or -h anywhere on a program's command line: the usage on standard
 * output, nothing run (sk_main_on, and sk_main_of in entries.c). */
int sk_wants_help(int argc, char **argv);

/* The bytes of argument a's block on one device. */
int64_t sk_local_bytes(const sk_arg_desc *a);

/* Each returns 0, or 1 with r->err set. */

/* r's tables for r->p on r->w (r->ndev set): block pointers, per-device
 * stats, workspaces unless r->workspace is already given. */
int sk_run_alloc(Run *r);
/* Every local device runs r->p (r->repeat times, timed, when asked; with
 * --steps, r->steps times). */
int sk_run_devices(Run *r);
/* What sk_run_alloc and the blocks took (not the world). */
void sk_run_free(Run *r);

/* Every parameter's blocks for this process's devices, from its file. */
int sk_read_inputs(Run *r);

/* Result blocks allocated (every device's on process 0 gathering); with
 * --outputs local, each result's part checked to be a box, before anything
 * runs. */
int sk_prepare_outputs(Run *r);

/* After the run: results gathered or kept local, replicas checked, files
 * written; with --steps, each carried result also as DIR/NAME.npy (or
 * DIR/NAME.process{p}.npy), NAME the parameter it carries into. */
int sk_write_outputs(Run *r);

/* Does result or parameter a have b's global type and the same block on
 * every device (so that one's blocks can stand for the other's: --steps,
 * sk_session_carry)? */
int sk_same_blocks(const sk_program *p, const sk_arg_desc *a, const sk_arg_desc *b);
/* Process 0 receives every device's blocks of each result (every process
 * calls it). */
int sk_gather_results(Run *r);
/* Result i as the whole global array of doubles (malloc'd), from the
 * blocks of each block's owner, which process 0 holds after
 * sk_gather_results; NULL with r->err set. */
double *sk_result_array(Run *r, int i);

/* --steps progress (progress.c), called by device 0: sk_progress_step after
 * each step s, which prints the loss lines on standard output and the
 * progress on standard error; sk_progress_end after the last. */
double sk_seconds(void);
void sk_progress_step(Run *r, long s);
void sk_progress_end(Run *r);

/* Checkpoints (checkpoint.c).  sk_checkpoint_args: the options' checks
 * after parsing (2: a usage error).  sk_resume: --resume's checkpoint
 * read and checked, and the carried parameters pointed at its arrays (1:
 * an error), after r->carry is known.  sk_checkpoint_write: after step s,
 * every process gathers and process 0 writes --checkpoint; 1 on any
 * process's failure. */
int sk_checkpoint_args(Run *r);
int sk_resume(Run *r);
/* Before anything runs, process 0 makes sure that --checkpoint's file can
 * be written (a temporary file created and removed there), so that a bad
 * path stops a long run at its start, not at its first checkpoint. */
int sk_checkpoint_probe(Run *r);
int sk_checkpoint_write(Run *r, long s);

/* The global API (session.c): parameter i's blocks of this process's
 * devices from the global array global[i] (allocated, zero padded, at the
 * first call; then only the data rewritten); and, after the run, each
 * result gathered to process 0, which writes it to global[i] from each
 * block's owner (padding trimmed). */
int sk_params_from(Run *r, const void *const *global);
int sk_results_to(Run *r, void *const *global);

#endif
