/* shardc_rt.h: the communication runtime that shardc's per-device programs
 * link against (libshardc_rt.a, -pthread).  See docs/runtime.md.
 *
 * A world is a device mesh; every device runs the same function (SPMD) on
 * its own thread and calls collectives over replica groups named by mesh
 * axes, as in docs/ir.md:
 *
 *     static int body(sc_device *dev, void *arg) {
 *         float x[4] = {...}, y[4];
 *         return sc_all_reduce(dev, SC_AXES(1), SC_F32, SC_SUM, x, y, 4);
 *     }
 *     sc_mesh mesh = {2, {2, 4}, {"X", "Y"}};
 *     sc_world *w = sc_threads_create(&mesh, err, sizeof err);
 *     if (!w || sc_run(w, body, NULL) != 0) ...;   (sc_world_error(w))
 *     sc_world_destroy(w);
 *
 * Every call returns 0 or, for failure, SC_ERR (-1) with a message in
 * sc_device_error.  A failed collective fails the world: every later or
 * waiting collective of every device fails too, so that no device hangs. */
#ifndef SHARDC_RT_H
#define SHARDC_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SC_MAX_AXES = 8, SC_MAX_RANK = 8, SC_ERR = -1 };

/* Element types.  bf16 and f16 are stored as uint16_t bit patterns. */
typedef enum { SC_F32, SC_F64, SC_BF16, SC_F16, SC_I32, SC_DTYPE_COUNT } sc_dtype;

/* Reductions.  Floating-point max and min propagate NaN; i32 sums wrap. */
typedef enum { SC_SUM, SC_MAX, SC_MIN } sc_reduce;

/* A row-major device mesh: device id = sum(coord[a] * stride[a]), the last
 * axis with stride 1.  Names are only used in messages (may be NULL). */
typedef struct {
    int naxes;                     /* 0 .. SC_MAX_AXES; 0 is one device */
    int sizes[SC_MAX_AXES];
    const char *names[SC_MAX_AXES];
} sc_mesh;

/* The axes of a collective, major first.  The group of a device is every
 * device that agrees with it on the other axes, in order of the coordinate
 * along these axes (the first one major): member j of a group has rank j.
 * On mesh X=2, Y=4, SC_AXES(1) gives {0,1,2,3},{4,5,6,7}; SC_AXES(0) gives
 * {0,4},{1,5},...; SC_AXES(1, 0) gives {0,4,1,5,2,6,3,7}. */
typedef struct {
    int n;
    int axis[SC_MAX_AXES];
} sc_axes;
#define SC_AXES(...) \
    ((sc_axes){(int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), {__VA_ARGS__}})

/* A row-major local shape (the operand's, on one device). */
typedef struct {
    int rank;
    int64_t dims[SC_MAX_RANK];
} sc_shape;
#define SC_SHAPE(...) \
    ((sc_shape){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}})

typedef struct sc_world sc_world;
typedef struct sc_device sc_device;
typedef struct sc_handle sc_handle;

/* ---- worlds and devices ---- */

/* The threads backend: one thread per device of `mesh`, in this process.
 * The collective timeout starts as $SHARDC_TIMEOUT seconds if set, else 60.
 * NULL on failure, with a message in err (if errlen > 0). */
sc_world *sc_threads_create(const sc_mesh *mesh, char *err, size_t errlen);
/* The MPI backend (libshardc_rt_mpi.a, built with mpicc): one device per
 * MPI process, device id = rank in MPI_COMM_WORLD, so the program runs
 * under `mpirun -np <devices>`.  Initializes MPI unless the caller did
 * (then the caller finalizes it).  Collective (all processes call it).  When
 * the process count is not the mesh's device count, only process 0 writes
 * the message (err is "" on the others). */
sc_world *sc_mpi_create(const sc_mesh *mesh, char *err, size_t errlen);
/* Frees the world.  On MPI it ends MPI (MPI_Finalize), or, when the world
 * failed, aborts every process (MPI_Abort) so that none waits forever. */
void sc_world_destroy(sc_world *w);
/* Seconds a device waits in one collective for its group (> 0). */
void sc_set_timeout(sc_world *w, double seconds);
double sc_timeout(const sc_world *w);
/* Runs fn(device, arg) on every device's thread and joins them.  Returns 0
 * when every fn returned 0 and no collective failed, else SC_ERR.  A fn
 * returning nonzero fails the world, so its peers do not wait for it.  A
 * world may run again after a successful run. */
int sc_run(sc_world *w, int (*fn)(sc_device *dev, void *arg), void *arg);
/* The first failure of the world ("" if none); stays valid until destroy. */
const char *sc_world_error(const sc_world *w);
int sc_world_failed(const sc_world *w);
int sc_device_count(const sc_world *w);

/* Processes, as multi-process JAX has them: this one's index (0 .. count-1;
 * always 0 on threads); whether device `dev` (a global id, row-major over
 * the mesh) runs in this process (sc_run runs those only); how many do;
 * the process that runs `dev`; and a device's local id, its index among
 * its process's devices.  Process p runs the global ids [p L, (p + 1) L)
 * where L is the local count. */
int sc_world_process(const sc_world *w);
int sc_world_process_count(const sc_world *w);
int sc_world_is_local(const sc_world *w, int dev);
int sc_world_local_count(const sc_world *w);
int sc_world_device_process(const sc_world *w, int dev);
int sc_device_local_id(const sc_device *dev);
/* Host-side steps outside sc_run, called by every process.  collect: on
 * process 0, blocks[d] for every device d receives the `bytes` that device
 * d's process holds in its blocks[d] (a no-op on threads).  agree: 1 when
 * every process passed ok != 0, and *first_ok (if not NULL) gets process
 * 0's ok.  Both return SC_ERR / 0 on a communication failure. */
int sc_world_collect(sc_world *w, void *const *blocks, size_t bytes);
int sc_world_agree(sc_world *w, int ok, int *first_ok);

int sc_device_id(const sc_device *dev);
int sc_coord(const sc_device *dev, int axis);
const sc_mesh *sc_device_mesh(const sc_device *dev);
sc_world *sc_device_world(const sc_device *dev);
/* This device's last failure ("" if none). */
const char *sc_device_error(const sc_device *dev);

/* Groups: size, this device's rank in its group, and member j's device id
 * (SC_ERR for invalid axes). */
int sc_group_size(const sc_device *dev, sc_axes axes);
int sc_group_rank(const sc_device *dev, sc_axes axes);
int sc_group_member(const sc_device *dev, sc_axes axes, int j);

/* ---- collectives ----
 * Every member of a group must make the same calls in the same order (the
 * same kind, dtype, reduction and shape); a mismatch fails the world.  The
 * send buffer must stay unchanged and the recv buffer unread until the call
 * returns (for start, until done).  Buffers must not overlap, except that
 * all-reduce may run in place (send == recv).  A group of size k: */

/* recv[i] = reduce over the group of send[i], i < count. */
int sc_all_reduce(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, const void *send,
                  void *recv, int64_t count);
/* recv (shape `in` with dim `dim` times k) holds member j's send as block j
 * along `dim`. */
int sc_all_gather(sc_device *dev, sc_axes axes, sc_dtype t, sc_shape in, int dim, const void *send,
                  void *recv);
/* The group's reduction of send (shape `in`, in.dims[dim] divisible by k),
 * of which member j keeps block j along `dim`. */
int sc_reduce_scatter(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, sc_shape in, int dim,
                      const void *send, void *recv);
/* Member j cuts send (shape `in`) into k blocks along split_dim and sends
 * block i to member i, where it becomes block j along concat_dim. */
int sc_all_to_all(sc_device *dev, sc_axes axes, sc_dtype t, sc_shape in, int split_dim,
                  int concat_dim, const void *send, void *recv);
/* pairs[2p] sends to pairs[2p+1] (ranks within the group; each rank a
 * source at most once and a target at most once).  A member that no pair
 * targets gets zeros. */
int sc_collective_permute(sc_device *dev, sc_axes axes, sc_dtype t, const int *pairs, int npairs,
                          const void *send, void *recv, int64_t count);

/* Start/done: the same collectives split in two, so that independent work
 * runs in between.  start never blocks; done waits, completes the
 * collective and frees the handle (also on failure).  start returns NULL
 * only when out of memory, and sc_done(NULL) is SC_ERR.  At most
 * SC_MAX_PENDING collectives of one device may be started and not done on
 * one group; members must call done in the same order. */
enum { SC_MAX_PENDING = 8 };
sc_handle *sc_start_all_reduce(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op,
                               const void *send, void *recv, int64_t count);
sc_handle *sc_start_all_gather(sc_device *dev, sc_axes axes, sc_dtype t, sc_shape in, int dim,
                               const void *send, void *recv);
sc_handle *sc_start_reduce_scatter(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op,
                                   sc_shape in, int dim, const void *send, void *recv);
sc_handle *sc_start_all_to_all(sc_device *dev, sc_axes axes, sc_dtype t, sc_shape in,
                               int split_dim, int concat_dim, const void *send, void *recv);
sc_handle *sc_start_collective_permute(sc_device *dev, sc_axes axes, sc_dtype t, const int *pairs,
                                       int npairs, const void *send, void *recv, int64_t count);
int sc_done(sc_handle *h);

/* ---- element types ---- */
size_t sc_dtype_size(sc_dtype t);
const char *sc_dtype_name(sc_dtype t);
/* Round to nearest, ties to even; overflow gives inf, NaN stays NaN. */
uint16_t sc_bf16_from_float(float x);
float sc_bf16_to_float(uint16_t b);
uint16_t sc_f16_from_float(float x);
float sc_f16_to_float(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif
