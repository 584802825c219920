/* Dots of bf16 and f16 values summed in f32 take their operands narrow.
 *
 * `h[b, f] = f32(x[b, d] * w[d, f])` of bf16 x and w lowers to converts of
 * both operands and an f32 dot (sema/index.c), and the backward pass of a
 * bf16 dot reads its forward operands converted (g_fwd) beside a rounded
 * cotangent (adjoint.c).  Converting two bf16 operands and multiplying in
 * f32 is what a bf16 dot that sums in f32 does: the products of bf16
 * values are exact in f32.  So each such dot becomes a wide dot (ir.h's
 * dot_is_wide: bf16 operands, an f32 result), which runs at the bf16 rate
 * where the CPU has bf16 instructions (AMX, AVX512-BF16) and reads half
 * the bytes; the converts nothing else reads are dropped. */
#include "internal.h"

/* The bf16 or f16 value that v converts to f32, or -1.  A constrained
 * convert keeps its sharding constraint, so it stays. */
static int narrow_source(const Fn *fn, int v) {
    const Inst *in = &fn->insts[v];
    if (in->op != OP_CONVERT || (in->flags & INST_CONSTRAINED))
        return -1;
    int src = ir_arg(fn, in, 0), dt = fn->insts[src].type.dtype;
    return sum_dtype(dt) != dt && in->type.dtype == sum_dtype(dt) ? src : -1;
}

/* The dtype a dot multiplies at: its operands', or bf16 or f16 when both
 * are converted from it (a wide dot to be). */
int dot_operand_dtype(const Fn *fn, const Inst *dot) {
    int a = narrow_source(fn, ir_arg(fn, dot, 0)), b = narrow_source(fn, ir_arg(fn, dot, 1));
    if (a >= 0 && b >= 0 && fn->insts[a].type.dtype == fn->insts[b].type.dtype)
        return fn->insts[a].type.dtype;
    return fn->insts[ir_arg(fn, dot, 0)].type.dtype;
}

void widen_dots(Module *m) {
    for (int f = 0; f < m->nfns; f++) {
        Fn *fn = &m->fns[f];
        int any = 0;
        for (int v = 0; v < fn->ninsts; v++) {
            const Inst *in = &fn->insts[v];
            if (in->op != OP_DOT)
                continue;
            int a = ir_arg(fn, in, 0), dt = dot_operand_dtype(fn, in);
            if (dt == fn->insts[a].type.dtype || in->type.dtype != sum_dtype(dt))
                continue;
            fn->args[in->args] = narrow_source(fn, a);
            fn->args[in->args + 1] = narrow_source(fn, ir_arg(fn, in, 1));
            any = 1;
        }
        if (any)
            fn_drop_dead(m, fn);
    }
}
