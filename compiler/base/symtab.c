#include "base.h"

#include <string.h>

static uint32_t hash(const char *s, size_t len) {
    uint32_t h = 2166136261u;  /* FNV-1a: short identifiers, good enough spread */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static void rehash(Symtab *t) {
    int nslots = t->nslots ? t->nslots * 2 : 256;
    int *slots = arena_alloc(t->arena, sizeof(int) * (size_t)nslots);
    for (int id = 0; id < t->n; id++) {
        const char *s = t->names[id];
        uint32_t i = hash(s, strlen(s)) & (uint32_t)(nslots - 1);
        while (slots[i])
            i = (i + 1) & (uint32_t)(nslots - 1);
        slots[i] = id + 1;
    }
    t->slots = slots;
    t->nslots = nslots;
}

int sym_intern(Symtab *t, const char *s, size_t len) {
    if (2 * (t->n + 1) > t->nslots)
        rehash(t);
    uint32_t mask = (uint32_t)(t->nslots - 1), i = hash(s, len) & mask;
    for (; t->slots[i]; i = (i + 1) & mask) {
        const char *name = t->names[t->slots[i] - 1];
        if (strncmp(name, s, len) == 0 && name[len] == '\0')
            return t->slots[i] - 1;
    }
    *VEC_PUSH(t->arena, t->names, t->n, t->cap) = arena_strndup(t->arena, s, len);
    t->slots[i] = t->n;
    return t->n - 1;
}
