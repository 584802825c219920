/* shardc_rng.h: the kinds of random draw, numbered alike by the IR's op
 * `random` (its attribute, compiler/ir/ops.def) and the kernel library's
 * sk_random (shardc_lib.h).  No includes, so that the compiler's front end
 * reads it without the runtime's headers. */
#ifndef SHARDC_RNG_H
#define SHARDC_RNG_H

typedef enum {
    SK_RNG_WORD0, SK_RNG_WORD1, SK_RNG_BITS, SK_RNG_UNIFORM, SK_RNG_NORMAL, SK_RNG_TRUNCATED_NORMAL,
    SK_RNG_RANDINT, SK_RNG_KIND_COUNT
} sk_rng_kind;

#endif
