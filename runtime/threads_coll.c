/* The threads backend's collectives.  A collective has phases separated by
 * barriers of its group:
 *
 *   start:  publish the send and recv pointers, arrive at barrier 0
 *   done:   wait for barrier 0; read the peers' buffers into recv (all-reduce:
 *           reduce this device's slice of the result into its own recv);
 *           barrier 1 (all-reduce: copy the other slices from the peers'
 *           recv; barrier 2)
 *
 * The last barrier keeps every send and recv buffer alive and unchanged
 * until every member has read it.  Barriers use the group's mutex and
 * condition variable (no spinning); the mutex orders each device's writes
 * to its buffers before its peers' reads.
 *
 * On the MPI backend the same barriers count only this process's members;
 * the last local arrival asks the RtRemote to bring in what the next phase
 * reads of the other processes' members, and one waiting member drives that
 * exchange before the barrier opens (mpi.c). */
#include "threads.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const kind_name[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                        "collective-permute"};
static const char *const reduce_name[] = {"sum", "max", "min"};

static int nphases(Kind k) { return k == K_ALL_REDUCE ? 3 : 2; }
int rt_nphases(Kind k) { return nphases(k); }

void rt_what(const sc_handle *h, char *buf, size_t n) {
    snprintf(buf, n, "%s over %s", kind_name[h->d.kind], h->f ? h->f->name : "{?}");
}

void rt_describe(const Desc *d, char *buf, size_t n) {
    int w = snprintf(buf, n, "%s %s", kind_name[d->kind], sc_dtype_name(d->dtype));
    if (d->kind == K_ALL_REDUCE || d->kind == K_REDUCE_SCATTER)
        w += snprintf(buf + w, n - (size_t)w, " %s", (unsigned)d->red <= SC_MIN ? reduce_name[d->red] : "?");
    for (int i = 0; i < d->shape.rank && w < (int)n - 24; i++)
        w += snprintf(buf + w, n - (size_t)w, "%s%lld", i ? "," : " [", (long long)d->shape.dims[i]);
    if (w < (int)n - 40 && d->shape.rank > 0)
        w += snprintf(buf + w, n - (size_t)w, "]");
    if (w < (int)n - 40 && (d->kind == K_ALL_GATHER || d->kind == K_REDUCE_SCATTER))
        snprintf(buf + w, n - (size_t)w, " dim %d", d->dim);
    else if (w < (int)n - 40 && d->kind == K_ALL_TO_ALL)
        snprintf(buf + w, n - (size_t)w, " split %d concat %d", d->dim, d->dim2);
}

int rt_desc_equal(const Desc *a, const Desc *b) {
    if (a->kind != b->kind || a->dtype != b->dtype || a->shape.rank != b->shape.rank ||
        a->dim != b->dim || a->dim2 != b->dim2)
        return 0;
    if ((a->kind == K_ALL_REDUCE || a->kind == K_REDUCE_SCATTER) && a->red != b->red)
        return 0;
    for (int i = 0; i < a->shape.rank; i++)
        if (a->shape.dims[i] != b->shape.dims[i])
            return 0;
    return 1;
}

/* Complete the slot's phase: after the last one free the slot for the
 * collective PENDING later.  The group lock is held. */
static void advance(sc_handle *h) {
    Slot *s = h->s;
    s->count = 0;
    s->xwait = 0;
    if (++s->phase == nphases(h->d.kind)) {
        if (s->xchg)
            h->dev->w->remote->release(s);
        s->op += PENDING;
        s->phase = 0;
        s->have_desc = 0;
        memset(s->reached, 0, (size_t)h->f->k * sizeof(int));
    }
    pthread_cond_broadcast(&h->g->cv);
}

/* Arrive at phase p; the group lock is held.  The last local arrival
 * completes the phase, or starts the exchange with the other processes
 * that completes it (then a waiting member drives it, in sync_phase).
 * SC_ERR with a message in err. */
static int arrive(sc_handle *h, int p, char *err, size_t errlen) {
    Slot *s = h->s;
    s->reached[h->rank] = p + 1;
    if (++s->count < h->g->nlocal)
        return 0;
    const RtRemote *remote = h->dev->w->remote;
    int pending = remote ? remote->post(h, p, err, errlen) : 0;
    if (pending < 0)
        return SC_ERR;
    if (pending)
        s->xwait = 1;
    else
        advance(h);
    return 0;
}

static struct timespec deadline_in(double seconds) {
    if (seconds > 1e8)
        seconds = 1e8;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)seconds;
    t.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (t.tv_nsec >= 1000000000L)
        t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

void rt_late_add(LateList *l, int dev) {
    int room = (int)sizeof l->text - l->len;
    if (room > 40)
        l->len += snprintf(l->text + l->len, (size_t)room, "%s%d", l->count ? ", " : "", dev);
    else if (room > 4)
        l->len += snprintf(l->text + l->len, (size_t)room, ", ...");
    l->count++;
}

int rt_late_fail(sc_handle *h, const LateList *l, double timeout) {
    char what[160];
    rt_what(h, what, sizeof what);
    return rt_dev_fail(h->dev, "%s: device%s %s did not arrive within %g s", what, l->count == 1 ? "" : "s",
                       l->text, timeout);
}

/* A barrier that timed out names the local members that have not arrived
 * at phase p (the others' lateness is the exchange's to report).  Called
 * with the group lock held; unlocks it. */
static int late_members(sc_handle *h, int p, double timeout) {
    LateList late = {.len = 0};
    for (int j = 0; j < h->f->k; j++)
        if (h->s->reached[j] <= p && sc_world_is_local(h->dev->w, h->g->members[j]))
            rt_late_add(&late, h->g->members[j]);
    pthread_mutex_unlock(&h->g->mu);
    return rt_late_fail(h, &late, timeout);
}

/* Arrive at phase p (unless `wait_only`) and wait until every member has.
 * While an exchange with other processes is pending, one waiting member
 * drives it (RtRemote.wait) outside the lock; it reports its own timeout. */
static int sync_phase(sc_handle *h, int p, int wait_only) {
    sc_device *dev = h->dev;
    sc_world *w = dev->w;
    Slot *s = h->s;
    char buf[MSG];
    double timeout = sc_timeout(w);
    struct timespec deadline = deadline_in(timeout);
    pthread_mutex_lock(&h->g->mu);
    if (!wait_only && arrive(h, p, buf, sizeof buf)) {
        pthread_mutex_unlock(&h->g->mu);
        return rt_dev_fail(dev, "%s", buf);
    }
    while (s->op == h->op && s->phase <= p) {
        if (atomic_load(&w->failed)) {
            pthread_mutex_unlock(&h->g->mu);
            rt_what(h, buf, sizeof buf);
            return rt_dev_aborted(dev, buf);
        }
        if (s->xwait && !s->driving) {
            s->driving = 1;
            pthread_mutex_unlock(&h->g->mu);
            int rc = w->remote->wait(h, p);
            pthread_mutex_lock(&h->g->mu);
            s->driving = 0;
            if (rc) {
                pthread_cond_broadcast(&h->g->cv);
                pthread_mutex_unlock(&h->g->mu);
                return rc;
            }
            advance(h);
            continue;
        }
        int rc = pthread_cond_timedwait(&h->g->cv, &h->g->mu, &deadline);
        if (rc != ETIMEDOUT || s->op != h->op || s->phase > p)
            continue;
        if (!s->xwait)
            return late_members(h, p, timeout);
        deadline = deadline_in(timeout);
    }
    pthread_mutex_unlock(&h->g->mu);
    return 0;
}

/* Checks the arguments; NULL or what is wrong.  Sets h->src and h->dst
 * for permute. */
static const char *check(sc_handle *h, int k, const int *pairs, int npairs) {
    const Desc *d = &h->d;
    if ((unsigned)d->dtype >= SC_DTYPE_COUNT)
        return "unknown dtype";
    if ((d->kind == K_ALL_REDUCE || d->kind == K_REDUCE_SCATTER) && (unsigned)d->red > SC_MIN)
        return "unknown reduction";
    if (d->shape.rank < 1 || d->shape.rank > SC_MAX_RANK)
        return "the rank of the shape is not 1 to 8";
    int64_t n = 1;
    for (int i = 0; i < d->shape.rank; i++) {
        if (d->shape.dims[i] < 0)
            return "a negative dim or count";
        n *= d->shape.dims[i];
    }
    if ((d->kind != K_ALL_REDUCE && d->kind != K_PERMUTE) &&
        (d->dim < 0 || d->dim >= d->shape.rank || d->dim2 < 0 || d->dim2 >= d->shape.rank))
        return "a dim out of range";
    if ((d->kind == K_REDUCE_SCATTER || d->kind == K_ALL_TO_ALL) && d->shape.dims[d->dim] % k)
        return "the dim to split is not divisible by the group size";
    if (n > 0 && (!h->send || !h->recv))
        return "a NULL buffer";
    if (d->kind == K_ALL_REDUCE && h->send != h->recv && n > 0) {
        const char *a = h->send, *b = h->recv;
        size_t bytes = (size_t)n * sc_dtype_size(d->dtype);
        if (a < b + bytes && b < a + bytes)
            return "send and recv overlap without being the same";
    }
    if (d->kind != K_PERMUTE)
        return NULL;
    if (npairs < 0 || (npairs > 0 && !pairs))
        return "invalid pairs";
    int me = h->rank;
    for (int p = 0; p < npairs; p++) {
        int src = pairs[2 * p], dst = pairs[2 * p + 1];
        if (src < 0 || src >= k || dst < 0 || dst >= k)
            return "a pair names a rank outside the group";
        for (int q = 0; q < p; q++)
            if (pairs[2 * q] == src || pairs[2 * q + 1] == dst)
                return "a rank is the source or the target of two pairs";
        if (dst == me)
            h->src = src;
        if (src == me)
            h->dst = dst;
    }
    return NULL;
}

static sc_handle *start(sc_device *dev, sc_axes axes, Desc d, const int *pairs, int npairs,
                        const void *send, void *recv) {
    sc_world *w = dev->w;
    sc_handle *h = calloc(1, sizeof *h);
    const char *kind = (unsigned)d.kind < 5 ? kind_name[d.kind] : "?";
    if (!h) {
        rt_dev_fail(dev, "%s: out of memory", kind);
        return NULL;
    }
    *h = (sc_handle){.dev = dev, .d = d, .send = send, .recv = recv, .src = -1, .dst = -1, .failed = 1};
    char buf[160];
    if (!rt_axes_valid(w, axes)) {
        char list[64] = "";
        for (int i = 0, n = 0; i < axes.n && i < SC_MAX_AXES && n < 50; i++)
            n += snprintf(list + n, sizeof list - (size_t)n, "%s%d", i ? "," : "", axes.axis[i]);
        rt_dev_fail(dev, "%s: invalid axes (%s): not distinct axes of the %d-axis mesh", kind, list, w->mesh.naxes);
        return h;
    }
    Family *f = h->f = rt_family_get(dev, axes);
    if (!f) {
        rt_dev_fail(dev, "%s: out of memory", kind);
        return h;
    }
    rt_what(h, buf, sizeof buf);
    h->rank = f->rank_of[dev->id];
    const char *bad = check(h, f->k, pairs, npairs);
    if (bad) {
        rt_dev_fail(dev, "%s: %s", buf, bad);
        return h;
    }
    if (atomic_load(&w->failed)) {
        rt_dev_aborted(dev, buf);
        return h;
    }
    if (f->pending[dev->id] >= PENDING) {
        rt_dev_fail(dev, "%s: more than %d collectives started and not done", buf, PENDING);
        return h;
    }
    f->pending[dev->id]++;
    h->g = &f->groups[f->group_of[dev->id]];
    h->op = f->next[dev->id]++;
    Slot *s = h->s = &h->g->slot[h->op % PENDING];
    pthread_mutex_lock(&h->g->mu);
    if (s->op != h->op) {
        pthread_mutex_unlock(&h->g->mu);
        rt_dev_fail(dev, "%s: internal error: slot of collective %llu holds %llu", buf,
                    (unsigned long long)h->op, (unsigned long long)s->op);
        return h;
    }
    if (s->have_desc && !rt_desc_equal(&s->desc, &h->d)) {
        char mine[128], theirs[128];
        rt_describe(&h->d, mine, sizeof mine);
        rt_describe(&s->desc, theirs, sizeof theirs);
        pthread_mutex_unlock(&h->g->mu);
        rt_dev_fail(dev, "%s: device %d calls %s where another member calls %s", buf, dev->id, mine, theirs);
        return h;
    }
    s->desc = h->d;
    s->have_desc = 1;
    s->send[h->rank] = send;
    s->recv[h->rank] = recv;
    s->src[h->rank] = h->src;
    s->dst[h->rank] = h->dst;
    char err[MSG];
    if (arrive(h, 0, err, sizeof err)) {
        pthread_mutex_unlock(&h->g->mu);
        rt_dev_fail(dev, "%s", err);
        return h;
    }
    pthread_mutex_unlock(&h->g->mu);
    h->failed = 0;
    return h;
}

/* This device's part of the data movement after barrier `phase - 1`. */
static void work(const sc_handle *h, int phase) {
    const Desc *d = &h->d;
    const Slot *s = h->s;
    int k = h->f->k, me = h->rank, rank = d->shape.rank;
    size_t es = sc_dtype_size(d->dtype);
    char *recv = h->recv;
    int64_t xs[SC_MAX_RANK], rs[SC_MAX_RANK], box[SC_MAX_RANK];
    int64_t n = rt_strides(&d->shape, xs);
    sc_shape out = d->shape;
    switch (d->kind) {
    case K_ALL_REDUCE:
        /* Member j reduces elements [n j / k, n (j + 1) / k) into its recv,
         * then every member copies the other slices from their owners. */
        if (phase == 1) {
            int64_t lo = n * me / k, hi = n * (me + 1) / k;
            rt_reduce(d->dtype, d->red, s->send, k, lo, recv + lo * (int64_t)es, hi - lo);
        } else {
            for (int j = 0; j < k; j++) {
                int64_t lo = n * j / k, hi = n * (j + 1) / k;
                if (j != me && hi > lo)
                    memcpy(recv + lo * (int64_t)es, (const char *)s->recv[j] + lo * (int64_t)es,
                           (size_t)(hi - lo) * es);
            }
        }
        break;
    case K_ALL_GATHER:
        out.dims[d->dim] *= k;
        rt_strides(&out, rs);
        for (int j = 0; j < k; j++)
            rt_copy_box(recv + j * d->shape.dims[d->dim] * rs[d->dim] * (int64_t)es, rs, s->send[j], xs, rank,
                        d->shape.dims, es);
        break;
    case K_REDUCE_SCATTER: {
        int64_t b = d->shape.dims[d->dim] / k, inner = xs[d->dim], outer = n / (d->shape.dims[d->dim] * inner);
        if (b * inner == 0)
            break;
        for (int64_t o = 0; o < outer; o++)
            rt_reduce(d->dtype, d->red, s->send, k, (o * k + me) * b * inner, recv + o * b * inner * (int64_t)es,
                      b * inner);
        break;
    }
    case K_ALL_TO_ALL:
        memcpy(box, d->shape.dims, sizeof box);
        box[d->dim] /= k;
        out.dims[d->dim] /= k;
        out.dims[d->dim2] *= k;
        rt_strides(&out, rs);
        for (int j = 0; j < k; j++)
            rt_copy_box(recv + j * box[d->dim2] * rs[d->dim2] * (int64_t)es, rs,
                        (const char *)s->send[j] + me * box[d->dim] * xs[d->dim] * (int64_t)es, xs, rank, box, es);
        break;
    case K_PERMUTE:
        if (n == 0)
            break;
        if (h->src < 0)
            memset(recv, 0, (size_t)n * es);
        else if (s->send[h->src] != recv)    /* MPI received it in place */
            memcpy(recv, s->send[h->src], (size_t)n * es);
        break;
    }
}

int sc_done(sc_handle *h) {
    if (!h)
        return SC_ERR;
    int rc = h->failed ? SC_ERR : sync_phase(h, 0, 1);
    for (int p = 1; rc == 0 && p < nphases(h->d.kind); p++) {
        work(h, p);
        rc = sync_phase(h, p, 0);
    }
    if (h->g)
        h->f->pending[h->dev->id]--;
    free(h);
    return rc;
}

/* ---- the entry points ---- */

static Desc desc(Kind kind, sc_dtype t, sc_reduce red, sc_shape shape, int dim, int dim2) {
    return (Desc){.kind = kind, .dtype = t, .red = red, .shape = shape, .dim = dim, .dim2 = dim2};
}

static sc_shape flat(int64_t count) { return (sc_shape){1, {count}}; }

sc_handle *sc_start_all_reduce(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, const void *send,
                               void *recv, int64_t count) {
    return start(dev, axes, desc(K_ALL_REDUCE, t, op, flat(count), 0, 0), NULL, 0, send, recv);
}

sc_handle *sc_start_all_gather(sc_device *dev, sc_axes axes, sc_dtype t, sc_shape in, int dim,
                               const void *send, void *recv) {
    return start(dev, axes, desc(K_ALL_GATHER, t, SC_SUM, in, dim, dim), NULL, 0, send, recv);
}

sc_handle *sc_start_reduce_scatter(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, sc_shape in,
                                   int dim, const void *send, void *recv) {
    return start(dev, axes, desc(K_REDUCE_SCATTER, t, op, in, dim, dim), NULL, 0, send, recv);
}

sc_handle *sc_start_all_to_all(sc_device *dev, sc_axes axes, sc_dtype t, sc_shape in, int split_dim,
                               int concat_dim, const void *send, void *recv) {
    return start(dev, axes, desc(K_ALL_TO_ALL, t, SC_SUM, in, split_dim, concat_dim), NULL, 0, send, recv);
}

sc_handle *sc_start_collective_permute(sc_device *dev, sc_axes axes, sc_dtype t, const int *pairs,
                                       int npairs, const void *send, void *recv, int64_t count) {
    return start(dev, axes, desc(K_PERMUTE, t, SC_SUM, flat(count), 0, 0), pairs, npairs, send, recv);
}

int sc_all_reduce(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, const void *send, void *recv,
                  int64_t count) {
    return sc_done(sc_start_all_reduce(dev, axes, t, op, send, recv, count));
}

int sc_all_gather(sc_device *dev, sc_axes axes, sc_dtype t, sc_shape in, int dim, const void *send,
                  void *recv) {
    return sc_done(sc_start_all_gather(dev, axes, t, in, dim, send, recv));
}

int sc_reduce_scatter(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, sc_shape in, int dim,
                      const void *send, void *recv) {
    return sc_done(sc_start_reduce_scatter(dev, axes, t, op, in, dim, send, recv));
}

int sc_all_to_all(sc_device *dev, sc_axes axes, sc_dtype t, sc_shape in, int split_dim, int concat_dim,
                  const void *send, void *recv) {
    return sc_done(sc_start_all_to_all(dev, axes, t, in, split_dim, concat_dim, send, recv));
}

int sc_collective_permute(sc_device *dev, sc_axes axes, sc_dtype t, const int *pairs, int npairs,
                          const void *send, void *recv, int64_t count) {
    return sc_done(sc_start_collective_permute(dev, axes, t, pairs, npairs, send, recv, count));
}
