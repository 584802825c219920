/* shardc_rt.h: the communication runtime that shardc's per-device programs
 * link against.  See docs/runtime.md.
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
 *     sc_world *w = sc_threads_create(&mesh, NULL, err, sizeof err);
 *     if (!w || sc_run(w, body, NULL) != 0) ...;   (sc_world_error(w))
 *     sc_world_destroy(w);
 *
 * Two backends make worlds, with the same API and the same results bit for
 * bit.  The threads backend (libshardc_rt.a, -pthread) runs every device of
 * the mesh in this process.  The MPI backend (libshardc_rt_mpi.a, built with
 * mpicc, linked before libshardc_rt.a) runs P processes of L local devices
 * each, P x L = the mesh's devices, as multi-process JAX does: process p
 * runs the global device ids [p L, (p + 1) L), each on a thread of its
 * own, and a collective whose group spans processes moves with MPI the
 * parts of buffers that the other processes read.  Settings such as the
 * collective timeout and L are an sc_options, given when the world is
 * made; from outside the program they come from environment variables,
 * which only sc_options_from_env reads.
 *
 * Every call returns 0 or, for failure, SC_ERR (-1) with a message in
 * sc_device_error.  A failed collective fails the world: every later or
 * waiting collective of every device fails too, so that no device hangs. */
#ifndef SHARDC_RT_H
#define SHARDC_RT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SC_MAX_AXES = 8, SC_MAX_RANK = 8, SC_MAX_DEVICES = 65536, SC_ERR = -1 };

/* Element types.  bf16 and f16 are stored as uint16_t bit patterns, bool
 * as one byte, 0 or 1; i64 as int64_t, u8 as uint8_t. */
typedef enum { SC_F32, SC_F64, SC_BF16, SC_F16, SC_I32, SC_BOOL, SC_U32, SC_I64, SC_U8, SC_DTYPE_COUNT } sc_dtype;

/* Reductions.  Floating-point max and min propagate NaN; i32, u32, i64 and
 * u8 sums wrap (modulo 2^32, 2^64, 256), computed in their own width;
 * over bool, sum and max are or, min is and. */
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

/* ---- options ---- */

/* A world's settings, fixed when it is made.  A field left 0 takes its
 * default, so `sc_options opt = {0}` (or a NULL pointer) is every default.
 * Fields may be added; initialize the struct with `= {0}` or designated
 * initializers, so that new ones keep their defaults. */
typedef struct {
    /* Seconds a device waits in one collective for the rest of its group
     * before the world fails naming the late devices (> 0; 0: 60).
     * sc_set_timeout changes it later. */
    double timeout;
    /* MPI backend: devices per process, L (1 .. SC_MAX_DEVICES; 0: the
     * mesh's devices divided evenly among the processes).  Process count
     * x L must be the mesh's device count.  The threads backend, whose one
     * process runs every device, does not use it. */
    int local_devices;
    /* Threads backend: SC_BIND_CORE runs device i's thread on the i-th
     * core this process may use, for the whole run, when the devices fit
     * the cores (as mpirun's --bind-to core does for processes);
     * SC_BIND_NONE (0), the default, leaves placement to the kernel, which
     * now and then starts two device threads on one core and takes
     * milliseconds to part them.  The MPI backend leaves placement to the
     * launcher (mpirun --bind-to). */
    int bind;
} sc_options;

enum { SC_BIND_NONE = 0, SC_BIND_CORE = 1 };

/* The environment variables through which a program's user sets its
 * options from outside (docs/runtime.md has the table):
 *
 *     SHARDC_TIMEOUT=SECONDS        timeout        (any positive number, e.g. 0.5)
 *     SHARDC_LOCAL_DEVICES=L        local_devices  (a whole number, 1 .. 65536)
 *     SHARDC_BIND=core|none         bind           (SC_BIND_CORE, SC_BIND_NONE)
 *
 * Each variable that is set and not empty replaces its field of *opt; the
 * others are left as they are, so start from {0} for the defaults (or from
 * the values the environment may override), and override with, say, the
 * command line after.  Returns 0, or SC_ERR with a message naming the first
 * bad variable and its value in err (if errlen > 0); a bad variable leaves
 * its field unchanged, and the valid ones are still read.  The runtime
 * itself reads no environment variable. */
int sc_options_from_env(sc_options *opt, char *err, size_t errlen);

/* ---- worlds and devices ---- */

/* Each creation function takes the world's options (NULL: the defaults,
 * not the environment's) and returns NULL on failure (an invalid mesh or
 * option), with a message in err (if errlen > 0). */

/* The threads backend: one thread per device of `mesh`, all in this
 * process (one process of every device: process 0 of 1). */
sc_world *sc_threads_create(const sc_mesh *mesh, const sc_options *opt, char *err, size_t errlen);
/* The MPI backend: the processes of MPI_COMM_WORLD (`mpirun -np P`, srun,
 * ...), each running opt->local_devices devices (L; by default the mesh's
 * devices / P), process p the global ids [p L, (p + 1) L), one thread each
 * (one local device runs on the calling thread).  The processes' MPI ranks
 * are their indices.  Initializes MPI with MPI_THREAD_MULTIPLE unless the
 * caller did (then the caller finalizes it; more than one local device
 * needs MPI_THREAD_MULTIPLE).  Collective: every process calls it, with the
 * same mesh and options.  When P x L is not the mesh's device count, only
 * process 0 writes the message (err is "" on the others). */
sc_world *sc_mpi_create(const sc_mesh *mesh, const sc_options *opt, char *err, size_t errlen);
/* Frees the world.  On MPI it ends MPI (MPI_Finalize), or, when the world
 * failed, aborts every process (MPI_Abort) so that none waits forever. */
void sc_world_destroy(sc_world *w);
/* Seconds a device waits in one collective for its group (> 0; other
 * values are ignored).  It starts as the options' timeout. */
void sc_set_timeout(sc_world *w, double seconds);
double sc_timeout(const sc_world *w);
/* Runs fn(device, arg) on the thread of every device of this process and
 * waits for them (on MPI, every process calls it: each runs its own).  The
 * threads are started at the first run and kept until sc_world_destroy
 * (one device runs on the calling thread).  Returns 0
 * when every fn returned 0 and no collective failed, else SC_ERR.  A fn
 * returning nonzero fails the world, so its peers do not wait for it.  A
 * world may run again after a successful run. */
int sc_run(sc_world *w, int (*fn)(sc_device *dev, void *arg), void *arg);
/* The first failure of the world ("" if none); stays valid until destroy. */
const char *sc_world_error(const sc_world *w);
int sc_world_failed(const sc_world *w);
/* The mesh's devices, of every process. */
int sc_device_count(const sc_world *w);

/* Processes, as multi-process JAX has them: this one's index (0 .. count-1:
 * its MPI rank; 0 of 1 on threads); whether device `dev` (a global id,
 * row-major over the mesh) runs in this process (sc_run runs those only);
 * how many do (L); the process that runs `dev`; and a device's local id,
 * its index among its process's devices.  Process p runs the global ids
 * [p L, (p + 1) L). */
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
 * 0's ok.  share: process 0's `bytes` at buf to every process's buf (a
 * no-op on threads).  Each returns SC_ERR / 0 on a communication failure. */
int sc_world_collect(sc_world *w, void *const *blocks, size_t bytes);
int sc_world_agree(sc_world *w, int ok, int *first_ok);
int sc_world_share(sc_world *w, void *buf, size_t bytes);

int sc_device_id(const sc_device *dev);
int sc_coord(const sc_device *dev, int axis);
const sc_mesh *sc_device_mesh(const sc_device *dev);
sc_world *sc_device_world(const sc_device *dev);
/* This device's last failure ("" if none). */
const char *sc_device_error(const sc_device *dev);
/* What the code run on the device needs of its runner: the kernel
 * library's context (shardc_lib.h's sk_ctx: the device's memory space),
 * set by the driver before the device's function runs; NULL until then.
 * The runtime only keeps it. */
void sc_device_set_ctx(sc_device *dev, void *ctx);
void *sc_device_ctx(const sc_device *dev);

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
/* In place over a strided block: the rows x cols elements of buf whose
 * row r starts at buf[r * ld] (ld >= cols when rows > 1) become the
 * group's reduction of them; the elements between the rows are neither
 * read nor written (others may write them meanwhile: a column tile of a
 * matrix whose other columns are computed or reduced at the same time).
 * Members pass the same rows, cols and ld; each result has the bits of the
 * flat all-reduce of the block's elements. */
int sc_all_reduce_strided(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, void *buf,
                          int64_t rows, int64_t cols, int64_t ld);
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

/* Returns when every member of the device's group over `axes` has called
 * it; it takes its place among the group's collectives like any of them. */
int sc_barrier(sc_device *dev, sc_axes axes);

/* Start/done: the same collectives split in two, so that independent work
 * runs in between.  start never blocks; done waits, completes the
 * collective and frees the handle (also on failure).  start returns NULL
 * only when out of memory, and sc_done(NULL) is SC_ERR.  At most
 * SC_MAX_PENDING collectives of one device may be started and not done on
 * one group; members must call done in the same order. */
enum { SC_MAX_PENDING = 8 };
sc_handle *sc_start_all_reduce(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op,
                               const void *send, void *recv, int64_t count);
sc_handle *sc_start_all_reduce_strided(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op,
                                       void *buf, int64_t rows, int64_t cols, int64_t ld);
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
/* Round to nearest, ties to even; overflow gives inf, NaN stays NaN.  The
 * bf16 conversions are inline and branch-free, so that a loop of them (a
 * cast, a fused loop storing bf16) vectorizes: called, f32 to bf16 ran at
 * 0.07 of the STREAM triad (docs/kernels.md). */
static inline uint16_t sc_bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1)) >> 16, quiet = (u >> 16) | 0x40;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : nearest);
}
static inline float sc_bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
uint16_t sc_f16_from_float(float x);
float sc_f16_to_float(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif
