/* C code generation (issue 4): one C11 file from a scheduled module, whose
 * per-device functions call the kernel library (lib/) and the runtime
 * (runtime/) and run chains of elementwise instructions as loops, with a
 * main() for one function or several (lib/host/driver.c); and a header declaring the
 * entry points (docs/codegen.md). */
#ifndef SHARDC_CODEGEN_H
#define SHARDC_CODEGEN_H

#include "../ir/ir.h"

#include <stdio.h>

/* The fns a file's main() runs (function indices): none, and the file is a
 * library of every per-device function; one; or several, of which main()
 * runs the one its --fn names (lib/host/entries.c). */
typedef struct {
    int n;
    const int *fn;
} Entries;

/* Emit the program; with entries, a main() for them, and the file then
 * holds only them and the fns they call.  Returns 0, or -1 with a message
 * in err (an op or function that cannot be emitted). */
int codegen_emit(const Module *m, Entries main_fns, FILE *out, char *err, size_t errlen);
/* Emit the header that declares the entry points (shardc_NAME, one per fn
 * and spmd fn the C file holds: see codegen_emit's main_fns) with their ABI; `path` is the header's file name,
 * for its include guard (prog.h: SHARDC_PROG_H).  Returns 0: err is there
 * for a failure like codegen_emit's, which the header has none of today. */
int codegen_emit_header(const Module *m, Entries main_fns, const char *path, FILE *out, char *err, size_t errlen);
/* The signature of fn f's global entry point, for the Python package
 * (signature.c, `shardc build --shared`).  Returns 0. */
int codegen_emit_signature(const Module *m, int f, FILE *out);

#endif
