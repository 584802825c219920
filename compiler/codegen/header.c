/* The entry points: their C names and signatures, and prog.h, the header
 * that declares them with their ABI (docs/codegen.md). */
#include "codegen.h"
#include "internal.h"

#include <ctype.h>
#include <string.h>

int emit_fn_cname(FILE *o, const Module *m, const Fn *fn) {
    const char *s = sym_name(m->syms, fn->sym);
    const char *prefix = fn->kept_global ? "local_" : fn->spec_of ? "spec_" : "shardc_";
    size_t n = strlen(s);
    if (fn->kept_global && n > 6 && strcmp(s + n - 6, ".local") == 0)
        n -= 6;                              /* f.local is local_f */
    fputs(prefix, o);
    for (size_t i = 0; i < n; i++)
        fputc(isalnum((unsigned char)s[i]) ? s[i] : '_', o);
    return (int)(strlen(prefix) + n);
}

static const Shape *param_type(const Fn *fn, const int *param, int i) {
    return param[i] >= 0 ? &fn->insts[param[i]].type : &fn->params[i].type;
}

/* Lines are wrapped before 100 columns, continued under the first parameter. */
enum { LINE_WIDTH = 100 };

static void emit_param(FILE *o, int *col, int indent, const char *text) {
    int n = (int)strlen(text);
    if (*col + 2 + n + 2 > LINE_WIDTH) {
        fprintf(o, ",\n%*s%s", indent, "", text);
        *col = indent + n;
    } else {
        fprintf(o, ", %s", text);
        *col += 2 + n;
    }
}

/* The signature after `first` (the device, or the session): fn's
 * parameters and results, as pointers to their element type. */
static void emit_args(FILE *o, const Fn *fn, char **names, const int *param, int col,
                      const char *first) {
    char text[256];
    col += fprintf(o, "(%s", first);
    int indent = col - (int)strlen(first);
    if (indent > 40)
        indent = 8;
    for (int i = 0; i < fn->nparams; i++) {
        const char *t = ctype_of[param_type(fn, param, i)->dtype];
        if (names && param[i] >= 0)
            snprintf(text, sizeof text, "const %s *%s", t, names[param[i]]);
        else
            snprintf(text, sizeof text, "const %s *param%d", t, i);
        emit_param(o, &col, indent, text);
    }
    for (int i = 0; i < fn->nresults; i++) {
        snprintf(text, sizeof text, "%s *result%d", ctype_of[result_type(fn, i)->dtype], i);
        emit_param(o, &col, indent, text);
    }
    fputc(')', o);
}

void emit_signature(FILE *o, const Module *m, const Fn *fn, char **names, const int *param) {
    int col = fprintf(o, "%sint ", fn_exported(fn) ? "" : "SC_MAYBE_UNUSED static ");
    col += emit_fn_cname(o, m, fn);
    emit_args(o, fn, names, param, col, "sc_device *dev");
}

void emit_global_signature(FILE *o, const Module *m, const Fn *fn, char **names, const int *param) {
    int col = fprintf(o, "int ");
    col += emit_fn_cname(o, m, fn);
    col += fprintf(o, "_global");
    emit_args(o, fn, names, param, col, "sk_session *s");
}

/* sym's C spelling, as emit_fn_cname writes it, equals name + "_global". */
static int is_global_of(const char *sym, const char *name) {
    size_t n = strlen(name);
    if (strlen(sym) != n + 7 || strcmp(sym + n, "_global") != 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char a = isalnum((unsigned char)sym[i]) ? sym[i] : '_', b = isalnum((unsigned char)name[i]) ? name[i] : '_';
        if (a != b)
            return 0;
    }
    return 1;
}

const char *global_name_clash(const Module *m, const char *in_file, Arena *arena) {
    for (int f = 0; f < m->nfns; f++)
        for (int g = 0; in_file[f] && fn_exported(&m->fns[f]) && g < m->nfns; g++) {
            const char *fs = sym_name(m->syms, m->fns[f].sym), *gs = sym_name(m->syms, m->fns[g].sym);
            if (in_file[g] && fn_exported(&m->fns[g]) && is_global_of(gs, fs))
                return arena_printf(arena, "'%s' is named like the global entry point of '%s' (shardc_%s_global): "
                                           "rename one", gs, fs, fs);
        }
    return NULL;
}

/* One line per parameter and result: its C name, its local block, and the
 * global array it is a block of, with its sharding. */
static void abi_line(FILE *o, const Module *m, const char *cname, int width, const Shape *local, const char *gname,
                     const Sig *sig) {
    fprintf(o, " *   %-*s ", width, cname);
    ir_print_shape(o, local);
    fputs(", the block of ", o);
    if (gname)
        fprintf(o, "%s: ", gname);
    ir_print_shape(o, &sig->type);
    ir_print_sharding(o, m, &sig->type, &sig->sh);
    fputc('\n', o);
}

void emit_abi_comment(FILE *o, const Module *m, const Fn *fn, char **names, const int *param) {
    fprintf(o, "/* %s %s: one device's blocks\n", fn->spmd ? "spmd fn" : "fn", sym_name(m->syms, fn->sym));
    int width = 7;                           /* "result0" */
    for (int i = 0; i < fn->nparams; i++)
        if (param[i] >= 0 && (int)strlen(names[param[i]]) > width)
            width = (int)strlen(names[param[i]]);
    for (int i = 0; i < fn->nparams; i++) {
        char pn[32];
        snprintf(pn, sizeof pn, "param%d", i);
        int v = param[i];
        abi_line(o, m, v >= 0 ? names[v] : pn, width, param_type(fn, param, i),
                 v >= 0 && fn->insts[v].sym >= 0 ? sym_name(m->syms, fn->insts[v].sym) : NULL, &fn->params[i]);
    }
    for (int i = 0; i < fn->nresults; i++) {
        char rn[32];
        snprintf(rn, sizeof rn, "result%d", i);
        const Sig *r = &fn->results[i];      /* `return l, w`: the block of w */
        abi_line(o, m, rn, width, result_type(fn, i), r->name ? sym_name(m->syms, r->name - 1) : NULL, r);
    }
    fputs(" */\n", o);
}

/* One line per parameter and result of fn on global arrays: its C name,
 * and the global array with its sharding. */
void emit_global_comment(FILE *o, const Module *m, const Fn *fn, char **names, const int *param) {
    fprintf(o, "/* %s %s on global arrays\n", fn->spmd ? "spmd fn" : "fn", sym_name(m->syms, fn->sym));
    int width = 7;                           /* "result0" */
    for (int i = 0; i < fn->nparams; i++)
        if (param[i] >= 0 && (int)strlen(names[param[i]]) > width)
            width = (int)strlen(names[param[i]]);
    for (int i = 0; i < fn->nparams + fn->nresults; i++) {
        char cn[32];
        const Sig *sig = i < fn->nparams ? &fn->params[i] : &fn->results[i - fn->nparams];
        int v = i < fn->nparams ? param[i] : -1;
        snprintf(cn, sizeof cn, i < fn->nparams ? "param%d" : "result%d", i < fn->nparams ? i : i - fn->nparams);
        fprintf(o, " *   %-*s ", width, v >= 0 ? names[v] : cn);
        if (i >= fn->nparams && sig->name)   /* `return l, w`: w */
            fprintf(o, "%s: ", sym_name(m->syms, sig->name - 1));
        ir_print_shape(o, &sig->type);
        ir_print_sharding(o, m, &sig->type, &sig->sh);
        fputc('\n', o);
    }
    fputs(" */\n", o);
}

/* The declarations of the entry points in the file (global: their
 * wrappers on global arrays), each after its ABI comment. */
static void emit_decls(FILE *o, const Module *m, const char *in_file, const char ***irnames, int global,
                       Arena *arena) {
    for (int f = 0; f < m->nfns; f++) {
        const Fn *fn = &m->fns[f];
        if (!in_file[f] || !fn_exported(fn))
            continue;
        char **names = c_value_names(fn, irnames[f], arena);
        int *param = param_insts(fn, arena);
        fputc('\n', o);
        (global ? emit_global_comment : emit_abi_comment)(o, m, fn, names, param);
        (global ? emit_global_signature : emit_signature)(o, m, fn, names, param);
        fputs(";\n", o);
    }
}

int codegen_emit_header(const Module *m, Entries main_fns, const char *path, FILE *o, char *err, size_t errlen) {
    (void)err, (void)errlen;                 /* nothing here fails: out of memory aborts (arena.c) */
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    Arena arena = {0};
    char *guard = arena_printf(&arena, "SHARDC_%s", base);   /* prog.h: SHARDC_PROG_H */
    for (char *c = guard + 7; *c; c++)
        *c = isalnum((unsigned char)*c) ? (char)toupper((unsigned char)*c) : '_';
    const char ***irnames = ir_module_value_names(m, &arena);
    fputs("/* Generated by shardc: the per-device entry points of the C file written with\n"
          " * this header (`shardc compile prog.tdsl -o prog.c` writes prog.c and prog.h).\n"
          " * Mesh: ", o);
    int64_t devices = 1;
    for (int a = 0; a < m->naxes; a++) {
        fprintf(o, "%s%s=%lld", a ? ", " : "", sym_name(m->syms, m->axis_sym[a]), (long long)m->axis_size[a]);
        devices *= m->axis_size[a];
    }
    if (m->naxes)
        fprintf(o, " (%lld device%s).\n", (long long)devices, devices == 1 ? "" : "s");
    else
        fputs("none, one device.\n", o);
    fputs(" *\n"
          " * The ABI (docs/codegen.md): an entry point runs one device's part of a\n"
          " * function.  Every device of the mesh calls it at once with its own `dev`\n"
          " * (sc_run does: a thread per device, all in one process or, on MPI, spread\n"
          " * over several; see shardc_rt.h), as the devices exchange blocks through the\n"
          " * runtime's collectives.  Each parameter points to the device's block of that\n"
          " * parameter, which the function only reads; each result to a block the caller\n"
          " * allocates and the function writes, not overlapping the parameters.  Blocks\n"
          " * are dense and row-major, of the local shapes listed; a dim that does not\n"
          " * split evenly has blocks of the ceiling, the last ones padded at the end (what\n"
          " * the padding holds does not matter, and the results' padding is unspecified).\n"
          " * Element types: f32 float, f64 double, bf16 and f16 uint16_t bit patterns,\n"
          " * i32 int32_t, bool uint8_t (0 or 1).  Returns 0, or SC_ERR after printing the\n"
          " * failing call on stderr.  Scratch memory is allocated and freed in the call;\n"
          " * nothing is kept between calls. */\n", o);
    fprintf(o, "#ifndef %s\n#define %s\n\n#include <shardc_rt.h>\n#include <shardc_session.h>\n#include <stdint.h>\n\n"
               "#ifdef __cplusplus\nextern \"C\" {\n#endif\n", guard, guard);
    char *in_file = fns_in_file(m, main_fns, &arena);
    emit_decls(o, m, in_file, irnames, 0, &arena);
    fputs("\n/* ---- on global arrays (shardc_session.h) ----\n"
          " * shardc_NAME_global runs shardc_NAME on every device: it splits each\n"
          " * global parameter (dense, row-major, of the global shape listed) into the\n"
          " * devices' blocks, runs them, and writes each whole result.  s: a session\n"
          " * (sk_session_new), which keeps the world and the buffers between calls, or\n"
          " * NULL for one call.  Returns 0, or SC_ERR (sk_session_error(s) says why). */\n", o);
    emit_decls(o, m, in_file, irnames, 1, &arena);
    fprintf(o, "\n#ifdef __cplusplus\n}\n#endif\n\n#endif /* %s */\n", guard);
    arena_free(&arena);
    return 0;
}
