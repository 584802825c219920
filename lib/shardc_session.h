/* shardc_session.h: calling a generated function on whole (global) arrays
 * from a host program (lib/host/session.c; docs/codegen.md, "The global API").
 *
 * `shardc compile prog.tdsl -o prog.c` writes, for every entry point
 * shardc_NAME (one device's blocks), a wrapper on global arrays, declared
 * in prog.h:
 *
 *     int shardc_mlp_global(sk_session *s, const float *x_, const float *w_in_,
 *                           const float *w_out_, float *result0);
 *
 * It splits each global parameter (dense, row-major, the global shape
 * prog.h lists) into every device's block (an uneven dim's last blocks
 * padded with zeros), runs the function on every device, and assembles
 * each global result from the devices' blocks (padding trimmed).
 *
 * A session is what keeps the cost of that down across calls, as a
 * training loop makes them: the world of the program's mesh (made at the
 * first call, from the options given or the environment's), every
 * device's workspace (its buffers, allocated once), and each function's
 * device blocks.  A call then costs the copies in and out and the run.
 * s == NULL makes a session for that one call and frees it after (the
 * world made and destroyed, the buffers allocated and faulted in again).
 *
 * One host thread uses a session at a time; every function it calls must
 * be of one mesh (one program).  With MPI (a program linked with the MPI
 * backend, `pkg-config shardc-mpi`, under mpirun), every process calls with the
 * same global parameters and process 0's results are written (the other
 * processes' are left as they are); the world is made once per process
 * (MPI is initialized once), so a session is needed, and it ends MPI when
 * freed.  After a failed call (SC_ERR), sk_session_error says why; a
 * session whose run failed refuses further calls (its world may hold
 * devices stopped halfway): free it and make another. */
#ifndef SHARDC_SESSION_H
#define SHARDC_SESSION_H

#include "shardc_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sk_session sk_session;

/* A session whose world will have the options *opt (NULL: the
 * environment's, sc_options_from_env: SHARDC_TIMEOUT, SHARDC_LOCAL_DEVICES,
 * SHARDC_BIND).  NULL when out of memory. */
sk_session *sk_session_new(const sc_options *opt);

/* Why the last call failed ("" if none). */
const char *sk_session_error(const sk_session *s);

/* The next call on s takes parameter `param`'s device blocks (its index
 * among the C function's parameters) from result `result` of the call
 * before it, when that was of the same function and the two have the same
 * type and blocks: each device's result block becomes its parameter block,
 * with no copy, as `--steps` carries a result between steps.  The global
 * array passed for the parameter is then not read (otherwise it is, as
 * usual).  For a caller that feeds results back unchanged (the Python
 * package, docs/python.md).  SC_ERR past 256 carries per call. */
int sk_session_carry(sk_session *s, int param, int result);

/* The backend a session's world is made on, chosen when the program runs
 * (lib/host/backend.c): "mpi" in a program linked with the MPI backend that an
 * MPI launcher started, else "threads", or as SHARDC_BACKEND says; NULL
 * when there is none to choose (the first call then says why). */
const char *sk_session_backend(void);

/* The world, the workspaces and the blocks freed (NULL: nothing). */
void sk_session_free(sk_session *s);

#ifdef __cplusplus
}
#endif

#endif
