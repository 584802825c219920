/* Private to the runtime: the threads backend's data structures, shared by
 * threads.c (worlds, devices, groups), threads_coll.c (barriers and
 * collectives) and the MPI backend (mpi.c).  The MPI backend keeps all of
 * it: a process's devices meet at the same barriers, and between two
 * phases of a collective an RtRemote brings in, from the other processes,
 * the parts of their members' buffers that the local members read next. */
#ifndef SHARDC_THREADS_H
#define SHARDC_THREADS_H

#include "rt_internal.h"

/* Waiting devices sleep on a futex (Linux); elsewhere, or built with
 * -DRT_NO_FUTEX, on a condition variable of the group. */
#if !defined(__linux__) && !defined(RT_NO_FUTEX)
#define RT_NO_FUTEX 1
#endif

#include <pthread.h>
#include <stdatomic.h>

/* A device may have PENDING collectives of a group started and not done;
 * a group has twice as many slots (see Slot). */
enum { MSG = 512, PENDING = SC_MAX_PENDING, NSLOTS = 2 * PENDING };

/* Waiting (threads_coll.c): nanoseconds a device looks before it sleeps,
 * with cores to spare (RT_SPIN_NS: spinning with a pause instruction, and
 * yielding once every RT_PAUSE_NS, for a peer that shares its core) and
 * with more device threads than cores (RT_YIELD_NS, yielding). */
enum { RT_SPIN_NS = 50000, RT_PAUSE_NS = 5000, RT_YIELD_NS = 50000 };
/* All-reduce within a process: results of at least RT_STREAM_BYTES per
 * device go out with non-temporal stores, RT_CHUNK_BYTES at a time. */
enum { RT_STREAM_BYTES = 1 << 20, RT_CHUNK_BYTES = 16384, RT_CLAIM_CHUNKS = 4 };
/* Eager collectives (within a process): a send of at most RT_EAGER_BYTES
 * (an all-reduce: k x its bytes at most RT_EAGER_REDUCE_BYTES) is copied
 * at start, and done does not wait for the peers to read it. */
enum { RT_EAGER_BYTES = 32768, RT_EAGER_REDUCE_BYTES = 65536 };

typedef enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_ALL_TO_ALL, K_PERMUTE } Kind;

/* What the members of one collective must agree on. */
typedef struct {
    Kind kind;
    sc_dtype dtype;
    sc_reduce red;
    sc_shape shape;          /* all-reduce and permute: rank 1, {count}; a strided all-reduce: {rows, cols} */
    int dim, dim2;           /* gather/scatter dim; all-to-all split, concat */
    int64_t ld;              /* all-reduce: elements between its rows (a flat one: count); others 0 */
} Desc;

/* An all-reduce reduces a block of rows x cols elements whose rows lie ld
 * apart in each member's buffer (a flat one: one row).  Its algorithms cut
 * the block's elements, in row-major order, as they cut a flat count, and
 * find element i of a buffer of row stride ld here. */
static inline int64_t rt_block_at(int64_t i, int64_t cols, int64_t ld) {
    return cols == ld ? i : i / cols * ld + i % cols;
}
static inline int64_t rt_block_cols(const Desc *d) { return d->shape.dims[d->shape.rank - 1]; }
static inline int64_t rt_block_elems(const Desc *d) {
    return d->shape.rank == 2 ? d->shape.dims[0] * d->shape.dims[1] : d->shape.dims[0];
}
/* The elements a member's buffer of all-reduce d spans. */
static inline int64_t rt_block_extent(const Desc *d) {
    int64_t n = rt_block_elems(d);
    return n ? rt_block_at(n - 1, rt_block_cols(d), d->ld) + 1 : 0;
}

/* One collective in flight in a group.  Collective number `op` of the group
 * uses slot op % NSLOTS; it has `nphases` barriers (rt_nphases), and the
 * barrier that completes the last one frees the slot for collective
 * op + NSLOTS.  A barrier counts this process's members; when another
 * process holds members too, the phase completes only when the exchange
 * that the last local arrival posted (RtRemote.post) has completed.
 *
 * No lock: `state` is op * 4 + the phases completed, and only grows (the
 * last phase of op jumps it to (op + NSLOTS) * 4), so "phase p of op is
 * complete" is state > op * 4 + p.  Arrivals count in `count` (acq_rel);
 * the arrival that completes a phase (at barrier 0 after comparing the
 * members' descriptions) stores state (release) and bumps `wake`, the
 * word that waiters sleep on (a futex); failures bump it too
 * (threads_coll.c).
 *
 * A device starts collective op + PENDING of a group only after its own
 * done(op) (start checks).  An eager collective has one barrier (its
 * members' sends are staged copies, and done waits only for every member
 * to have started: every member's `reached` flag, stored with release),
 * after which member 0's done frees the slot (before member 0 starts
 * op + PENDING, which every member waits for before op + NSLOTS); a member may
 * still be reading the staged copies of op, but none rewrites them before
 * op + NSLOTS, and a member starts op + 2 PENDING only after its
 * done(op + PENDING), which waited for every member to start op + PENDING,
 * which each did only after its own done(op). */
/* A member's progress in a slot, on a cache line of its own: only the
 * member writes it (release), and its peers read it to pass an eager
 * collective's barrier and to name the late ones. */
typedef struct {
    _Alignas(64) _Atomic uint64_t v;   /* op * 4 + phases arrived at */
} Reached;

typedef struct {
    /* Three cache lines: what spinning waiters read (written once a
     * phase), what arrivals increment, and what sleepers and wakers use. */
    _Alignas(64) _Atomic uint64_t state;
    _Alignas(64) atomic_int count;   /* local arrivals at the phase under way */
    atomic_int xwait;        /* an exchange is pending: a waiting member must drive it */
    atomic_int driving;      /* a member drives it */
    _Alignas(64) atomic_uint wake;   /* bumped whenever a sleeper may have to look again */
    atomic_int sleepers;     /* waiters about to sleep or asleep on `wake`: without any a waker writes nothing */
    _Alignas(64) _Atomic int64_t claimed;   /* a large all-reduce's pieces taken so far */
    _Alignas(64) Reached *reached;   /* per rank */
    /* Per rank, written by the member itself before it arrives at barrier 0,
     * and only when they change, so that the lines stay shared while a
     * loop calls the same collective on the same buffers. */
    const void **send;       /* (a member in another process: a staging copy) */
    void **recv;
    int *src, *dst;          /* permute's source and target, or -1 */
    Desc *descs;             /* each member's description of the call: the last to arrive compares them */
    void **stage;            /* each member's staged send (eager), grown by the member */
    size_t *stage_cap;
    Desc desc;               /* the last local arrival's at barrier 0 (the MPI backend sends it) */
    void *xchg;              /* the remote backend's state of the collective */
#ifdef RT_NO_FUTEX
    pthread_mutex_t mu;      /* sleeping without futexes: a waiter waits on cv */
    pthread_cond_t cv;
#endif
} Slot;

typedef struct {
    const int *members;      /* device ids by rank */
    int nlocal;              /* members in this process */
    Slot slot[NSLOTS];
} Group;

/* A device's own progress in a family, on a cache line of its own: it
 * writes it at every start and done, and devices that shared a line would
 * pass it between their cores at every call (a third of a 2-device
 * all-gather's microsecond). */
typedef struct {
    _Alignas(64) uint64_t next;      /* its next collective number */
    int pending;                     /* started, not done */
    unsigned char open[NSLOTS];      /* its collective in each slot is started, not done */
} Progress;

/* Every group of one ordered list of axes. */
typedef struct {
    sc_axes axes;
    int k, ngroups;
    char name[128];          /* "{X,Y}" */
    int *members;            /* ngroups * k device ids */
    int *group_of, *rank_of; /* per device */
    Progress *progress;      /* per device */
    Group *groups;
} Family;

/* A backend whose devices live in several processes (mpi.c).
 * post: called by the last local member to arrive at `phase` of h's
 *   collective (alone: the others wait for the phase): start moving what the local
 *   members read after this phase; 1 when something is in flight, 0 when
 *   the phase is complete, SC_ERR with a message in err.
 * wait: called by one local member without the lock: wait for what post
 *   started; 0 or SC_ERR with the device failed (rt_dev_fail).
 * release: the slot's collective is complete (called by the member that
 *   completes it, before the slot is reused). */
typedef struct {
    int (*post)(sc_handle *h, int phase, char *err, size_t errlen);
    int (*wait)(sc_handle *h, int phase);
    void (*release)(Slot *s);
    int (*collect)(sc_world *w, void *const *blocks, size_t bytes);
    int (*agree)(sc_world *w, int ok, int *first_ok);
    int (*share)(sc_world *w, void *buf, size_t bytes);
    void (*destroy)(sc_world *w);
} RtRemote;

/* One collective as a backend's start receives it: what its members must
 * agree on, a permute's pairs (its point-to-point transfers), and this
 * member's buffers. */
typedef struct {
    Desc d;
    const int *pairs;
    int npairs;
    const void *send;
    void *recv;
} RtCall;

/* What a world's backend implements: every public call that moves data,
 * waits or ends a world goes through its world's table (runtime/api.c),
 * chosen when the world is made, not when the program is compiled
 * (docs/backends.md).
 * run: fn(device, arg) on every local device, as sc_run.
 * start, done: a collective (or a permute: point-to-point) split in two;
 *   start never blocks; done waits, completes it and frees the handle.
 * barrier: returns when every member of the group has called it.
 * set_timeout: how long a device waits in one collective (> 0).
 * collect, agree, share: the host-side steps across processes.
 * destroy: frees the world.
 * The threads world (rt_threads_ops) is one implementation, with or
 * without a remote transport (RtRemote: the MPI backend's processes). */
typedef struct {
    int (*run)(sc_world *w, int (*fn)(sc_device *dev, void *arg), void *arg);
    sc_handle *(*start)(sc_device *dev, sc_axes axes, const RtCall *c);
    int (*done)(sc_handle *h);
    int (*barrier)(sc_device *dev, sc_axes axes);
    void (*set_timeout)(sc_world *w, double seconds);
    int (*collect)(sc_world *w, void *const *blocks, size_t bytes);
    int (*agree)(sc_world *w, int ok, int *first_ok);
    int (*share)(sc_world *w, void *buf, size_t bytes);
    void (*destroy)(sc_world *w);
} RtOps;

extern const RtOps rt_threads_ops;
/* The threads world's collectives (threads_coll.c), for its table. */
sc_handle *rt_threads_start(sc_device *dev, sc_axes axes, const RtCall *c);
int rt_threads_done(sc_handle *h);
int rt_threads_barrier(sc_device *dev, sc_axes axes);

struct sc_world {
    const RtOps *ops;        /* its backend: every data-moving call goes through it */
    sc_mesh mesh;
    sc_options opt;          /* as made, defaults filled in */
    char names[SC_MAX_AXES][32];
    int ndev, stride[SC_MAX_AXES];
    _Atomic double timeout;
    pthread_mutex_t mu;      /* families and the error; taken before a group's */
    Family **fam;
    int nfam;
    atomic_int failed;
    char error[MSG];
    sc_device *dev;
    int (*fn)(sc_device *, void *);
    void *arg;
    /* This process runs devices [local, local + nlocal): all of them on
     * the threads backend; nlocal per process on MPI, whose remote is set. */
    int local, nlocal, process, nprocesses;
    /* How a waiting device waits (threads_coll.c): look for spin_ns before
     * sleeping, spinning with a pause instruction when the device threads
     * of this machine fit its cores, else yielding the core.  Set when the
     * world is made (rt_set_spin); the MPI backend counts the threads of
     * every process on the node. */
    int oversubscribed;
    long spin_ns;
    const RtRemote *remote;
    void *remote_state;
    /* The local devices' threads (sc_run with nlocal > 1): started at the
     * first run and kept until sc_world_destroy, each waiting for the next
     * run, so that a host calling sc_run in a loop (the global API, the
     * Python package) starts no threads, nor OpenMP teams, per call. */
    pthread_t *pool;         /* NULL until started */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_go, pool_done;
    unsigned long pool_gen;  /* runs posted */
    int pool_pending, pool_quit;
};

struct sc_device {
    sc_world *w;
    int id, rc, coord[SC_MAX_AXES];
    char error[MSG];
    Family **cache;          /* families this device has used */
    int ncache;
    void *ctx;               /* sc_device_set_ctx's */
};

struct sc_handle {
    sc_device *dev;
    Family *f;
    Group *g;
    Slot *s;
    uint64_t op;
    int rank, src, dst, failed;  /* permute's source and target ranks, or -1 */
    int nphases;             /* barriers: rt_nphases */
    int eager;               /* the send is staged; one barrier, at start */
    Desc d;
    const void *send;
    void *recv;
};

/* Record the device's failure, fail the world and wake every waiter;
 * SC_ERR.  Called with no group lock held. */
int rt_dev_fail(sc_device *dev, const char *fmt, ...);
/* The message of a collective that found the world failed; SC_ERR. */
int rt_dev_aborted(sc_device *dev, const char *what);
int rt_axes_valid(const sc_world *w, sc_axes a);
/* The device's family for `a`, created on first use; NULL if out of memory. */
Family *rt_family_get(sc_device *dev, sc_axes a);
/* A world of every device of `mesh`, all local, none running, with the
 * options checked; NULL with a message in err.  sc_threads_create is this. */
sc_world *rt_world_new(const sc_mesh *mesh, const sc_options *opt, char *err, size_t errlen);
/* "kind over {X,Y}", and a description of a collective's arguments, for
 * messages. */
void rt_what(const sc_handle *h, char *buf, size_t n);
void rt_describe(const Desc *d, char *buf, size_t n);
int rt_desc_equal(const Desc *a, const Desc *b);
/* The devices a collective waited for in vain, for its message. */
typedef struct {
    char text[256];
    int len, count;
} LateList;
void rt_late_add(LateList *l, int dev);
/* "kind over {X}: devices 2, 3 did not arrive within T s": fails h's device. */
int rt_late_fail(sc_handle *h, const LateList *l, double timeout);
/* The barriers of a collective: 2, or 3 for an all-reduce whose group
 * spans processes (`local`: every member is in this process). */
int rt_nphases(Kind k, int local);
/* Choose how devices wait, for `threads` device threads on this machine. */
void rt_set_spin(sc_world *w, int threads);
/* Wake every waiter of the slot (they look at their condition again). */
void rt_wake(Slot *s);

#endif
