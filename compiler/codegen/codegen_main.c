/* The main() of a generated program: a table of the chosen function's
 * parameters and results (global and local shapes, shardings) and the mesh,
 * for sk_main (lib/driver.c), which splits the .npy inputs into blocks,
 * runs every device and assembles the results. */
#include "internal.h"

/* One parameter's or result's place in the global array (lib/shardc_main.h). */
static void emit_arg_desc(const Module *m, FILE *o, const char *name, const Sig *sig) {
    const char *var = sig->name ? sym_name(m->syms, sig->name - 1) : NULL;
    Shape local = shape_local(m, &sig->type, &sig->sh);
    fprintf(o, "    {\"%s\", {%s, %d, ", name, sk_dtype_of[sig->type.dtype], sig->type.rank);
    emit_list(o, sig->type.dims, sig->type.rank);
    fputs("}, ", o);
    emit_list(o, local.dims, local.rank);
    int64_t dim[MAX_AXES], pos[MAX_AXES];
    for (int a = 0; a < MAX_AXES; a++) {
        dim[a] = sig->sh.known && a < m->naxes && sig->sh.dim[a] >= 0 ? sig->sh.dim[a] : -1;
        pos[a] = dim[a] >= 0 ? sig->sh.pos[a] : 0;
    }
    fputs(", ", o);
    emit_list(o, dim, m->naxes ? m->naxes : 1);
    fputs(", ", o);
    emit_list(o, pos, m->naxes ? m->naxes : 1);
    if (var)
        fprintf(o, ", \"%s\"},\n", var);
    else
        fputs(", NULL},\n", o);
}

void emit_main(const Module *m, const Fn *fn, FILE *o, Arena *arena) {
    const char *fname = sym_name(m->syms, fn->sym);
    fputs("\n/* ---- main: read the inputs, run every device, write the results ---- */\n\n", o);
    fprintf(o, "static const sk_arg_desc params_[] = {\n");
    int *param = param_insts(fn, arena);
    for (int i = 0; i < fn->nparams; i++) {
        int v = param[i];
        const char *pn = v >= 0 && fn->insts[v].sym >= 0 ? sym_name(m->syms, fn->insts[v].sym) : "?";
        emit_arg_desc(m, o, pn, &fn->params[i]);
    }
    if (!fn->nparams)
        fputs("    {\"\", {0, 0, {0}}, {0}, {-1}, {0}, NULL},\n", o);
    fputs("};\n\nstatic const sk_arg_desc results_[] = {\n", o);
    for (int i = 0; i < fn->nresults; i++) {
        char name[32];
        snprintf(name, sizeof name, "result%d", i);
        emit_arg_desc(m, o, name, &fn->results[i]);
    }
    fputs("};\n\nstatic int entry_(sc_device *dev, const void *const *params, void *const *results) {\n", o);
    fputs("    (void)params;\n    return ", o);
    emit_fn_cname(o, m, fn);
    fputs("(dev", o);
    for (int i = 0; i < fn->nparams; i++)
        fprintf(o, ", params[%d]", i);
    for (int i = 0; i < fn->nresults; i++)
        fprintf(o, ", results[%d]", i);
    fputs(");\n}\n\n", o);
    fprintf(o, "static const sk_program program_ = {\n    \"%s\",\n    {%d, ", fname, m->naxes);
    emit_list(o, m->axis_size, m->naxes ? m->naxes : 1);
    fputs(", {", o);
    for (int a = 0; a < m->naxes; a++)
        fprintf(o, "%s\"%s\"", a ? ", " : "", sym_name(m->syms, m->axis_sym[a]));
    fprintf(o, "%s}},\n    %d, %d, params_, results_, entry_,\n};\n\n", m->naxes ? "" : "NULL", fn->nparams,
            fn->nresults);
    fputs("int main(int argc, char **argv) {\n    return sk_main(argc, argv, &program_);\n}\n", o);
}

