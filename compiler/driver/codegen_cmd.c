/* `shardc compile`, `build` and `run`.  The headers and libraries are found
 * relative to the shardc binary: in the build tree (BUILD/shardc next to
 * libshardc_*.a, runtime/ and lib/ one or two levels up) or in an installed
 * PREFIX (bin/shardc, include/shardc/, lib/). */
#include "codegen_cmd.h"
#include "output.h"

#include "../codegen/codegen.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
    fmt(probe, sizeof probe, "%s/../include/shardc/shardc_main.h", self);
    fmt(libdir, cap, "%s/../lib/libshardc_lib.a", self);
    if (exists(probe) && exists(libdir)) {           /* PREFIX/bin/shardc */
        fmt(inc1, cap, "%s/../include/shardc", self);
        fmt(inc2, cap, "%s/../include/shardc", self);
        fmt(libdir, cap, "%s/../lib", self);
        return 0;
    }
    return -1;
}

static int spawn(char *const *argv) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "shardc: error: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

typedef struct {
    const Module *m;
    int fn;
} CArgs;

static int write_c_to(FILE *out, void *ctx) {
    const CArgs *a = ctx;
    char err[512];
    if (codegen_emit(a->m, a->fn, out, err, sizeof err)) {
        fprintf(stderr, "shardc: error: %s\n", err);
        return 1;
    }
    return 0;
}

static int write_c(const Module *m, int f, const char *path) { return write_output(path, write_c_to, &(CArgs){m, f}); }

int compile_command(const Module *m, int f, const char *out) { return write_c(m, f, out); }

/* Emit `dir`/prog.c and link `out`. */
static int build_in(const Module *m, int f, const char *dir, const char *out) {
    char inc1[PATH_MAX], inc2[PATH_MAX], libdir[PATH_MAX];
    if (locate(inc1, inc2, libdir, PATH_MAX)) {
        fprintf(stderr, "shardc: error: cannot find shardc_rt.h and libshardc_lib.a next to the shardc binary "
                        "(a build tree or PREFIX/include/shardc and PREFIX/lib)\n");
        return 1;
    }
    char src[PATH_MAX + 16];
    fmt(src, sizeof src, "%s/prog.c", dir);
    int rc = write_c(m, f, src);
    if (rc)
        return rc;
    char i1[PATH_MAX + 4], i2[PATH_MAX + 4], l[PATH_MAX + 4];
    fmt(i1, sizeof i1, "-I%s", inc1);
    fmt(i2, sizeof i2, "-I%s", inc2);
    fmt(l, sizeof l, "-L%s", libdir);
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    char *argv[] = {(char *)cc, "-std=c11", "-O2", "-o", (char *)out, src, i1, i2, l, "-lshardc_lib", "-lshardc_rt",
                    "-lopenblas", "-lm", "-pthread", NULL};
    rc = spawn(argv);
    if (rc) {
        fprintf(stderr, "shardc: error: the C compiler '%s' failed on the generated %s (status %d)\n", cc, src, rc);
        return 1;
    }
    return 0;
}

static char *make_temp_dir(void) {
    const char *t = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    size_t n = strlen(t) + 32;
    char *dir = malloc(n);
    if (dir)
        snprintf(dir, n, "%s/shardc-XXXXXX", t);
    if (dir && !mkdtemp(dir)) {
        fprintf(stderr, "shardc: error: cannot create a temporary directory in '%s': %s\n", t, strerror(errno));
        free(dir);
        return NULL;
    }
    return dir;
}

static void remove_temp(char *dir, const char *const *names, int n) {
    char path[PATH_MAX + 64];
    for (int i = 0; i < n; i++) {
        fmt(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
    free(dir);
}

int build_command(const Module *m, int f, const char *out) {
    char *dir = make_temp_dir();
    if (!dir)
        return 1;
    int rc = build_in(m, f, dir, out);
    remove_temp(dir, (const char *[]){"prog.c"}, 1);
    return rc;
}

int run_command(const Module *m, int f, const char *const *ins, int nins, const char *out_dir) {
    char *dir = make_temp_dir();
    if (!dir)
        return 1;
    char prog[PATH_MAX + 16];
    fmt(prog, sizeof prog, "%s/prog", dir);
    int rc = build_in(m, f, dir, prog);
    if (!rc) {
        char **argv = calloc((size_t)(2 * nins + 4), sizeof(char *));
        int k = 0;
        argv[k++] = prog;
        for (int i = 0; i < nins; i++) {
            argv[k++] = "--in";
            argv[k++] = (char *)ins[i];
        }
        argv[k++] = "--out";
        argv[k++] = (char *)out_dir;
        rc = spawn(argv);
        free(argv);
        rc = rc == 0 ? 0 : rc == 2 ? 2 : 1;
    }
    remove_temp(dir, (const char *[]){"prog.c", "prog"}, 2);
    return rc;
}
