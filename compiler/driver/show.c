/* Pictures of shardings for people: a table of blocks and the devices that
 * hold them, and a Graphviz graph of a function's dataflow. */
#include "show.h"
#include "../base/suggest.h"

#include <string.h>

static int find_value(const Fn *fn, const char **names, const char *value) {
    for (int v = 0; v < fn->ninsts; v++)
        if (fn->insts[v].op != OP_RETURN && strcmp(names[v], value) == 0)
            return v;
    return -1;
}

/* The block of dim d that device `dev` holds, and how many blocks dim d has. */
static int64_t block_of(const Module *m, const Sharding *sh, int d, int64_t dev, int64_t *nblocks) {
    int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
    int64_t stride[MAX_AXES], total = 1;
    for (int a = m->naxes - 1; a >= 0; a--) {
        stride[a] = total;
        total *= m->axis_size[a];
    }
    int64_t block = 0, count = 1;
    for (int i = 0; i < n; i++) {
        int64_t size = m->axis_size[axes[i]];
        block = block * size + (dev / stride[axes[i]]) % size;
        count *= size;
    }
    *nblocks = count;
    return block;
}

static int64_t devices(const Module *m) {
    int64_t n = 1;
    for (int a = 0; a < m->naxes; a++)
        n *= m->axis_size[a];
    return n;
}

/* Rows are the blocks of every dim but the last, columns the blocks of the
 * last dim; each cell lists the devices holding that block. */
int show_value(const Module *m, int f, const char *value, FILE *out) {
    const Fn *fn = &m->fns[f];
    if (fn->spmd) {
        fprintf(stderr, "shardc: error: '%s' is an spmd fn: its values are each device's own blocks, with no "
                        "global sharding to draw\n", sym_name(m->syms, fn->sym));
        return 2;
    }
    Arena arena = {0};
    const char **names = ir_value_names(m, fn, &arena);
    int v = find_value(fn, names, value);
    if (v < 0) {
        char hint[SUGGEST_MAX_LEN + 32];
        Suggest sg = suggest_begin(value);
        for (int k = 0; k < fn->ninsts; k++)
            if (fn->insts[k].op != OP_RETURN)
                suggest_add(&sg, names[k], -1);
        fprintf(stderr, "shardc: error: '%s' has no value named '%s' (names are as `shardc dump` prints them)%s\n",
                sym_name(m->syms, fn->sym), value, suggest_text(&sg, hint, sizeof hint));
        arena_free(&arena);
        return 2;
    }
    const Inst *in = &fn->insts[v];
    Shape g = in->type;
    const Sharding *sh = &in->sh;
    if (fn->partitioned)         /* a block's global extent: padded blocks times their count */
        for (int d = 0; d < g.rank; d++) {
            int64_t k;
            block_of(m, sh, d, 0, &k);
            g.dims[d] *= k;
        }
    fprintf(out, "%%%s = %s : ", value, op_info[in->op].name);
    ir_print_shape(out, &g);
    ir_print_sharding(out, m, &g, sh);
    fputc('\n', out);
    int rank = g.rank;
    int64_t ndev = devices(m), rows = 1, cols = 1, kd[MAX_RANK];
    for (int d = 0; d < rank; d++) {
        block_of(m, sh, d, 0, &kd[d]);
        if (d < rank - 1)
            rows *= kd[d];
        else
            cols = kd[d];
    }
    if (rows * cols > 4096) {
        fprintf(out, "(%lld blocks: too many to draw)\n", (long long)(rows * cols));
        arena_free(&arena);
        return 0;
    }
    /* Cell text: the devices holding each block, in device order. */
    char **cell = arena_alloc(&arena, sizeof(char *) * (size_t)(rows * cols));
    for (int64_t dev = 0; dev < ndev; dev++) {
        int64_t r = 0, c = 0, k;
        for (int d = 0; d < rank; d++) {
            int64_t b = block_of(m, sh, d, dev, &k);
            if (d < rank - 1)
                r = r * k + b;
            else
                c = b;
        }
        char **s = &cell[r * cols + c];
        *s = *s ? arena_printf(&arena, "%s,%lld", *s, (long long)dev) : arena_printf(&arena, "%lld", (long long)dev);
    }
    int width = 6;
    for (int64_t i = 0; i < rows * cols; i++)
        if (cell[i] && (int)strlen(cell[i]) + 2 > width)
            width = (int)strlen(cell[i]) + 2;
    for (int64_t c = 0; rank && c < cols; c++) {     /* column headers fit too */
        int need = snprintf(NULL, 0, "%lld:%lld", (long long)(c * g.dims[rank - 1]), (long long)g.dims[rank - 1]);
        if (need + 1 > width)
            width = need + 1;
    }
    /* Row labels: the element ranges of every dim but the last. */
    char **row = arena_alloc(&arena, sizeof(char *) * (size_t)rows);
    int label_width = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t rest = r, idx[MAX_RANK];
        for (int d = rank - 2; d >= 0; d--) {
            idx[d] = rest % kd[d];
            rest /= kd[d];
        }
        row[r] = "";
        for (int d = 0; d < rank - 1; d++) {
            int64_t b = (g.dims[d] + kd[d] - 1) / kd[d], lo = idx[d] * b, hi = lo + b < g.dims[d] ? lo + b : g.dims[d];
            row[r] = arena_printf(&arena, "%s%s%lld:%lld", row[r], d ? ", " : "", (long long)lo, (long long)hi);
        }
        if ((int)strlen(row[r]) > label_width)
            label_width = (int)strlen(row[r]);
    }
    /* Header: the element ranges of the last dim. */
    fprintf(out, "  %*s", label_width, "");
    for (int64_t c = 0; c < cols; c++) {
        int64_t n = rank ? g.dims[rank - 1] : 1, b = (n + cols - 1) / cols, hi = c * b + b < n ? c * b + b : n;
        const char *range = rank ? arena_printf(&arena, "%lld:%lld", (long long)(c * b), (long long)hi) : "";
        fprintf(out, " %-*s", width, range);
    }
    fputc('\n', out);
    for (int64_t r = 0; r < rows; r++) {
        fprintf(out, "  %-*s", label_width, row[r]);
        for (int64_t c = 0; c < cols; c++)
            fprintf(out, "|%-*s", width, cell[r * cols + c] ? cell[r * cols + c] : "");
        fputs("|\n", out);
    }
    int partial[MAX_AXES], np = 0;
    for (int a = 0; a < m->naxes; a++)
        if (sh->dim[a] == SH_PARTIAL)
            partial[np++] = a;
    if (np) {
        fputs("each block is a partial result: devices listed together differ along ", out);
        for (int i = 0; i < np; i++)
            fprintf(out, "%s%s", i ? ", " : "", sym_name(m->syms, m->axis_sym[partial[i]]));
        fprintf(out, " and their blocks %s to the value\n",
                reducer_info[sh->reducer].words);
    } else if (ndev > rows * cols)
        fputs("devices listed together hold copies of the same block\n", out);
    arena_free(&arena);
    return 0;
}


void show_dot(const Module *m, int f, FILE *out) {
    const Fn *fn = &m->fns[f];
    Arena arena = {0};
    const char **names = ir_value_names(m, fn, &arena);
    fprintf(out, "digraph \"%s\" {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
            sym_name(m->syms, fn->sym));
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        if (in->op == OP_RETURN) {
            fprintf(out, "  n%d [label=\"return\", shape=oval];\n", v);
        } else {
            fprintf(out, "  n%d [label=\"%%%s = %s\\n", v, names[v], op_info[in->op].name);
            ir_print_shape(out, &in->type);
            ir_print_sharding(out, m, &in->type, &in->sh);
            fprintf(out, "\"%s];\n", op_is_collective(in->op) ? ", style=filled, fillcolor=\"#ffd27f\""
                                    : in->op == OP_PARAMETER ? ", shape=oval" : "");
        }
        for (int i = 0; i < in->nargs; i++)
            fprintf(out, "  n%d -> n%d;\n", ir_arg(fn, in, i), v);
    }
    fputs("}\n", out);
    arena_free(&arena);
}
