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
    Desc *theirs;             /* per process of the group: its description */
    int *their_dev;           /* its first member */
    int ntheirs;
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

/* ---- runs: the parts of a member's buffer that a process reads ---- */

static int runs_add(Runs *r, int64_t off, int64_t len) {
    const int64_t chunk = (int64_t)1 << 30;
    for (; len > 0; off += chunk, len -= chunk) {
        int64_t n = len < chunk ? len : chunk;
        if (r->n && r->off[r->n - 1] + r->len[r->n - 1] == off && r->len[r->n - 1] + n <= chunk) {
            r->len[r->n - 1] += (int)n;
            continue;
        }
        if (r->n == r->cap) {
            int cap = r->cap ? 2 * r->cap : 16;
            MPI_Aint *o = realloc(r->off, (size_t)cap * sizeof *o);
            if (o)
                r->off = o;
            int *l = realloc(r->len, (size_t)cap * sizeof *l);
            if (l)
                r->len = l;
            if (!o || !l)
                return -1;
            r->cap = cap;
        }
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

/* What the members `ranks` (of some process) read of member i's send in
 * phase 1, i.e. after barrier 0 (threads_coll.c's work). */
static int runs_of_send(Runs *r, const Desc *d, int k, int i, const int *ranks, int nr, const int *src) {
    size_t es = sc_dtype_size(d->dtype);
    int64_t st[SC_MAX_RANK], box[SC_MAX_RANK];
    int64_t n = rt_strides(&d->shape, st);
    int rc = 0;
    for (int t = 0; t < nr && !rc; t++) {
        int j = ranks[t];
        switch (d->kind) {
        case K_ALL_REDUCE:
            rc = runs_add(r, n * j / k * (int64_t)es, (n * (j + 1) / k - n * j / k) * (int64_t)es);
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
        case K_PERMUTE:
            if (src[t] != i)
                break;
            /* fall through */
        case K_ALL_GATHER:
            return runs_add(r, 0, n * (int64_t)es);
        }
    }
    return rc;
}

/* ---- posting ---- */

static int tag_of(const Xchg *x, unsigned set, int lidx, int what) {
    return (int)((((x->seq % x->m->ncount) * (uint64_t)x->m->nsets + set) * (uint64_t)x->m->L + (uint64_t)lidx) *
                     NWHAT +
                 (uint64_t)what);
}

static int add_req(Xchg *x, int late) {
    if (x->nreq == x->cap) {
        int cap = x->cap ? 2 * x->cap : 16;
        MPI_Request *q = realloc(x->req, (size_t)cap * sizeof *q);
        if (q)
            x->req = q;
        int *l = realloc(x->late, (size_t)cap * sizeof *l);
        if (l)
            x->late = l;
        if (!q || !l)
            return -1;
        x->cap = cap;
    }
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

/* The group's members in process p, as ranks, and their permute sources
 * (known for local members only); returns how many. */
static int ranks_in(const sc_handle *h, int p, int *ranks, int *src) {
    int n = 0;
    for (int j = 0; j < h->f->k; j++)
        if (proc_of(h->dev->w, h->g->members[j]) == p) {
            src[n] = h->s->src[j];
            ranks[n++] = j;
        }
    return n;
}

/* Phase 0: descriptions, and the parts of the sends the members read.
 * first[p]: the rank of process p's first member, or -1. */
static int post_sends(sc_handle *h, Xchg *x, unsigned set, int *ranks, int *src, const int *first) {
    sc_world *w = h->dev->w;
    Slot *s = h->s;
    int k = h->f->k, me = w->process, lead = -1, rc = 0;
    int64_t n = 1;
    for (int i = 0; i < s->desc.shape.rank; i++)
        n *= s->desc.shape.dims[i];
    size_t bytes = (size_t)n * sc_dtype_size(s->desc.dtype);
    lead = h->g->members[first[me]];
    /* Descriptions: one per process pair, from each side's first member. */
    for (int j = 0; j < k && !rc; j++) {
        int dev = h->g->members[j], p = proc_of(w, dev);
        if (p == me || first[p] != j)
            continue;
        int t = x->ntheirs++, q1 = add_req(x, -2 - p), q2 = add_req(x, -1);
        x->their_dev[t] = dev;
        rc = q1 < 0 || q2 < 0 ||
             MPI_Irecv(&x->theirs[t], sizeof(Desc), MPI_BYTE, p, tag_of(x, set, dev % w->nlocal, W_DESC), x->m->coll,
                       &x->req[q1]) != MPI_SUCCESS ||
             MPI_Isend(&s->desc, sizeof(Desc), MPI_BYTE, p, tag_of(x, set, lead % w->nlocal, W_DESC), x->m->coll,
                       &x->req[q2]) != MPI_SUCCESS;
    }
    x->ndesc = x->nreq;
    int nmine = ranks_in(h, me, ranks, src);
    Runs r = {0};
    for (int i = 0; i < k && !rc; i++) {
        int dev = h->g->members[i], p = proc_of(w, dev);
        if (p != me) {                      /* what the local members read of i */
            r.n = 0;
            rc = runs_of_send(&r, &s->desc, k, i, ranks, nmine, src);
            /* A permute's source lands straight in its target's recv,
             * which work() then leaves as it is. */
            char *into = NULL;
            for (int t = 0; s->desc.kind == K_PERMUTE && t < nmine; t++)
                if (src[t] == i)
                    into = s->recv[ranks[t]];
            if (!rc && r.n) {
                rc = !(into || (into = x->stage[i] = malloc(bytes + 1))) ||
                     post_runs(x, &r, into, p, tag_of(x, set, dev % w->nlocal, W_DATA), dev);
                s->send[i] = into;
            }
            continue;
        }
        for (int q = 0; q < w->nprocesses && !rc; q++) {    /* what process q reads of i */
            int nq = q == me ? 0 : ranks_in(h, q, ranks + k, src + k);
            for (int t = 0; t < nq; t++)    /* a permute's target knows its source */
                src[k + t] = s->dst[i] == ranks[k + t] ? i : -1;
            r.n = 0;
            rc = nq && (runs_of_send(&r, &s->desc, k, i, ranks + k, nq, src + k) ||
                        post_runs(x, &r, (void *)s->send[i], q, tag_of(x, set, dev % w->nlocal, W_DATA), -1));
        }
    }
    free(r.off);
    free(r.len);
    return rc;
}

/* All-reduce, phase 1: member i's reduced slice of its recv, to and from
 * every process of the group. */
static int post_slices(sc_handle *h, Xchg *x, unsigned set, const int *first) {
    sc_world *w = h->dev->w;
    Slot *s = h->s;
    int k = h->f->k, me = w->process, rc = 0;
    int64_t n = s->desc.shape.dims[0];
    size_t es = sc_dtype_size(s->desc.dtype);
    Runs r = {0};
    for (int i = 0; i < k && !rc; i++) {
        int dev = h->g->members[i], p = proc_of(w, dev), tag = tag_of(x, set, dev % w->nlocal, W_SLICES);
        r.n = 0;
        rc = runs_add(&r, n * i / k * (int64_t)es, (n * (i + 1) / k - n * i / k) * (int64_t)es);
        if (!rc && p != me) {
            rc = !(x->stage[k + i] = malloc((size_t)n * es + 1)) || post_runs(x, &r, x->stage[k + i], p, tag, dev);
            s->recv[i] = x->stage[k + i];
        }
        for (int j = 0; j < k && !rc && p == me; j++) {     /* once per other process */
            int q = proc_of(w, h->g->members[j]);
            if (q != me && first[q] == j)
                rc = post_runs(x, &r, s->recv[i], q, tag, -1);
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
    free(x->theirs);
    free(x->their_dev);
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

static int mpi_post(sc_handle *h, int phase, char *err, size_t errlen) {
    sc_world *w = h->dev->w;
    Slot *s = h->s;
    int k = h->f->k, rc = 0;
    if (h->g->nlocal == k || phase == rt_nphases(s->desc.kind) - 1)
        return 0;                           /* nothing remote, or nothing left to move */
    if (phase == 1 && s->desc.kind != K_ALL_REDUCE)
        return 0;
    unsigned set = set_of(h->f->axes);
    Mpi *m = state(w);
    Xchg *x = s->xchg;
    int *first = malloc((size_t)(w->nprocesses + 4 * k) * sizeof *first), *ranks = first + w->nprocesses;
    if (first) {
        for (int p = 0; p < w->nprocesses; p++)
            first[p] = -1;
        for (int j = k - 1; j >= 0; j--)
            first[proc_of(w, h->g->members[j])] = j;
    }
    if (phase == 0) {
        x = s->xchg = calloc(1, sizeof *x);
        if (x) {
            x->m = m;
            x->k = k;
            x->stage = calloc((size_t)(2 * k), sizeof *x->stage);
            x->theirs = calloc((size_t)k, sizeof *x->theirs);
            x->their_dev = calloc((size_t)k, sizeof *x->their_dev);
        }
        if (x && x->stage && x->theirs && x->their_dev && first) {
            /* Numbered per set of axes and group, whatever the axes' order:
             * the group is its lowest local device. */
            int lead = w->nlocal;
            for (int j = 0; j < k; j++)
                if (proc_of(w, h->g->members[j]) == w->process && h->g->members[j] % w->nlocal < lead)
                    lead = h->g->members[j] % w->nlocal;
            x->seq = atomic_fetch_add(&m->count[set * (unsigned)w->nlocal + (unsigned)lead], 1);
            rc = post_sends(h, x, set, ranks, ranks + 2 * k, first);
            in_flight(m, 1);
        } else
            rc = -1;
    } else
        rc = !first || post_slices(h, x, set, first);
    free(first);
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
    char late[256];
    int n = 0, nlate = 0;
    for (int i = from; i < to; i++) {
        int got = 1;
        if (x->late[i] != -1)
            MPI_Test(&x->req[i], &got, MPI_STATUS_IGNORE);
        for (int j = 0; !got && j < h->f->k; j++) {
            int dev = h->g->members[j];
            if ((x->late[i] == dev || -2 - x->late[i] == proc_of(h->dev->w, dev)) && n < (int)sizeof late - 40) {
                n += snprintf(late + n, sizeof late - (size_t)n, "%s%d", nlate ? ", " : "", dev);
                nlate++;
            }
        }
    }
    rt_what(h, what, sizeof what);
    if (!nlate)
        return rt_dev_fail(h->dev, "%s: sends to the other processes did not complete within %g s", what, timeout);
    return rt_dev_fail(h->dev, "%s: device%s %s did not arrive within %g s", what, nlate == 1 ? "" : "s", late,
                       timeout);
}

static int check_descs(sc_handle *h, Xchg *x) {
    for (int t = 0; t < x->ntheirs; t++)
        if (!rt_desc_equal(&x->theirs[t], &h->s->desc)) {
            char what[160], mine[128], theirs[128];
            rt_what(h, what, sizeof what);
            rt_describe(&h->s->desc, mine, sizeof mine);
            rt_describe(&x->theirs[t], theirs, sizeof theirs);
            return rt_dev_fail(h->dev, "%s: device %d calls %s where device %d calls %s", what, h->dev->id, mine,
                               x->their_dev[t], theirs);
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

static int start_progress(Mpi *m) {
    MPI_Comm_dup(MPI_COMM_WORLD, &m->quiet);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->have_progress = pthread_create(&m->progress, NULL, progress_main, m) == 0;
    if (!m->have_progress) {
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        MPI_Comm_free(&m->quiet);
    }
    return m->have_progress;
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

static const RtRemote mpi_remote = {mpi_post, mpi_wait, mpi_release, mpi_collect, mpi_agree, mpi_destroy};

/* ---- creation ---- */

/* Local devices: SHARDC_LOCAL_DEVICES, else the mesh shared evenly; 0 with
 * a message (process 0 only) when the layout does not fit. */
static int local_devices(int ndev, int size, int rank, char *err, size_t errlen) {
    const char *env = getenv("SHARDC_LOCAL_DEVICES");
    int L = ndev % size ? 0 : ndev / size;
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        L = *end || v < 1 || v > ndev ? -1 : (int)v;
    }
    if (L > 0 && (int64_t)L * size == ndev)
        return L;
    if (rank != 0)
        snprintf(err, errlen, "%s", "");    /* process 0 says it for all */
    else if (L < 0)
        snprintf(err, errlen, "SHARDC_LOCAL_DEVICES=%s is not a number of devices from 1 to %d", env, ndev);
    else if (env && *env)
        snprintf(err, errlen,
                 "the mesh has %d devices but %d MPI processes x %d local devices (SHARDC_LOCAL_DEVICES) = %lld: "
                 "run mpirun -np %d, or set SHARDC_LOCAL_DEVICES to %d",
                 ndev, size, L, (long long)L * size, ndev % L ? ndev : ndev / L, ndev % size ? 1 : ndev / size);
    else
        snprintf(err, errlen,
                 "the mesh has %d device%s, which %d MPI process%s cannot share evenly: run mpirun -np P with P "
                 "dividing %d (each process runs %d/P devices), or set SHARDC_LOCAL_DEVICES",
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

sc_world *sc_mpi_create(const sc_mesh *mesh, char *err, size_t errlen) {
    int inited = 0, provided = 0, rank = 0, size = 1;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        snprintf(err, errlen, "cannot initialize MPI");
        return NULL;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sc_world *w = rt_world_new(mesh, err, errlen);
    int L = w ? local_devices(w->ndev, size, rank, err, errlen) : 0;
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
    w->process = rank;
    w->nprocesses = size;
    w->remote_state = m;
    w->remote = &mpi_remote;
    return w;
}
