/* mlp_host.c: a host program calling the sharded MLP of samples/mlp.tdsl on
 * whole arrays, through the global API (docs/codegen.md, "The global API").
 *
 *     shardc compile samples/mlp.tdsl --const B=7,D=5,F=10 -o mlp.c
 *     cc -std=c11 -O2 mlp_host.c mlp.c -o mlp_host $(pkg-config --cflags --libs shardc)
 *     ./mlp_host [DIR]
 *
 * (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not a system one.)
 * The mesh is 2x4; B = 7 and F = 10 do not split evenly over X = 2 and
 * Y = 4, so the session pads the last blocks.  One session runs the MLP
 * STEPS times, as a training loop would (the world and the buffers made
 * once), on inputs that change from call to call; then once without a
 * session (on the threads backend).  Built with `pkg-config shardc-mpi` and
 * run by `mpirun -np 2`, it runs on MPI (the backend is chosen when it
 * runs): each process makes the same calls and gets the same results (so
 * each prints them).  With DIR, each call's inputs and result are written there as
 * raw float32 (x.K.f32, w_in.f32, w_out.f32, out.K.f32, out.once.f32) for
 * tests/codegen/check_host.py, which compares them with NumPy. */
#include "mlp.h"               /* shardc_mlp_global, from `shardc compile -o mlp.c` */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 7, D = 5, F = 10, STEPS = 3 };

/* Deterministic inputs of a size and a seed, in [-1, 1). */
static void fill(float *a, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
}

/* DIR/NAME as raw float32, if DIR was given. */
static int save(const char *dir, const char *name, const float *a, int n) {
    if (!dir)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(a, sizeof *a, (size_t)n, f) == (size_t)n;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "mlp_host: cannot write %s\n", path);
    return !ok;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : NULL;
    static float x[B * D], w_in[D * F], w_out[F * D], out[B * D], once[B * D];
    fill(w_in, D * F, 1);
    fill(w_out, F * D, 2);
    int rc = save(dir, "w_in.f32", w_in, D * F) || save(dir, "w_out.f32", w_out, F * D);

    /* A session keeps the 8 devices' world and buffers across the calls. */
    sk_session *s = sk_session_new(NULL);
    if (!s) {
        fprintf(stderr, "mlp_host: out of memory\n");
        return 1;
    }
    for (int k = 0; k < STEPS && !rc; k++) {
        char name[64];
        fill(x, B * D, 100 + (unsigned)k);
        if (shardc_mlp_global(s, x, w_in, w_out, out) != 0) {
            fprintf(stderr, "mlp_host: %s\n", sk_session_error(s));
            rc = 1;
            break;
        }
        double sum = 0;
        for (int i = 0; i < B * D; i++)
            sum += out[i];
        printf("call %d: out[0][0] %.6f, sum %.6f\n", k, out[0], sum);
        snprintf(name, sizeof name, "x.%d.f32", k);
        rc = save(dir, name, x, B * D);
        snprintf(name, sizeof name, "out.%d.f32", k);
        rc = rc || save(dir, name, out, B * D);
    }
    sk_session_free(s);

    /* Without a session: a world for this one call (errors on stderr).  Not
     * on MPI, which a process initializes once: the session ended it. */
    const char *backend = sk_session_backend();
    if (backend && strcmp(backend, "threads") == 0) {
        if (!rc && shardc_mlp_global(NULL, x, w_in, w_out, once) != 0)
            rc = 1;
        rc = rc || save(dir, "out.once.f32", once, B * D);
    }
    return rc;
}
