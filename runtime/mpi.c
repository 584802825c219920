/* The MPI backend: P processes, each with L local devices (threads), one
 * mesh of P x L devices; process p runs devices [p L, (p + 1) L).
 *
 * Collectives are hierarchical.  The members of a group that share a
 * process meet at the threads backend's barriers and read each other's
 * buffers directly (threads_coll.c).  When the group spans processes, the
 * last local member to arrive at a barrier posts the MPI exchange of what
 * the local members read in the next phase and what the other processes'
 * members read of the local buffers; one waiting member drives it to
 * completion, and only then does the barrier open.  A member in another
 * process is, to the local members, a staging buffer that holds exactly the
 * parts they read: the same code then reduces or copies, in the same member
 * order, so every layout of processes and devices gives the same bits.
 *
 * Messages: one from each member to each other process of its group and
 * phase, described by an MPI datatype over the parts that process reads (no
 * packing), on one communicator.  The tag names the collective's number in
 * its set of axes (counted per process and group), the set, the sending
 * device's local index and what the message is.  Each process first sends
 * every other a description of its call: processes that call different
 * collectives fail with a message naming both instead of exchanging wrong
 * data; processes that wait for a message that never comes (a dead or
 * different program) fail at the world's timeout naming the late devices. */
#include "threads.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Tag = (((count mod ncount) * nsets + set) * L + local index) * 3 + what;
 * TAG_COLLECT is on the host communicator. */
enum { W_DESC, W_DATA, W_SLICES, NWHAT, TAG_COLLECT = 1 };

typedef struct {
    MPI_Comm host, coll;      /* MPI_COMM_WORLD duplicated: host steps, collectives */
    int L, nsets;
    uint64_t ncount;          /* counts wrap here, within the tag range */
    _Atomic uint64_t *count;  /* per set and group (its first local device) */
    int finalize;             /* MPI was initialized here */
    /* The progress thread (with MPI_THREAD_MULTIPLE): while exchanges are
     * in flight it calls into MPI every PROGRESS_US, so that messages move
     * while the devices compute between a collective's start and done. */
    pthread_t progress;
    int have_progress, in_flight, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    MPI_Comm quiet;           /* a communicator nothing is sent on, to probe */
} Mpi;

enum { PROGRESS_US = 100 };

/* One process's exchange for one collective (Slot.xchg). */
typedef struct {
    MPI_Request *req;
    int *late;                /* per request: the device it waits for, -2 - the process, or -1 (a send) */
    int nreq, cap, waited;    /* requests [0, waited) are complete */
    int ndesc;                /* requests [0, ndesc) carry descriptions */
    /* The group by process: byproc holds the ranks ordered by process,
     * then rank; the group's process g has byproc[pstart[g] .. pstart[g + 1])
     * and this one is g = mine.  Made once, at phase 0. */
    int *byproc, *pstart, nprocs, mine;
    Desc *theirs;             /* per process g: its description */
    char **stage;             /* 2k: per rank, copies of a remote member's send, recv */
    uint64_t seq;
    int k;
    Mpi *m;
} Xchg;

/* Byte runs of a buffer, for an MPI_Type_create_hindexed. */
typedef struct {
    MPI_Aint *off;
    int *len;
    int n, cap;
} Runs;

static Mpi *state(const sc_world *w) { return w->remote_state; }
static int proc_of(const sc_world *w, int dev) { return dev / w->nlocal; }

/* Room for element n of the parallel arrays *a and *b (*cap allocated). */
static int grow(void **a, size_t asize, void **b, size_t bsize, int n, int *cap) {
    if (n < *cap)
        return 0;
    int grown = *cap ? 2 * *cap : 16;
    void *na = realloc(*a, (size_t)grown * asize);
    if (na)
        *a = na;
    void *nb = realloc(*b, (size_t)grown * bsize);
    if (nb)
        *b = nb;
    if (!na || !nb)
        return -1;
    *cap = grown;
    return 0;
}

/* ---- runs: the parts of a member's buffer that a process reads ---- */

static int runs_add(Runs *r, int64_t off, int64_t len) {
    const int64_t chunk = (int64_t)1 << 30;
    for (; len > 0; off += chunk, len -= chunk) {
        int64_t n = len < chunk ? len : chunk;
        if (r->n && r->off[r->n - 1] + r->len[r->n - 1] == off && r->len[r->n - 1] + n <= chunk) {
            r->len[r->n - 1] += (int)n;
            continue;
        }
        if (grow((void **)&r->off, sizeof *r->off, (void **)&r->len, sizeof *r->len, r->n, &r->cap))
            return -1;
        r->off[r->n] = (MPI_Aint)off;
        r->len[r->n++] = (int)n;
    }
    return 0;
}

/* The box `dims` (row-major strides `st`, elements) at element `base`. */
static int runs_box(Runs *r, int64_t base, int rank, const int64_t *dims, const int64_t *st, size_t es) {
    int64_t idx[SC_MAX_RANK] = {0}, total = 1;
    for (int d = 0; d < rank; d++)
        total *= dims[d];
    if (total == 0)
        return 0;
    int inner = rank - 1;
    for (int64_t i = 0; i < total; i += dims[inner]) {
        int64_t off = base;
        for (int d = 0; d < rank; d++)
            off += idx[d] * st[d];
        if (runs_add(r, off * (int64_t)es, dims[inner] * (int64_t)es))
            return -1;
        for (int d = inner - 1; d >= 0 && ++idx[d] == dims[d]; d--)
            idx[d] = 0;
    }
    return 0;
}

/* Elements [lo, hi) of all-reduce d's block (rt_block_at), a run of a
 * row at a time. */
static int runs_block(Runs *r, const Desc *d, int64_t lo, int64_t hi) {
    int64_t cols = rt_block_cols(d), es = (int64_t)sc_dtype_size(d->dtype);
    for (int64_t i = lo, len; i < hi; i += len) {
        len = cols - i % cols < hi - i ? cols - i % cols : hi - i;
        if (runs_add(r, rt_block_at(i, cols, d->ld) * es, len * es))
            return -1;
    }
    return 0;
}

/* What the members `ranks` (of some process) read of a member's send in
 * phase 1, i.e. after barrier 0 (threads_coll.c's work); the same for
 * every member.  Not for permutes, whose reads are whole sends. */
static int runs_of_send(Runs *r, const Desc *d, int k, const int *ranks, int nr) {
    size_t es = sc_dtype_size(d->dtype);
    int64_t st[SC_MAX_RANK], box[SC_MAX_RANK];
    int64_t n = rt_strides(&d->shape, st);
    int rc = 0;
    for (int t = 0; t < nr && !rc; t++) {
        int j = ranks[t];
        switch (d->kind) {
        case K_ALL_REDUCE:
            rc = runs_block(r, d, n * j / k, n * (j + 1) / k);
            break;
        case K_REDUCE_SCATTER: {
            int64_t b = d->shape.dims[d->dim] / k, inner = st[d->dim];
            int64_t dims[2] = {b ? n / (d->shape.dims[d->dim] * inner) : 0, b * inner}, s2[2] = {k * b * inner, 1};
            rc = runs_box(r, j * b * inner, 2, dims, s2, es);
            break;
        }
        case K_ALL_TO_ALL:
            memcpy(box, d->shape.dims, sizeof box);
            box[d->dim] /= k;
            rc = runs_box(r, j * box[d->dim] * st[d->dim], d->shape.rank, box, st, es);
            break;
        default:                            /* all-gather */
            return runs_add(r, 0, n * (int64_t)es);
        }
    }
    return rc;
}

/* ---- posting ---- */

/* The tag of a message from device dev (see the top of the file). */
static int tag_of(const Xchg *x, unsigned set, int dev, int what) {
    uint64_t lidx = (uint64_t)(dev % x->m->L);
    return (int)((((x->seq % x->m->ncount) * (uint64_t)x->m->nsets + set) * (uint64_t)x->m->L + lidx) * NWHAT +
                 (uint64_t)what);
}

static int add_req(Xchg *x, int late) {
    if (grow((void **)&x->req, sizeof *x->req, (void **)&x->late, sizeof *x->late, x->nreq, &x->cap))
        return -1;
    x->late[x->nreq] = late;
    return x->nreq++;
}

/* Send (peer_dev < 0) or receive the runs of buf to or from process proc. */
static int post_runs(Xchg *x, Runs *r, void *buf, int proc, int tag, int peer_dev) {
    if (r->n == 0)
        return 0;
    MPI_Datatype t;
    int q = add_req(x, peer_dev);
    if (q < 0 || MPI_Type_create_hindexed(r->n, r->len, r->off, MPI_BYTE, &t) != MPI_SUCCESS)
        return -1;
    int rc = MPI_Type_commit(&t);
    if (rc == MPI_SUCCESS)
        rc = peer_dev >= 0 ? MPI_Irecv(buf, 1, t, proc, tag, x->m->coll, &x->req[q])
                           : MPI_Isend(buf, 1, t, proc, tag, x->m->coll, &x->req[q]);
    MPI_Type_free(&t);
    return rc == MPI_SUCCESS ? 0 : -1;
}

static unsigned set_of(sc_axes axes) {
    unsigned m = 0;
    for (int i = 0; i < axes.n; i++)
        m |= 1u << axes.axis[i];
    return m;
}

static int by_key(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sort the group's ranks by process (x->byproc, x->pstart): O(k log k),
 * whatever the number of processes. */
static int group_by_process(const sc_handle *h, Xchg *x) {
    const sc_world *w = h->dev->w;
    int k = h->f->k;
    int64_t *key = malloc((size_t)k * sizeof *key);
    x->byproc = malloc((size_t)k * sizeof *x->byproc);
    x->pstart = malloc((size_t)(k + 1) * sizeof *x->pstart);
    if (!key || !x->byproc || !x->pstart) {
        free(key);
        return -1;
    }
    for (int j = 0; j < k; j++)
        key[j] = (int64_t)proc_of(w, h->g->members[j]) * k + j;
    qsort(key, (size_t)k, sizeof *key, by_key);
    for (int t = 0; t < k; t++) {
        if (t == 0 || key[t] / k != key[t - 1] / k) {
            if (key[t] / k == w->process)
                x->mine = x->nprocs;
            x->pstart[x->nprocs++] = t;
        }
        x->byproc[t] = (int)(key[t] % k);
    }
    x->pstart[x->nprocs] = k;
    free(key);
    return 0;
}

/* Process g of the group: its ranks (returns how many) and first device. */
static int ranks_of(const sc_handle *h, const Xchg *x, int g, const int **ranks, int *first_dev) {
    *ranks = x->byproc + x->pstart[g];
    *first_dev = h->g->members[**ranks];
    return x->pstart[g + 1] - x->pstart[g];
}

/* Post the receive (from = the device it comes from) or the send (from < 0)
 * of one contiguous region. */
static int post_region(Xchg *x, void *buf, int64_t off, int64_t bytes, int proc, int tag, int from) {
    Runs r = {0};
    int rc = runs_add(&r, off, bytes) || post_runs(x, &r, buf, proc, tag, from);
    free(r.off);
    free(r.len);
    return rc;
}

/* Phase 0, first: each process's description of its call, to and from
 * every other process of the group, from each side's first member. */
static int post_descs(sc_handle *h, Xchg *x, unsigned set) {
    const sc_world *w = h->dev->w;
    const int *ranks;
    int lead, dev, rc = 0;
    ranks_of(h, x, x->mine, &ranks, &lead);
    for (int g = 0; g < x->nprocs && !rc; g++) {
        if (g == x->mine)
            continue;
        ranks_of(h, x, g, &ranks, &dev);
        int p = proc_of(w, dev), q1 = add_req(x, -2 - p), q2 = add_req(x, -1);
        rc = q1 < 0 || q2 < 0 ||
             MPI_Irecv(&x->theirs[g], sizeof(Desc), MPI_BYTE, p, tag_of(x, set, dev, W_DESC), x->m->coll,
                       &x->req[q1]) != MPI_SUCCESS ||
             MPI_Isend(&h->s->desc, sizeof(Desc), MPI_BYTE, p, tag_of(x, set, lead, W_DESC), x->m->coll,
                       &x->req[q2]) != MPI_SUCCESS;
    }
    x->ndesc = x->nreq;
    return rc;
}

/* Phase 0, a permute: a local target receives its remote source's send
 * straight into its recv (which work() then leaves as it is), and a local
 * source sends to its remote target. */
static int post_permute(sc_handle *h, Xchg *x, unsigned set, int64_t bytes) {
    sc_world *w = h->dev->w;
    Slot *s = h->s;
    const int *mine;
    int me, rc = 0, nmine = ranks_of(h, x, x->mine, &mine, &me);
    for (int t = 0; t < nmine && !rc; t++) {
        int j = mine[t], src = s->src[j], dst = s->dst[j];
        if (src >= 0 && !sc_world_is_local(w, h->g->members[src])) {
            int dev = h->g->members[src];
            rc = post_region(x, s->recv[j], 0, bytes, proc_of(w, dev), tag_of(x, set, dev, W_DATA), dev);
            s->send[src] = s->recv[j];
        }
        if (!rc && dst >= 0 && !sc_world_is_local(w, h->g->members[dst]))
            rc = post_region(x, (void *)s->send[j], 0, bytes, proc_of(w, h->g->members[dst]),
                             tag_of(x, set, h->g->members[j], W_DATA), -1);
    }
    return rc;
}

/* Phase 0, the other kinds: from each remote member, what the local
 * members read of its send, into a staging copy; to each other process,
 * what its members read of each local member's send. */
static int post_sends(sc_handle *h, Xchg *x, unsigned set, int64_t bytes) {
    const sc_world *w = h->dev->w;
    Slot *s = h->s;
    const int *mine, *theirs;
    int dev, rc, nmine = ranks_of(h, x, x->mine, &mine, &dev);
    Runs in = {0}, out = {0};
    rc = runs_of_send(&in, &s->desc, h->f->k, mine, nmine);
    for (int g = 0; g < x->nprocs && !rc; g++) {
        if (g == x->mine)
            continue;
        int n = ranks_of(h, x, g, &theirs, &dev), p = proc_of(w, dev);
        for (int t = 0; t < n && !rc && in.n; t++) {
            int i = theirs[t];
            dev = h->g->members[i];
            rc = !(x->stage[i] = malloc((size_t)bytes + 1)) ||
                 post_runs(x, &in, x->stage[i], p, tag_of(x, set, dev, W_DATA), dev);
            s->send[i] = x->stage[i];
        }
        out.n = 0;
        rc = rc || runs_of_send(&out, &s->desc, h->f->k, theirs, n);
        for (int t = 0; t < nmine && !rc; t++)
            rc = post_runs(x, &out, (void *)s->send[mine[t]], p, tag_of(x, set, h->g->members[mine[t]], W_DATA), -1);
    }
    free(in.off);
    free(in.len);
    free(out.off);
    free(out.len);
    return rc;
}

/* All-reduce, phase 1: member i's reduced slice of its recv, to and from
 * every process of the group. */
static int post_slices(sc_handle *h, Xchg *x, unsigned set) {
    const sc_world *w = h->dev->w;
    Slot *s = h->s;
    int k = h->f->k, rc = 0, dev;
    const Desc *d = &s->desc;
    int64_t n = rt_block_elems(d), es = (int64_t)sc_dtype_size(d->dtype);
    const int *mine, *theirs;
    int nmine = ranks_of(h, x, x->mine, &mine, &dev);
    Runs r = {0};
    for (int g = 0; g < x->nprocs && !rc; g++) {
        if (g == x->mine)
            continue;
        int nt = ranks_of(h, x, g, &theirs, &dev), p = proc_of(w, dev);
        for (int t = 0; t < nt && !rc; t++) {
            int i = theirs[t];
            dev = h->g->members[i];
            r.n = 0;
            rc = !(x->stage[k + i] = malloc((size_t)(rt_block_extent(d) * es) + 1)) ||
                 runs_block(&r, d, n * i / k, n * (i + 1) / k) ||
                 post_runs(x, &r, x->stage[k + i], p, tag_of(x, set, dev, W_SLICES), dev);
            s->recv[i] = x->stage[k + i];
        }
        for (int t = 0; t < nmine && !rc; t++) {
            int i = mine[t];
            r.n = 0;
            rc = runs_block(&r, d, n * i / k, n * (i + 1) / k) ||
                 post_runs(x, &r, s->recv[i], p, tag_of(x, set, h->g->members[i], W_SLICES), -1);
        }
    }
    free(r.off);
    free(r.len);
    return rc;
}

static void xchg_free(Xchg *x) {
    if (!x)
        return;
    for (int j = 0; x->stage && j < 2 * x->k; j++)
        free(x->stage[j]);
    free(x->stage);
    free(x->req);
    free(x->late);
    free(x->byproc);
    free(x->pstart);
    free(x->theirs);
    free(x);
}

static void in_flight(Mpi *m, int delta) {
    if (!m->have_progress)
        return;
    pthread_mutex_lock(&m->mu);
    m->in_flight += delta;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static Xchg *xchg_new(sc_handle *h) {
    int k = h->f->k;
    Xchg *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->m = state(h->dev->w);
    x->k = k;
    x->stage = calloc((size_t)(2 * k), sizeof *x->stage);
    x->theirs = calloc((size_t)k, sizeof *x->theirs);
    if (!x->stage || !x->theirs || group_by_process(h, x)) {
        xchg_free(x);
        return NULL;
    }
    return x;
}

static int mpi_post(sc_handle *h, int phase, char *err, size_t errlen) {
    sc_world *w = h->dev->w;
    Slot *s = h->s;
    if (h->g->nlocal == h->f->k || phase == rt_nphases(s->desc.kind, 0) - 1)
        return 0;                           /* nothing remote, or nothing left to move */
    if (phase == 1 && s->desc.kind != K_ALL_REDUCE)
        return 0;
    unsigned set = set_of(h->f->axes);
    Xchg *x = phase == 0 ? s->xchg = xchg_new(h) : s->xchg;
    int rc = !x;
    if (!rc && phase == 0) {
        /* Numbered per set of axes and group, whatever the axes' order:
         * the group is its lowest local device (the first by rank may
         * differ between orders). */
        const int *mine;
        int lead = w->ndev, dev, nmine = ranks_of(h, x, x->mine, &mine, &dev);
        for (int t = 0; t < nmine; t++)
            lead = h->g->members[mine[t]] < lead ? h->g->members[mine[t]] : lead;
        x->seq = atomic_fetch_add(&x->m->count[set * (unsigned)w->nlocal + (unsigned)(lead % w->nlocal)], 1);
        int64_t bytes = (int64_t)sc_dtype_size(s->desc.dtype);
        for (int i = 0; i < s->desc.shape.rank; i++)
            bytes *= s->desc.shape.dims[i];
        if (s->desc.kind == K_ALL_REDUCE)   /* its staging copies mirror the (strided) sends */
            bytes = rt_block_extent(&s->desc) * (int64_t)sc_dtype_size(s->desc.dtype);
        rc = post_descs(h, x, set) ||
             (s->desc.kind == K_PERMUTE ? post_permute(h, x, set, bytes) : post_sends(h, x, set, bytes));
        in_flight(x->m, 1);
    } else if (!rc)
        rc = post_slices(h, x, set);
    if (rc) {
        char what[160];
        rt_what(h, what, sizeof what);
        snprintf(err, errlen, "%s: cannot post its messages (out of memory, or MPI failed)", what);
        return SC_ERR;
    }
    return 1;
}

/* ---- waiting ---- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Wait for requests [x->waited, to) until the timeout; a device that waits
 * yields its core (ranks may outnumber cores). */
static int wait_upto(sc_handle *h, Xchg *x, int to) {
    double timeout = sc_timeout(h->dev->w), t0 = now();
    char what[160];
    int from = x->waited;
    for (long spins = 0;; spins++) {
        int done = 0;
        if (MPI_Testall(to - from, x->req + from, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            rt_what(h, what, sizeof what);
            return rt_dev_fail(h->dev, "%s: MPI reported an error (a message of another size: do the processes run "
                                       "the same program?)", what);
        }
        if (done) {
            x->waited = to;
            return 0;
        }
        if (now() - t0 > timeout)
            break;
        if (spins < 2000)
            sched_yield();
        else
            nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    /* Name the devices whose messages did not come: a process that sent
     * no description is late with all its members of the group. */
    LateList late = {.len = 0};
    for (int i = from; i < to; i++) {
        int got = 1;
        if (x->late[i] != -1)
            MPI_Test(&x->req[i], &got, MPI_STATUS_IGNORE);
        for (int j = 0; !got && j < h->f->k; j++) {
            int dev = h->g->members[j];
            if (x->late[i] == dev || -2 - x->late[i] == proc_of(h->dev->w, dev))
                rt_late_add(&late, dev);
        }
    }
    if (late.count)
        return rt_late_fail(h, &late, timeout);
    rt_what(h, what, sizeof what);
    return rt_dev_fail(h->dev, "%s: sends to the other processes did not complete within %g s", what, timeout);
}

static int check_descs(sc_handle *h, Xchg *x) {
    for (int g = 0; g < x->nprocs; g++)
        if (g != x->mine && !rt_desc_equal(&x->theirs[g], &h->s->desc)) {
            char what[160], mine[128], theirs[128];
            const int *ranks;
            int dev;
            ranks_of(h, x, g, &ranks, &dev);
            rt_what(h, what, sizeof what);
            rt_describe(&h->s->desc, mine, sizeof mine);
            rt_describe(&x->theirs[g], theirs, sizeof theirs);
            return rt_dev_fail(h->dev, "%s: device %d calls %s where device %d calls %s", what, h->dev->id, mine,
                               dev, theirs);
        }
    return 0;
}

static int mpi_wait(sc_handle *h, int phase) {
    Xchg *x = h->s->xchg;
    if (phase == 0 && (wait_upto(h, x, x->ndesc) || check_descs(h, x)))
        return SC_ERR;
    return wait_upto(h, x, x->nreq);
}

static void mpi_release(Slot *s) {
    Xchg *x = s->xchg;
    in_flight(x->m, -1);
    xchg_free(x);
    s->xchg = NULL;
}

/* ---- progress ----
 * OpenMPI moves a large message only inside MPI calls of the receiver
 * (and the sender): without them the data of a collective started before
 * a long GEMM would wait for its done. */

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

static void start_progress(Mpi *m) {
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

static void stop_progress(Mpi *m) {
    if (!m->have_progress)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->progress, NULL);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    MPI_Comm_free(&m->quiet);
}

/* ---- host-side steps ---- */

static int mpi_collect(sc_world *w, void *const *blocks, size_t bytes) {
    Mpi *m = state(w);
    const size_t chunk = (size_t)1 << 30;
    for (int d = w->nlocal; d < w->ndev; d++) {
        int p = proc_of(w, d);
        for (size_t at = 0; at < bytes; at += chunk) {
            int n = (int)(bytes - at < chunk ? bytes - at : chunk), rc = MPI_SUCCESS;
            if (w->process == 0)
                rc = MPI_Recv((char *)blocks[d] + at, n, MPI_BYTE, p, TAG_COLLECT, m->host, MPI_STATUS_IGNORE);
            else if (w->process == p)
                rc = MPI_Send((char *)blocks[d] + at, n, MPI_BYTE, 0, TAG_COLLECT, m->host);
            if (rc != MPI_SUCCESS)
                return SC_ERR;
        }
    }
    return 0;
}

static int mpi_agree(sc_world *w, int ok, int *first_ok) {
    int mine[2] = {ok != 0, w->process == 0 ? ok != 0 : 1}, all[2] = {0, 0};
    if (MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, state(w)->host) != MPI_SUCCESS)
        all[0] = all[1] = 0;
    if (first_ok)
        *first_ok = all[1];
    return all[0];
}

static int mpi_share(sc_world *w, void *buf, size_t bytes) {
    const size_t chunk = (size_t)1 << 30;          /* MPI counts are ints */
    for (size_t at = 0; at < bytes; at += chunk) {
        int n = (int)(bytes - at < chunk ? bytes - at : chunk);
        if (MPI_Bcast((char *)buf + at, n, MPI_BYTE, 0, state(w)->host) != MPI_SUCCESS)
            return SC_ERR;
    }
    return 0;
}

static void mpi_free(Mpi *m) {
    free(m->count);
    free(m);
}

static void mpi_destroy(sc_world *w) {
    Mpi *m = state(w);
    stop_progress(m);
    if (sc_world_failed(w)) {               /* messages may be pending: stop every process */
        fflush(NULL);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm_free(&m->coll);
    MPI_Comm_free(&m->host);
    if (m->finalize)
        MPI_Finalize();
    mpi_free(m);
}

static const RtRemote mpi_remote = {mpi_post, mpi_wait, mpi_release, mpi_collect, mpi_agree, mpi_share,
                                     mpi_destroy};

/* ---- creation ---- */

/* Local devices: the options' count, else the mesh shared evenly; 0 with
 * a message (process 0 only: every process finds the same) when the layout
 * does not fit.  The messages name both ways a program's user sets the
 * count: the generated programs' option and the environment variable. */
static int local_devices(int ndev, int given, int size, int rank, char *err, size_t errlen) {
    int L = given ? given : ndev % size ? 0 : ndev / size;
    if (L > 0 && (int64_t)L * size == ndev)
        return L;
    if (rank != 0)
        snprintf(err, errlen, "%s", "");    /* process 0 says it for all */
    else if (given)
        snprintf(err, errlen,
                 "the mesh has %d devices but %d MPI processes x %d local devices = %lld: start devices / L "
                 "processes, or change L (--local-devices L, SHARDC_LOCAL_DEVICES)",
                 ndev, size, L, (long long)L * size);
    else
        snprintf(err, errlen,
                 "the mesh has %d device%s, which %d MPI process%s cannot share evenly: run mpirun -np P with P "
                 "dividing %d (each process runs %d/P devices), or set the local devices L (--local-devices L, "
                 "SHARDC_LOCAL_DEVICES)",
                 ndev, ndev == 1 ? "" : "s", size, size == 1 ? "" : "es", ndev, ndev);
    return 0;
}

static Mpi *mpi_new(sc_world *w, int L, char *err, size_t errlen) {
    Mpi *m = calloc(1, sizeof *m);
    int provided = 0, *tag_ub = NULL, flag = 0;
    if (!m || !(m->count = calloc((size_t)L << w->mesh.naxes, sizeof *m->count))) {
        snprintf(err, errlen, "out of memory");
        free(m);
        return NULL;
    }
    m->L = L;
    m->nsets = 1 << w->mesh.naxes;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    m->ncount = flag ? (uint64_t)*tag_ub / ((uint64_t)m->nsets * (uint64_t)L * NWHAT) : 0;
    MPI_Query_thread(&provided);
    if (m->ncount < 4 * PENDING)
        snprintf(err, errlen, "this MPI's tags (up to %d) are too few for %d axes and %d local devices",
                 flag ? *tag_ub : 0, w->mesh.naxes, L);
    else if (L > 1 && provided != MPI_THREAD_MULTIPLE)
        snprintf(err, errlen, "%d local devices need MPI_THREAD_MULTIPLE, which this MPI does not provide", L);
    else
        return m;
    mpi_free(m);
    return NULL;
}

sc_world *sc_mpi_create(const sc_mesh *mesh, const sc_options *opt, char *err, size_t errlen) {
    int inited = 0, provided = 0, rank = 0, size = 1;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        snprintf(err, errlen, "cannot initialize MPI");
        return NULL;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sc_world *w = rt_world_new(mesh, opt, err, errlen);
    int L = w ? local_devices(w->ndev, w->opt.local_devices, size, rank, err, errlen) : 0;
    Mpi *m = L ? (w->local = rank * L, w->nlocal = L, mpi_new(w, L, err, errlen)) : NULL;
    if (!m) {
        sc_world_destroy(w);
        if (!inited)
            MPI_Finalize();
        return NULL;
    }
    m->finalize = !inited;
    MPI_Query_thread(&provided);
    if (provided == MPI_THREAD_MULTIPLE)
        start_progress(m);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->host);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->coll);
    MPI_Comm_set_errhandler(m->host, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(m->coll, MPI_ERRORS_RETURN);
    /* Waiting devices spin only while the device threads of this node fit
     * its cores: count the processes that share the node. */
    MPI_Comm node;
    int on_node = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &on_node);
        MPI_Comm_free(&node);
    }
    rt_set_spin(w, on_node * L);
    w->process = rank;
    w->nprocesses = size;
    w->remote_state = m;
    w->remote = &mpi_remote;
    return w;
}
