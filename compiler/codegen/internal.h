/* Helpers shared by codegen.c (the functions) and codegen_main.c (main()). */
#ifndef SHARDC_CODEGEN_INTERNAL_H
#define SHARDC_CODEGEN_INTERNAL_H

#include "../ir/ir.h"

#include <stdio.h>

extern const char *const sk_dtype_of[];   /* "SK_F32", ... by dtype */
char *fn_cname(const Module *m, const Fn *fn);          /* fn_NAME, malloc'd */
void emit_list(FILE *o, const char *type, const int64_t *x, int n);   /* {1, 2} */
int param_inst(const Fn *fn, int i);      /* the parameter(i) instruction, or -1 */
/* main() for function fn: the sk_program table lib/driver.c reads. */
void emit_main(const Module *m, const Fn *fn, FILE *o);

#endif
