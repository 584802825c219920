/* What lib/host/npy.c (the .npy format) and lib/host/npz.c (.npz archives) share;
 * not installed. */
#ifndef SHARDC_NPY_INTERNAL_H
#define SHARDC_NPY_INTERNAL_H

#include "shardc_npy.h"

#include <stddef.h>
#include <stdint.h>

/* The message into err; returns -1. */
int npy_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Little-endian integers of `size` bytes. */
uint64_t npy_load_le(const unsigned char *b, int size);
void npy_store_le(unsigned char *b, uint64_t v, int size);

/* Entry e as a .npy file's bytes (malloc'd, *len of them), or NULL with a
 * message. */
unsigned char *npy_member_bytes(const sk_npz_entry *e, size_t *len, char *err, size_t errlen);

/* Where `member`'s .npy bytes lie in the archive fd at `path`: offset *at,
 * *size bytes.  Returns 0, or -1 with a message (what the archive holds,
 * when it has no such array). */
int npz_member_data(int fd, const char *path, const char *member, int64_t *at, int64_t *size, char *err,
                    size_t errlen);

#endif
