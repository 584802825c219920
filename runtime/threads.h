/* Private to the runtime: the threads backend's data structures, shared by
 * threads.c (worlds, devices, groups), threads_coll.c (barriers and
 * collectives) and the MPI backend (mpi.c).  The MPI backend keeps all of
 * it: a process's devices meet at the same barriers, and between two
 * phases of a collective an RtRemote brings in, from the other processes,
 * the parts of their members' buffers that the local members read next. */
#ifndef SHARDC_THREADS_H
#define SHARDC_THREADS_H

#include "rt_internal.h"

#include <pthread.h>
#include <stdatomic.h>

enum { MSG = 512, PENDING = SC_MAX_PENDING };

typedef enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_ALL_TO_ALL, K_PERMUTE } Kind;

/* What the members of one collective must agree on. */
typedef struct {
    Kind kind;
    sc_dtype dtype;
    sc_reduce red;
    sc_shape shape;          /* all-reduce and permute: rank 1, {count} */
    int dim, dim2;           /* gather/scatter dim; all-to-all split, concat */
} Desc;

/* One collective in flight in a group.  Collective number `op` of the group
 * uses slot op % PENDING; it has `nphases` barriers, and the barrier that
 * completes the last one frees the slot for collective op + PENDING.
 * A barrier counts this process's members; when another process holds
 * members too, the phase completes only when the exchange that the last
 * local arrival posted (RtRemote.post) has completed. */
typedef struct {
    uint64_t op;
    int phase, count;        /* the phase under way and its local arrivals */
    int *reached;            /* per rank: phases arrived at */
    const void **send;       /* per rank, published on arrival at phase 0 */
    void **recv;             /* (a member in another process: a staging copy) */
    int *src, *dst;          /* per rank: permute's source and target, or -1 */
    Desc desc;               /* the first arrival's */
    int have_desc;
    void *xchg;              /* the remote backend's state of the collective */
    int xwait, driving;      /* an exchange is pending; a member waits for it */
} Slot;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const int *members;      /* device ids by rank */
    int nlocal;              /* members in this process */
    Slot slot[PENDING];
} Group;

/* Every group of one ordered list of axes. */
typedef struct {
    sc_axes axes;
    int k, ngroups;
    char name[128];          /* "{X,Y}" */
    int *members;            /* ngroups * k device ids */
    int *group_of, *rank_of; /* per device */
    uint64_t *next;          /* per device: its next collective number */
    int *pending;            /* per device: started, not done */
    Group *groups;
} Family;

/* A backend whose devices live in several processes (mpi.c).
 * post: called by the last local member to arrive at `phase` of h's
 *   collective, with the group lock held: start moving what the local
 *   members read after this phase; 1 when something is in flight, 0 when
 *   the phase is complete, SC_ERR with a message in err.
 * wait: called by one local member without the lock: wait for what post
 *   started; 0 or SC_ERR with the device failed (rt_dev_fail).
 * release: the slot's collective is complete (group lock held). */
typedef struct {
    int (*post)(sc_handle *h, int phase, char *err, size_t errlen);
    int (*wait)(sc_handle *h, int phase);
    void (*release)(Slot *s);
    int (*collect)(sc_world *w, void *const *blocks, size_t bytes);
    int (*agree)(sc_world *w, int ok, int *first_ok);
    void (*destroy)(sc_world *w);
} RtRemote;

struct sc_world {
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
    const RtRemote *remote;
    void *remote_state;
};

struct sc_device {
    sc_world *w;
    int id, rc, coord[SC_MAX_AXES];
    char error[MSG];
    Family **cache;          /* families this device has used */
    int ncache;
};

struct sc_handle {
    sc_device *dev;
    Family *f;
    Group *g;
    Slot *s;
    uint64_t op;
    int rank, src, dst, failed;  /* permute's source and target ranks, or -1 */
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
int rt_nphases(Kind k);

#endif
