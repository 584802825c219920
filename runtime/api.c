/* api.c: the public calls that move data, wait or end a world, each passed
 * to its world's backend through the world's table (RtOps, threads.h), so
 * that a backend is a table filled in, chosen when the world is made
 * (docs/backends.md).  The calls that only read what the world is (its
 * mesh, processes, groups) are threads.c's: every backend's world has
 * those facts. */
#include "threads.h"

/* ---- collectives: start / done ---- */

static sc_handle *start(sc_device *dev, sc_axes axes, Desc d, const int *pairs, int npairs, const void *send,
                        void *recv) {
    RtCall c = {d, pairs, npairs, send, recv};
    return dev->w->ops->start(dev, axes, &c);
}

static Desc desc(Kind kind, sc_dtype t, sc_reduce red, sc_shape shape, int dim, int dim2) {
    Desc d = {.kind = kind, .dtype = t, .red = red, .shape = shape, .dim = dim, .dim2 = dim2};
    if (kind == K_ALL_REDUCE)            /* flat: one row */
        d.ld = shape.dims[shape.rank - 1];
    return d;
}

static sc_shape flat(int64_t count) { return (sc_shape){1, {count}}; }

sc_handle *sc_start_all_reduce(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, const void *send,
                               void *recv, int64_t count) {
    return start(dev, axes, desc(K_ALL_REDUCE, t, op, flat(count), 0, 0), NULL, 0, send, recv);
}

sc_handle *sc_start_all_reduce_strided(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, void *buf,
                                       int64_t rows, int64_t cols, int64_t ld) {
    Desc d = desc(K_ALL_REDUCE, t, op, (sc_shape){2, {rows, cols}}, 0, 0);
    d.ld = rows && cols ? ld : cols;     /* an empty block is any stride's: no row to step over */
    return start(dev, axes, d, NULL, 0, buf, buf);
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

int sc_done(sc_handle *h) { return h ? h->dev->w->ops->done(h) : SC_ERR; }

int sc_barrier(sc_device *dev, sc_axes axes) { return dev->w->ops->barrier(dev, axes); }

/* ---- the blocking forms: start, then done ---- */

int sc_all_reduce(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, const void *send, void *recv,
                  int64_t count) {
    return sc_done(sc_start_all_reduce(dev, axes, t, op, send, recv, count));
}

int sc_all_reduce_strided(sc_device *dev, sc_axes axes, sc_dtype t, sc_reduce op, void *buf, int64_t rows,
                          int64_t cols, int64_t ld) {
    return sc_done(sc_start_all_reduce_strided(dev, axes, t, op, buf, rows, cols, ld));
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

/* ---- worlds ---- */

int sc_run(sc_world *w, int (*fn)(sc_device *, void *), void *arg) { return w->ops->run(w, fn, arg); }

void sc_set_timeout(sc_world *w, double seconds) {
    if (seconds > 0)
        w->ops->set_timeout(w, seconds);
}

int sc_world_collect(sc_world *w, void *const *blocks, size_t bytes) { return w->ops->collect(w, blocks, bytes); }
int sc_world_agree(sc_world *w, int ok, int *first_ok) { return w->ops->agree(w, ok, first_ok); }
int sc_world_share(sc_world *w, void *buf, size_t bytes) { return w->ops->share(w, buf, bytes); }

void sc_world_destroy(sc_world *w) {
    if (w)
        w->ops->destroy(w);
}
