/* `shardc compile`, `build` and `run`.  The headers and libraries are found
 * relative to the shardc binary: in the build tree (BUILD/shardc next to
 * libshardc_*.a, runtime/ and lib/ one or two levels up) or in an installed
 * PREFIX (bin/shardc, include/, lib/). */
#include "codegen_cmd.h"
#include "child.h"
#include "toolchain.h"
#include "output.h"
#include "version.h"

#include "../codegen/codegen.h"

#include "../../lib/shardc_npy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* snprintf through a function, so that paths of any length are fine: a
 * truncated one is simply not found. */
static void fmt(char *buf, size_t cap, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *buf, size_t cap, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, cap, f, ap);
    va_end(ap);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* -I and -L directories; returns 0, or -1 when they cannot be found. */
static int locate(char *inc1, char *inc2, char *libdir, size_t cap) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    *slash = 0;                                       /* the binary's directory */
    char probe[PATH_MAX + 64];
    for (const char *up = ".."; ; up = "../..") {     /* the build tree */
        fmt(probe, sizeof probe, "%s/%s/runtime/shardc_rt.h", self, up);
        fmt(libdir, cap, "%s/libshardc_lib.a", self);
        if (exists(probe) && exists(libdir)) {
            fmt(inc1, cap, "%s/%s/runtime", self, up);
            fmt(inc2, cap, "%s/%s/lib", self, up);
            fmt(libdir, cap, "%s", self);
            return 0;
        }
        if (strcmp(up, "../..") == 0)
            break;
    }
    fmt(probe, sizeof probe, "%s/../include/shardc_main.h", self);
    fmt(libdir, cap, "%s/../lib/libshardc_lib.a", self);
    if (exists(probe) && exists(libdir)) {           /* PREFIX/bin/shardc */
        fmt(inc1, cap, "%s/../include", self);
        fmt(inc2, cap, "%s/../include", self);
        fmt(libdir, cap, "%s/../lib", self);
        return 0;
    }
    return -1;
}

/* Where execvp finds the command `name`: `name` itself when it has a
 * slash, else its directory of $PATH.  Returns 0, or -1 when not found. */
static int resolve(const char *name, char *found, size_t cap) {
    if (strchr(name, '/')) {
        fmt(found, cap, "%s", name);
        return access(found, X_OK);
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        fmt(found, cap, "%.*s/%s", (int)n, p, name);
        if (n && access(found, X_OK) == 0)
            return 0;
        p += n + (p[n] == ':');
    }
    return -1;
}

static int on_path(const char *name) {
    char found[PATH_MAX];
    return resolve(name, found, sizeof found) == 0;
}

typedef struct {
    const Module *m;
    Entries fns;
} CArgs;

static int write_c_to(FILE *out, void *ctx) {
    const CArgs *a = ctx;
    char err[512];
    if (codegen_emit(a->m, a->fns, out, err, sizeof err)) {
        fprintf(stderr, "shardc: error: %s\n", err);
        return 1;
    }
    return 0;
}

static int write_c(const Module *m, Entries fns, const char *path) {
    return write_output(path, write_c_to, &(CArgs){m, fns});
}

typedef struct {
    const Module *m;
    Entries fns;
    const char *path;
} HArgs;

static int write_h_to(FILE *out, void *ctx) {
    const HArgs *a = ctx;
    char err[512];
    if (codegen_emit_header(a->m, a->fns, a->path, out, err, sizeof err)) {
        fprintf(stderr, "shardc: error: %s\n", err);
        return 1;
    }
    return 0;
}

/* -o prog.c also writes prog.h (-o prog: prog.h) next to it, declaring the
 * entry points; C on standard output or a device (-o /dev/stdout) gets no
 * header.  The .c does not include it: it is complete without. */
int compile_command(const Module *m, Entries fns, const char *out) {
    int rc = write_c(m, fns, out);
    struct stat st;
    if (rc || !out || (stat(out, &st) == 0 && !S_ISREG(st.st_mode)))
        return rc;
    size_t n = strlen(out), stem = n >= 2 && strcmp(out + n - 2, ".c") == 0 ? n - 2 : n;
    Arena arena = {0};
    char *h = arena_printf(&arena, "%.*s.h", (int)stem, out);
    rc = write_output(h, write_h_to, &(HArgs){m, fns, h});
    arena_free(&arena);
    return rc;
}

/* Where the headers and libraries are, and what a build links. */
typedef struct {
    char inc1[PATH_MAX], inc2[PATH_MAX], libdir[PATH_MAX];
    int mpi;
} BuildInputs;

/* The environment that changes what cc and mpicc do with the same command
 * line: include and library search paths, and OpenMPI's wrapper settings. */
static const char *const cc_environment[] = {"CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX",
                                             "COMPILER_PATH", "OMPI_CC", "OMPI_CFLAGS", "OMPI_CPPFLAGS",
                                             "OMPI_LDFLAGS", "OMPI_LIBS"};

/* The compiler named `cc`: where it is (size, modification time) and what
 * it says it is; with MPI, the compiler mpicc wraps as well. */
static void key_compiler(Sha256 *key, const char *cc, int mpi) {
    char found[PATH_MAX];
    cache_key_file_identity(key, "cc", resolve(cc, found, sizeof found) == 0 ? found : cc);
    if (mpi && getenv("OMPI_CC"))
        cache_key_file_identity(key, "ompi-cc", resolve(getenv("OMPI_CC"), found, sizeof found) == 0 ? found : "");
    if (cache_key_command_output(key, "cc --version", (char *const[]){(char *)cc, "--version", NULL}))
        cache_key_str(key, "cc --version", "failed");
}

/* The cache key of linking `src` by `argv` into `out`: everything that
 * decides the executable's bytes.  `lines` gets the C's line count. */
static int build_key(char *const *argv, const char *src, const char *out, const BuildInputs *in, char key[65],
                     long *lines) {
    Sha256 s;
    sha256_init(&s);
    /* Not shardc's binary: a rebuilt shardc that generates the same C and
     * calls cc the same way makes the same executable, and its tests then
     * rebuild only the programs whose C changed. */
    cache_key_str(&s, "shardc", SHARDC_VERSION);
    for (int i = 0; argv[i]; i++)      /* the temporary paths vary from build to build */
        cache_key_str(&s, "argv", argv[i] == src ? "<prog.c>" : argv[i] == out ? "<out>" : argv[i]);
    for (size_t i = 0; i < sizeof cc_environment / sizeof *cc_environment; i++)
        cache_key_str(&s, cc_environment[i], getenv(cc_environment[i]));
    key_compiler(&s, argv[0], in->mpi);
    cache_key_headers(&s, in->inc1);
    if (strcmp(in->inc1, in->inc2) != 0)
        cache_key_headers(&s, in->inc2);
    static const char *const libs[] = {"libshardc_lib.a", "libshardc_rt.a", "libshardc_rt_mpi.a"};
    for (int i = 0; i < 2 + in->mpi; i++) {
        char path[PATH_MAX + 32];
        fmt(path, sizeof path, "%s/%s", in->libdir, libs[i]);
        cache_key_file_identity(&s, "library", path);
    }
    int rc = cache_key_file_content(&s, "prog.c", src, lines);
    sha256_hex(&s, key);
    return rc;
}

/* The C's line count, for the progress line when there is no key to
 * compute. */
static long count_lines(const char *src) {
    Sha256 s;
    long lines = 0;
    sha256_init(&s);
    cache_key_file_content(&s, "prog.c", src, &lines);
    return lines;
}

typedef struct {
    Status *status;
    double t0;
    const char *src;
} CcTick;

/* While cc runs: the file it compiles and its seconds so far. */
static void cc_tick(void *ctx) {
    const CcTick *t = ctx;
    char tail[128];
    const char *slash = strrchr(t->src, '/');
    snprintf(tail, sizeof tail, ", cc %s %.1f s", slash ? slash + 1 : t->src, status_seconds() - t->t0);
    status_tail(t->status, tail);
}

/* Run cc; on a terminal its messages wait in `dir`/cc-errors until the
 * progress line is finished, so that they do not land inside it.  -v says
 * its command line. */
static int run_cc(char *const *argv, const char *src, const char *dir, Status *status) {
    char errors[PATH_MAX + 16], line[4096] = "";
    fmt(errors, sizeof errors, "%s/cc-errors", dir);
    int on = status && status->on;
    for (int i = 0; status && status->verbose && argv[i]; i++)
        fmt(line + strlen(line), sizeof line - strlen(line), "%s%s", i ? " " : "", argv[i]);
    status_note(status, "%s", line);
    CcTick tick = {status, status_seconds(), src};
    cc_tick(&tick);
    int rc = child_run_ticking(argv, 0, on ? errors : NULL, on ? cc_tick : NULL, &tick);
    status_add(status, "cc %.2f s", status_seconds() - tick.t0);
    FILE *f = on ? fopen(errors, "r") : NULL;
    if (f && fgetc(f) != EOF) {
        status_end(status);
        rewind(f);
        char buf[4096];
        for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;)
            fwrite(buf, 1, n, stderr);
    }
    if (f)
        fclose(f);
    if (on)
        remove(errors);
    return rc;
}

/* Compile and link by `argv`, or take the executable from the cache. */
static int cached_cc(char *const *argv, const char *src, const char *out, const char *dir, const BuildInputs *in,
                     const RunOptions *ro) {
    char key[65];
    long lines = 0;
    int keyed = ro->cache.enabled && build_key(argv, src, out, in, key, &lines) == 0;
    status_add(ro->status, "C %ld lines", keyed ? lines : count_lines(src));
    if (keyed && cache_fetch(&ro->cache, key, out)) {
        status_add(ro->status, "cached");
        return 0;
    }
    int rc = run_cc(argv, src, dir, ro->status);
    if (rc == 0 && keyed)
        cache_store(&ro->cache, key, out);
    return rc;
}

/* Emit `dir`/prog.c and link `out`; for MPI with mpicc and
 * libshardc_rt_mpi.a, which -u pulls in for lib/host/backend.c's weak reference:
 * the program then runs on MPI under a launcher, on threads without. */
static int build_in(const Module *m, Entries fns, const char *dir, const char *out, int mpi, const RunOptions *ro) {
    BuildInputs in = {.mpi = mpi};
    if (locate(in.inc1, in.inc2, in.libdir, PATH_MAX)) {
        status_end(ro->status);
        fprintf(stderr, "shardc: error: cannot find shardc_rt.h and libshardc_lib.a next to the shardc binary "
                        "(a build tree or PREFIX/include and PREFIX/lib)\n");
        return 1;
    }
    char probe[PATH_MAX + 32];
    fmt(probe, sizeof probe, "%s/libshardc_rt_mpi.a", in.libdir);
    if (mpi && !exists(probe)) {
        status_end(ro->status);
        fprintf(stderr, "shardc: error: the MPI backend's library %s is missing: build shardc where OpenMPI's "
                        "mpicc is installed (tools/install-deps installs it)\n", probe);
        return 1;
    }
    char src[PATH_MAX + 16];
    fmt(src, sizeof src, "%s/prog.c", dir);
    int rc = write_c(m, fns, src);
    child_stop_if_asked();         /* a signal during code generation */
    if (rc)
        return rc;
    char i1[PATH_MAX + 4], i2[PATH_MAX + 4], l[PATH_MAX + 4];
    fmt(i1, sizeof i1, "-I%s", in.inc1);
    fmt(i2, sizeof i2, "-I%s", in.inc2);
    fmt(l, sizeof l, "-L%s", in.libdir);
    Toolchain tc;               /* the compiler and flags the libraries were built with */
    if (toolchain_read(in.libdir, &tc))
        return 1;
    const char *cc = tc.cc;
    if (mpi) {                  /* mpicc wraps $CC (OpenMPI reads OMPI_CC) */
        setenv("OMPI_CC", cc, 0);
        cc = getenv("MPICC") && *getenv("MPICC") ? getenv("MPICC") : "mpicc";
    }
    /* -fopenmp: the loops run on each device's share of the cores
     * (docs/kernels.md, "Threads inside a device"); the kernel library is
     * built with it too, and oneDNN runs on the same OpenMP runtime.  GNU
     * ld spends ~0.25 s reading libdnnl.so's symbols, five times what the
     * compile of a generated program takes; gold links it in 0.05 s.
     * -fno-math-errno: sqrtf of a negative sets errno, a test and a call
     * in every element that keep a loop with a sqrt (Adam's, a layernorm's
     * rsqrt) scalar; nothing reads errno, and the results are the same. */
    char *argv[24 + TOOLCHAIN_MAX_FLAGS] = {(char *)cc, "-std=c11", "-O2", "-fno-math-errno", "-o", (char *)out, src, i1, i2, l,
                                            "-lshardc_lib", mpi ? "-lshardc_rt_mpi" : "-lshardc_rt", "-lshardc_rt",
                                            "-ldnnl", "-lopenblas", "-lm", "-pthread"};
    int n = 0;
    while (argv[n])
        n++;
    int sanitized = 0;
    for (int i = 0; i < tc.nflags; i++) {   /* -fopenmp (or $SHARDC_OPENMP), a sanitizer's flags */
        argv[n++] = tc.flags[i];
        sanitized |= strncmp(tc.flags[i], "-fsanitize=", 11) == 0;
    }
    /* Not with a sanitizer: gold warns of every ASan symbol it cannot export. */
    if (on_path("ld.gold") && !sanitized)
        argv[n++] = "-fuse-ld=gold";
    if (mpi)
        argv[n++] = "-Wl,-u,sc_mpi_create";
    if (ro->shared) {           /* the libraries are built -fPIC for this */
        argv[n++] = "-shared";
        argv[n++] = "-fPIC";
    }
    rc = cached_cc(argv, src, out, dir, &in, ro);
    if (rc) {
        status_end(ro->status);
        fprintf(stderr, "shardc: error: the C compiler '%s' failed on the generated %s (status %d)\n", cc, src, rc);
        return 1;
    }
    return 0;
}

static char *make_temp_dir(Arena *arena) {
    const char *t = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *dir = arena_printf(arena, "%s/shardc-XXXXXX", t);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "shardc: error: cannot create a temporary directory in '%s': %s\n", t, strerror(errno));
        return NULL;
    }
    child_guard_dir(dir);            /* removed if shardc is told to stop */
    return dir;
}

static void remove_temp(const char *dir, const char *const *names, int n) {
    char path[PATH_MAX + 64];
    for (int i = 0; i < n; i++) {
        fmt(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

int build_command(const Module *m, Entries fns, const char *out, const RunOptions *ro) {
    Arena arena = {0};
    char *dir = make_temp_dir(&arena);
    int rc = dir ? build_in(m, fns, dir, out, ro->mpi, ro) : 1;
    status_end(ro->status);
    if (dir)
        remove_temp(dir, (const char *[]){"prog.c"}, 1);
    child_guard_dir(NULL);
    arena_free(&arena);
    return rc;
}

static int device_count(const Module *m) {
    int n = 1;
    for (int a = 0; a < m->naxes; a++)
        n *= (int)m->axis_size[a];
    return n;
}

/* The program died by `sig`: say which, and how to look closer. */
static void report_signal(int sig) {
    char buf[32];
    fprintf(stderr, "shardc: error: the program was killed by %s (%s)", child_signal_name(sig, buf, sizeof buf),
            strsignal(sig));
    if (sig == SIGKILL)
        fprintf(stderr, "; when nobody killed it, the system was probably out of memory (dmesg says)");
    fprintf(stderr, "; to debug it, build it with 'shardc build' (the same --fn, --mesh and --const) and run "
                    "'gdb --args PROG --in ... --out DIR',\n");
}

/* Run `prog` (in shardc's temporary folder) on the inputs; on MPI through
 * mpirun with np processes of ndev / np devices each (the program's
 * --local-devices, which overrides a SHARDC_LOCAL_DEVICES of the caller's),
 * on shared memory (--mca btl self,vader, under the ob1 messaging layer:
 * naming it spares each process opening the others, 0.2 s of every launch
 * here), with more processes than cores allowed (--oversubscribe: otherwise
 * idle ranks spin) and not bound.  OpenMPI's session folder goes into the
 * temporary folder too (orte_tmpdir_base), removed with it: an mpirun
 * stopped while its ranks start can leave it behind ($TMPDIR/ompi.HOST.UID,
 * once in check_driver's `timeout 4` case). */
static int run_program(const char *prog, const char *const *ins, int nins, const char *out_dir, int mpi, int np,
                       int ndev, const RunOptions *ro, int quiet) {
    Arena arena = {0};
    char **argv = arena_alloc(&arena, sizeof(char *) * (size_t)(2 * nins + 34)), nps[16], local[16];
    char session[PATH_MAX + 16];         /* OpenMPI's: "mpi" beside prog */
    int k = 0;
    if (mpi) {
        fmt(session, sizeof session, "%s", prog);
        char *slash = strrchr(session, '/');
        fmt(slash ? slash + 1 : session, 4, "mpi");
        mkdir(session, 0700);
        argv[k++] = getenv("MPIRUN") && *getenv("MPIRUN") ? getenv("MPIRUN") : "mpirun";
        if (geteuid() == 0)
            argv[k++] = "--allow-run-as-root";
        snprintf(nps, sizeof nps, "%d", np);
        const char *flags[] = {"--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
                               "--mca", "pml", "ob1", "--mca", "orte_tmpdir_base", session, "-np", nps};
        for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
            argv[k++] = (char *)flags[i];
    }
    argv[k++] = (char *)prog;
    if (mpi) {
        snprintf(local, sizeof local, "%d", ndev / np);
        argv[k++] = "--local-devices";
        argv[k++] = local;
    }
    for (int i = 0; i < nins; i++) {
        argv[k++] = "--in";
        argv[k++] = (char *)ins[i];
    }
    argv[k++] = "--out";
    argv[k++] = (char *)out_dir;
    /* The --check run (quiet) resumes as the main one does, but writes no
     * checkpoint over the main run's. */
    const char *const steps[] = {"--steps", ro->steps, "--log-every", ro->log_every, "--resume", ro->resume,
                                 "--checkpoint", quiet ? NULL : ro->checkpoint,
                                 "--checkpoint-every", quiet ? NULL : ro->checkpoint_every};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i += 2)
        if (steps[i + 1]) {
            argv[k++] = (char *)steps[i];
            argv[k++] = (char *)steps[i + 1];
        }
    if (ro->cast)
        argv[k++] = "--cast";
    if (quiet)                     /* nor its progress on standard error */
        setenv("SHARDC_PROGRESS", "0", 1);
    int rc = child_run(argv, quiet, NULL);
    if (quiet)
        unsetenv("SHARDC_PROGRESS");
    if (mpi)
        child_remove_tree(session);
    arena_free(&arena);
    if (rc > 128 && !mpi)          /* mpirun reports a rank's signal itself */
        report_signal(rc - 128);
    return rc == 0 ? 0 : rc == 2 ? 2 : rc > 128 && !mpi ? rc : 1;
}

/* --check: compare the results with the one-device run's. */
static int compare_results(const Module *m, int f, const char *out_dir, const char *ref_dir) {
    int bad = 0;
    for (int i = 0; i < m->fns[f].nresults; i++) {
        char a_path[PATH_MAX + 32], b_path[PATH_MAX + 32], err[512], member[32];
        size_t len = strlen(out_dir);
        int npz = len > 4 && strcmp(out_dir + len - 4, ".npz") == 0;   /* --out results.npz */
        fmt(member, sizeof member, "result%d", i);
        fmt(a_path, sizeof a_path, npz ? "%s" : "%s/result%d.npy", out_dir, i);
        fmt(b_path, sizeof b_path, "%s/result%d.npy", ref_dir, i);
        sk_npy_shape as, bs;
        double *a = NULL, *b = NULL;         /* elements, malloc'd by lib/host/npy.c */
        sk_npy_source src = {a_path, npz ? member : NULL, 0};
        if (sk_npy_read_source(&src, NULL, &as, &a, NULL, err, sizeof err) ||
            sk_npy_read(b_path, &as, &bs, &b, err, sizeof err)) {
            fprintf(stderr, "shardc: error: --check: %s\n", err);
            free(a);
            bad = 1;
            continue;
        }
        int64_t n = 1;
        for (int d = 0; d < as.rank; d++)
            n *= as.dims[d];
        double abs_err = 0, rel_err = 0;
        int64_t nan_diff = 0;
        for (int64_t e = 0; e < n; e++) {
            double x = a[e], y = b[e], dx = fabs(x - y);
            if (isnan(x) != isnan(y))
                nan_diff++;
            else if (!isnan(x) && x != y) {
                abs_err = dx > abs_err || isnan(dx) ? dx : abs_err;
                if (y != 0 && dx / fabs(y) > rel_err)
                    rel_err = dx / fabs(y);
            }
        }
        printf("check: result%d: largest absolute error %.3g, largest relative error %.3g", i, abs_err, rel_err);
        printf(nan_diff ? ", %lld elements NaN in one run only\n" : "\n", (long long)nan_diff);
        free(a);
        free(b);
    }
    if (!bad)
        printf("check: against '%s' unpartitioned on one device (relative error: |x - y| / |y| where y != 0)\n",
               sym_name(m->syms, m->fns[f].sym));
    return bad;
}

int run_command(const Module *m, int f, const char *const *ins, int nins, const char *out_dir, const RunOptions *ro) {
    int ndev = device_count(m), np = ro->np ? ro->np : ndev;
    if (ro->mpi && ndev % np) {
        fprintf(stderr,
                "shardc: error: --np %d: the mesh has %d device%s, which %d processes cannot share evenly "
                "(each process runs the same number of devices)\n",
                np, ndev, ndev == 1 ? "" : "s", np);
        return 2;
    }
    Arena arena = {0};
    char *dir = make_temp_dir(&arena);
    if (!dir) {
        arena_free(&arena);
        return 1;
    }
    char prog[PATH_MAX + 16], ref[PATH_MAX + 16], ref_out[PATH_MAX + 16];
    fmt(prog, sizeof prog, "%s/prog", dir);
    fmt(ref, sizeof ref, "%s/one", dir);
    fmt(ref_out, sizeof ref_out, "%s/one-out", dir);
    int rc = build_in(m, (Entries){1, &f}, dir, prog, ro->mpi, ro);
    if (!rc && ro->check) {               /* the same function, compiled for one device */
        status_begin(ro->status, "shardc: --check: '%s' on one device", sym_name(m->syms, m->fns[f].sym));
        rc = build_in(ro->check, (Entries){1, &ro->check_fn}, dir, ref, 0, ro);
    }
    status_end(ro->status);            /* the programs print next */
    /* The one-device run first (quiet: its --steps log unprinted), as the
     * program's --checkpoint may overwrite the --resume file both read. */
    if (!rc && ro->check)
        rc = run_program(ref, ins, nins, ref_out, 0, 1, 1, ro, 1);
    if (!rc)
        rc = run_program(prog, ins, nins, out_dir, ro->mpi, np, ndev, ro, 0);
    if (!rc && ro->check)
        rc = compare_results(m, f, out_dir, ref_out);
    if (ro->check)
        child_remove_tree(ref_out);   /* the one-device run's results: result0.npy, ..., NAME.npy */
    remove_temp(dir, (const char *[]){"prog.c", "prog", "one"}, 3);
    child_guard_dir(NULL);
    arena_free(&arena);
    return rc;
}
