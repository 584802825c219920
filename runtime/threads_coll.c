/* The threads backend's collectives.  A collective has phases separated by
 * barriers of its group, in one of three algorithms that every member
 * picks alike from the call (docs/runtime.md has the why):
 *
 *   eager (small, within a process): start copies the send into the slot
 *       and arrives at barrier 0; done waits for it and reads the staged
 *       copies into recv (an all-reduce reduces all of it: one-shot).  One
 *       barrier: done waits for no reader.  Its members wait on each
 *       other's `reached` flags, not on the state word (phase_done); each
 *       compares the calls itself, and member 0 frees the slot in done.
 *   direct (within a process): start publishes the send and recv pointers
 *       and arrives at barrier 0; done waits for it, reads the peers'
 *       buffers into recv (all-reduce: reduces this device's slice from
 *       every send and writes it into every member's recv), barrier 1,
 *       which keeps every buffer alive and unchanged until every member
 *       has read (or written) it.
 *   across processes (MPI): below.
 *
 * Barriers are lock-free (Slot in threads.h): an arrival is an atomic
 * increment, and the arrival that completes a phase publishes it with a
 * release store that waiters load with acquire, which orders each device's
 * writes to its buffers before its peers' reads.  A waiting device spins
 * with a pause instruction while the device threads fit the cores (yielding
 * once every RT_PAUSE_NS, should a peer share its core), or yields its core
 * while they do not, for RT_SPIN_NS / RT_YIELD_NS; then it sleeps on a
 * futex until the phase completes, the world fails or its timeout passes.
 * Waking costs a system call only when someone sleeps.
 *
 * On the MPI backend the same barriers count only this process's members;
 * when the group spans processes, the last local arrival asks the RtRemote
 * to bring in what the next phase reads of the other processes' members,
 * and one waiting member drives that exchange before the barrier opens
 * (mpi.c).  Such an all-reduce keeps three phases: each member reduces its
 * slice into its own recv; barrier 1 (and the exchange of the slices);
 * every member copies the other slices; barrier 2. */
#define _GNU_SOURCE 1        /* syscall */
#include "threads.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef RT_NO_FUTEX
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static const char *const kind_name[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                        "collective-permute"};
static const char *const reduce_name[] = {"sum", "max", "min"};

int rt_nphases(Kind k, int local) { return k == K_ALL_REDUCE && !local ? 3 : 2; }

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
    if (w < (int)n - 40 && d->kind == K_ALL_REDUCE && d->shape.rank == 2)
        w += snprintf(buf + w, n - (size_t)w, " rows %lld apart", (long long)d->ld);
    if (w < (int)n - 40 && (d->kind == K_ALL_GATHER || d->kind == K_REDUCE_SCATTER))
        snprintf(buf + w, n - (size_t)w, " dim %d", d->dim);
    else if (w < (int)n - 40 && d->kind == K_ALL_TO_ALL)
        snprintf(buf + w, n - (size_t)w, " split %d concat %d", d->dim, d->dim2);
}

int rt_desc_equal(const Desc *a, const Desc *b) {
    if (a->kind != b->kind || a->dtype != b->dtype || a->shape.rank != b->shape.rank ||
        a->dim != b->dim || a->dim2 != b->dim2 || a->ld != b->ld)
        return 0;
    if ((a->kind == K_ALL_REDUCE || a->kind == K_REDUCE_SCATTER) && a->red != b->red)
        return 0;
    for (int i = 0; i < a->shape.rank; i++)
        if (a->shape.dims[i] != b->shape.dims[i])
            return 0;
    return 1;
}

/* ---- waiting ---- */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static struct timespec now_ts(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
}

static long long ns_between(struct timespec a, struct timespec b) {
    return (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
}

static struct timespec plus(struct timespec t, double seconds) {
    if (seconds > 1e8)
        seconds = 1e8;
    t.tv_sec += (time_t)seconds;
    t.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (t.tv_nsec >= 1000000000L)
        t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

/* Sleep while s->wake is `seen`, until the absolute CLOCK_MONOTONIC
 * deadline at most; returns early on any wake (or spuriously).  The caller
 * counted itself in `sleepers` before it read `seen` and looked at its
 * condition (rt_wake). */
static void sleep_on(Slot *s, unsigned seen, const struct timespec *deadline) {
#ifndef RT_NO_FUTEX
    syscall(SYS_futex, (unsigned *)&s->wake, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, seen, deadline, NULL,
            FUTEX_BITSET_MATCH_ANY);
#else
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->wake) == seen)
        pthread_cond_timedwait(&s->cv, &s->mu, deadline);
    pthread_mutex_unlock(&s->mu);
#endif
}

/* A sleeper counts itself in `sleepers`, then reads `wake` and looks at its
 * condition once more; a waker has made the condition true, then looks at
 * `sleepers`, and bumps `wake` only when someone sleeps.  Both with a
 * seq_cst fence between, so either the waker sees the sleeper (and the
 * bump ends its wait, before or in the kernel) or the sleeper sees the
 * condition and does not sleep.  A waker writes no shared line when nobody
 * sleeps: an eager collective's every arrival wakes. */
void rt_wake(Slot *s) {
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->sleepers, memory_order_relaxed) == 0)
        return;
    atomic_fetch_add(&s->wake, 1);
#ifndef RT_NO_FUTEX
    syscall(SYS_futex, (unsigned *)&s->wake, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT_MAX, NULL, NULL, 0);
#else
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
#endif
}

static uint64_t state_of(uint64_t op, int phase) { return op * 4 + (uint64_t)phase; }

/* Complete phase p of h's collective: after the last phase free the slot
 * for the collective NSLOTS later.  Called by one member: the last local
 * arrival, or the one that drove the exchange. */
static void advance(sc_handle *h, int p) {
    Slot *s = h->s;
    uint64_t next = state_of(h->op, p + 1);
    atomic_store_explicit(&s->count, 0, memory_order_relaxed);
    atomic_store_explicit(&s->xwait, 0, memory_order_relaxed);
    if (p + 1 == h->nphases) {
        if (atomic_load_explicit(&s->claimed, memory_order_relaxed))
            atomic_store_explicit(&s->claimed, 0, memory_order_relaxed);
        if (s->xchg)
            h->dev->w->remote->release(s);
        next = state_of(h->op + NSLOTS, 0);
    }
    atomic_store_explicit(&s->state, next, memory_order_release);
    rt_wake(s);
}

/* Barrier 0: the members of this process must describe the same call;
 * the last to arrive compares (whoever is first in rank order is the
 * reference).  0, or SC_ERR with a message in err. */
static int same_calls(sc_handle *h, char *err, size_t errlen) {
    const Slot *s = h->s;
    const Desc *ref = NULL;
    for (int j = 0; j < h->f->k; j++) {
        int dev = h->g->members[j];
        if (!sc_world_is_local(h->dev->w, dev))
            continue;
        if (!ref)
            ref = &s->descs[j];
        else if (!rt_desc_equal(ref, &s->descs[j])) {
            char what[160], mine[128], theirs[128];
            rt_what(h, what, sizeof what);
            rt_describe(&s->descs[j], mine, sizeof mine);
            rt_describe(ref, theirs, sizeof theirs);
            snprintf(err, errlen, "%s: device %d calls %s where another member calls %s", what, dev, mine, theirs);
            return SC_ERR;
        }
    }
    return 0;
}

/* Arrive at phase p.  The last local arrival completes the phase, or
 * starts the exchange with the other processes that completes it (then a
 * waiting member drives it, in wait_phase).  SC_ERR with a message in err. */
static int arrive(sc_handle *h, int p, char *err, size_t errlen) {
    Slot *s = h->s;
    atomic_store_explicit(&s->reached[h->rank].v, state_of(h->op, p) + 1, memory_order_release);
    if (h->eager) {                      /* the waiters read the flags (phase_done) */
        rt_wake(s);
        return 0;
    }
    if (atomic_fetch_add_explicit(&s->count, 1, memory_order_acq_rel) + 1 < h->g->nlocal)
        return 0;
    const RtRemote *remote = h->dev->w->remote;
    if (p == 0 && same_calls(h, err, errlen))
        return SC_ERR;
    if (p == 0 && remote && !rt_desc_equal(&s->desc, &h->d))
        s->desc = h->d;
    int pending = remote ? remote->post(h, p, err, errlen) : 0;
    if (pending < 0)
        return SC_ERR;
    if (pending) {
        atomic_store_explicit(&s->xwait, 1, memory_order_release);
        rt_wake(s);
    } else
        advance(h, p);
    return 0;
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
 * at phase p (the others' lateness is the exchange's to report). */
static int late_members(sc_handle *h, int p, double timeout) {
    LateList late = {.len = 0};
    for (int j = 0; j < h->f->k; j++)
        if (atomic_load_explicit(&h->s->reached[j].v, memory_order_relaxed) <= state_of(h->op, p) &&
            sc_world_is_local(h->dev->w, h->g->members[j]))
            rt_late_add(&late, h->g->members[j]);
    return rt_late_fail(h, &late, timeout);
}

/* Whether phase p of h's collective is complete: its state has passed it,
 * or, for an eager collective, every member's own flag has (its members
 * wait on each other's lines, not on a counter and a state word that the
 * last arrival writes: a barrier of 2 passes one line each way, not four
 * in a row). */
static int phase_done(const sc_handle *h, uint64_t target) {
    const Slot *s = h->s;
    if (!h->eager)
        return atomic_load_explicit(&s->state, memory_order_acquire) > target;
    for (int j = 0; j < h->f->k; j++)
        if (atomic_load_explicit(&s->reached[j].v, memory_order_acquire) <= target)
            return 0;
    return 1;
}

/* Wait until phase p of h's collective is complete.  First spin (or yield)
 * for the world's spin_ns, then sleep, with the timeout counted from the
 * start of the wait.  While an exchange with other processes is pending,
 * one waiting member drives it (RtRemote.wait); it reports its own
 * timeout. */
static int wait_phase(sc_handle *h, int p) {
    sc_device *dev = h->dev;
    sc_world *w = dev->w;
    Slot *s = h->s;
    uint64_t target = state_of(h->op, p);
    if (phase_done(h, target))
        return 0;
    double timeout = sc_timeout(w);
    struct timespec t0 = now_ts(), deadline = plus(t0, timeout);
    int spinning = 1;
    long long next_yield = RT_PAUSE_NS;
    for (unsigned it = 1;; it++) {
        if (phase_done(h, target))
            return 0;
        if (atomic_load_explicit(&w->failed, memory_order_relaxed)) {
            char buf[160];
            rt_what(h, buf, sizeof buf);
            return rt_dev_aborted(dev, buf);
        }
        if (w->remote && atomic_load_explicit(&s->xwait, memory_order_acquire) &&
            !atomic_exchange_explicit(&s->driving, 1, memory_order_acq_rel)) {
            /* The driver before may have completed the phase after this
             * member saw xwait: it advanced before it let go. */
            if (atomic_load_explicit(&s->state, memory_order_acquire) > target) {
                atomic_store_explicit(&s->driving, 0, memory_order_release);
                return 0;
            }
            int rc = w->remote->wait(h, p);
            if (rc) {
                atomic_store_explicit(&s->driving, 0, memory_order_release);
                rt_wake(s);
                return rc;
            }
            advance(h, p);
            atomic_store_explicit(&s->driving, 0, memory_order_release);
            continue;
        }
        if (spinning) {                  /* only `state` (or the flags) is read: lines stay shared */
            if (w->oversubscribed)
                sched_yield();
            else
                cpu_relax();
            if (w->oversubscribed || it % 64 == 0) {
                long long waited = ns_between(t0, now_ts());
                spinning = waited <= w->spin_ns;
                if (!w->oversubscribed && waited > next_yield) {
                    sched_yield();       /* a peer that shares this core runs */
                    next_yield = waited + RT_PAUSE_NS;
                }
            }
            continue;
        }
        atomic_fetch_add(&s->sleepers, 1);          /* before the last look: see rt_wake */
        atomic_thread_fence(memory_order_seq_cst);
        unsigned seen = atomic_load_explicit(&s->wake, memory_order_acquire);
        if (!phase_done(h, target) && !atomic_load_explicit(&w->failed, memory_order_relaxed) &&
            !(w->remote && atomic_load_explicit(&s->xwait, memory_order_acquire)))
            sleep_on(s, seen, &deadline);
        atomic_fetch_sub(&s->sleepers, 1);
        if (phase_done(h, target) || ns_between(deadline, now_ts()) < 0)
            continue;
        if (!atomic_load_explicit(&s->xwait, memory_order_acquire))
            return late_members(h, p, timeout);
        deadline = plus(now_ts(), timeout);
    }
}

/* Arrive at phase p and wait until every member has. */
static int sync_phase(sc_handle *h, int p) {
    char buf[MSG];
    if (arrive(h, p, buf, sizeof buf))
        return rt_dev_fail(h->dev, "%s", buf);
    return wait_phase(h, p);
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
    if (d->kind == K_ALL_REDUCE && d->shape.rank == 2 && d->ld < d->shape.dims[1] && d->shape.dims[0] > 1)
        return "rows closer together than their length";
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

static int64_t bytes_of(const Desc *d) {
    int64_t n = (int64_t)sc_dtype_size(d->dtype);
    for (int i = 0; i < d->shape.rank; i++)
        n *= d->shape.dims[i];
    return n;
}

/* Small collectives within a process are eager: their members copy their
 * sends at start, so that done need not wait for the peers to read them.
 * An eager all-reduce is one-shot: every member reduces the whole result
 * from every staged send (k times the work of the sliced one, so only
 * while k x bytes is small). */
static int eager(const Desc *d, int k) {
    int64_t bytes = bytes_of(d);
    return d->kind == K_ALL_REDUCE ? bytes * k <= RT_EAGER_REDUCE_BYTES : bytes <= RT_EAGER_BYTES;
}

/* Elements [lo, lo + m) of all-reduce d's block (rt_block_at), from srcs
 * (row stride sld) reduced into dst (row stride dld), which points at
 * element lo: a run of a row at a time. */
static void reduce_block(const Desc *d, const void *const *srcs, int k, int64_t sld, int64_t lo, char *dst,
                         int64_t dld, int64_t m) {
    int64_t cols = rt_block_cols(d), es = (int64_t)sc_dtype_size(d->dtype), base = rt_block_at(lo, cols, dld);
    for (int64_t i = lo, len; i < lo + m; i += len) {
        len = cols - i % cols < lo + m - i ? cols - i % cols : lo + m - i;
        rt_reduce(d->dtype, d->red, srcs, k, rt_block_at(i, cols, sld), dst + (rt_block_at(i, cols, dld) - base) * es,
                  len);
    }
}

/* Elements [lo, lo + m) of all-reduce d's block from src (row stride sld)
 * to dst (row stride dld), both pointing at element lo; with non-temporal
 * stores when `stream`. */
static void copy_block(const Desc *d, void *dst, int64_t dld, const void *src, int64_t sld, int64_t lo, int64_t m,
                       int stream) {
    int64_t cols = rt_block_cols(d), es = (int64_t)sc_dtype_size(d->dtype);
    int64_t dbase = rt_block_at(lo, cols, dld), sbase = rt_block_at(lo, cols, sld);
    for (int64_t i = lo, len; i < lo + m; i += len) {
        len = cols - i % cols < lo + m - i ? cols - i % cols : lo + m - i;
        char *to = (char *)dst + (rt_block_at(i, cols, dld) - dbase) * es;
        const char *from = (const char *)src + (rt_block_at(i, cols, sld) - sbase) * es;
        if (stream)
            rt_copy_stream(to, from, (size_t)(len * es));
        else
            memcpy(to, from, (size_t)(len * es));
    }
}

/* Copies the send of member `rank` into its staging buffer of the slot
 * (nobody reads it: the slot is free); *out is the copy.  SC_ERR when out
 * of memory. */
static int stage(Slot *s, int rank, const void *send, const void **out, const Desc *d) {
    size_t bytes = (size_t)bytes_of(d);
    if (s->stage_cap[rank] < bytes) {
        size_t cap = bytes < 4096 ? 4096 : bytes;
        void *p = realloc(s->stage[rank], cap);
        if (!p)
            return SC_ERR;
        s->stage[rank] = p;
        s->stage_cap[rank] = cap;
    }
    if (d->kind == K_ALL_REDUCE)         /* a strided block is staged packed */
        copy_block(d, s->stage[rank], rt_block_cols(d), send, d->ld, 0, rt_block_elems(d), 0);
    else if (bytes)
        memcpy(s->stage[rank], send, bytes);
    *out = s->stage[rank];
    return 0;
}

/* Fails h's device with "KIND over {AXES}: why".  The name is formatted
 * here, off the path of a collective that starts: a small one takes about
 * a microsecond, and snprintf a good part of one. */
static void start_fail(sc_handle *h, const char *fmt, ...) {
    char what[160], why[MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    rt_what(h, what, sizeof what);
    rt_dev_fail(h->dev, "%s: %s", what, why);
}

sc_handle *rt_threads_start(sc_device *dev, sc_axes axes, const RtCall *c) {
    sc_world *w = dev->w;
    Desc d = c->d;
    const void *send = c->send;
    void *recv = c->recv;
    sc_handle *h = calloc(1, sizeof *h);
    const char *kind = (unsigned)d.kind < 5 ? kind_name[d.kind] : "?";
    if (!h) {
        rt_dev_fail(dev, "%s: out of memory", kind);
        return NULL;
    }
    *h = (sc_handle){.dev = dev, .d = d, .send = send, .recv = recv, .src = -1, .dst = -1, .failed = 1};
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
    h->rank = f->rank_of[dev->id];
    const char *bad = check(h, f->k, c->pairs, c->npairs);
    if (bad) {
        start_fail(h, "%s", bad);
        return h;
    }
    if (atomic_load(&w->failed)) {
        char what[160];
        rt_what(h, what, sizeof what);
        rt_dev_aborted(dev, what);
        return h;
    }
    Progress *me = &f->progress[dev->id];
    if (me->pending >= PENDING) {
        start_fail(h, "more than %d collectives started and not done", PENDING);
        return h;
    }
    uint64_t op = me->next;
    if (op >= PENDING && me->open[(op - PENDING) % NSLOTS]) {
        start_fail(h, "collective %llu of the group started before this device's collective %llu is done "
                   "(collectives must be done within %d of their start order)", (unsigned long long)op,
                   (unsigned long long)(op - PENDING), PENDING);
        return h;
    }
    me->pending++;
    me->open[op % NSLOTS] = 1;
    h->g = &f->groups[f->group_of[dev->id]];
    h->op = me->next++;
    Slot *s = h->s = &h->g->slot[h->op % NSLOTS];
    uint64_t state = atomic_load_explicit(&s->state, memory_order_acquire);
    if (state / 4 != h->op) {
        start_fail(h, "internal error: slot of collective %llu holds %llu", (unsigned long long)h->op,
                   (unsigned long long)(state / 4));
        return h;
    }
    /* Written only when changed (see Slot); the last arrival compares. */
    if (!rt_desc_equal(&s->descs[h->rank], &h->d))
        s->descs[h->rank] = h->d;
    int local = h->g->nlocal == f->k;
    h->eager = local && eager(&h->d, f->k);
    h->nphases = h->eager ? 1 : rt_nphases(h->d.kind, local);
    if (h->eager && stage(s, h->rank, send, &send, &h->d)) {
        start_fail(h, "out of memory");
        return h;
    }
    if (s->send[h->rank] != send)
        s->send[h->rank] = send;
    if (s->recv[h->rank] != recv)
        s->recv[h->rank] = recv;
    if (s->src[h->rank] != h->src)
        s->src[h->rank] = h->src;
    if (s->dst[h->rank] != h->dst)
        s->dst[h->rank] = h->dst;
    char err[MSG];
    if (arrive(h, 0, err, sizeof err)) {
        rt_dev_fail(dev, "%s", err);
        return h;
    }
    h->failed = 0;
    return h;
}

/* All-reduce within one process, after barrier 0: each element is reduced
 * from every member's send in member order (rt_reduce), by one member, and
 * written into every member's recv, so every member gets the same bits
 * whoever computes them.  Each input is read once and each result written
 * once.
 *
 * A small result is split into one slice per member, starting at multiples
 * of 64 bytes so that two writers share no cache line of a 64-byte-aligned
 * recv; each member reduces its slice into its own recv, where it stays in
 * cache for the readers, and copies it from there.
 *
 * A large one is taken RT_CLAIM_CHUNKS chunks at a time from a counter in
 * the slot by whichever members run, reduced a chunk at a time into a
 * buffer that stays in L1 and copied out with non-temporal stores (memory
 * traffic: read the inputs, write the results, nothing else).  With more
 * devices than cores, fixed slices left the work to the scheduler's order:
 * a member descheduled mid-slice held up the barrier while the cores of
 * the members done with theirs idled. */
static void all_reduce_local(const sc_handle *h) {
    const Desc *d = &h->d;
    Slot *s = h->s;
    int k = h->f->k, me = h->rank;
    size_t es = sc_dtype_size(d->dtype);
    int64_t n = rt_block_elems(d), chunk = RT_CHUNK_BYTES / (int64_t)es;
    int64_t cols = rt_block_cols(d), ld = d->ld;
    if ((int64_t)es * n < RT_STREAM_BYTES) {
        int64_t align = 64 / (int64_t)es;
        int64_t lo = n * me / k, hi = me + 1 == k ? n : n * (me + 1) / k;
        lo -= lo % align;
        hi -= me + 1 == k ? 0 : hi % align;
        char *mine = (char *)h->recv;
        for (int64_t c = lo; c < hi; c += chunk) {
            int64_t m = hi - c < chunk ? hi - c : chunk;
            size_t off = (size_t)rt_block_at(c, cols, ld) * es;
            reduce_block(d, s->send, k, ld, c, mine + off, ld, m);
            for (int i = 1; i < k; i++)
                copy_block(d, (char *)s->recv[(me + i) % k] + off, ld, mine + off, ld, c, m, 0);
        }
        return;
    }
    _Alignas(64) unsigned char buf[RT_CHUNK_BYTES];
    for (;;) {
        int64_t piece = atomic_fetch_add_explicit(&s->claimed, 1, memory_order_relaxed);
        int64_t lo = piece * RT_CLAIM_CHUNKS * chunk;
        if (lo >= n)
            break;
        int64_t hi = n - lo < RT_CLAIM_CHUNKS * chunk ? n : lo + RT_CLAIM_CHUNKS * chunk;
        for (int64_t c = lo; c < hi; c += chunk) {
            int64_t m = hi - c < chunk ? hi - c : chunk;
            size_t off = (size_t)rt_block_at(c, cols, ld) * es;
            reduce_block(d, s->send, k, ld, c, (char *)buf, cols, m);
            for (int i = 0; i < k; i++)   /* members in turn, a different first one per piece */
                copy_block(d, (char *)s->recv[(piece + i) % k] + off, ld, buf, cols, c, m, 1);
        }
    }
    rt_stream_fence();
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
        /* Across processes: member j reduces elements [n j / k, n (j + 1) / k)
         * into its recv, then every member copies the other slices from
         * their owners (mpi.c moves the same slices). */
        if (h->eager)                    /* the staged copies are packed */
            reduce_block(d, s->send, k, rt_block_cols(d), 0, recv, d->ld, n);
        else if (h->nphases == 2)
            all_reduce_local(h);
        else if (phase == 1) {
            int64_t lo = n * me / k, hi = n * (me + 1) / k;
            reduce_block(d, s->send, k, d->ld, lo, recv + rt_block_at(lo, rt_block_cols(d), d->ld) * (int64_t)es,
                         d->ld, hi - lo);
        } else {
            for (int j = 0; j < k; j++) {
                int64_t lo = n * j / k, hi = n * (j + 1) / k;
                int64_t off = rt_block_at(lo, rt_block_cols(d), d->ld) * (int64_t)es;
                if (j != me && hi > lo)
                    copy_block(d, recv + off, d->ld, (const char *)s->recv[j] + off, d->ld, lo, hi - lo, 0);
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

int rt_threads_done(sc_handle *h) {
    int rc = h->failed ? SC_ERR : wait_phase(h, 0);
    if (rc == 0 && h->eager) {
        /* No last arrival compared the calls: each member does, before it
         * reads a staged copy of another size; member 0 frees the slot. */
        char err[MSG];
        if (same_calls(h, err, sizeof err))
            rc = rt_dev_fail(h->dev, "%s", err);
        else {
            if (h->rank == 0)
                advance(h, 0);
            work(h, 1);                  /* the staged copies: nobody waits for this */
        }
    }
    for (int p = 1; rc == 0 && p < h->nphases; p++) {
        work(h, p);
        rc = sync_phase(h, p);
    }
    if (h->g) {
        Progress *me = &h->f->progress[h->dev->id];
        me->pending--;
        me->open[h->op % NSLOTS] = 0;
    }
    free(h);
    return rc;
}

/* A barrier is an all-reduce of nothing: within a process it is eager,
 * and done waits for every member to have started it; across processes its
 * phases wait for the other processes' members. */
int rt_threads_barrier(sc_device *dev, sc_axes axes) {
    RtCall c = {.d = {.kind = K_ALL_REDUCE, .dtype = SC_U8, .red = SC_SUM, .shape = {1, {0}}}};
    sc_handle *h = rt_threads_start(dev, axes, &c);
    return h ? rt_threads_done(h) : SC_ERR;
}
