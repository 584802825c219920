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
 * - all-gather, reduce-scatter, all-to-all and collective-permute both
 *   eager (sends of up to RT_EAGER_BYTES, staged at start) and not, over
 *   each replica group of a 2x4 mesh, along each dim;
 * - eager slots reused while some members lag: pipelines of 8 collectives
 *   started before the first is done, one device sleeping now and then;
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
    if (t == SC_BOOL) {                  /* or; and for min */
        int any = 0, all = 1;
        for (int j = 0; j < k; j++) {
            any |= ((const uint8_t *)src[j])[i] != 0;
            all &= ((const uint8_t *)src[j])[i] != 0;
        }
        ((uint8_t *)dst)[at] = (uint8_t)(op == SC_MIN ? all : any);
        return;
    }
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
    if (t == SC_U32) {                   /* sums wrap; unsigned maxima */
        uint32_t sum = 0, m = ((const uint32_t *)src[0])[i];
        for (int j = 0; j < k; j++) {
            uint32_t z = ((const uint32_t *)src[j])[i];
            sum += z;
            m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);
        }
        ((uint32_t *)dst)[at] = op == SC_SUM ? sum : m;
        return;
    }
    if (t == SC_I64) {                   /* in 64 bits: sums wrap modulo 2^64 */
        uint64_t sum = 0;
        int64_t m = ((const int64_t *)src[0])[i];
        for (int j = 0; j < k; j++) {
            int64_t z = ((const int64_t *)src[j])[i];
            sum += (uint64_t)z;
            m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);
        }
        if (op == SC_SUM)
            memcpy(&m, &sum, sizeof m);
        ((int64_t *)dst)[at] = m;
        return;
    }
    if (t == SC_U8) {                    /* sums wrap modulo 256 */
        unsigned sum = 0, m = ((const uint8_t *)src[0])[i];
        for (int j = 0; j < k; j++) {
            unsigned z = ((const uint8_t *)src[j])[i];
            sum += z;
            m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);
        }
        ((uint8_t *)dst)[at] = (uint8_t)(op == SC_SUM ? sum : m);
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

/* Value number i of the sequence `seed`, stored at element `at` of p. */
static void gen_value(sc_dtype t, void *p, int64_t at, uint64_t seed, int64_t i) {
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
        ((int32_t *)p)[at] = (int32_t)(uint32_t)(r >> 16);
        return;
    }
    if (t == SC_U32) {
        ((uint32_t *)p)[at] = (uint32_t)(r >> 16);
        return;
    }
    if (t == SC_I64) {                   /* any 64 bits: far past 2^53, and sums that wrap */
        memcpy((int64_t *)p + at, &r, sizeof r);
        return;
    }
    if (t == SC_U8) {
        ((uint8_t *)p)[at] = (uint8_t)(r >> 16);
        return;
    }
    if (t == SC_BOOL) {                  /* mostly false, so that and and or both vary */
        ((uint8_t *)p)[at] = (r >> 16) % 5 == 0;
        return;
    }
    if (r % 97 == 9) {                    /* a NaN with a payload */
        if (t == SC_F64) {
            uint64_t b = 0x7ff0000000000000ULL | ((r >> 20) & 0x7ffffffffffffULL) | 1;
            memcpy((double *)p + at, &b, 8);
        } else if (t == SC_F32) {
            uint32_t b = 0x7f800000u | ((uint32_t)(r >> 20) & 0x3fffffu) | 1;
            memcpy((float *)p + at, &b, 4);
        } else
            put(t, p, at, NAN);
        return;
    }
    if (t == SC_F64)
        ((double *)p)[at] = x;
    else
        put(t, p, at, x);
}

static void fill_value(sc_dtype t, void *p, int64_t i, uint64_t seed) { gen_value(t, p, i, seed, i); }

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
    else                                   /* no result of the run before can pass */
        memset(a->recv[me], 0xA5, (size_t)a->n * es);
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
    /* A large one runs until its group's slot comes round again: the slot
     * must start each use afresh (the counter its pieces are claimed from). */
    int large = n * (int64_t)sc_dtype_size(t) >= RT_STREAM_BYTES, runs = large ? NSLOTS + 1 : 2;
    for (a.runs = 0; a.runs < runs && !bad; a.runs++) {
        rc |= sc_run(w, ar_body, &a);
        for (int d = 0; d < ndev; d++)
            if (a.bad[d] && !bad)
                bad = 1, msg = a.msg[d];
    }
    static const char *const opn[] = {"sum", "max", "min"};
    check(rc == 0 && !bad, "all-reduce %s %s of %lld (%s) on mesh %s over %s%s%s: exact, the same in %d runs%s%s",
          sc_dtype_name(t), opn[op], (long long)n, large ? "non-temporal, pieces claimed" : "small", mesh_name,
          axes_name, in_place ? ", in place" : "", async ? ", start/done" : "", runs, bad ? ": " : "",
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

/* ---- the all-reduce over a strided block ---- */

typedef struct {
    sc_axes axes;
    sc_dtype t;
    sc_reduce op;
    int64_t rows, cols, ld;
    int async;
    void *buf[16], *orig[16];
    int bad[16];
    char msg[16][200];
} Sar;

/* Each device reduces the rows x cols block of its buffer (rows ld
 * apart) in place: each element the reference's reduction of the
 * members' originals, the elements between the rows as they were. */
static int sar_body(sc_device *dev, void *arg) {
    Sar *a = arg;
    int me = sc_device_id(dev), k = sc_group_size(dev, a->axes);
    size_t es = sc_dtype_size(a->t);
    int64_t n = a->rows * a->ld;
    for (int64_t i = 0; i < n; i++)
        fill_value(a->t, a->buf[me], i, (uint64_t)me);
    memcpy(a->orig[me], a->buf[me], (size_t)n * es);
    int rc;
    if (a->async) {                      /* another collective in flight on another group meanwhile */
        int32_t x = me, all[16];
        sc_handle *h = sc_start_all_reduce_strided(dev, a->axes, a->t, a->op, a->buf[me], a->rows, a->cols, a->ld);
        int rc2 = sc_all_gather(dev, SC_AXES(0), SC_I32, SC_SHAPE(1), 0, &x, all);
        rc = sc_done(h) | rc2;
    } else
        rc = sc_all_reduce_strided(dev, a->axes, a->t, a->op, a->buf[me], a->rows, a->cols, a->ld);
    if (rc) {
        a->bad[me] = 1;
        snprintf(a->msg[me], sizeof a->msg[me], "device %d: %s", me, sc_device_error(dev));
        return 0;
    }
    const void *src[16];
    for (int j = 0; j < k; j++)
        src[j] = a->orig[sc_group_member(dev, a->axes, j)];
    double want[2];
    for (int64_t i = 0; i < n && !a->bad[me]; i++) {
        if (i % a->ld < a->cols)
            ref_reduce(a->t, a->op, src, k, i, want, 0);
        else
            memcpy(want, (const char *)a->orig[me] + i * (int64_t)es, es);
        if (memcmp((char *)a->buf[me] + i * (int64_t)es, want, es)) {
            a->bad[me] = 1;
            snprintf(a->msg[me], sizeof a->msg[me], "device %d element %lld (row %lld) is %g, want %g", me,
                     (long long)i, (long long)(i / a->ld), get(a->t, a->buf[me], i), get(a->t, want, 0));
        }
    }
    return 0;
}

static void strided_case(const char *mesh_name, sc_mesh mesh, sc_axes axes, const char *axes_name, sc_dtype t,
                         sc_reduce op, int64_t rows, int64_t cols, int64_t ld, int async) {
    static Sar a;
    memset(&a, 0, sizeof a);
    a.axes = axes, a.t = t, a.op = op, a.rows = rows, a.cols = cols, a.ld = ld, a.async = async;
    int ndev = 1;
    for (int i = 0; i < mesh.naxes; i++)
        ndev *= mesh.sizes[i];
    for (int d = 0; d < ndev; d++)
        a.buf[d] = malloc((size_t)(rows * ld + 1) * sc_dtype_size(t)),
        a.orig[d] = malloc((size_t)(rows * ld + 1) * sc_dtype_size(t));
    sc_world *w = sc_threads_create(&mesh, NULL, NULL, 0);
    int rc = sc_run(w, sar_body, &a), bad = 0;
    const char *msg = "";
    for (int d = 0; d < ndev; d++)
        if (a.bad[d] && !bad)
            bad = 1, msg = a.msg[d];
    static const char *const opn[] = {"sum", "max", "min"};
    check(rc == 0 && !bad, "strided all-reduce %s %s of %lld x %lld rows %lld apart on mesh %s over %s%s: exact, "
          "the rest untouched%s%s", sc_dtype_name(t), opn[op], (long long)rows, (long long)cols, (long long)ld,
          mesh_name, axes_name, async ? ", start/done" : "", bad ? ": " : "", rc ? sc_world_error(w) : msg);
    sc_world_destroy(w);
    for (int d = 0; d < ndev; d++)
        free(a.buf[d]), free(a.orig[d]);
}

/* Every path (eager, sliced, non-temporal pieces) and dtype, ld == cols,
 * one row and one column. */
static void test_all_reduce_strided(void) {
    const sc_mesh m24 = {2, {2, 4}, {"X", "Y"}}, m5 = {1, {5}, {"X"}};
    const struct { sc_axes axes; const char *name; } groups[] = {
        {SC_AXES(1), "{Y}"}, {SC_AXES(0), "{X}"}, {SC_AXES(0, 1), "{X,Y}"}, {SC_AXES(1, 0), "{Y,X}"}};
    static const int64_t shapes[][3] = {{3, 5, 9}, {1, 7, 7}, {100, 37, 50}, {64, 64, 64}, {333, 1, 4},
                                        {300, 1000, 1500}};
    for (int g = 0; g < 4; g++)
        for (int s = 0; s < 6; s++)
            strided_case("2x4", m24, groups[g].axes, groups[g].name, SC_F32, SC_SUM, shapes[s][0], shapes[s][1],
                         shapes[s][2], s == 2);
    for (int t = 0; t < SC_DTYPE_COUNT; t++)
        for (int op = SC_SUM; op <= SC_MIN; op++)
            strided_case("2x4", m24, SC_AXES(1, 0), "{Y,X}", (sc_dtype)t, (sc_reduce)op, 41, 100, 130, op == SC_MAX);
    strided_case("5", m5, SC_AXES(0), "{X}", SC_F64, SC_SUM, 200, 700, 1001, 1);
    strided_case("5", m5, SC_AXES(0), "{X}", SC_BF16, SC_SUM, 7, 3, 5, 0);
}

/* ---- the other kinds, eager and not ---- */

typedef struct {
    sc_axes axes;
    sc_dtype t;
    int64_t rows, cols;      /* each device's send: rows x cols */
    void *send[8], *recv[8], *want[8];
    int bad[8];
    char msg[8][200];
} Kinds;

/* Checks recv against want (n elements); records the first difference. */
static void k_compare(Kinds *x, int me, int rc, sc_device *dev, int64_t n, const char *what) {
    size_t es = sc_dtype_size(x->t);
    if (rc && !x->bad[me]) {
        x->bad[me] = 1;
        snprintf(x->msg[me], sizeof x->msg[me], "%s: device %d: %s", what, me, sc_device_error(dev));
    }
    for (int64_t i = 0; i < n && !x->bad[me]; i++)
        if (memcmp((char *)x->recv[me] + i * (int64_t)es, (char *)x->want[me] + i * (int64_t)es, es)) {
            x->bad[me] = 1;
            snprintf(x->msg[me], sizeof x->msg[me], "%s: device %d element %lld is %g, want %g", what, me,
                     (long long)i, get(x->t, x->recv[me], i), get(x->t, x->want[me], i));
        }
}

/* Element (r, c) of device d's send (R x C): fill_value's, seeded by d. */
static void k_elem(const Kinds *x, int d, int64_t r, int64_t c, void *dst, int64_t at) {
    gen_value(x->t, dst, at, (uint64_t)d + 100, r * x->cols + c);
}

static int kinds_body(sc_device *dev, void *arg) {
    Kinds *x = arg;
    int me = sc_device_id(dev), k = sc_group_size(dev, x->axes), rank = sc_group_rank(dev, x->axes), rc;
    int64_t R = x->rows, C = x->cols, n = R * C;
    size_t es = sc_dtype_size(x->t);
    int mem[8];
    for (int j = 0; j < k; j++)
        mem[j] = sc_group_member(dev, x->axes, j);
    for (int64_t i = 0; i < n; i++)
        fill_value(x->t, x->send[me], i, (uint64_t)me + 100);
    char what[80];
    for (int dim = 0; dim < 2; dim++) {
        /* all-gather: member j's send is block j along dim */
        for (int j = 0; j < k; j++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++)
                    k_elem(x, mem[j], r, c, x->want[me], dim ? r * C * k + j * C + c : (j * R + r) * C + c);
        rc = sc_all_gather(dev, x->axes, x->t, SC_SHAPE(R, C), dim, x->send[me], x->recv[me]);
        snprintf(what, sizeof what, "all-gather dim %d", dim);
        k_compare(x, me, rc, dev, n * k, what);

        /* reduce-scatter (sum): block `rank` along dim of the group's sum */
        int64_t br = dim ? R : R / k, bc = dim ? C / k : C;
        for (int64_t r = 0; r < br; r++)
            for (int64_t c = 0; c < bc; c++) {
                int64_t gr = dim ? r : rank * br + r, gc = dim ? rank * bc + c : c;
                double v[16];
                const void *src[8];
                for (int j = 0; j < k; j++) {
                    k_elem(x, mem[j], gr, gc, &v[2 * j], 0);
                    src[j] = &v[2 * j];
                }
                ref_reduce(x->t, SC_SUM, src, k, 0, x->want[me], r * bc + c);
            }
        rc = sc_reduce_scatter(dev, x->axes, x->t, SC_SUM, SC_SHAPE(R, C), dim, x->send[me], x->recv[me]);
        snprintf(what, sizeof what, "reduce-scatter dim %d", dim);
        k_compare(x, me, rc, dev, n / k, what);

        /* all-to-all, split dim, concat the other: member j's block `rank`
         * along dim becomes block j along the other dim */
        int split = dim, concat = 1 - dim;
        int64_t sr = split == 0 ? R / k : R, scn = split == 1 ? C / k : C;   /* the block */
        int64_t oc = concat == 1 ? scn * k : scn;                            /* the result's columns */
        for (int j = 0; j < k; j++)
            for (int64_t r = 0; r < sr; r++)
                for (int64_t c = 0; c < scn; c++) {
                    int64_t gr = split == 0 ? rank * sr + r : r, gc = split == 1 ? rank * scn + c : c;
                    int64_t orow = concat == 0 ? j * sr + r : r, ocol = concat == 1 ? j * scn + c : c;
                    k_elem(x, mem[j], gr, gc, x->want[me], orow * oc + ocol);
                }
        rc = sc_all_to_all(dev, x->axes, x->t, SC_SHAPE(R, C), split, concat, x->send[me], x->recv[me]);
        snprintf(what, sizeof what, "all-to-all split %d concat %d", split, concat);
        k_compare(x, me, rc, dev, n, what);
    }
    /* collective-permute: a shift by one, member 0 gets zeros */
    int pairs[16], np = 0;
    for (int j = 0; j + 1 < k; j++)
        pairs[2 * np] = j, pairs[2 * np + 1] = j + 1, np++;
    for (int64_t i = 0; i < n; i++)
        if (rank == 0)
            memset((char *)x->want[me] + i * (int64_t)es, 0, es);
        else
            fill_value(x->t, x->want[me], i, (uint64_t)mem[rank - 1] + 100);
    rc = sc_collective_permute(dev, x->axes, x->t, pairs, np, x->send[me], x->recv[me], n);
    k_compare(x, me, rc, dev, n, "collective-permute");
    return 0;
}

static void kinds_case(sc_axes axes, const char *axes_name, sc_dtype t, int64_t rows, int64_t cols) {
    static Kinds x;
    memset(&x, 0, sizeof x);
    x.axes = axes, x.t = t, x.rows = rows, x.cols = cols;
    const sc_mesh m24 = {2, {2, 4}, {"X", "Y"}};
    size_t bytes = (size_t)(rows * cols * 8 + 1) * sc_dtype_size(t);
    for (int d = 0; d < 8; d++)
        x.send[d] = malloc(bytes), x.recv[d] = malloc(bytes), x.want[d] = malloc(bytes);
    sc_world *w = sc_threads_create(&m24, NULL, NULL, 0);
    int rc = sc_run(w, kinds_body, &x), bad = 0;
    const char *msg = "";
    for (int d = 0; d < 8; d++)
        if (x.bad[d] && !bad)
            bad = 1, msg = x.msg[d];
    int64_t b = rows * cols * (int64_t)sc_dtype_size(t);
    check(rc == 0 && !bad,
          "all-gather, reduce-scatter, all-to-all, permute of %s %lldx%lld (%s) on mesh 2x4 over %s, each dim: exact%s%s",
          sc_dtype_name(t), (long long)rows, (long long)cols, b <= RT_EAGER_BYTES ? "eager" : "not eager", axes_name,
          bad || rc ? ": " : "", rc && !bad ? sc_world_error(w) : msg);
    sc_world_destroy(w);
    for (int d = 0; d < 8; d++)
        free(x.send[d]), free(x.recv[d]), free(x.want[d]);
}

static void test_kinds(void) {
    const struct { sc_axes axes; const char *name; } groups[] = {
        {SC_AXES(1), "{Y}"}, {SC_AXES(0), "{X}"}, {SC_AXES(0, 1), "{X,Y}"}, {SC_AXES(1, 0), "{Y,X}"}};
    for (int g = 0; g < 4; g++) {
        kinds_case(groups[g].axes, groups[g].name, SC_F32, 16, 24);     /* 1.5 KiB: eager */
        kinds_case(groups[g].axes, groups[g].name, SC_F32, 64, 200);    /* 50 KiB: not */
    }
    kinds_case(SC_AXES(1, 0), "{Y,X}", SC_BF16, 8, 8 * 1024);           /* 128 KiB: not */
    kinds_case(SC_AXES(1), "{Y}", SC_F64, 8, 512);                      /* 32 KiB: eager, at the limit */
}

/* ---- eager slots reused while members lag ---- */

enum { PIPE_ROUNDS = 300 };

static int pipe_body(sc_device *dev, void *arg) {
    int *bad = arg, me = sc_device_id(dev), k = sc_group_size(dev, SC_AXES(1));
    int rank = sc_group_rank(dev, SC_AXES(1));
    for (int r = 0; r < PIPE_ROUNDS; r++) {
        int32_t mine[SC_MAX_PENDING], all[SC_MAX_PENDING][8], sum[SC_MAX_PENDING];
        sc_handle *h[SC_MAX_PENDING];
        for (int i = 0; i < SC_MAX_PENDING; i++) {
            mine[i] = me * 100000 + r * 10 + i;
            h[i] = i % 2 ? sc_start_all_gather(dev, SC_AXES(1), SC_I32, SC_SHAPE(1), 0, &mine[i], all[i])
                         : sc_start_all_reduce(dev, SC_AXES(1), SC_I32, SC_SUM, &mine[i], &sum[i], 1);
            mine[i] = -1;                /* staged: changing it now must not matter */
        }
        if (me == 1 + r % 3 && r % 7 == 0)   /* someone lags now and then */
            nanosleep(&(struct timespec){0, 200000}, NULL);
        for (int i = 0; i < SC_MAX_PENDING; i++) {
            if (sc_done(h[i]))
                return 1;
            int x = me - rank;               /* the group's first device */
            if (i % 2) {
                for (int j = 0; j < k; j++)
                    bad[me] |= all[i][j] != (x + j) * 100000 + r * 10 + i;
            } else
                bad[me] |= sum[i] != (k * x + k * (k - 1) / 2) * 100000 + k * (r * 10 + i);
        }
    }
    return 0;
}

static void test_pipeline(void) {
    const sc_mesh m24 = {2, {2, 4}, {"X", "Y"}};
    int bad[8] = {0}, any = 0;
    sc_world *w = sc_threads_create(&m24, NULL, NULL, 0);
    int rc = sc_run(w, pipe_body, bad);
    for (int d = 0; d < 8; d++)
        any |= bad[d];
    check(rc == 0 && !any, "%d rounds of %d eager collectives in flight over {Y}, sends changed after start, "
          "members lagging: exact%s%s", PIPE_ROUNDS, SC_MAX_PENDING, rc ? ": " : "", rc ? sc_world_error(w) : "");
    sc_world_destroy(w);
}

/* ---- done out of order ---- */

typedef struct {
    int rc[8];
    char msg[8][512];
} Order;

/* Eight started, then done in the order 1..7, 0: fine.  The same again,
 * with a ninth started after done 1..7 (one pending) but before done(0):
 * refused, the one 8 before it is not done. */
static int order_body(sc_device *dev, void *arg) {
    Order *o = arg;
    int me = sc_device_id(dev), rc = 0;
    int32_t x[SC_MAX_PENDING + 1], y[SC_MAX_PENDING + 1];
    sc_handle *h[SC_MAX_PENDING + 1];
    for (int round = 0; round < 2 && rc == 0; round++) {
        for (int i = 0; i < SC_MAX_PENDING; i++) {
            x[i] = me + i;
            h[i] = sc_start_all_reduce(dev, SC_AXES(1), SC_I32, SC_SUM, &x[i], &y[i], 1);
        }
        for (int i = 1; i < SC_MAX_PENDING; i++)
            rc |= sc_done(h[i]);
        if (round == 1)              /* collective 16, 7 pending: before done(8) */
            h[SC_MAX_PENDING] = sc_start_all_reduce(dev, SC_AXES(1), SC_I32, SC_SUM, &x[0], &y[SC_MAX_PENDING], 1);
        rc |= sc_done(h[0]);
        if (round == 1)
            rc |= sc_done(h[SC_MAX_PENDING]);
        for (int i = 0; i < SC_MAX_PENDING && round == 0; i++)
            rc |= y[i] != 4 * (me - me % 4) + 6 + 4 * i;
    }
    o->rc[me] = rc;
    snprintf(o->msg[me], sizeof o->msg[me], "%s", sc_device_error(dev));
    return 0;
}

static void test_order(void) {
    const sc_mesh m24 = {2, {2, 4}, {"X", "Y"}};
    static Order o;
    memset(&o, 0, sizeof o);
    sc_world *w = sc_threads_create(&m24, &(sc_options){.timeout = 5}, NULL, 0);
    double t0 = now_s();
    int rc = sc_run(w, order_body, &o), good = rc == SC_ERR;
    for (int d = 0; d < 8; d++)
        good &= o.rc[d] != 0;
    const char *want = "all-reduce over {Y}: collective 16 of the group started before this device's collective 8 is done";
    check(good && strstr(sc_world_error(w), want) && now_s() - t0 < 2,
          "done in another order than start: fine within 8, refused beyond: \"%s\"", sc_world_error(w));
    sc_world_destroy(w);
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
    test_all_reduce_strided();
    test_kinds();
    test_pipeline();
    test_order();
    test_rounds();
    return tap_done();
}
