/* The threads backend: one thread per device in one process.  Collectives
 * read their peers' buffers directly (one copy, no staging); devices meet
 * at per-group barriers of atomic counters, where a waiting device spins
 * or yields briefly, then sleeps (threads_coll.c).  See docs/runtime.md. */
#define _GNU_SOURCE 1        /* sched_getaffinity */
#include "threads.h"

#include <sched.h>
#include <unistd.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- failure ---- */

static void fail_world(sc_world *w, const char *msg) {
    pthread_mutex_lock(&w->mu);
    if (!atomic_load(&w->failed)) {
        snprintf(w->error, sizeof w->error, "%s", msg);
        atomic_store(&w->failed, 1);
    }
    /* Wake every waiter; they see `failed`. */
    for (int i = 0; i < w->nfam; i++)
        for (int g = 0; g < w->fam[i]->ngroups; g++)
            for (int s = 0; s < NSLOTS; s++)
                rt_wake(&w->fam[i]->groups[g].slot[s]);
    pthread_mutex_unlock(&w->mu);
}

int rt_dev_fail(sc_device *dev, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dev->error, sizeof dev->error, fmt, ap);
    va_end(ap);
    fail_world(dev->w, dev->error);
    return SC_ERR;
}

int rt_dev_aborted(sc_device *dev, const char *what) {
    sc_world *w = dev->w;
    pthread_mutex_lock(&w->mu);
    snprintf(dev->error, sizeof dev->error, "%.150s: aborted: %.340s", what, w->error);
    pthread_mutex_unlock(&w->mu);
    return SC_ERR;
}

/* ---- families of groups ---- */

int rt_axes_valid(const sc_world *w, sc_axes a) {
    if (a.n < 1 || a.n > w->mesh.naxes)
        return 0;
    for (int i = 0; i < a.n; i++) {
        if (a.axis[i] < 0 || a.axis[i] >= w->mesh.naxes)
            return 0;
        for (int j = 0; j < i; j++)
            if (a.axis[j] == a.axis[i])
                return 0;
    }
    return 1;
}

static int axes_equal(sc_axes a, sc_axes b) {
    if (a.n != b.n)
        return 0;
    for (int i = 0; i < a.n; i++)
        if (a.axis[i] != b.axis[i])
            return 0;
    return 1;
}

/* Rank of a device with coordinates `c` in its group: the listed axes'
 * coordinates, the first one major. */
static int rank_in(const sc_mesh *m, sc_axes a, const int *c) {
    int r = 0;
    for (int i = 0; i < a.n; i++)
        r = r * m->sizes[a.axis[i]] + c[a.axis[i]];
    return r;
}

static void coords_of(const sc_world *w, int id, int *c) {
    for (int a = 0; a < w->mesh.naxes; a++)
        c[a] = id / w->stride[a] % w->mesh.sizes[a];
}

static void family_free(Family *f) {
    if (!f)
        return;
    for (int g = 0; f->groups && g < f->ngroups; g++) {
        Group *gr = &f->groups[g];
        for (int s = 0; s < NSLOTS; s++) {
#ifdef RT_NO_FUTEX
            pthread_mutex_destroy(&gr->slot[s].mu);
            pthread_cond_destroy(&gr->slot[s].cv);
#endif
            free(gr->slot[s].reached);
            free(gr->slot[s].send);
            free(gr->slot[s].recv);
            free(gr->slot[s].src);
            free(gr->slot[s].dst);
            free(gr->slot[s].descs);
            for (int j = 0; gr->slot[s].stage && j < f->k; j++)
                free(gr->slot[s].stage[j]);
            free(gr->slot[s].stage);
            free(gr->slot[s].stage_cap);
        }
    }
    free(f->groups);
    free(f->members);
    free(f->group_of);
    free(f->rank_of);
    free(f->progress);
    free(f);
}

static Family *family_new(const sc_world *w, sc_axes a) {
    Family *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->axes = a;
    f->k = 1;
    int n = snprintf(f->name, sizeof f->name, "{");
    for (int i = 0; i < a.n; i++) {
        f->k *= w->mesh.sizes[a.axis[i]];
        n += snprintf(f->name + n, sizeof f->name - (size_t)n, "%s%s", i ? "," : "", w->names[a.axis[i]]);
        if (n >= (int)sizeof f->name - 2)
            n = (int)sizeof f->name - 2;
    }
    snprintf(f->name + n, sizeof f->name - (size_t)n, "}");
    f->ngroups = w->ndev / f->k;
    size_t nd = (size_t)w->ndev;
    f->members = malloc(nd * sizeof(int));
    f->group_of = malloc(nd * sizeof(int));
    f->rank_of = malloc(nd * sizeof(int));
    f->progress = aligned_alloc(_Alignof(Progress), nd * sizeof(Progress));
    if (f->progress)
        memset(f->progress, 0, nd * sizeof(Progress));
    /* Slots keep their hot fields on cache lines of their own (64-byte
     * aligned members): the groups need that alignment too. */
    f->groups = aligned_alloc(_Alignof(Group), (size_t)f->ngroups * sizeof(Group));
    if (f->groups)
        memset(f->groups, 0, (size_t)f->ngroups * sizeof(Group));
    if (!f->members || !f->group_of || !f->rank_of || !f->progress || !f->groups) {
        free(f->groups);
        f->groups = NULL;
        family_free(f);
        return NULL;
    }
    /* Groups in order of their first device id (the one whose listed
     * coordinates are all 0). */
    int ng = 0, c[SC_MAX_AXES];
    for (int id = 0; id < w->ndev; id++) {
        coords_of(w, id, c);
        f->rank_of[id] = rank_in(&w->mesh, a, c);
        int base = id;
        for (int i = 0; i < a.n; i++)
            base -= c[a.axis[i]] * w->stride[a.axis[i]];
        f->group_of[id] = f->rank_of[id] == 0 ? ng++ : f->group_of[base];
        f->members[f->group_of[id] * f->k + f->rank_of[id]] = id;
    }
#ifdef RT_NO_FUTEX
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
#endif
    int ok = 1;
    for (int g = 0; g < f->ngroups; g++) {
        Group *gr = &f->groups[g];
        gr->members = f->members + g * f->k;
        for (int j = 0; j < f->k; j++)
            gr->nlocal += gr->members[j] >= w->local && gr->members[j] < w->local + w->nlocal;
        for (int s = 0; s < NSLOTS; s++) {
            Slot *sl = &gr->slot[s];
#ifdef RT_NO_FUTEX
            pthread_mutex_init(&sl->mu, NULL);
            pthread_cond_init(&sl->cv, &ca);
#endif
            atomic_init(&sl->state, (uint64_t)s * 4);
            atomic_init(&sl->count, 0);
            atomic_init(&sl->wake, 0);
            atomic_init(&sl->sleepers, 0);
            atomic_init(&sl->xwait, 0);
            atomic_init(&sl->driving, 0);
            sl->reached = aligned_alloc(64, (size_t)f->k * sizeof(Reached));
            sl->send = calloc((size_t)f->k, sizeof(void *));
            sl->recv = calloc((size_t)f->k, sizeof(void *));
            sl->src = calloc((size_t)f->k, sizeof(int));
            sl->dst = calloc((size_t)f->k, sizeof(int));
            sl->descs = calloc((size_t)f->k, sizeof(Desc));
            sl->stage = calloc((size_t)f->k, sizeof(void *));
            sl->stage_cap = calloc((size_t)f->k, sizeof(size_t));
            ok &= sl->reached && sl->send && sl->recv && sl->src && sl->dst && sl->descs && sl->stage && sl->stage_cap;
            for (int j = 0; sl->reached && j < f->k; j++)
                atomic_init(&sl->reached[j].v, 0);
        }
    }
#ifdef RT_NO_FUTEX
    pthread_condattr_destroy(&ca);
#endif
    if (!ok) {
        family_free(f);
        return NULL;
    }
    return f;
}

Family *rt_family_get(sc_device *dev, sc_axes a) {
    for (int i = 0; i < dev->ncache; i++)
        if (axes_equal(dev->cache[i]->axes, a))
            return dev->cache[i];
    sc_world *w = dev->w;
    Family *f = NULL;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->nfam && !f; i++)
        if (axes_equal(w->fam[i]->axes, a))
            f = w->fam[i];
    if (!f) {
        Family **grown = realloc(w->fam, (size_t)(w->nfam + 1) * sizeof *grown);
        if (grown) {
            w->fam = grown;
            f = family_new(w, a);
            if (f)
                w->fam[w->nfam++] = f;
        }
    }
    pthread_mutex_unlock(&w->mu);
    Family **grown = f ? realloc(dev->cache, (size_t)(dev->ncache + 1) * sizeof *grown) : NULL;
    if (!grown)
        return f;
    dev->cache = grown;
    dev->cache[dev->ncache++] = f;
    return f;
}

/* ---- worlds ---- */

sc_world *rt_world_new(const sc_mesh *mesh, const sc_options *opt, char *err, size_t errlen) {
    sc_options o;
    if (rt_options_check(opt, &o, err, errlen))
        return NULL;
    const char *why = NULL;
    int64_t ndev = 1;
    if (!mesh || mesh->naxes < 0 || mesh->naxes > SC_MAX_AXES)
        why = "a mesh has 0 to 8 axes";
    for (int a = 0; !why && a < mesh->naxes; a++) {
        if (mesh->sizes[a] < 1)
            why = "mesh axes have sizes of at least 1";
        ndev *= mesh->sizes[a];
        if (ndev > SC_MAX_DEVICES)
            why = "a mesh has at most 65536 devices";
    }
    sc_world *w = why ? NULL : calloc(1, sizeof *w);
    if (w)
        w->dev = calloc((size_t)ndev, sizeof(sc_device));
    if (!why && (!w || !w->dev)) {
        why = "out of memory";
        free(w);
        w = NULL;
    }
    if (!w) {
        if (errlen)
            snprintf(err, errlen, "%s", why);
        return NULL;
    }
    w->ops = &rt_threads_ops;
    w->mesh = *mesh;
    w->opt = o;
    w->ndev = w->nlocal = (int)ndev;
    w->nprocesses = 1;
    for (int a = mesh->naxes - 1, s = 1; a >= 0; a--) {
        if (mesh->names[a])
            snprintf(w->names[a], sizeof w->names[a], "%s", mesh->names[a]);
        else
            snprintf(w->names[a], sizeof w->names[a], "axis%d", a);
        w->mesh.names[a] = w->names[a];
        w->stride[a] = s;
        s *= mesh->sizes[a];
    }
    atomic_init(&w->timeout, o.timeout);
    atomic_init(&w->failed, 0);
    rt_set_spin(w, w->nlocal);
    pthread_mutex_init(&w->mu, NULL);
    for (int id = 0; id < w->ndev; id++) {
        w->dev[id].w = w;
        w->dev[id].id = id;
        coords_of(w, id, w->dev[id].coord);
    }
    return w;
}

/* The cores this process may run on. */
static int cores(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void rt_set_spin(sc_world *w, int threads) {
    w->oversubscribed = threads > cores();
    w->spin_ns = w->oversubscribed ? RT_YIELD_NS : RT_SPIN_NS;
}

/* opt->local_devices is the MPI backend's: this one process runs every
 * device whatever it says. */
sc_world *sc_threads_create(const sc_mesh *mesh, const sc_options *opt, char *err, size_t errlen) {
    return rt_world_new(mesh, opt, err, errlen);
}

static void stop_pool(sc_world *w);

static void threads_destroy(sc_world *w) {
    stop_pool(w);
    if (w->remote)
        w->remote->destroy(w);
    for (int i = 0; i < w->nfam; i++)
        family_free(w->fam[i]);
    free(w->fam);
    for (int id = 0; id < w->ndev; id++)
        free(w->dev[id].cache);
    free(w->dev);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static void threads_set_timeout(sc_world *w, double seconds) { atomic_store(&w->timeout, seconds); }

double sc_timeout(const sc_world *w) { return atomic_load(&((sc_world *)w)->timeout); }
int sc_world_failed(const sc_world *w) { return atomic_load(&((sc_world *)w)->failed); }
const char *sc_world_error(const sc_world *w) { return w->error; }
int sc_device_count(const sc_world *w) { return w->ndev; }

#ifdef __linux__
typedef cpu_set_t Cores;
#else
typedef char Cores;          /* no binding where there is no affinity */
#endif

/* With SC_BIND_CORE (threads backend, devices that fit the cores): the
 * cores of the process, read once per run; 0 when threads are not bound. */
static int bind_cores(const sc_world *w, Cores *all) {
#ifdef __linux__
    return w->opt.bind == SC_BIND_CORE && !w->remote && !w->oversubscribed &&
           sched_getaffinity(0, sizeof *all, all) == 0 && CPU_COUNT(all) >= w->nlocal;
#else
    (void)w, (void)all;
    return 0;
#endif
}

/* attr starts a thread on the i-th core of `all` and keeps it there. */
static pthread_attr_t *on_core(const Cores *all, int i, pthread_attr_t *attr) {
#ifdef __linux__
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, all) && seen++ == i) {
            CPU_SET(c, &one);
            break;
        }
    return pthread_attr_setaffinity_np(attr, sizeof one, &one) == 0 ? attr : NULL;
#else
    (void)all, (void)i;
    return attr;
#endif
}

/* A device whose function fails fails the world, so that its peers do not
 * wait for it until the timeout. */
static void *device_main(void *p) {
    sc_device *dev = p;
    dev->rc = dev->w->fn(dev, dev->w->arg);
    if (dev->rc != 0 && !atomic_load(&dev->w->failed)) {
        char msg[MSG];
        snprintf(msg, sizeof msg, "device %d returned %d", dev->id, dev->rc);
        fail_world(dev->w, msg);
    }
    return NULL;
}

/* A pool thread: run device `p`'s part of every run posted, until told to quit. */
static void *pool_main(void *p) {
    sc_device *dev = p;
    sc_world *w = dev->w;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&w->pool_mu);
        while (w->pool_gen == seen && !w->pool_quit)
            pthread_cond_wait(&w->pool_go, &w->pool_mu);
        int quit = w->pool_quit;
        seen = w->pool_gen;
        pthread_mutex_unlock(&w->pool_mu);
        if (quit)
            return NULL;
        device_main(dev);
        pthread_mutex_lock(&w->pool_mu);
        if (--w->pool_pending == 0)
            pthread_cond_signal(&w->pool_done);
        pthread_mutex_unlock(&w->pool_mu);
    }
}

/* Tell the first n pool threads to quit, and wait for them. */
static void join_pool(sc_world *w, int n) {
    pthread_mutex_lock(&w->pool_mu);
    w->pool_quit = 1;
    pthread_cond_broadcast(&w->pool_go);
    pthread_mutex_unlock(&w->pool_mu);
    for (int i = 0; i < n; i++)
        pthread_join(w->pool[i], NULL);
}

/* Start a thread per local device (each on its own core when binding). */
static int start_pool(sc_world *w) {
    if (!(w->pool = calloc((size_t)(unsigned)w->nlocal, sizeof *w->pool))) {
        fail_world(w, "sc_run: out of memory");
        return SC_ERR;
    }
    pthread_mutex_init(&w->pool_mu, NULL);
    pthread_cond_init(&w->pool_go, NULL);
    pthread_cond_init(&w->pool_done, NULL);
    sc_device *local = w->dev + w->local;
    Cores all;
    pthread_attr_t attr;
    int bound = bind_cores(w, &all) && pthread_attr_init(&attr) == 0, started = 0;
    for (; started < w->nlocal; started++)
        if (pthread_create(&w->pool[started], bound ? on_core(&all, started, &attr) : NULL, pool_main,
                           &local[started]) != 0) {
            char msg[MSG];
            snprintf(msg, sizeof msg, "sc_run: cannot start the thread of device %d", local[started].id);
            fail_world(w, msg);
            break;
        }
    if (bound)
        pthread_attr_destroy(&attr);
    if (started < w->nlocal) {
        join_pool(w, started);
        stop_pool(w);
        return SC_ERR;
    }
    return 0;
}

static void stop_pool(sc_world *w) {
    if (!w->pool)
        return;
    if (!w->pool_quit)
        join_pool(w, w->nlocal);
    pthread_cond_destroy(&w->pool_done);
    pthread_cond_destroy(&w->pool_go);
    pthread_mutex_destroy(&w->pool_mu);
    free(w->pool);
    w->pool = NULL;
}

static int threads_run(sc_world *w, int (*fn)(sc_device *, void *), void *arg) {
    if (atomic_load(&w->failed))
        return SC_ERR;
    w->fn = fn;
    w->arg = arg;
    sc_device *local = w->dev + w->local;
    for (int i = 0; i < w->nlocal; i++) {
        local[i].error[0] = 0;
        local[i].rc = 0;
    }
    /* One device of a process runs on the calling thread, which is the one
     * that initialized MPI. */
    if (w->nlocal == 1) {
        device_main(local);
        return local->rc || atomic_load(&w->failed) ? SC_ERR : 0;
    }
    if (!w->pool && start_pool(w))
        return SC_ERR;
    /* Post the run (fn and arg above, published by the mutex) and wait for
     * every device to finish it. */
    pthread_mutex_lock(&w->pool_mu);
    w->pool_pending = w->nlocal;
    w->pool_gen++;
    pthread_cond_broadcast(&w->pool_go);
    while (w->pool_pending > 0)
        pthread_cond_wait(&w->pool_done, &w->pool_mu);
    pthread_mutex_unlock(&w->pool_mu);
    int rc = 0;
    for (int i = 0; i < w->nlocal; i++)
        rc |= local[i].rc != 0;
    return rc || atomic_load(&w->failed) ? SC_ERR : 0;
}

int sc_world_process(const sc_world *w) { return w->process; }
int sc_world_process_count(const sc_world *w) { return w->nprocesses; }
int sc_world_is_local(const sc_world *w, int dev) { return dev >= w->local && dev < w->local + w->nlocal; }
int sc_world_local_count(const sc_world *w) { return w->nlocal; }
int sc_world_device_process(const sc_world *w, int dev) { return dev >= 0 && dev < w->ndev ? dev / w->nlocal : SC_ERR; }
int sc_device_local_id(const sc_device *dev) { return dev->id - dev->w->local; }

/* One process holds every device, unless a remote transport joins others. */
static int threads_collect(sc_world *w, void *const *blocks, size_t bytes) {
    return w->remote ? w->remote->collect(w, blocks, bytes) : 0;
}

static int threads_share(sc_world *w, void *buf, size_t bytes) {
    return w->remote ? w->remote->share(w, buf, bytes) : 0;
}

static int threads_agree(sc_world *w, int ok, int *first_ok) {
    if (w->remote)
        return w->remote->agree(w, ok, first_ok);
    if (first_ok)
        *first_ok = ok;
    return ok;
}

const RtOps rt_threads_ops = {
    .run = threads_run,
    .start = rt_threads_start,
    .done = rt_threads_done,
    .barrier = rt_threads_barrier,
    .set_timeout = threads_set_timeout,
    .collect = threads_collect,
    .agree = threads_agree,
    .share = threads_share,
    .destroy = threads_destroy,
};

int sc_device_id(const sc_device *dev) { return dev->id; }
const sc_mesh *sc_device_mesh(const sc_device *dev) { return &dev->w->mesh; }
sc_world *sc_device_world(const sc_device *dev) { return dev->w; }
const char *sc_device_error(const sc_device *dev) { return dev->error; }
void sc_device_set_ctx(sc_device *dev, void *ctx) { dev->ctx = ctx; }
void *sc_device_ctx(const sc_device *dev) { return dev->ctx; }

int sc_coord(const sc_device *dev, int axis) {
    return axis >= 0 && axis < dev->w->mesh.naxes ? dev->coord[axis] : SC_ERR;
}

int sc_group_size(const sc_device *dev, sc_axes axes) {
    if (!rt_axes_valid(dev->w, axes))
        return SC_ERR;
    int k = 1;
    for (int i = 0; i < axes.n; i++)
        k *= dev->w->mesh.sizes[axes.axis[i]];
    return k;
}

int sc_group_rank(const sc_device *dev, sc_axes axes) {
    return rt_axes_valid(dev->w, axes) ? rank_in(&dev->w->mesh, axes, dev->coord) : SC_ERR;
}

int sc_group_member(const sc_device *dev, sc_axes axes, int j) {
    int k = sc_group_size(dev, axes);
    if (k < 0 || j < 0 || j >= k)
        return SC_ERR;
    int id = dev->id;
    for (int i = axes.n - 1; i >= 0; i--) {   /* j's digits, the last axis minor */
        int a = axes.axis[i], n = dev->w->mesh.sizes[a];
        id += (j % n - dev->coord[a]) * dev->w->stride[a];
        j /= n;
    }
    return id;
}
