/* device.c: a device's memory space and kernel context (shardc_lib.h).
 *
 * Generated code reaches a device's arrays only through these calls, so a
 * backend whose memory the host cannot dereference (a GPU's) fills in this
 * file and nothing else of the generated C changes.  Two spaces exist:
 * host memory, where every call is what the code did before it had them
 * (memcpy, the thread's workspace), and the guarded space, a test fixture
 * that proves the claim on this machine: each device's arrays lie in a
 * region mapped PROT_NONE, opened (read-write) only while work runs on the
 * device (sk_launch_begin to sk_launch_end, which nest) and inside the
 * copy calls.  A host access anywhere else faults.
 *
 * Peers read and write a device's buffers inside a collective, between
 * that device's start and done, and generated code opens its region from
 * start to done; the runtime guarantees no peer touches the buffers once
 * the device's done returns (runtime/threads_coll.c).  So a region is only
 * ever opened and closed by its own device's thread, or by the driver's
 * thread when no device runs: no lock.
 *
 * The guarded region is one reservation: a function's blocks (sk_dev_take,
 * in stack order) from its start up, the driver's blocks (sk_dev_alloc)
 * from its end down.
 *
 * Built with ASan, the region is closed by poisoning it instead: the same
 * accesses are reported (use-after-poison), at the cost of writing shadow
 * bytes rather than two system calls and their TLB flushes per bracket,
 * and opening unpoisons only the live blocks, so the 64 bytes after each
 * stay poisoned as a redzone. */
#define _DEFAULT_SOURCE   /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define GUARD_BY_POISON 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GUARD_BY_POISON 1
#endif
#endif
#ifdef GUARD_BY_POISON
#include <sanitizer/asan_interface.h>
#define REDZONE 64
#else
#define REDZONE 0
#endif

enum { ALIGN = 64, PAGE = 4096, MAX_BLOCKS = 4096 };
#define GUARDED_BYTES ((size_t)8 << 30)   /* reserved, not committed: pages appear when written */

struct sk_ctx {
    sk_mem_space space;
    char *base;              /* guarded: the region */
    size_t cap, top, bottom; /* its size; the stack's top; the lowest allocated byte */
    size_t high, peak;       /* the stack's highest top, in whole pages and in bytes */
    int open;                /* begins not yet ended, and copy calls running */
#ifdef GUARD_BY_POISON
    int nlive;               /* the blocks taken or allocated and not given back */
    struct { size_t at, bytes; } live[MAX_BLOCKS];
#endif
};

static const char *const space_name[] = {"host", "guarded"};

const char *sk_mem_space_name(sk_mem_space space) {
    return (unsigned)space < 2 ? space_name[space] : "?";
}

int sk_mem_space_from_env(sk_mem_space *space, char *err, size_t errlen) {
    const char *v = getenv("SHARDC_DEVICE_MEMORY");
    *space = SK_MEM_HOST;
    if (!v || !*v)
        return 0;
    for (int s = 0; s < 2; s++)
        if (strcmp(v, space_name[s]) == 0) {
            *space = (sk_mem_space)s;
            return 0;
        }
    snprintf(err, errlen, "SHARDC_DEVICE_MEMORY=%s: expected host or guarded", v);
    return -1;
}

sk_ctx *sk_ctx_new(sk_mem_space space) {
    sk_ctx *c = calloc(1, sizeof *c);
    if (!c || space == SK_MEM_HOST)
        return c;
    c->space = space;
    c->base = mmap(NULL, GUARDED_BYTES, REDZONE ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (c->base == MAP_FAILED) {
        free(c);
        return NULL;
    }
    c->cap = c->bottom = GUARDED_BYTES;
    return c;
}

void sk_ctx_free(sk_ctx *c) {
    if (c && c->base)
        munmap(c->base, c->cap);
    free(c);
}

static int guarded(const sk_ctx *c) { return c && c->space == SK_MEM_GUARDED; }

/* A bug in the caller, not a condition to report: the fixture stops at it. */
static void misuse(const char *what) {
    fprintf(stderr, "shardc: guarded device memory: %s\n", what);
    abort();
}

#ifdef GUARD_BY_POISON
static void protect(sk_ctx *c, int prot) {
    if (prot == PROT_NONE) {
        ASAN_POISON_MEMORY_REGION(c->base, c->high);
        ASAN_POISON_MEMORY_REGION(c->base + c->bottom, c->cap - c->bottom);
        return;
    }
    for (int i = 0; i < c->nlive; i++)
        ASAN_UNPOISON_MEMORY_REGION(c->base + c->live[i].at, c->live[i].bytes);
}

/* Bytes newly in use: a fresh mapping is addressable, so they start closed. */
static void grown(sk_ctx *c, size_t at, size_t bytes) { ASAN_POISON_MEMORY_REGION(c->base + at, bytes); }

/* A block is live from its take or allocation: opened now if the region is. */
static void live_add(sk_ctx *c, size_t at, size_t bytes) {
    if (c->nlive == MAX_BLOCKS)
        misuse("more live blocks than the fixture tracks");
    c->live[c->nlive].at = at;
    c->live[c->nlive++].bytes = bytes;
    if (c->open)
        ASAN_UNPOISON_MEMORY_REGION(c->base + at, bytes);
}

static void live_remove(sk_ctx *c, size_t at) {
    for (int i = c->nlive - 1; i >= 0; i--)
        if (c->live[i].at == at) {
            ASAN_POISON_MEMORY_REGION(c->base + at, c->live[i].bytes);
            c->live[i] = c->live[--c->nlive];
            return;
        }
}
#else
/* Only the parts in use change: mprotect's cost grows with the range (a
 * gigabyte's took 100 us). */
static void protect(sk_ctx *c, int prot) {
    if ((c->high && mprotect(c->base, c->high, prot) != 0) ||
        (c->bottom < c->cap && mprotect(c->base + c->bottom, c->cap - c->bottom, prot) != 0))
        misuse("mprotect failed");
}

/* Bytes newly in use take the region's state (bytes freed and in use
 * again may have been left open). */
static void grown(sk_ctx *c, size_t at, size_t bytes) {
    if (mprotect(c->base + at, bytes, c->open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
        misuse("mprotect failed");
}

static void live_add(sk_ctx *c, size_t at, size_t bytes) { (void)c, (void)at, (void)bytes; }
static void live_remove(sk_ctx *c, size_t at) { (void)c, (void)at; }
#endif

void sk_launch_begin(sk_ctx *c) {
    if (guarded(c) && c->open++ == 0)
        protect(c, PROT_READ | PROT_WRITE);
}

void sk_launch_end(sk_ctx *c) {
    if (!guarded(c))
        return;
    if (c->open <= 0)
        misuse("sk_launch_end without sk_launch_begin");
    if (--c->open == 0)
        protect(c, PROT_NONE);
}

static size_t rounded(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

/* What a block of `bytes` takes of the region: at least one byte, its
 * redzone, rounded up to `to`. */
static size_t block_span(size_t bytes, size_t to) { return rounded((bytes ? bytes : 1) + REDZONE, to); }

void *sk_dev_take(sk_ctx *c, size_t bytes) {
    if (!guarded(c))
        return sk_workspace_take(bytes);
    size_t span = block_span(bytes, ALIGN);
    if (span > c->bottom - c->top)
        return NULL;
    c->top += span;
    c->peak = c->top > c->peak ? c->top : c->peak;
    if (c->top > c->high) {
        size_t high = rounded(c->top, PAGE);
        grown(c, c->high, high - c->high);
        c->high = high;
    }
    live_add(c, c->top - span, bytes ? bytes : 1);
    return c->base + c->top - span;
}

size_t sk_dev_peak(const sk_ctx *c) { return guarded(c) ? c->peak : sk_workspace_peak(); }

void sk_dev_give(sk_ctx *c, void *p, size_t bytes) {
    if (!guarded(c)) {
        sk_workspace_give(p, bytes);
        return;
    }
    size_t span = block_span(bytes, ALIGN);
    if (!p || (char *)p != c->base + c->top - span)
        misuse("a block given back out of stack order");
    live_remove(c, c->top - span);
    c->top -= span;
}

void *sk_dev_alloc(sk_ctx *c, size_t bytes) {
    if (!guarded(c))
        return sk_alloc_zeroed(bytes);
    size_t span = block_span(bytes, PAGE);
    if (span > c->bottom - c->top)
        return NULL;
    c->bottom -= span;
    grown(c, c->bottom, span);
    live_add(c, c->bottom, bytes ? bytes : 1);
    sk_launch_begin(c);      /* a block freed and taken again is not fresh */
    memset(c->base + c->bottom, 0, bytes);
    sk_launch_end(c);
    return c->base + c->bottom;
}

/* Only the lowest block's bytes come back (the driver frees its blocks
 * together, at the end); the others are the region's until it goes. */
void sk_dev_free(sk_ctx *c, void *p, size_t bytes) {
    if (!guarded(c)) {
        free(p);
        return;
    }
    if (!p)
        return;
    live_remove(c, (size_t)((char *)p - c->base));
    if ((char *)p == c->base + c->bottom)
        c->bottom += block_span(bytes, PAGE);
}

/* On these spaces the three directions are one copy with the region open;
 * a device backend's differ (docs/backends.md). */
static int copy_open(sk_ctx *c, void *dst, const void *src, size_t bytes) {
    sk_launch_begin(c);
    memmove(dst, src, bytes);
    sk_launch_end(c);
    return 0;
}

int sk_dev_read(sk_ctx *c, void *host, const void *dev, size_t bytes) { return copy_open(c, host, dev, bytes); }
int sk_dev_write(sk_ctx *c, void *dev, const void *host, size_t bytes) { return copy_open(c, dev, host, bytes); }
int sk_dev_copy(sk_ctx *c, void *dst, const void *src, size_t bytes) { return copy_open(c, dst, src, bytes); }
