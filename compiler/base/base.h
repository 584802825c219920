/* Base utilities shared by every pass: arenas, growable arrays, interned
 * symbols and diagnostics.  Compiler memory lives in arenas so that a whole
 * compilation is freed at once and no pass owns a pointer it must free. */
#ifndef SHARDC_BASE_H
#define SHARDC_BASE_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- arena ---- */
typedef struct ArenaBlock ArenaBlock;
typedef struct {
    ArenaBlock *head;
    size_t used;     /* bytes handed out so far, for limits and stats */
} Arena;

void *arena_alloc(Arena *a, size_t size);           /* zeroed, 16-byte aligned */
void *arena_realloc(Arena *a, void *old, size_t old_size, size_t new_size);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

/* Growable array in an arena: `T *items; int n, cap;` fields of any struct.
 * VEC_PUSH returns a pointer to the new zeroed slot. */
void *vec_grow(Arena *a, void *items, int *cap, size_t elem);
#define VEC_PUSH(arena, items, n, cap)                                       \
    ((n) >= (cap) ? (void)((items) = vec_grow((arena), (items), &(cap),      \
                                              sizeof *(items))) : (void)0,   \
     &(items)[(n)++])

/* ---- source locations and diagnostics ---- */
typedef struct {
    int line, col;   /* 1-based; line 0 means "no location" */
} Loc;

typedef struct {
    const char *path;    /* as given on the command line */
    const char *text;    /* whole source, NUL-terminated */
    size_t len;
    FILE *out;           /* where diagnostics go; NULL silences them (fuzzing) */
    int errors;
    jmp_buf *bail;       /* sema jumps here after the first error */
} Diag;

/* Print `path:line:col: error: msg`, the source line and a caret. */
void diag_report(Diag *d, Loc loc, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Report an error and abandon the compilation (longjmp to d->bail). */
_Noreturn void diag_fatal(Diag *d, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- interned symbols ---- */
typedef struct {
    const char **names;  /* symbol id -> name */
    int n, cap;
    int *slots;          /* open-addressing hash: symbol id + 1, 0 = empty */
    int nslots;
    Arena *arena;
} Symtab;

int sym_intern(Symtab *t, const char *s, size_t len);
static inline const char *sym_name(const Symtab *t, int id) { return t->names[id]; }

#endif
