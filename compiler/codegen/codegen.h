/* C code generation (issue 4): one C11 file from a scheduled module, whose
 * per-device functions call the kernel library (lib/) and the runtime
 * (runtime/), with a main() for one function (lib/driver.c). */
#ifndef SHARDC_CODEGEN_H
#define SHARDC_CODEGEN_H

#include "../ir/ir.h"

#include <stdio.h>

/* Emit the program; `main_fn` (a function index, or -1 for none) gets a
 * main().  Returns 0, or -1 with a message in err (an op or function that
 * cannot be emitted). */
int codegen_emit(const Module *m, int main_fn, FILE *out, char *err, size_t errlen);

#endif
