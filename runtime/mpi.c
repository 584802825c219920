/* The MPI backend: one device per MPI process.  It keeps the threads
 * backend's worlds, devices, groups and argument checks (threads.c,
 * threads_coll.c) and moves the data itself, with non-blocking
 * point-to-point MPI: start posts the sends and receives of a collective,
 * done waits for them (up to the world's timeout, then naming the devices
 * whose data did not arrive), reduces or copies, and frees.
 *
 * Communicators: one per set of mesh axes, made once when the world is
 * created (MPI_Comm_split; a group's members are the same set whatever the
 * order of its axes, only their ranks differ).  Each device counts the
 * collectives it starts on each set, as its peers do; the count is in the
 * tags, so that the messages of collectives in flight together never mix.
 *
 * Before its data, each member sends every peer a description of its call
 * (kind, dtype, reduction, shape, dims): members that call different
 * collectives fail with a message naming both, instead of exchanging
 * wrong data.
 *
 * Reductions combine the members' values in member order with rt_reduce,
 * as the threads backend does, so that both backends give the same bits. */
#include "threads.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Tags on a set's communicator: (count mod TAGS) * 4 + what the message
 * is; TAG_COLLECT is on the world's, used by nothing else. */
enum { TAGS = 8192, TAG_DESC = 0, TAG_DATA = 1, TAG_GATHER = 2, TAG_COLLECT = 1 };

typedef struct {
    MPI_Comm world;           /* MPI_COMM_WORLD duplicated: errors return */
    MPI_Comm *comm;           /* per set of axes (bit mask) */
    uint64_t *count;          /* per set: collectives this device started */
    int finalize;             /* MPI was initialized here */
    /* The progress thread (with MPI_THREAD_MULTIPLE): while collectives
     * are in flight it calls into MPI every PROGRESS_US, so that messages
     * move while the device computes between start and done. */
    pthread_t progress;
    int have_progress, in_flight, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    MPI_Comm quiet;           /* a communicator nothing is sent on, to probe */
} Mpi;

enum { PROGRESS_US = 100 };

/* A block along one dim of a row-major array: block j of k. */
typedef struct {
    int64_t off, n;           /* first element, elements */
    sc_shape box;
    int contiguous;
} Block;

/* The state of one collective between start and done. */
typedef struct {
    MPI_Comm comm;
    int tag, nreq, ndesc;     /* requests [0, ndesc) carry descriptions */
    MPI_Request *req;
    int *peer;                /* per request: the member it is from, or -1 for a send */
    int *comm_rank;           /* per member */
    Desc *theirs;             /* per member: the description it sent */
    char **tmp;               /* per member: a staging buffer or NULL */
    const void **srcs;
} Op;

static Mpi *state(const sc_world *w) { return w->remote_state; }

/* ---- geometry ---- */

static Block block_of(sc_shape s, int dim, int j, int k) {
    int64_t st[SC_MAX_RANK], outer = 1;
    rt_strides(&s, st);
    Block b = {.box = s};
    b.box.dims[dim] = s.dims[dim] / k;
    b.off = j * b.box.dims[dim] * st[dim];
    b.n = 1;
    for (int d = 0; d < s.rank; d++)
        b.n *= b.box.dims[d];
    for (int d = 0; d < dim; d++)
        outer *= s.dims[d];
    b.contiguous = outer == 1;
    return b;
}

/* Copy block b of an array of shape s to or from a contiguous buffer. */
static void pack(void *dst, const void *src, sc_shape s, Block b, size_t es) {
    int64_t xs[SC_MAX_RANK], bs[SC_MAX_RANK];
    rt_strides(&s, xs);
    rt_strides(&b.box, bs);
    rt_copy_box(dst, bs, (const char *)src + b.off * (int64_t)es, xs, s.rank, b.box.dims, es);
}

static void unpack(void *dst, sc_shape s, Block b, const void *src, size_t es) {
    int64_t xs[SC_MAX_RANK], bs[SC_MAX_RANK];
    rt_strides(&s, xs);
    rt_strides(&b.box, bs);
    rt_copy_box((char *)dst + b.off * (int64_t)es, xs, src, bs, s.rank, b.box.dims, es);
}

/* A device's rank in the communicator of axis set `mask`: its coordinates
 * along those axes, in mesh order. */
static int comm_rank_of(const sc_world *w, unsigned mask, int id) {
    int r = 0;
    for (int a = 0; a < w->mesh.naxes; a++)
        if (mask >> a & 1)
            r = r * w->mesh.sizes[a] + id / w->stride[a] % w->mesh.sizes[a];
    return r;
}

static unsigned mask_of(sc_axes axes) {
    unsigned m = 0;
    for (int i = 0; i < axes.n; i++)
        m |= 1u << axes.axis[i];
    return m;
}

/* ---- posting and waiting ---- */

static int post(sc_handle *h, Op *op, int recv, int member, void *buf, int64_t bytes, int tag) {
    if (bytes > INT32_MAX)
        return rt_dev_fail(h->dev, "collective: a message of more than 2 GiB (%lld bytes)", (long long)bytes);
    int rank = op->comm_rank[member], rc;
    MPI_Request *r = &op->req[op->nreq];
    if (recv)
        rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, rank, op->tag + tag, op->comm, r);
    else
        rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, rank, op->tag + tag, op->comm, r);
    op->peer[op->nreq++] = recv ? member : -1;
    if (rc != MPI_SUCCESS)
        return rt_dev_fail(h->dev, "collective: MPI_I%s failed", recv ? "recv" : "send");
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Wait for requests [from, to) until the timeout; a device that waits
 * yields its core (ranks may outnumber cores). */
static int wait_range(sc_handle *h, Op *op, int from, int to) {
    double timeout = sc_timeout(h->dev->w), t0 = now();
    char what[160];
    for (long spins = 0;; spins++) {
        int done = 0;
        if (MPI_Testall(to - from, op->req + from, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            rt_what(h, what, sizeof what);
            return rt_dev_fail(h->dev, "%s: MPI reported an error (a message of another size: do the processes run "
                                       "the same program?)", what);
        }
        if (done)
            return 0;
        if (now() - t0 > timeout)
            break;
        if (spins < 2000)
            sched_yield();
        else
            nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    /* Name the members whose messages did not come. */
    char late[256];
    int n = 0, nlate = 0;
    for (int i = from; i < to; i++) {
        int got = 1;
        if (op->peer[i] >= 0)
            MPI_Test(&op->req[i], &got, MPI_STATUS_IGNORE);
        if (!got && n < (int)sizeof late - 40)
            n += snprintf(late + n, sizeof late - (size_t)n, "%s%d", nlate ? ", " : "",
                          h->g->members[op->peer[i]]);
        nlate += !got;
    }
    rt_what(h, what, sizeof what);
    if (!nlate)
        return rt_dev_fail(h->dev, "%s: sends to its peers did not complete within %g s", what, timeout);
    return rt_dev_fail(h->dev, "%s: device%s %s did not arrive within %g s", what, nlate == 1 ? "" : "s", late,
                       timeout);
}

/* ---- start: post the descriptions and the first exchange of data ---- */

static int post_data(sc_handle *h, Op *op) {
    const Desc *d = &h->d;
    int k = h->f->k, me = h->rank;
    size_t es = sc_dtype_size(d->dtype);
    char *send = (char *)h->send, *recv = h->recv;
    int64_t n = 1;
    for (int i = 0; i < d->shape.rank; i++)
        n *= d->shape.dims[i];
    for (int j = 0; j < k; j++) {
        if (j == me && d->kind != K_PERMUTE)
            continue;
        int rc = 0;
        Block in, out;
        switch (d->kind) {
        case K_ALL_REDUCE: {        /* member j reduces slice j of every send */
            int64_t lo = n * j / k, hi = n * (j + 1) / k, mlo = n * me / k, mhi = n * (me + 1) / k;
            op->tmp[j] = malloc((size_t)(mhi - mlo) * es + 1);
            rc = !op->tmp[j] ? rt_dev_fail(h->dev, "all-reduce: out of memory")
                 : post(h, op, 1, j, op->tmp[j], (mhi - mlo) * (int64_t)es, TAG_DATA) ||
                       post(h, op, 0, j, send + lo * (int64_t)es, (hi - lo) * (int64_t)es, TAG_DATA);
            break;
        }
        case K_ALL_GATHER: {
            sc_shape full = d->shape;
            full.dims[d->dim] *= k;
            out = block_of(full, d->dim, j, k);
            char *dst = out.contiguous ? recv + out.off * (int64_t)es : (op->tmp[j] = malloc((size_t)out.n * es + 1));
            rc = !dst ? rt_dev_fail(h->dev, "all-gather: out of memory")
                      : post(h, op, 1, j, dst, out.n * (int64_t)es, TAG_DATA) ||
                            post(h, op, 0, j, send, n * (int64_t)es, TAG_DATA);
            break;
        }
        case K_REDUCE_SCATTER:
        case K_ALL_TO_ALL: {
            /* Send block j (along the split dim) to member j; receive its
             * block for this member into a staging buffer (reduce-scatter),
             * or into block j along the concat dim (all-to-all). */
            in = block_of(d->shape, d->dim, j, k);
            sc_shape rshape = d->shape;
            if (d->kind == K_ALL_TO_ALL) {
                rshape.dims[d->dim] /= k;
                rshape.dims[d->dim2] *= k;
            }
            out = d->kind == K_ALL_TO_ALL ? block_of(rshape, d->dim2, j, k) : block_of(d->shape, d->dim, me, k);
            int direct = d->kind == K_ALL_TO_ALL && out.contiguous;
            char *dst = direct ? recv + out.off * (int64_t)es : (op->tmp[j] = malloc((size_t)out.n * es + 1));
            char *src = in.contiguous ? send + in.off * (int64_t)es : malloc((size_t)in.n * es + 1);
            if (src && !in.contiguous) {
                pack(src, send, d->shape, in, es);
                op->tmp[k + j] = src;          /* freed with the others */
            }
            rc = !dst || !src ? rt_dev_fail(h->dev, "collective: out of memory")
                              : post(h, op, 1, j, dst, out.n * (int64_t)es, TAG_DATA) ||
                                    post(h, op, 0, j, src, in.n * (int64_t)es, TAG_DATA);
            break;
        }
        case K_PERMUTE:
            if (j == h->src && j != me)
                rc = post(h, op, 1, j, recv, n * (int64_t)es, TAG_DATA);
            if (!rc && j == h->dst && j != me)
                rc = post(h, op, 0, j, send, n * (int64_t)es, TAG_DATA);
            break;
        }
        if (rc)
            return SC_ERR;
    }
    return 0;
}

static void op_free(Op *op, int k) {
    if (!op)
        return;
    for (int j = 0; op->tmp && j < 2 * k; j++)
        free(op->tmp[j]);
    free(op->tmp);
    free(op->req);
    free(op->peer);
    free(op->comm_rank);
    free(op->theirs);
    free(op->srcs);
    free(op);
}

/* ---- progress ----
 * OpenMPI moves a large message only inside MPI calls of the receiver
 * (and the sender): without them the data of a collective started before
 * a long GEMM would wait for done. */

static void *progress_main(void *arg) {
    Mpi *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        if (!m->in_flight) {
            pthread_cond_wait(&m->cv, &m->mu);
            continue;
        }
        pthread_mutex_unlock(&m->mu);
        int flag;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->quiet, &flag, MPI_STATUS_IGNORE);
        nanosleep(&(struct timespec){0, PROGRESS_US * 1000L}, NULL);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static void in_flight(Mpi *m, int delta) {
    if (!m->have_progress)
        return;
    pthread_mutex_lock(&m->mu);
    m->in_flight += delta;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static int mpi_start(sc_handle *h) {
    sc_world *w = h->dev->w;
    Mpi *m = state(w);
    int k = h->f->k;
    unsigned mask = mask_of(h->f->axes);
    Op *op = calloc(1, sizeof *op);
    if (op) {
        op->req = calloc((size_t)(6 * k), sizeof *op->req);
        op->peer = calloc((size_t)(6 * k), sizeof *op->peer);
        op->comm_rank = calloc((size_t)k, sizeof *op->comm_rank);
        op->theirs = calloc((size_t)k, sizeof *op->theirs);
        op->tmp = calloc((size_t)(2 * k), sizeof *op->tmp);
        op->srcs = calloc((size_t)k, sizeof *op->srcs);
    }
    if (!op || !op->req || !op->peer || !op->comm_rank || !op->theirs || !op->tmp || !op->srcs) {
        op_free(op, k);
        return rt_dev_fail(h->dev, "collective: out of memory");
    }
    op->comm = m->comm[mask];
    op->tag = (int)(m->count[mask]++ % TAGS) * 4;
    for (int j = 0; j < k; j++)
        op->comm_rank[j] = comm_rank_of(w, mask, h->g->members[j]);
    h->remote = op;
    int rc = 0;
    for (int j = 0; j < k && !rc; j++)
        if (j != h->rank)
            rc = post(h, op, 1, j, &op->theirs[j], sizeof(Desc), TAG_DESC) ||
                 post(h, op, 0, j, &h->d, sizeof(Desc), TAG_DESC);
    op->ndesc = op->nreq;
    if (!rc)
        rc = post_data(h, op);
    if (!rc)
        in_flight(m, 1);
    /* On failure the world fails and every process is aborted, so pending
     * requests never complete into freed memory. */
    return rc;
}

/* ---- done: check the descriptions, finish the data, reduce or copy ---- */

static int check_descs(sc_handle *h, Op *op) {
    for (int j = 0; j < h->f->k; j++)
        if (j != h->rank && !rt_desc_equal(&op->theirs[j], &h->d)) {
            char what[160], mine[128], theirs[128];
            rt_what(h, what, sizeof what);
            rt_describe(&h->d, mine, sizeof mine);
            rt_describe(&op->theirs[j], theirs, sizeof theirs);
            return rt_dev_fail(h->dev, "%s: device %d calls %s where device %d calls %s", what, h->dev->id, mine,
                               h->g->members[j], theirs);
        }
    return 0;
}

static int finish_all_reduce(sc_handle *h, Op *op) {
    const Desc *d = &h->d;
    int k = h->f->k, me = h->rank;
    size_t es = sc_dtype_size(d->dtype);
    int64_t n = d->shape.dims[0], lo = n * me / k, hi = n * (me + 1) / k;
    char *recv = h->recv;
    for (int j = 0; j < k; j++)
        op->srcs[j] = j == me ? (const char *)h->send + lo * (int64_t)es : op->tmp[j];
    rt_reduce(d->dtype, d->red, op->srcs, k, 0, recv + lo * (int64_t)es, hi - lo);
    /* Then every member's slice goes to every other member. */
    int from = op->nreq;
    for (int j = 0; j < k; j++) {
        int64_t jlo = n * j / k, jhi = n * (j + 1) / k;
        if (j != me && (post(h, op, 1, j, recv + jlo * (int64_t)es, (jhi - jlo) * (int64_t)es, TAG_GATHER) ||
                        post(h, op, 0, j, recv + lo * (int64_t)es, (hi - lo) * (int64_t)es, TAG_GATHER)))
            return SC_ERR;
    }
    return wait_range(h, op, from, op->nreq);
}

static void finish_blocks(sc_handle *h, Op *op) {
    const Desc *d = &h->d;
    int k = h->f->k, me = h->rank;
    size_t es = sc_dtype_size(d->dtype);
    sc_shape out = d->shape;
    switch (d->kind) {
    case K_ALL_GATHER:
        out.dims[d->dim] *= k;
        for (int j = 0; j < k; j++)
            if (j == me)
                unpack(h->recv, out, block_of(out, d->dim, j, k), h->send, es);
            else if (op->tmp[j])
                unpack(h->recv, out, block_of(out, d->dim, j, k), op->tmp[j], es);
        break;
    case K_REDUCE_SCATTER: {
        Block mine = block_of(d->shape, d->dim, me, k);
        char *own = mine.contiguous ? (char *)h->send + mine.off * (int64_t)es : malloc((size_t)mine.n * es + 1);
        if (!own) {
            rt_dev_fail(h->dev, "reduce-scatter: out of memory");
            return;
        }
        if (!mine.contiguous)
            pack(own, h->send, d->shape, mine, es);
        for (int j = 0; j < k; j++)
            op->srcs[j] = j == me ? own : op->tmp[j];
        rt_reduce(d->dtype, d->red, op->srcs, k, 0, h->recv, mine.n);
        if (!mine.contiguous)
            free(own);
        break;
    }
    case K_ALL_TO_ALL: {
        out.dims[d->dim] /= k;
        out.dims[d->dim2] *= k;
        Block in = block_of(d->shape, d->dim, me, k);
        char *own = malloc((size_t)in.n * es + 1);
        if (!own) {
            rt_dev_fail(h->dev, "all-to-all: out of memory");
            return;
        }
        pack(own, h->send, d->shape, in, es);
        unpack(h->recv, out, block_of(out, d->dim2, me, k), own, es);
        free(own);
        for (int j = 0; j < k; j++)
            if (j != me && op->tmp[j])
                unpack(h->recv, out, block_of(out, d->dim2, j, k), op->tmp[j], es);
        break;
    }
    default: {                              /* permute */
        int64_t n = d->shape.dims[0];
        if (h->src < 0 && n > 0)
            memset(h->recv, 0, (size_t)n * es);
        else if (h->src == me && n > 0)
            memcpy(h->recv, h->send, (size_t)n * es);
    }
    }
}

static int mpi_done(sc_handle *h) {
    Op *op = h->remote;
    in_flight(state(h->dev->w), -1);
    int rc = wait_range(h, op, 0, op->ndesc);
    rc = rc ? rc : check_descs(h, op);
    rc = rc ? rc : wait_range(h, op, op->ndesc, op->nreq);
    if (!rc && h->d.kind == K_ALL_REDUCE)
        rc = finish_all_reduce(h, op);
    else if (!rc)
        finish_blocks(h, op);
    if (!rc && sc_world_failed(h->dev->w))
        rc = SC_ERR;
    if (!rc)                                /* see mpi_start on failure */
        op_free(op, h->f->k);
    h->remote = NULL;
    return rc;
}

/* ---- host-side steps ---- */

static int mpi_collect(sc_world *w, void *const *blocks, size_t bytes) {
    Mpi *m = state(w);
    const size_t chunk = (size_t)1 << 30;
    for (int p = 1; p < w->nprocesses; p++)
        for (size_t at = 0; at < bytes; at += chunk) {
            int n = (int)(bytes - at < chunk ? bytes - at : chunk), rc = MPI_SUCCESS;
            if (w->process == 0)
                rc = MPI_Recv((char *)blocks[p] + at, n, MPI_BYTE, p, TAG_COLLECT, m->world, MPI_STATUS_IGNORE);
            else if (w->process == p)
                rc = MPI_Send((char *)blocks[p] + at, n, MPI_BYTE, 0, TAG_COLLECT, m->world);
            if (rc != MPI_SUCCESS)
                return SC_ERR;
        }
    return 0;
}

static int mpi_agree(sc_world *w, int ok, int *first_ok) {
    int mine[2] = {ok != 0, w->process == 0 ? ok != 0 : 1}, all[2] = {0, 0};
    if (MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, state(w)->world) != MPI_SUCCESS)
        all[0] = all[1] = 0;
    if (first_ok)
        *first_ok = all[1];
    return all[0];
}

static void mpi_destroy(sc_world *w) {
    Mpi *m = state(w);
    if (m->have_progress) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->progress, NULL);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        MPI_Comm_free(&m->quiet);
    }
    if (sc_world_failed(w)) {
        fflush(NULL);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (unsigned s = 1; s < 1u << w->mesh.naxes; s++)
        MPI_Comm_free(&m->comm[s]);
    MPI_Comm_free(&m->world);
    if (m->finalize)
        MPI_Finalize();
    free(m->comm);
    free(m->count);
    free(m);
}

static const RtRemote mpi_remote = {mpi_start, mpi_done, mpi_collect, mpi_agree, mpi_destroy};

sc_world *sc_mpi_create(const sc_mesh *mesh, char *err, size_t errlen) {
    int inited = 0, provided = 0, rank = 0, size = 1;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        snprintf(err, errlen, "cannot initialize MPI");
        return NULL;
    }
    sc_world *w = rt_world_new(mesh, err, errlen);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Mpi *m = w && size == w->ndev ? calloc(1, sizeof *m) : NULL;
    unsigned nsets = w ? 1u << w->mesh.naxes : 0;
    if (m) {
        m->comm = calloc(nsets, sizeof *m->comm);
        m->count = calloc(nsets, sizeof *m->count);
    }
    if (w && size != w->ndev && rank != 0 && errlen)
        err[0] = 0;                         /* process 0 says it for all */
    else if (w && size != w->ndev)
        snprintf(err, errlen,
                 "the mesh has %d device%s but %d MPI process%s started: run it with mpirun -np %d "
                 "(the MPI backend runs one device per process)",
                 w->ndev, w->ndev == 1 ? "" : "s", size, size == 1 ? " was" : "es were", w->ndev);
    else if (w && (!m || !m->comm || !m->count))
        snprintf(err, errlen, "out of memory");
    if (!w || !m || !m->comm || !m->count) {
        if (m) {
            free(m->comm);
            free(m->count);
            free(m);
        }
        sc_world_destroy(w);
        if (!inited)
            MPI_Finalize();
        return NULL;
    }
    m->finalize = !inited;
    MPI_Query_thread(&provided);
    if (provided == MPI_THREAD_MULTIPLE) {
        MPI_Comm_dup(MPI_COMM_WORLD, &m->quiet);
        pthread_mutex_init(&m->mu, NULL);
        pthread_cond_init(&m->cv, NULL);
        m->have_progress = pthread_create(&m->progress, NULL, progress_main, m) == 0;
        if (!m->have_progress) {
            pthread_mutex_destroy(&m->mu);
            pthread_cond_destroy(&m->cv);
            MPI_Comm_free(&m->quiet);
        }
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
    MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    for (unsigned s = 1; s < nsets; s++) {
        int color = rank;                   /* the group's device with 0 on the set's axes */
        for (int a = 0; a < w->mesh.naxes; a++)
            if (s >> a & 1)
                color -= rank / w->stride[a] % w->mesh.sizes[a] * w->stride[a];
        MPI_Comm_split(m->world, color, comm_rank_of(w, s, rank), &m->comm[s]);
        MPI_Comm_set_errhandler(m->comm[s], MPI_ERRORS_RETURN);
    }
    w->local = w->process = rank;
    w->nlocal = 1;
    w->nprocesses = size;
    w->remote_state = m;
    w->remote = &mpi_remote;
    return w;
}
