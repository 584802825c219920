/* checkpoint.c: --steps runs that can stop and go on (docs/cli.md,
 * "Checkpoints").  --checkpoint FILE.npz writes, every --checkpoint-every K
 * steps and after the last, what the next step would start from: each
 * carried parameter's value (the carried result of the step just run) as
 * the array of the parameter's name (a record's fields as p.wq, ..., the
 * names --in and --out use), and two arrays of its own, `shardc:step` (the
 * steps taken, an int64 scalar) and `shardc:fn` (the function's name, as
 * uint8 bytes).  --resume FILE.npz reads the carried parameters from such a
 * file in place of their --in, and runs the steps after the recorded one up
 * to --steps N: the same values, bit for bit, as the run that was
 * interrupted would have computed, since a step depends only on its
 * parameters (a step counter or a data position the step uses is itself
 * carried, so it is in the checkpoint).  The global arrays do not depend on
 * the mesh's layout, so a checkpoint of a threads run resumes under MPI.
 * Every checkpoint replaces the last through an fsync'd temporary file
 * (sk_npz_write): a run killed at any moment leaves the previous one whole. */
#include "driver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEP_KEY "shardc:step"
#define FN_KEY "shardc:fn"

static int is_npz(const char *path) {
    size_t n = strlen(path);
    return n > 4 && strcmp(path + n - 4, ".npz") == 0;
}

int sk_checkpoint_args(Run *r) {
    const char *bad = r->checkpoint && !is_npz(r->checkpoint) ? r->checkpoint
                      : r->resume && !is_npz(r->resume)       ? r->resume
                                                              : NULL;
    if (bad) {
        sk_run_fail(r, "%s '%s': a checkpoint is a .npz archive: give a path ending in .npz",
                    bad == r->checkpoint ? "--checkpoint" : "--resume", bad);
        return 2;
    }
    if ((r->checkpoint || r->resume) && !r->steps) {
        sk_run_fail(r, "%s goes with --steps", r->checkpoint ? "--checkpoint" : "--resume");
        return 2;
    }
    if (r->checkpoint_every && !r->checkpoint) {
        sk_run_fail(r, "--checkpoint-every goes with --checkpoint");
        return 2;
    }
    if (r->checkpoint && !r->checkpoint_every)
        r->checkpoint_every = r->log_every;
    return 0;
}

/* One array of the checkpoint, which must be there. */
static double *read_key(Run *r, const char *key, int dtype, sk_npy_shape *shape) {
    sk_npy_source src = {r->resume, key, 0};
    double *data = NULL;
    char err[768];
    if (!sk_npz_has(r->resume, key)) {
        /* A file that cannot be read: reading says why. */
        if (access(r->resume, R_OK) != 0 && sk_npy_read_source(&src, NULL, shape, &data, NULL, err, sizeof err) != 0)
            sk_run_fail(r, "--resume: %s", err);
        else
            sk_run_fail(r, "--resume '%s' is not a checkpoint: it has no array '%s' (--checkpoint writes one)",
                        r->resume, key);
        free(data);
        return NULL;
    }
    if (sk_npy_read_source(&src, NULL, shape, &data, NULL, err, sizeof err) != 0) {
        sk_run_fail(r, "--resume: %s", err);
        return NULL;
    }
    if (shape->dtype != dtype || shape->rank != (dtype == SK_U8)) {
        sk_run_fail(r, "--resume '%s': its array '%s' is not what --checkpoint writes", r->resume, key);
        free(data);
        return NULL;
    }
    return data;
}

/* The function the checkpoint was written by must be this one. */
static int check_fn(Run *r) {
    sk_npy_shape s;
    double *b = read_key(r, FN_KEY, SK_U8, &s);
    if (!b)
        return 1;
    char fn[256];
    int64_t n = s.dims[0] < (int64_t)sizeof fn - 1 ? s.dims[0] : (int64_t)sizeof fn - 1;
    for (int64_t k = 0; k < n; k++)
        fn[k] = (char)b[k];
    fn[n] = 0;
    free(b);
    if (strcmp(fn, r->p->fn) == 0)
        return 0;
    sk_run_fail(r, "--resume '%s' is a checkpoint of '%s', not of '%s'", r->resume, fn, r->p->fn);
    return 1;
}

int sk_resume(Run *r) {
    if (!r->resume)
        return 0;
    sk_npy_shape s;
    double *step = read_key(r, STEP_KEY, SK_I64, &s);
    if (!step || check_fn(r)) {
        free(step);
        return 1;
    }
    long at = (long)step[0];
    free(step);
    if (at < 1 || at >= r->steps) {
        sk_run_fail(r, "--resume '%s' is at step %ld, %s --steps %ld: give more steps to go on from it", r->resume, at,
                    at == r->steps ? "the last of" : at > r->steps ? "beyond" : "not a step of", r->steps);
        return 1;
    }
    const sk_program *p = r->p;
    size_t need = 1, w = 0;
    for (int i = 0; i < p->nresults; i++)
        need += r->carry[i] < 0 ? 0 : strlen(r->resume) + strlen(p->params[r->carry[i]].name) + 2;
    if (!(r->resume_files = malloc(need))) {          /* "FILE.npz:NAME" for each, freed with r */
        sk_run_fail(r, "out of memory");
        return 1;
    }
    for (int i = 0; i < p->nresults; i++) {
        if (r->carry[i] < 0)
            continue;
        const char *name = p->params[r->carry[i]].name;
        if (!sk_npz_has(r->resume, name)) {
            sk_run_fail(r, "--resume '%s' has no array '%s', the carried parameter %s of '%s': it is a checkpoint "
                           "of another program", r->resume, name, name, p->fn);
            return 1;
        }
        r->file[r->carry[i]] = r->resume_files + w;
        r->local_in[r->carry[i]] = 0;
        w += (size_t)sprintf(r->resume_files + w, "%s:%s", r->resume, name) + 1;
    }
    r->resumed_at = at;
    return 0;
}

int sk_checkpoint_probe(Run *r) {
    char tmp[4096 + 32];
    if (!r->checkpoint || !r->root)
        return 0;
    errno = 0;
    FILE *f = sk_temp_path(r->checkpoint, tmp, sizeof tmp) ? NULL : fopen(tmp, "wb");
    if (!f) {
        sk_run_fail(r, "--checkpoint: cannot write '%s': %s", r->checkpoint, strerror(errno ? errno : ENAMETOOLONG));
        return 1;
    }
    fclose(f);
    remove(tmp);
    return 0;
}

/* Process 0's part: the carried results, the step and the function's
 * name, as one archive. */
static int write_archive(Run *r, long s) {
    const sk_program *p = r->p;
    int n = 0, rc = 0;
    size_t fn_len = strlen(p->fn);
    sk_npz_entry *e = calloc((size_t)p->nresults + 2, sizeof *e);
    double *fn = calloc(fn_len + 1, sizeof *fn), step = (double)s;
    char err[768];
    if (!e || !fn) {
        sk_run_fail(r, "out of memory");
        rc = 1;
    }
    for (int i = 0; i < p->nresults && !rc; i++) {
        if (r->carry[i] < 0)
            continue;
        const sk_arg_desc *a = &p->params[r->carry[i]];
        double *g = sk_result_array(r, i);
        if (!g)
            rc = 1;
        else
            e[n++] = (sk_npz_entry){a->name, a->global, g};
    }
    for (size_t k = 0; k < fn_len && !rc; k++)
        fn[k] = (unsigned char)p->fn[k];
    int carried = n;
    if (!rc) {
        e[n++] = (sk_npz_entry){STEP_KEY, {.dtype = SK_I64}, &step};
        e[n++] = (sk_npz_entry){FN_KEY, {.dtype = SK_U8, .rank = 1, .dims = {(int64_t)fn_len}}, fn};
    }
    if (!rc && sk_npz_write(r->checkpoint, e, n, err, sizeof err) != 0) {
        sk_run_fail(r, "--checkpoint: %s", err);
        rc = 1;
    }
    n = carried;
    for (int k = 0; k < n; k++)
        free((void *)e[k].data);
    free(e);
    free(fn);
    return rc;
}

int sk_checkpoint_write(Run *r, long s) {
    int rc = sk_gather_results(r);
    if (!rc && r->root)
        rc = write_archive(r, s);
    return !sc_world_agree(r->w, rc == 0, NULL) || rc;
}
