/* SHA-256 (FIPS 180-4), for the build cache's keys (cache.c): a key names
 * an executable by everything that went into it, so two different inputs
 * must never share one; a 256-bit cryptographic hash makes that safe where
 * a 64-bit FNV would not be over millions of builds. */
#ifndef SHARDC_SHA256_H
#define SHARDC_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bytes;          /* bytes hashed so far */
    uint8_t block[64];       /* the partial block */
    size_t fill;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
/* The digest as 64 lowercase hex digits and a NUL. */
void sha256_hex(Sha256 *s, char hex[65]);

#endif
