/* The signature file of `shardc build --shared` (docs/python.md): what the
 * Python package needs to call a function's global entry point through
 * ctypes, in lines of words that need no C parser.
 *
 *   shardc-signature 1
 *   fn NAME CNAME                      CNAME: shardc_NAME_global
 *   mesh AXIS SIZE                     one line per axis, in order
 *   param NAME DTYPE RANK DIM...       one line per C parameter, in order
 *   result NAME DTYPE RANK DIM...      one per C result; NAME "-" when unnamed
 *
 * NAMEs are the global arrays' names as prog.h lists them: a record's
 * fields by their paths (p.w1, p.l1.w), since records are gone after
 * checking (docs/language.md, "Records"). */
#include "codegen.h"
#include "internal.h"

static void shape_words(FILE *o, const Shape *t) {
    fprintf(o, " %s %d", dtype_name[t->dtype], t->rank);
    for (int d = 0; d < t->rank; d++)
        fprintf(o, " %lld", (long long)t->dims[d]);
    fputc('\n', o);
}

int codegen_emit_signature(const Module *m, int f, FILE *o) {
    const Fn *fn = &m->fns[f];
    Arena arena = {0};
    int *param = param_insts(fn, &arena);
    fprintf(o, "shardc-signature 1\nfn %s ", sym_name(m->syms, fn->sym));
    emit_fn_cname(o, m, fn);
    fputs("_global\n", o);
    for (int a = 0; a < m->naxes; a++)
        fprintf(o, "mesh %s %lld\n", sym_name(m->syms, m->axis_sym[a]), (long long)m->axis_size[a]);
    for (int i = 0; i < fn->nparams; i++) {
        int v = param[i];
        if (v >= 0 && fn->insts[v].sym >= 0)
            fprintf(o, "param %s", sym_name(m->syms, fn->insts[v].sym));
        else
            fprintf(o, "param param%d", i);
        shape_words(o, &fn->params[i].type);
    }
    for (int i = 0; i < fn->nresults; i++) {
        const Sig *r = &fn->results[i];
        fprintf(o, "result %s", r->name ? sym_name(m->syms, r->name - 1) : "-");
        shape_words(o, &r->type);
    }
    arena_free(&arena);
    return 0;
}
