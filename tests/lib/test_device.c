/* Device memory and the kernel context (lib/device.c, docs/backends.md):
 *
 * 1. SHARDC_DEVICE_MEMORY: unset, host and guarded are read; anything else
 *    is an error naming the choices.
 * 2. Both spaces: what sk_dev_write puts is what sk_dev_read gets, a copy
 *    moves it, an allocated block starts zeroed, blocks are aligned.
 * 3. The guarded space faults: a host access to a block outside
 *    sk_launch_begin/end (a child killed by SIGSEGV; built with ASan, a
 *    use-after-poison report and ASan's exit status 1) and none inside them,
 *    nested begins keeping the region open until the last end, blocks
 *    taken or allocated while open usable at once and closed with the rest.
 *    Built with ASan, a byte past a block is reported even inside them.
 * 4. A block given back out of stack order stops the process (SIGABRT);
 *    a take larger than the region is NULL.
 * 5. A kernel takes its scratch from the context it is given: an i32 dot
 *    (whose panels are packed in a scratch block on every CPU) of
 *    operands in device memory, run between begin and end, raises the
 *    context's peak by at least its accumulator, gives it all back, and
 *    computes what the same dot computes on host memory with no context. */
#include "../runtime/tap.h"
#include "shardc_lib.h"

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define FAULT 1                      /* ASan reports the poisoned access and exits 1 */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FAULT 1
#endif
#endif
#ifndef FAULT
#define FAULT (128 + SIGSEGV)
#endif

static void from_env(void) {
    static const struct { const char *value; int rc; sk_mem_space space; } cases[] = {
        {NULL, 0, SK_MEM_HOST}, {"", 0, SK_MEM_HOST}, {"host", 0, SK_MEM_HOST},
        {"guarded", 0, SK_MEM_GUARDED}, {"gpu", -1, SK_MEM_HOST},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[128] = "";
        sk_mem_space got = SK_MEM_GUARDED;
        if (cases[i].value)
            setenv("SHARDC_DEVICE_MEMORY", cases[i].value, 1);
        else
            unsetenv("SHARDC_DEVICE_MEMORY");
        int rc = sk_mem_space_from_env(&got, err, sizeof err);
        check(rc == cases[i].rc && got == cases[i].space && (rc == 0 || strstr(err, "expected host or guarded")),
              "SHARDC_DEVICE_MEMORY=%s: rc %d, space %s, '%s'", cases[i].value ? cases[i].value : "(unset)", rc,
              sk_mem_space_name(got), err);
    }
    unsetenv("SHARDC_DEVICE_MEMORY");
}

static void round_trip(sk_mem_space space) {
    const char *name = sk_mem_space_name(space);
    sk_ctx *c = sk_ctx_new(space);
    enum { N = 1000 };
    int32_t in[N], out[N], zero[N] = {0};
    for (int i = 0; i < N; i++)
        in[i] = i * 7 - 3;
    int32_t *a = sk_dev_take(c, sizeof in), *b = sk_dev_alloc(c, sizeof in);
    check(c && a && b && (uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0, "%s: a context, aligned blocks", name);
    if (!c || !a || !b)
        return;
    memset(out, 1, sizeof out);
    sk_dev_read(c, out, b, sizeof out);
    check(memcmp(out, zero, sizeof out) == 0, "%s: an allocated block starts zeroed", name);
    sk_dev_write(c, a, in, sizeof in);
    sk_dev_copy(c, b, a, sizeof in);
    memset(out, 0, sizeof out);
    sk_dev_read(c, out, b, sizeof out);
    check(memcmp(out, in, sizeof in) == 0, "%s: written, copied and read back", name);
    sk_dev_free(c, b, sizeof in);
    sk_dev_give(c, a, sizeof in);
    sk_ctx_free(c);
}

/* How a child running f ends: its exit status, or 128 + its signal. */
static int child(void (*f)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(open("/dev/null", O_WRONLY), 2);   /* the fault's report is expected */
        f();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

static volatile int32_t sink;

static void touch_outside(void) {
    sk_ctx *c = sk_ctx_new(SK_MEM_GUARDED);
    int32_t *a = sk_dev_take(c, 64);
    sink = a[0];
}

static void touch_inside(void) {
    sk_ctx *c = sk_ctx_new(SK_MEM_GUARDED);
    int32_t *a = sk_dev_take(c, 64), *b = sk_dev_alloc(c, 64);
    sk_launch_begin(c);
    a[0] = 5;
    b[0] = a[0];
    sk_launch_end(c);
}

static void touch_after_end(void) {
    sk_ctx *c = sk_ctx_new(SK_MEM_GUARDED);
    int32_t *a = sk_dev_alloc(c, 64);
    sk_launch_begin(c);
    a[0] = 5;
    sk_launch_end(c);
    sink = a[0];
}

/* Two begins and one end, then a write: the region is still open. */
static sk_ctx *written_after_inner_end(int32_t **a) {
    sk_ctx *c = sk_ctx_new(SK_MEM_GUARDED);
    *a = sk_dev_take(c, 64);
    sk_launch_begin(c);
    sk_launch_begin(c);
    sk_launch_end(c);
    (*a)[0] = 1;
    return c;
}

static void nested_open(void) {
    int32_t *a;
    written_after_inner_end(&a);
}

static void nested(void) {           /* open until the last end */
    int32_t *a;
    sk_launch_end(written_after_inner_end(&a));
    _exit(a[0] == 1 ? 0 : 1);        /* closed: faults here */
}

static void taken_while_open(void) {
    sk_ctx *c = sk_ctx_new(SK_MEM_GUARDED);
    sk_launch_begin(c);
    int32_t *a = sk_dev_take(c, 3 << 20), *b = sk_dev_alloc(c, 64);   /* new pages, past what was open */
    a[(3 << 20) / 4 - 1] = 1;
    b[0] = 2;
    sk_launch_end(c);
    sink = a[(3 << 20) / 4 - 1];
}

static void past_the_end(void) {
    sk_ctx *c = sk_ctx_new(SK_MEM_GUARDED);
    char *a = sk_dev_take(c, 100);
    sk_launch_begin(c);
    a[100] = 1;
    sk_launch_end(c);
}

static void out_of_order(void) {
    sk_ctx *c = sk_ctx_new(SK_MEM_GUARDED);
    void *a = sk_dev_take(c, 64), *b = sk_dev_take(c, 64);
    (void)b;
    sk_dev_give(c, a, 64);
}

static void faults(void) {
    check(child(touch_outside) == FAULT, "guarded: a host read outside begin/end faults");
    check(child(touch_inside) == 0, "guarded: reads and writes between begin and end do not");
    check(child(touch_after_end) == FAULT, "guarded: after the end, a read faults again");
    check(child(nested_open) == 0, "guarded: nested begins: open after an inner end");
    check(child(nested) == FAULT, "guarded: nested begins: closed after the last end");
    check(child(taken_while_open) == FAULT, "guarded: blocks taken while open: usable, then closed");
    if (FAULT == 1)                  /* with ASan, each block has a redzone after it */
        check(child(past_the_end) == FAULT, "guarded (ASan): a byte past a block is reported, open or not");
    check(child(out_of_order) == 128 + SIGABRT, "guarded: a block given back out of stack order stops it");
    sk_ctx *c = sk_ctx_new(SK_MEM_GUARDED);
    check(c && !sk_dev_take(c, (size_t)16 << 30), "guarded: a take past the region is NULL");
    sk_ctx_free(c);
}

static void kernel_scratch(sk_mem_space space) {
    enum { M = 40, K = 56, N = 48 };
    const char *name = sk_mem_space_name(space);
    int32_t a[M * K], b[K * N], want[M * N], got[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (i * 37) % 200 - 100;
    for (int i = 0; i < K * N; i++)
        b[i] = (i * 53) % 180 - 90;
    sk_dot_dims dd = {.ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
    int host_rc = sk_dot(NULL, SK_I32, SC_SHAPE(M, K), a, SC_SHAPE(K, N), b, &dd, want, NULL);
    sk_workspace *w = sk_workspace_new();   /* the host space's scratch: the thread's workspace */
    sk_workspace_bind(w);
    sk_ctx *c = sk_ctx_new(space);
    void *da = sk_dev_alloc(c, sizeof a), *db = sk_dev_alloc(c, sizeof b), *dout = sk_dev_alloc(c, sizeof got);
    void *first = sk_dev_take(c, 64);
    sk_dev_give(c, first, 64);
    size_t before = sk_dev_peak(c);
    int rc = sk_dev_write(c, da, a, sizeof a) || sk_dev_write(c, db, b, sizeof b);
    sk_launch_begin(c);
    rc = rc || sk_dot(c, SK_I32, SC_SHAPE(M, K), da, SC_SHAPE(K, N), db, &dd, dout, NULL);
    sk_launch_end(c);
    rc = rc || sk_dev_read(c, got, dout, sizeof got);
    check(host_rc == 0 && rc == 0 && memcmp(got, want, sizeof got) == 0,
          "%s: an i32 dot on the device's memory gives the host's result", name);
    check(sk_dev_peak(c) >= before + sizeof(int32_t) * M * N,
          "%s: its packed panels are the context's scratch (peak %zu bytes, was %zu)", name, sk_dev_peak(c), before);
    void *next = sk_dev_take(c, 64);   /* the host's workspace moves its block as it grows */
    sk_dev_give(c, next, 64);
    if (space == SK_MEM_GUARDED)
        check(next == first, "%s: and given back", name);
    sk_dev_free(c, dout, sizeof got), sk_dev_free(c, db, sizeof b), sk_dev_free(c, da, sizeof a);
    sk_ctx_free(c);
    sk_workspace_bind(NULL);
    sk_workspace_free(w);
}

/* Two runs of the same calls: a function's block, a nested call's past it
 * and a kernel's scratch.  The second run gets the memory the first
 * touched, the nested take's included (no new block to fault in), and
 * what is taken stays apart. */
static void runs_reuse_memory(void) {
    sk_workspace *w = sk_workspace_new();
    sk_workspace_bind(w);
    void *got[2][3];
    for (int run = 0; run < 2; run++) {
        char *outer = sk_workspace_take(1000), *nested = sk_workspace_take(3 << 20), *scratch = sk_workspace_take(64);
        got[run][0] = outer, got[run][1] = nested, got[run][2] = scratch;
        memset(outer, 1, 1000), memset(nested, 2, 3 << 20), memset(scratch, 3, 64);
        check(outer[999] == 1 && nested[0] == 2 && nested[(3 << 20) - 1] == 2 && scratch[0] == 3,
              "workspace run %d: nested takes do not overlap", run + 1);
        sk_workspace_give(scratch, 64), sk_workspace_give(nested, 3 << 20), sk_workspace_give(outer, 1000);
    }
    check(got[1][0] == got[0][0] && got[1][1] == got[0][1] && got[1][2] == got[0][2],
          "workspace: the second run takes the first run's memory (%p %p %p, was %p %p %p)", got[1][0], got[1][1],
          got[1][2], got[0][0], got[0][1], got[0][2]);
    sk_workspace_bind(NULL);
    sk_workspace_free(w);
}

int main(void) {
    from_env();
    runs_reuse_memory();
    round_trip(SK_MEM_HOST);
    round_trip(SK_MEM_GUARDED);
    faults();
    kernel_scratch(SK_MEM_HOST);
    kernel_scratch(SK_MEM_GUARDED);
    return tap_done();
}
