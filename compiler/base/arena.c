#include "base.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct ArenaBlock {
    ArenaBlock *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

enum { BLOCK_MIN = 64 * 1024 };

void *arena_alloc(Arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    ArenaBlock *b = a->head;
    if (!b || b->size - b->used < size) {
        size_t cap = size > BLOCK_MIN ? size : BLOCK_MIN;
        b = malloc(sizeof *b + cap);
        if (!b) {
            fputs("shardc: out of memory\n", stderr);
            abort();
        }
        b->size = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    a->used += size;
    memset(p, 0, size);
    return p;
}

void *arena_realloc(Arena *a, void *old, size_t old_size, size_t new_size) {
    void *p = arena_alloc(a, new_size);
    if (old_size)
        memcpy(p, old, old_size < new_size ? old_size : new_size);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    return p;
}

char *arena_printf(Arena *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void arena_free(Arena *a) {
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->used = 0;
}

/* Doubling keeps pushes amortized O(1); the old block stays in the arena
 * until the arena dies, which at most doubles the space used. */
void *vec_grow(Arena *a, void *items, int *cap, size_t elem) {
    int ncap = *cap ? *cap * 2 : 8;
    void *p = arena_realloc(a, items, (size_t)*cap * elem, (size_t)ncap * elem);
    *cap = ncap;
    return p;
}
