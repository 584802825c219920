/* Every collective of the threads backend on meshes of 1, 2, 2x2, 2x4 and
 * 2x2x2 devices, over each axis and over several in both orders, in every
 * dtype, checked against results computed here element by element from the
 * definitions (docs/ir.md), with groups found by sorting coordinates.
 *
 * Built with mpicc and -DTEST_MPI it tests the MPI backend instead: under
 * `mpirun -np P` it runs the meshes of P x L devices, L devices per process
 * (SHARDC_LOCAL_DEVICES, default 1), and process 0 prints the results of
 * all. */
#include "tap.h"

#ifdef TEST_MPI
#include <mpi.h>
#endif

#include <stdlib.h>

enum { AR, AG, RS, A2A, PERM, NKIND, MAXDEV = 64 };
static const char *const kind_names[NKIND] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                             "collective-permute"};

typedef struct {
    sc_mesh mesh;
    sc_axes axes;
    sc_dtype t;
    int fails[NKIND][MAXDEV];
    char msg[NKIND][MAXDEV][200];
} Case;

/* ---- the reference ---- */

static void coords(const sc_mesh *m, int id, int *c) {
    for (int a = m->naxes - 1; a >= 0; a--) {
        c[a] = id % m->sizes[a];
        id /= m->sizes[a];
    }
}

/* The group of `dev`: the devices that agree with it off the axes, sorted
 * by their coordinates along the axes (the first one major). */
static int ref_group(const sc_mesh *m, sc_axes a, int dev, int *members, int *rank) {
    int ndev = 1, k = 0, cd[SC_MAX_AXES], ce[SC_MAX_AXES], cf[SC_MAX_AXES];
    for (int i = 0; i < m->naxes; i++)
        ndev *= m->sizes[i];
    coords(m, dev, cd);
    for (int e = 0; e < ndev; e++) {
        coords(m, e, ce);
        int in = 1;
        for (int b = 0; b < m->naxes; b++) {
            int listed = 0;
            for (int i = 0; i < a.n; i++)
                listed |= a.axis[i] == b;
            in &= listed || ce[b] == cd[b];
        }
        if (in)
            members[k++] = e;
    }
    for (int i = 1; i < k; i++)                  /* insertion sort by the listed coords */
        for (int j = i; j > 0; j--) {
            coords(m, members[j - 1], ce);
            coords(m, members[j], cf);
            int less = 0;
            for (int x = 0; x < a.n; x++)
                if (cf[a.axis[x]] != ce[a.axis[x]]) {
                    less = cf[a.axis[x]] < ce[a.axis[x]];
                    break;
                }
            if (!less)
                break;
            int tmp = members[j];
            members[j] = members[j - 1];
            members[j - 1] = tmp;
        }
    for (int j = 0; j < k; j++)
        if (members[j] == dev)
            *rank = j;
    return k;
}

/* Element i of device dev's operand: exact in every dtype.  i32 sums wrap;
 * floats include a NaN on device 1 and values whose bf16/f16 sums round. */
static double value(sc_dtype t, int dev, int64_t i) {
    double small = (double)((dev * 7 + i * 3) % 17 - 8);
    if (t == SC_BOOL)
        return (dev + i) % 3 == 0;
    if (t == SC_I32)
        return i % 5 == 0 ? small + (dev % 2 ? 0x7ffffff0 : -0x7ffffff0) : small;
    if (t == SC_U32)                     /* sums wrap; maxima above 2^31 */
        return i % 5 == 0 ? 0xfffffff0u - (uint32_t)(dev * 3) : (double)(uint32_t)(small + 8);
    if (t == SC_I64)                     /* past i32's range (a double holds these exactly) */
        return i % 5 == 0 ? small + (dev % 2 ? 0x1p50 : -0x1p50) : small;
    if (t == SC_U8)                      /* sums wrap modulo 256 */
        return (double)((dev * 37 + i * 11) % 256);
    if (i == 5 && dev == 1)
        return NAN;
    if (i % 7 == 3)
        return 1.0 + dev * 0x1p-7;
    return small * 0.25;
}

static double ref_reduce(sc_dtype t, sc_reduce op, const int *mem, int k, int64_t i) {
    if (t == SC_BOOL) {                  /* or; and for min */
        int any = 0, all = 1;
        for (int j = 0; j < k; j++) {
            any |= value(t, mem[j], i) != 0;
            all &= value(t, mem[j], i) != 0;
        }
        return op == SC_MIN ? all : any;
    }
    if (t == SC_I32) {
        uint32_t sum = 0;
        int32_t m = (int32_t)value(t, mem[0], i);
        for (int j = 0; j < k; j++) {
            int32_t z = (int32_t)value(t, mem[j], i);
            sum += (uint32_t)z;
            m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);
        }
        return op == SC_SUM ? (double)(sum >= 0x80000000u ? (int64_t)sum - 0x100000000LL : (int64_t)sum) : m;
    }
    if (t == SC_U32) {
        uint32_t sum = 0, m = (uint32_t)value(t, mem[0], i);
        for (int j = 0; j < k; j++) {
            uint32_t z = (uint32_t)value(t, mem[j], i);
            sum += z;
            m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);
        }
        return op == SC_SUM ? sum : m;
    }
    if (t == SC_I64 || t == SC_U8) {      /* integers: sums exact (i64, within 2^53) or modulo 256 (u8) */
        int64_t sum = 0, m = (int64_t)value(t, mem[0], i);
        for (int j = 0; j < k; j++) {
            int64_t z = (int64_t)value(t, mem[j], i);
            sum += z;
            m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);
        }
        return op == SC_SUM ? (double)(t == SC_U8 ? sum % 256 : sum) : (double)m;
    }
    double acc = op == SC_SUM ? 0.0 : value(t, mem[0], i);
    for (int j = 0; j < k; j++) {
        double z = value(t, mem[j], i);
        if (op == SC_SUM)
            acc += z;
        else if (isnan(acc) || isnan(z))
            acc = NAN;
        else
            acc = op == SC_MAX ? fmax(acc, z) : fmin(acc, z);
    }
    return acc;
}

static int64_t elems(sc_shape s) {
    int64_t n = 1;
    for (int d = 0; d < s.rank; d++)
        n *= s.dims[d];
    return n;
}

static void unravel(int64_t lin, sc_shape s, int64_t *idx) {
    for (int d = s.rank - 1; d >= 0; d--) {
        idx[d] = lin % s.dims[d];
        lin /= s.dims[d];
    }
}

static int64_t ravel(const int64_t *idx, sc_shape s) {
    int64_t lin = 0;
    for (int d = 0; d < s.rank; d++)
        lin = lin * s.dims[d] + idx[d];
    return lin;
}

/* ---- one device ---- */

typedef struct {
    Case *c;
    sc_device *dev;
    int me, rank, k, members[MAXDEV];
    void *send, *recv, *want;
} Dev;

static void fill(Dev *d, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        put(d->c->t, d->send, i, value(d->c->t, d->me, i));
}

/* Compares recv with want; records the first failure of `kind`. */
static void compare(Dev *d, int kind, int rc, int64_t n, const char *what) {
    if (d->c->fails[kind][d->me])
        return;
    if (rc != 0) {
        d->c->fails[kind][d->me] = 1;
        snprintf(d->c->msg[kind][d->me], 200, "%s: device %d: %s", what, d->me, sc_device_error(d->dev));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        if (!same(d->c->t, d->recv, d->want, i)) {
            d->c->fails[kind][d->me] = 1;
            snprintf(d->c->msg[kind][d->me], 200, "%s: device %d element %lld is %g, want %g", what, d->me,
                     (long long)i, get(d->c->t, d->recv, i), get(d->c->t, d->want, i));
            return;
        }
}

static void run_all_reduce(Dev *d) {
    static const int64_t counts[] = {37, 3, 0};
    for (int ci = 0; ci < 3; ci++)
        for (int op = SC_SUM; op <= SC_MIN; op++) {
            int64_t n = counts[ci];
            fill(d, n);
            for (int64_t i = 0; i < n; i++)
                put(d->c->t, d->want, i, ref_reduce(d->c->t, (sc_reduce)op, d->members, d->k, i));
            int rc = sc_all_reduce(d->dev, d->c->axes, d->c->t, (sc_reduce)op, d->send, d->recv, n);
            char what[64];
            snprintf(what, sizeof what, "op %d count %lld", op, (long long)n);
            compare(d, AR, rc, n, what);
        }
    /* In place over a strided block (rows x cols, rows ld apart): the
     * elements between the rows stay as they were. */
    static const int64_t blocks[][3] = {{3, 5, 8}, {4, 6, 6}, {1, 7, 9}, {5, 1, 3}, {6, 0, 2}};
    for (int bi = 0; bi < 5; bi++)
        for (int op = SC_SUM; op <= SC_MIN; op++) {
            int64_t rows = blocks[bi][0], cols = blocks[bi][1], ld = blocks[bi][2], n = rows * ld;
            for (int64_t i = 0; i < n; i++) {
                put(d->c->t, d->recv, i, value(d->c->t, d->me, i));
                put(d->c->t, d->want, i, i % ld < cols ? ref_reduce(d->c->t, (sc_reduce)op, d->members, d->k, i)
                                                       : value(d->c->t, d->me, i));
            }
            int rc = sc_all_reduce_strided(d->dev, d->c->axes, d->c->t, (sc_reduce)op, d->recv, rows, cols, ld);
            char what[64];
            snprintf(what, sizeof what, "op %d strided %lld x %lld rows %lld apart", op, (long long)rows,
                     (long long)cols, (long long)ld);
            compare(d, AR, rc, n, what);
        }
}

static void run_all_gather(Dev *d) {
    for (int dim = 0; dim < 3; dim++) {
        sc_shape in = SC_SHAPE(2, 3, 5), out = in;
        out.dims[dim] *= d->k;
        fill(d, elems(in));
        int64_t idx[SC_MAX_RANK];
        for (int64_t o = 0; o < elems(out); o++) {
            unravel(o, out, idx);
            int j = (int)(idx[dim] / in.dims[dim]);
            idx[dim] %= in.dims[dim];
            put(d->c->t, d->want, o, value(d->c->t, d->members[j], ravel(idx, in)));
        }
        int rc = sc_all_gather(d->dev, d->c->axes, d->c->t, in, dim, d->send, d->recv);
        char what[64];
        snprintf(what, sizeof what, "dim %d", dim);
        compare(d, AG, rc, elems(out), what);
    }
}

static void run_reduce_scatter(Dev *d) {
    for (int dim = 0; dim < 3; dim++)
        for (int op = SC_SUM; op <= SC_MIN; op++) {
            sc_shape in = SC_SHAPE(3, 2, 2), out;
            in.dims[dim] = 2 * d->k;
            out = in;
            out.dims[dim] = 2;
            fill(d, elems(in));
            int64_t idx[SC_MAX_RANK];
            for (int64_t o = 0; o < elems(out); o++) {
                unravel(o, out, idx);
                idx[dim] += d->rank * out.dims[dim];
                put(d->c->t, d->want, o, ref_reduce(d->c->t, (sc_reduce)op, d->members, d->k, ravel(idx, in)));
            }
            int rc = sc_reduce_scatter(d->dev, d->c->axes, d->c->t, (sc_reduce)op, in, dim, d->send, d->recv);
            char what[64];
            snprintf(what, sizeof what, "dim %d op %d", dim, op);
            compare(d, RS, rc, elems(out), what);
        }
}

static void run_all_to_all(Dev *d) {
    static const int sc[][2] = {{0, 1}, {1, 0}, {0, 0}, {1, 2}, {0, 2}};
    for (int p = 0; p < 5; p++) {
        int s = sc[p][0], c = sc[p][1];
        sc_shape in = SC_SHAPE(2 * d->k, 2 * d->k, 3), box = in, out = in;
        box.dims[s] /= d->k;
        out.dims[s] /= d->k;
        out.dims[c] *= d->k;
        fill(d, elems(in));
        int64_t idx[SC_MAX_RANK];
        for (int64_t o = 0; o < elems(out); o++) {
            unravel(o, out, idx);
            int j = (int)(idx[c] / box.dims[c]);
            idx[c] %= box.dims[c];
            idx[s] += d->rank * box.dims[s];
            put(d->c->t, d->want, o, value(d->c->t, d->members[j], ravel(idx, in)));
        }
        int rc = sc_all_to_all(d->dev, d->c->axes, d->c->t, in, s, c, d->send, d->recv);
        char what[64];
        snprintf(what, sizeof what, "split %d concat %d", s, c);
        compare(d, A2A, rc, elems(out), what);
    }
}

static void run_permute(Dev *d) {
    int pairs[2 * MAXDEV], k = d->k;
    for (int variant = 0; variant < 3; variant++) {
        int np = 0;
        if (variant == 0)                        /* cyclic shift by +1 */
            for (int j = 0; j < k; j++)
                pairs[2 * np] = j, pairs[2 * np + 1] = (j + 1) % k, np++;
        else if (variant == 1 && k > 1)          /* only the last member receives */
            pairs[0] = 0, pairs[1] = k - 1, np = 1;
        int64_t n = 10;
        fill(d, n);
        int src = -1;
        for (int p = 0; p < np; p++)
            if (pairs[2 * p + 1] == d->rank)
                src = pairs[2 * p];
        for (int64_t i = 0; i < n; i++)
            put(d->c->t, d->want, i, src < 0 ? 0.0 : value(d->c->t, d->members[src], i));
        memset(d->recv, 0xff, (size_t)n * sc_dtype_size(d->c->t));
        int rc = sc_collective_permute(d->dev, d->c->axes, d->c->t, pairs, np, d->send, d->recv, n);
        char what[64];
        snprintf(what, sizeof what, "variant %d", variant);
        compare(d, PERM, rc, n, what);
    }
}

static int body(sc_device *dev, void *arg) {
    Dev d = {.c = arg, .dev = dev, .me = sc_device_id(dev)};
    d.k = ref_group(&d.c->mesh, d.c->axes, d.me, d.members, &d.rank);
    size_t bytes = (size_t)(12 * d.k * d.k + 64) * 8;
    d.send = malloc(bytes);
    d.recv = malloc(bytes);
    d.want = malloc(bytes);
    run_all_reduce(&d);
    run_all_gather(&d);
    run_reduce_scatter(&d);
    run_all_to_all(&d);
    run_permute(&d);
    free(d.send);
    free(d.recv);
    free(d.want);
    return 0;
}

static void axes_text(const sc_mesh *m, sc_axes a, char *buf) {
    int n = sprintf(buf, "{");
    for (int i = 0; i < a.n; i++)
        n += sprintf(buf + n, "%s%s", i ? "," : "", m->names[a.axis[i]]);
    sprintf(buf + n, "}");
}

/* The worlds' options: SHARDC_LOCAL_DEVICES and SHARDC_TIMEOUT, as the
 * launcher sets them (tests/run-tests). */
static sc_options options;

/* Whether dtype t is tested: all of them, or those SHARDC_TEST_DTYPES lists
 * ("f32,bf16,f64,u8": the two-hosts run, where each dtype's worlds cost a
 * TCP setup and one dtype per element size covers the transport). */
static int dtype_wanted(sc_dtype t) {
    const char *list = getenv("SHARDC_TEST_DTYPES"), *name = sc_dtype_name(t);
    size_t n = strlen(name);
    for (const char *p = list; p && *p; p += strcspn(p, ","), p += *p == ',')
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == 0))
            return 1;
    return list == NULL;
}

static void run_case(const char *mesh_name, const sc_mesh *m, sc_axes axes) {
    char ax[64], err[256];
    axes_text(m, axes, ax);
    for (int t = 0; t < SC_DTYPE_COUNT; t++) {
        if (!dtype_wanted((sc_dtype)t))
            continue;
        static Case c;
        memset(&c, 0, sizeof c);
        c.mesh = *m;
        c.axes = axes;
        c.t = (sc_dtype)t;
#ifdef TEST_MPI
        sc_world *w = sc_mpi_create(m, &options, err, sizeof err);
        int rc = w ? sc_run(w, body, &c) : -1, all = rc;
        if (w && rc)                            /* only process 0 prints to stdout: the first failure may be elsewhere */
            fprintf(stderr, "# process %d, mesh %s over %s, %s: %s\n", sc_world_process(w), mesh_name, ax,
                    sc_dtype_name((sc_dtype)t), sc_world_error(w));
        MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        rc = all;
        MPI_Allreduce(MPI_IN_PLACE, c.fails, NKIND * MAXDEV, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
#else
        sc_world *w = sc_threads_create(m, &options, err, sizeof err);
        int rc = w ? sc_run(w, body, &c) : -1;
#endif
        int ndev = w ? sc_device_count(w) : 0;
        for (int kind = 0; kind < NKIND; kind++) {
            const char *msg = NULL;
            for (int id = 0; id < ndev && !msg; id++)
                if (c.fails[kind][id])
                    msg = c.msg[kind][id];
            check(w && rc == 0 && !msg, "%s on mesh %s over %s, %s", kind_names[kind], mesh_name, ax,
                  sc_dtype_name((sc_dtype)t));
            if (!w)
                printf("#   create: %s\n", err);
            else if (msg || rc)
                printf("#   %s\n", msg ? msg : sc_world_error(w));
        }
        sc_world_destroy(w);
    }
}

/* ---- the barrier ---- */

/* After a barrier over every device, device 0 sleeps LATE_MS and calls the
 * barrier over `axes`: every member of its group must return from that one
 * at least LATE_MS / 2 after it left the first (a barrier that did not wait
 * returns at once); a member whose thread is descheduled after the first
 * barrier waits less, hence the half. */
enum { LATE_MS = 200 };

typedef struct {
    sc_axes axes;
    double waited_ms[MAXDEV];
    int in_group[MAXDEV], rc[MAXDEV];
} Barrier;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int barrier_body(sc_device *dev, void *arg) {
    Barrier *b = arg;
    int id = sc_device_id(dev), all[SC_MAX_AXES], n = sc_device_mesh(dev)->naxes;
    for (int a = 0; a < n; a++)
        all[a] = a;
    sc_axes every = {n, {0}};
    memcpy(every.axis, all, sizeof(int) * (size_t)n);
    int rc = sc_barrier(dev, every);
    double t0 = now_ms();
    if (id == 0)
        nanosleep(&(struct timespec){0, LATE_MS * 1000000L}, NULL);
    rc |= sc_barrier(dev, b->axes);
    b->waited_ms[id] = now_ms() - t0;
    b->in_group[id] = 0;
    for (int j = 0; j < sc_group_size(dev, b->axes); j++)
        b->in_group[id] |= sc_group_member(dev, b->axes, j) == 0;
    b->rc[id] = rc;
    return rc;
}

static void check_barrier(const char *mesh_name, const sc_mesh *m, sc_axes axes) {
    char err[256], ax[64];
    axes_text(m, axes, ax);
    static Barrier b;
    memset(&b, 0, sizeof b);
    b.axes = axes;
#ifdef TEST_MPI
    sc_world *w = sc_mpi_create(m, &options, err, sizeof err);
#else
    sc_world *w = sc_threads_create(m, &options, err, sizeof err);
#endif
    int rc = w ? sc_run(w, barrier_body, &b) : -1, good = w && rc == 0, ndev = w ? sc_device_count(w) : 0;
    double least = 1e9;
    for (int id = 0; id < ndev; id++)
        if (w && sc_world_is_local(w, id) && b.in_group[id] && b.waited_ms[id] < least)
            least = b.waited_ms[id];
    good &= least >= LATE_MS / 2;
#ifdef TEST_MPI
    MPI_Allreduce(MPI_IN_PLACE, &good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
#endif
    check(good, "barrier on mesh %s over %s: device 0's group waits for it (%.0f ms of %d at least)", mesh_name, ax,
          least, LATE_MS);
    if (!good)
        printf("#   %s\n", w ? sc_world_error(w) : err);
    sc_world_destroy(w);
}

/* The meshes of `ndev` devices (all when ndev is 0). */
static void run_meshes(int ndev) {
    sc_mesh one = {1, {1}, {"X"}}, two = {1, {2}, {"X"}}, sq = {2, {2, 2}, {"X", "Y"}};
    sc_mesh rect = {2, {2, 4}, {"X", "Y"}}, cube = {3, {2, 2, 2}, {"X", "Y", "Z"}};
    if (ndev == 0 || ndev == 1)
        run_case("1", &one, SC_AXES(0));
    if (ndev == 0 || ndev == 2)
        run_case("2", &two, SC_AXES(0));
    const struct { const char *name; sc_mesh *m; int n; } two_d[] = {{"2x2", &sq, 4}, {"2x4", &rect, 8}};
    for (int i = 0; i < 2; i++) {
        if (ndev && ndev != two_d[i].n)
            continue;
        run_case(two_d[i].name, two_d[i].m, SC_AXES(0));
        run_case(two_d[i].name, two_d[i].m, SC_AXES(1));
        run_case(two_d[i].name, two_d[i].m, SC_AXES(0, 1));
        run_case(two_d[i].name, two_d[i].m, SC_AXES(1, 0));
    }
    if (ndev == 0 || ndev == 8) {
        run_case("2x2x2", &cube, SC_AXES(2));
        run_case("2x2x2", &cube, SC_AXES(0, 2));
        run_case("2x2x2", &cube, SC_AXES(2, 1, 0));
    }
}

#ifdef TEST_MPI
static int check_local_id(sc_device *dev, void *arg) {
    (void)arg;
    sc_world *w = sc_device_world(dev);
    int id = sc_device_id(dev), L = sc_world_local_count(w);
    return sc_device_local_id(dev) == id - sc_world_process(w) * L && sc_world_is_local(w, id) ? 0 : 1;
}

/* The layout, as JAX numbers it: process p runs global ids p L + local id. */
static void check_layout(int rank, int size, int L) {
    sc_mesh m = {1, {size * L}, {"X"}};
    char err[256];
    sc_world *w = sc_mpi_create(&m, &options, err, sizeof err);
    int good = w && sc_world_process(w) == rank && sc_world_process_count(w) == size && sc_world_local_count(w) == L;
    for (int d = 0; w && d < size * L; d++)
        good &= sc_world_device_process(w, d) == d / L && sc_world_is_local(w, d) == (d / L == rank);
    if (w)
        good &= sc_run(w, check_local_id, NULL) == 0;
    MPI_Allreduce(MPI_IN_PLACE, &good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    check(good, "%d processes x %d local devices: process index, local count, local ids", size, L);
    sc_world_destroy(w);
}

/* Options the program gives, not the environment: a local count and a
 * timeout take effect, a count that does not fit the mesh is refused (by
 * process 0, for all). */
static void check_given_options(int rank, int size, int L) {
    char err[256] = "", want[256];
    sc_mesh twice = {1, {2 * size * L}, {"X"}};
    sc_world *w = sc_mpi_create(&twice, &(sc_options){.timeout = 7, .local_devices = 2 * L}, err, sizeof err);
    int good = w && sc_world_local_count(w) == 2 * L && sc_timeout(w) == 7 && sc_world_process_count(w) == size;
    MPI_Allreduce(MPI_IN_PLACE, &good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    check(good, "options {.timeout = 7, .local_devices = %d} on %d devices: %d local devices, 7 s", 2 * L,
          2 * size * L, 2 * L);
    sc_world_destroy(w);
    sc_mesh m = {1, {size * L}, {"X"}};
    w = sc_mpi_create(&m, &(sc_options){.local_devices = L + 1}, err, sizeof err);
    snprintf(want, sizeof want, "the mesh has %d devices but %d MPI processes x %d local devices = %d", size * L, size,
             L + 1, size * (L + 1));
    good = !w && (rank == 0 ? strstr(err, want) != NULL : err[0] == 0);
    MPI_Allreduce(MPI_IN_PLACE, &good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    check(good, "options {.local_devices = %d} on %d processes of a %d-device mesh are refused: %s", L + 1, size,
          size * L, err);
    sc_world_destroy(w);
}

int main(int argc, char **argv) {
    int rank, size;
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);   /* as sc_mpi_create: with the progress thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != 0 && !freopen("/dev/null", "w", stdout))
        return 1;
    char err[256];
    if (sc_options_from_env(&options, err, sizeof err) != 0) {
        fprintf(stderr, "test_collectives: %s\n", err);
        return 1;
    }
    int L = options.local_devices ? options.local_devices : 1;
    run_meshes(size * L);
    sc_mesh line = {1, {size * L}, {"X"}};
    check_barrier("all", &line, SC_AXES(0));
    check_layout(rank, size, L);
    check_given_options(rank, size, L);
    int rc = tap_done();
    MPI_Finalize();
    return rc;
}
#else
int main(void) {
    run_meshes(0);
    sc_mesh rect = {2, {2, 4}, {"X", "Y"}};
    check_barrier("2x4", &rect, SC_AXES(1));
    check_barrier("2x4", &rect, SC_AXES(0));
    check_barrier("2x4", &rect, SC_AXES(1, 0));
    return tap_done();
}
#endif
