/* The threads backend's algorithm paths, checked bit for bit against
 * references computed here:
 *
 * - rt_reduce's sum loops (one pass over up to 8 members, in SSE2, AVX2 and
 *   AVX-512 where the CPU has them; rt_reduce_isa caps the set) for group
 *   sizes 1 to 17 and counts around the 256-element chunks, with NaNs (their
 *   payloads), infinities, signed zeros, subnormals and cancellations;
 * - the all-reduce within a process (each member reduces its slice and
 *   writes it into every recv) at small sizes (the copy through this
 *   device's recv) and at sizes of 1 MiB and more per device (non-temporal
 *   stores), over each replica group of a 2x4 mesh and on 3, 5 and 16
 *   devices, in place and not, with start/done and another collective in
 *   flight; results identical on every member and from run to run;
 * - barriers under load: more devices than cores, many short collectives.
 *
 * The references sum in member order from +0 in double, as docs/ir.md
 * defines the reductions. */
#include "tap.h"

#include "threads.h"        /* RT_STREAM_BYTES, rt_reduce, rt_reduce_isa */

#include <stdint.h>
#include <stdlib.h>

/* ---- the reference reduction ---- */

static double ref_add(double acc, double x) { return isnan(x) ? x + x : acc + x; }

/* Element i of the reduction of k sources of dtype t (floats: widened to
 * double, summed from +0 in member order, rounded once). */
static void ref_reduce(sc_dtype t, sc_reduce op, const void *const *src, int k, int64_t i, void *dst, int64_t at) {
    if (t == SC_I32) {
        uint32_t sum = 0;
        int32_t m = ((const int32_t *)src[0])[i];
        for (int j = 0; j < k; j++) {
            int32_t z = ((const int32_t *)src[j])[i];
            sum += (uint32_t)z;
            m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);
        }
        if (op == SC_SUM)
            memcpy(&m, &sum, sizeof m);
        ((int32_t *)dst)[at] = m;
        return;
    }
    double acc = op == SC_SUM ? 0.0 : get(t, src[0], i);
    for (int j = 0; j < k; j++) {
        double x = get(t, src[j], i);
        if (op == SC_SUM)
            acc = ref_add(acc, x);
        else if (isnan(acc) || isnan(x))
            acc = NAN;
        else
            acc = op == SC_MAX ? (acc > x ? acc : x) : (acc < x ? acc : x);   /* a tie (+-0) takes the later */
    }
    if (t == SC_F64)
        ((double *)dst)[at] = acc;
    else
        put(t, dst, at, acc);
}

/* A value with every hard case now and then: NaNs with payloads, +-inf,
 * -0, subnormals, large values that cancel; otherwise ordinary numbers. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static void fill_value(sc_dtype t, void *p, int64_t i, uint64_t seed) {
    uint64_t r = mix(seed * 1000003u + (uint64_t)i);
    double x;
    switch (r % 97) {
    case 0: x = -0.0; break;
    case 1: x = INFINITY; break;
    case 2: x = -INFINITY; break;
    case 3: x = 1e300; break;
    case 4: x = -1e300; break;
    case 5: x = 0x1p-1070; break;        /* subnormal in double */
    case 6: x = 0x1p-140; break;         /* subnormal in f32 */
    case 7: x = 1e16; break;
    case 8: x = -1e16; break;
    default: x = (double)((int64_t)(r >> 8) % 200001 - 100000) * 0x1p-9; break;
    }
    if (t == SC_I32) {
        ((int32_t *)p)[i] = (int32_t)(uint32_t)(r >> 16);
        return;
    }
    if (r % 97 == 9) {                    /* a NaN with a payload */
        if (t == SC_F64) {
            uint64_t b = 0x7ff0000000000000ULL | ((r >> 20) & 0x7ffffffffffffULL) | 1;
            memcpy((double *)p + i, &b, 8);
        } else if (t == SC_F32) {
            uint32_t b = 0x7f800000u | ((uint32_t)(r >> 20) & 0x3fffffu) | 1;
            memcpy((float *)p + i, &b, 4);
        } else
            put(t, p, i, NAN);
        return;
    }
    if (t == SC_F64)
        ((double *)p)[i] = x;
    else
        put(t, p, i, x);
}

/* ---- rt_reduce's loops ---- */

static void test_kernels(void) {
    static const int ks[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17};
    static const int64_t ns[] = {0, 1, 255, 256, 257, 1000, 2053};
    int top = rt_reduce_isa(-1);
    for (int isa = 0; isa <= top; isa++) {
        rt_reduce_isa(isa);
        for (int t = 0; t < SC_DTYPE_COUNT; t++)
            for (int op = SC_SUM; op <= SC_MIN; op++) {
                if (op != SC_SUM && (t == SC_F32 || t == SC_F64) && isa > 0)
                    continue;                    /* the same code at every level */
                int bad = 0;
                char where[160] = "";
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks && !bad; ki++)
                    for (size_t ni = 0; ni < sizeof ns / sizeof *ns && !bad; ni++) {
                        int k = ks[ki];
                        int64_t n = ns[ni], off = 3;
                        size_t es = sc_dtype_size((sc_dtype)t);
                        void *src[17], *got = malloc((size_t)(n + 1) * es), *want = malloc((size_t)(n + 1) * es);
                        for (int j = 0; j < k; j++) {
                            src[j] = malloc((size_t)(n + off + 1) * es);
                            for (int64_t i = 0; i < n + off; i++)
                                fill_value((sc_dtype)t, src[j], i, (uint64_t)(j * 131 + k * 7 + (int)n));
                        }
                        rt_reduce((sc_dtype)t, (sc_reduce)op, (const void *const *)src, k, off, got, n);
                        for (int64_t i = 0; i < n; i++)
                            ref_reduce((sc_dtype)t, (sc_reduce)op, (const void *const *)src, k, off + i, want, i);
                        for (int64_t i = 0; i < n && !bad; i++)
                            if (memcmp((char *)got + i * (int64_t)es, (char *)want + i * (int64_t)es, es)) {
                                bad = 1;
                                snprintf(where, sizeof where, ": k %d n %lld element %lld is %g, want %g", k,
                                         (long long)n, (long long)i, get((sc_dtype)t, got, i),
                                         get((sc_dtype)t, want, i));
                            }
                        for (int j = 0; j < k; j++)
                            free(src[j]);
                        free(got);
                        free(want);
                    }
                static const char *const opn[] = {"sum", "max", "min"};
                check(!bad, "rt_reduce %s %s at instruction set %d of %d, k 1..17, n 0..2053, bit for bit%s",
                      sc_dtype_name((sc_dtype)t), opn[op], isa, top, where);
            }
    }
    rt_reduce_isa(2);
}

/* ---- the all-reduce within a process ---- */

typedef struct {
    sc_mesh mesh;
    sc_axes axes;
    sc_dtype t;
    sc_reduce op;
    int64_t n;
    int in_place, async;
    void *send[16], *recv[16], *first[16];
    int bad[16], runs;
    char msg[16][200];
} Ar;

static int ar_body(sc_device *dev, void *arg) {
    Ar *a = arg;
    int me = sc_device_id(dev), k = sc_group_size(dev, a->axes);
    size_t es = sc_dtype_size(a->t);
    for (int64_t i = 0; i < a->n; i++)
        fill_value(a->t, a->send[me], i, (uint64_t)me);
    void *out = a->in_place ? a->send[me] : a->recv[me];
    if (a->in_place)                       /* the reference needs the inputs: keep a copy */
        memcpy(a->recv[me], a->send[me], (size_t)a->n * es);
    int rc;
    if (a->async) {
        /* Another collective in flight on another group meanwhile. */
        int32_t x = me, all[16];
        sc_handle *h = sc_start_all_reduce(dev, a->axes, a->t, a->op, a->send[me], out, a->n);
        int rc2 = sc_all_gather(dev, SC_AXES(0), SC_I32, SC_SHAPE(1), 0, &x, all);
        rc = sc_done(h) | rc2;
    } else
        rc = sc_all_reduce(dev, a->axes, a->t, a->op, a->send[me], out, a->n);
    /* Every member has finished once this returns: the inputs are safe to read. */
    if (rc) {
        a->bad[me] = 1;
        snprintf(a->msg[me], sizeof a->msg[me], "device %d: %s", me, sc_device_error(dev));
        return 0;
    }
    const void *src[16];
    for (int j = 0; j < k; j++) {
        int d = sc_group_member(dev, a->axes, j);
        src[j] = a->in_place ? a->recv[d] : a->send[d];
    }
    double want[2];
    for (int64_t i = 0; i < a->n && !a->bad[me]; i++) {
        ref_reduce(a->t, a->op, src, k, i, want, 0);
        if (memcmp((char *)out + i * (int64_t)es, want, es)) {
            a->bad[me] = 1;
            snprintf(a->msg[me], sizeof a->msg[me], "device %d element %lld is %g, want %g", me, (long long)i,
                     get(a->t, out, i), get(a->t, want, 0));
        }
    }
    if (a->runs > 0 && memcmp(out, a->first[me], (size_t)a->n * es)) {
        a->bad[me] = 1;
        snprintf(a->msg[me], sizeof a->msg[me], "device %d: a second run gives other bits", me);
    }
    if (a->runs == 0)
        memcpy(a->first[me], out, (size_t)a->n * es);
    return 0;
}

static void all_reduce_case(const char *mesh_name, sc_mesh mesh, sc_axes axes, const char *axes_name, sc_dtype t,
                            sc_reduce op, int64_t n, int in_place, int async) {
    static Ar a;
    memset(&a, 0, sizeof a);
    a.mesh = mesh, a.axes = axes, a.t = t, a.op = op, a.n = n, a.in_place = in_place, a.async = async;
    int ndev = 1;
    for (int i = 0; i < mesh.naxes; i++)
        ndev *= mesh.sizes[i];
    size_t bytes = (size_t)(n + 1) * sc_dtype_size(t);
    for (int d = 0; d < ndev; d++)
        a.send[d] = malloc(bytes), a.recv[d] = malloc(bytes), a.first[d] = malloc(bytes);
    sc_world *w = sc_threads_create(&mesh, NULL, NULL, 0);
    int rc = 0, bad = 0;
    const char *msg = "";
    for (a.runs = 0; a.runs < 2 && !bad; a.runs++) {
        rc |= sc_run(w, ar_body, &a);
        for (int d = 0; d < ndev; d++)
            if (a.bad[d] && !bad)
                bad = 1, msg = a.msg[d];
    }
    static const char *const opn[] = {"sum", "max", "min"};
    check(rc == 0 && !bad, "all-reduce %s %s of %lld (%s) on mesh %s over %s%s%s: exact, the same in two runs%s%s",
          sc_dtype_name(t), opn[op], (long long)n, n * (int64_t)sc_dtype_size(t) >= RT_STREAM_BYTES ? "non-temporal" : "small",
          mesh_name, axes_name, in_place ? ", in place" : "", async ? ", start/done" : "", bad ? ": " : "",
          rc ? sc_world_error(w) : msg);
    sc_world_destroy(w);
    for (int d = 0; d < ndev; d++)
        free(a.send[d]), free(a.recv[d]), free(a.first[d]);
}

static void test_all_reduce(void) {
    const sc_mesh m24 = {2, {2, 4}, {"X", "Y"}}, m3 = {1, {3}, {"X"}}, m5 = {1, {5}, {"X"}}, m16 = {1, {16}, {"X"}};
    const struct { sc_axes axes; const char *name; } groups[] = {
        {SC_AXES(1), "{Y}"}, {SC_AXES(0), "{X}"}, {SC_AXES(0, 1), "{X,Y}"}, {SC_AXES(1, 0), "{Y,X}"}};
    /* Small: slices from empty to several 16 KiB chunks, uneven ends. */
    static const int64_t small[] = {1, 7, 100, 1000, 40009};
    for (int g = 0; g < 4; g++)
        for (int s = 0; s < 5; s++)
            all_reduce_case("2x4", m24, groups[g].axes, groups[g].name, SC_F32, SC_SUM, small[s], s == 3, s == 2);
    for (int t = 0; t < SC_DTYPE_COUNT; t++)
        for (int op = SC_SUM; op <= SC_MIN; op++)
            all_reduce_case("2x4", m24, SC_AXES(1, 0), "{Y,X}", (sc_dtype)t, (sc_reduce)op, 4099, op == SC_MAX, 0);
    all_reduce_case("3", m3, SC_AXES(0), "{X}", SC_F64, SC_SUM, 3001, 0, 0);
    all_reduce_case("5", m5, SC_AXES(0), "{X}", SC_BF16, SC_SUM, 12345, 1, 0);
    /* Large: 1 MiB and more per device, non-temporal stores. */
    int64_t big32 = RT_STREAM_BYTES / 4 + 1237;
    for (int g = 0; g < 4; g++)
        all_reduce_case("2x4", m24, groups[g].axes, groups[g].name, SC_F32, SC_SUM, big32, g == 1, g == 2);
    all_reduce_case("2x4", m24, SC_AXES(1, 0), "{Y,X}", SC_BF16, SC_SUM, RT_STREAM_BYTES / 2 + 77, 0, 0);
    all_reduce_case("2x4", m24, SC_AXES(0, 1), "{X,Y}", SC_I32, SC_MAX, big32, 1, 0);
    all_reduce_case("5", m5, SC_AXES(0), "{X}", SC_F64, SC_SUM, RT_STREAM_BYTES / 8 + 3, 0, 1);
    all_reduce_case("16", m16, SC_AXES(0), "{X}", SC_F32, SC_SUM, big32, 0, 0);
    all_reduce_case("16", m16, SC_AXES(0), "{X}", SC_F32, SC_SUM, 777, 1, 0);
}

/* ---- barriers under load ---- */

enum { SHORT_ROUNDS = 3000 };

static int short_body(sc_device *dev, void *arg) {
    int *bad = arg, me = sc_device_id(dev), k = sc_group_size(dev, SC_AXES(0));
    for (int r = 0; r < SHORT_ROUNDS; r++) {
        int32_t x[3] = {me + r, 1, -r}, y[3], all[16];
        if (sc_all_reduce(dev, SC_AXES(0), SC_I32, SC_SUM, x, y, 3) ||
            sc_all_gather(dev, SC_AXES(0), SC_I32, SC_SHAPE(1), 0, &x[0], all))
            return 1;
        if (y[0] != k * (k - 1) / 2 + k * r || y[1] != k || y[2] != -k * r)
            bad[me] = 1;
        for (int j = 0; j < k; j++)
            if (all[j] != j + r)
                bad[me] = 1;
    }
    return 0;
}

static void test_rounds(void) {
    static const int sizes[] = {2, 16};
    for (int s = 0; s < 2; s++) {
        sc_mesh m = {1, {sizes[s]}, {"X"}};
        int bad[16] = {0}, any = 0;
        sc_world *w = sc_threads_create(&m, NULL, NULL, 0);
        double t0 = now_s();
        int rc = sc_run(w, short_body, bad);
        double t = now_s() - t0;
        for (int d = 0; d < sizes[s]; d++)
            any |= bad[d];
        check(rc == 0 && !any, "%d devices: %d rounds of all-reduce and all-gather (%.1f us a round)", sizes[s],
              SHORT_ROUNDS, t / SHORT_ROUNDS * 1e6);
        sc_world_destroy(w);
    }
}

int main(void) {
    test_kernels();
    test_all_reduce();
    test_rounds();
    return tap_done();
}
