/* The C compiler and flags the kernel library and runtime were built with,
 * recorded by the Makefile in BUILD/shardc-toolchain (installed as
 * PREFIX/lib/shardc-toolchain), so that `shardc build` and `run` link a
 * generated program as the libraries need: a library built by clang with
 * -fopenmp calls LLVM's OpenMP runtime (__kmpc_*), which gcc's -fopenmp
 * (libgomp) does not provide; one built with -fsanitize needs it at the
 * link too.  $CC overrides the compiler, $SHARDC_OPENMP the OpenMP flags,
 * and $SHARDC_CFLAGS adds flags after all others (docs/cli.md, "The C
 * compiler"). */
#ifndef SHARDC_TOOLCHAIN_H
#define SHARDC_TOOLCHAIN_H

enum { TOOLCHAIN_MAX_FLAGS = 16 };

typedef struct {
    char cc[256];                   /* the compiler to run */
    char text[1024];                /* the flags' words, NUL-separated in place */
    char *flags[TOOLCHAIN_MAX_FLAGS + 1]; /* OpenMP's, the libraries' other link flags, $SHARDC_CFLAGS; NULL-ended */
    int nflags;
} Toolchain;

/* Read `libdir`/shardc-toolchain (absent: cc and -fopenmp, as a tree built
 * before it existed), then apply $CC, $SHARDC_OPENMP and $SHARDC_CFLAGS.  Returns 0, or -1
 * with a message on stderr when the file is malformed. */
int toolchain_read(const char *libdir, Toolchain *t);

#endif
