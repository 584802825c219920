/* Every entry point's table of its parameters and results (global and local
 * shapes, shardings) and the mesh: for its shardc_NAME_global wrapper,
 * whose session (lib/host/session.c) splits global arrays into blocks, runs
 * every device and assembles the results; and for the main() of a
 * generated program, sk_main (lib/host/driver.c), which does the same with .npy
 * files. */
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

/* The static tables of fn (sk_program: its parameters' and results' places
 * in the global arrays, the mesh, an entry taking arrays of blocks), named
 * program_shardc_NAME and so on: no function's C name starts so. */
static void emit_program(const Module *m, const Fn *fn, FILE *o, Arena *arena) {
    fputs("static const sk_arg_desc params_", o);
    emit_fn_cname(o, m, fn);
    fputs("[] = {\n", o);
    int *param = param_insts(fn, arena);
    for (int i = 0; i < fn->nparams; i++) {
        int v = param[i];
        const char *pn = v >= 0 && fn->insts[v].sym >= 0 ? sym_name(m->syms, fn->insts[v].sym) : "?";
        emit_arg_desc(m, o, pn, &fn->params[i]);
    }
    if (!fn->nparams)
        fputs("    {\"\", {0, 0, {0}}, {0}, {-1}, {0}, NULL},\n", o);
    fputs("};\n\nstatic const sk_arg_desc results_", o);
    emit_fn_cname(o, m, fn);
    fputs("[] = {\n", o);
    for (int i = 0; i < fn->nresults; i++) {
        char name[32];
        snprintf(name, sizeof name, "result%d", i);
        emit_arg_desc(m, o, name, &fn->results[i]);
    }
    fputs("};\n\nstatic int entry_", o);
    emit_fn_cname(o, m, fn);
    fputs("(sc_device *dev, const void *const *params, void *const *results) {\n    (void)params;\n    return ", o);
    emit_fn_cname(o, m, fn);
    fputs("(dev", o);
    for (int i = 0; i < fn->nparams; i++)
        fprintf(o, ", params[%d]", i);
    for (int i = 0; i < fn->nresults; i++)
        fprintf(o, ", results[%d]", i);
    fputs(");\n}\n\nstatic const sk_program program_", o);
    emit_fn_cname(o, m, fn);
    fprintf(o, " = {\n    \"%s\",\n    {%d, ", sym_name(m->syms, fn->sym), m->naxes);
    emit_list(o, m->axis_size, m->naxes ? m->naxes : 1);
    fputs(", {", o);
    for (int a = 0; a < m->naxes; a++)
        fprintf(o, "%s\"%s\"", a ? ", " : "", sym_name(m->syms, m->axis_sym[a]));
    fprintf(o, "%s}},\n    %d, %d, params_", m->naxes ? "" : "NULL", fn->nparams, fn->nresults);
    emit_fn_cname(o, m, fn);
    fputs(", results_", o);
    emit_fn_cname(o, m, fn);
    fputs(", entry_", o);
    emit_fn_cname(o, m, fn);
    fputs(",\n};\n", o);
}

/* shardc_NAME_global: fn on global arrays, through a session
 * (lib/host/session.c), on the backend chosen when the program runs. */
static void emit_global(const Module *m, const Fn *fn, char **names, FILE *o, Arena *arena) {
    int *param = param_insts(fn, arena);
    emit_global_signature(o, m, fn, names, param);
    fputs(" {\n    const void *params[] = {", o);
    for (int i = 0; i < fn->nparams; i++) {
        if (param[i] >= 0)
            fprintf(o, "%s%s", i ? ", " : "", names[param[i]]);
        else
            fprintf(o, "%sparam%d", i ? ", " : "", i);
    }
    fputs(fn->nparams ? "};\n    void *results[] = {" : "NULL};\n    void *results[] = {", o);
    for (int i = 0; i < fn->nresults; i++)
        fprintf(o, "%sresult%d", i ? ", " : "", i);
    fputs(fn->nresults ? "};\n" : "NULL};\n", o);
    fputs("    return sk_session_call(s, &program_", o);
    emit_fn_cname(o, m, fn);
    fputs(", params, results);\n}\n", o);
}

void emit_programs(const Module *m, const char *in_file, const char ***irnames, FILE *o,
                   Arena *arena) {
    fputs("\n/* ---- the entry points on global arrays (shardc_session.h) ---- */\n", o);
    for (int f = 0; f < m->nfns; f++) {
        const Fn *fn = &m->fns[f];
        if (!in_file[f] || !fn_exported(fn))
            continue;
        fputc('\n', o);
        emit_program(m, fn, o, arena);
        fputc('\n', o);
        emit_global(m, fn, c_value_names(fn, irnames[f], arena), o, arena);
    }
}

void emit_main(const Module *m, Entries main_fns, FILE *o) {
    fputs("\n/* ---- main: read the inputs, run every device, write the results ---- */\n\n", o);
    if (main_fns.n == 1) {
        fputs("int main(int argc, char **argv) {\n    return sk_main(argc, argv, &program_", o);
        emit_fn_cname(o, m, &m->fns[main_fns.fn[0]]);
        fputs(");\n}\n", o);
        return;
    }
    fputs("/* One of several fns, named by --fn on the command line (lib/host/entries.c). */\n"
          "static const sk_program *const programs[] = {\n", o);
    for (int i = 0; i < main_fns.n; i++) {
        fputs("    &program_", o);
        emit_fn_cname(o, m, &m->fns[main_fns.fn[i]]);
        fputs(",\n", o);
    }
    fprintf(o, "};\n\nint main(int argc, char **argv) {\n    return sk_main_of(argc, argv, programs, %d);\n}\n",
            main_fns.n);
}
