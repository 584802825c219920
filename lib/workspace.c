/* workspace.c: where a generated function's buffers live.
 *
 * A function takes one block for all its buffers on entry and gives it back
 * on return (codegen.c).  Without a workspace bound to the thread, that is a
 * malloc and a free per call.  The driver binds one workspace to each device
 * thread (lib/host/driver.c), and it keeps its memory between calls: the
 * second run of a program allocates nothing and touches no fresh page.
 * Fresh pages cost more than the work on them: 100 MiB of buffers per call
 * of the attention sample spent a third of its time in page faults.
 *
 * Calls nest (a function calling another, a kernel's scratch), so blocks are
 * taken and given back in stack order.  An outermost take grows the block
 * to fit; a nested take that does not fit is served by a chunk of its own,
 * which the workspace keeps when it is given back and serves again (the
 * smallest free one that fits).  A run then touches the memory the run
 * before touched: growing the block to the nested peak instead, as this
 * did, made the second run fault in a new block (the GPT bf16 step's
 * second run took 1.6 times the third's thread CPU time).  Large blocks
 * and chunks ask for transparent huge pages (fewer faults, fewer TLB
 * misses: the first step of the GPT sample's training, whose backward
 * pass takes 135 MB per device in a nested call, spent most of its time
 * faulting in 4 KiB pages). */
#define _DEFAULT_SOURCE   /* MADV_HUGEPAGE */
#include "internal.h"

#include <stdlib.h>
#include <sys/mman.h>

enum { ALIGN = 64, HUGE_PAGE = 2 << 20 };

enum { MAX_CHUNKS = 64 };   /* chunks kept; a take past them is allocated and freed each time */

typedef struct {
    char *p;
    size_t size;
    int taken;
} Chunk;

struct sk_workspace {
    char *block;
    size_t cap, top;      /* the block's size; its bytes taken, in stack order */
    size_t need, peak;    /* bytes taken now, in the block or not; the most ever */
    Chunk chunk[MAX_CHUNKS];
    int nchunks;
};

static _Thread_local sk_workspace *bound;

sk_workspace *sk_workspace_new(void) { return calloc(1, sizeof(sk_workspace)); }

void sk_workspace_free(sk_workspace *w) {
    if (!w)
        return;
    for (int i = 0; i < w->nchunks; i++)
        free(w->chunk[i].p);
    free(w->block);
    free(w);
}

void sk_workspace_bind(sk_workspace *w) { bound = w; }

static size_t rounded(size_t bytes) { return (bytes + ALIGN - 1) / ALIGN * ALIGN; }

/* bytes rounded up to what pages() allocates: whole huge pages when large. */
static size_t page_rounded(size_t bytes) {
    return bytes >= HUGE_PAGE ? (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : rounded(bytes ? bytes : 1);
}

/* A block for large arrays: on huge pages when it is large (a 4 KiB page
 * fault costs 4-6 us on these VMs: a first run of the attention sample
 * spent a second in them), for free(). */
static void *pages(size_t bytes) {
    size_t cap = page_rounded(bytes);
    void *p = aligned_alloc(cap >= HUGE_PAGE ? HUGE_PAGE : ALIGN, cap);
    if (p && cap >= HUGE_PAGE)
        madvise(p, cap, MADV_HUGEPAGE);   /* advice: failing changes nothing */
    return p;
}

void *sk_alloc_zeroed(size_t bytes) {
    void *p = pages(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

/* The block grown to `bytes` (its contents are not kept: nothing is taken). */
static void regrow(sk_workspace *w, size_t bytes) {
    free(w->block);
    w->block = pages(bytes);
    w->cap = w->block ? page_rounded(bytes) : 0;
}

/* A nested take past the block: the smallest free chunk that fits, else a
 * new one, kept for the next run. */
static void *take_chunk(sk_workspace *w, size_t bytes) {
    Chunk *best = NULL;
    for (int i = 0; i < w->nchunks; i++) {
        Chunk *c = &w->chunk[i];
        if (!c->taken && c->size >= bytes && (!best || c->size < best->size))
            best = c;
    }
    if (!best && w->nchunks < MAX_CHUNKS) {
        char *p = pages(bytes);
        if (!p)
            return NULL;
        best = &w->chunk[w->nchunks++];
        *best = (Chunk){p, page_rounded(bytes), 0};
    }
    if (!best)
        return pages(bytes);
    best->taken = 1;
    return best->p;
}

void *sk_workspace_take(size_t bytes) {
    sk_workspace *w = bound;
    bytes = rounded(bytes ? bytes : 1);
    if (!w)
        return aligned_alloc(ALIGN, bytes);
    /* An outermost take knows what its whole block needs (codegen takes
     * one per function): it gets the block at once, with huge pages. */
    if (w->need == 0 && w->cap < bytes)
        regrow(w, bytes);
    void *p;
    if (w->top + bytes <= w->cap) {
        p = w->block + w->top;
        w->top += bytes;
    } else if (!(p = take_chunk(w, bytes)))
        return NULL;
    w->need += bytes;
    w->peak = w->need > w->peak ? w->need : w->peak;
    return p;
}

size_t sk_workspace_peak(void) { return bound ? bound->peak : 0; }

void sk_workspace_give(void *p, size_t bytes) {
    sk_workspace *w = bound;
    if (!p)
        return;
    bytes = rounded(bytes ? bytes : 1);
    if (w)
        w->need -= bytes;
    if (w && w->block && (char *)p >= w->block && (char *)p < w->block + w->cap) {
        w->top -= bytes;
        return;
    }
    for (int i = 0; w && i < w->nchunks; i++)
        if (w->chunk[i].p == p) {
            w->chunk[i].taken = 0;
            return;
        }
    free(p);
}
