/* The build cache of `shardc build` and `run` (docs/cli.md, "The build
 * cache"): executables kept under the SHA-256 of everything that went into
 * them (the generated C, the C compiler's command line, environment and
 * identity, the headers and libraries, shardc's version), so that building an
 * unchanged program again copies the executable instead of running cc.
 *
 * Layout: DIR/v2/KEY, one executable per entry behind a header that
 * records its size and SHA-256 (checked before every use), written to a
 * temporary file in the same directory, fsync'd and renamed into place, so
 * that a concurrent reader (tests build two at a time, MPI ranks) sees a
 * whole entry or none, and a crash leaves none.  An entry's modification time is when it was last used; beyond
 * the size bound the least recently used entries are removed. */
#ifndef SHARDC_CACHE_H
#define SHARDC_CACHE_H

#include "sha256.h"

#include <stdint.h>

typedef struct {
    int enabled;             /* 0: SHARDC_CACHE=0, --no-cache, or nowhere to keep it */
    const char *off;         /* why it is off, for `cache info` (NULL: on) */
    const char *dir;         /* the cache directory (entries in dir/v2) */
    int64_t max_bytes;       /* SHARDC_CACHE_MAX */
    int stats;               /* SHARDC_CACHE_STATS: say each hit and miss on stderr */
} CacheOptions;

/* Key ingredients, each written as a labelled line so that two different
 * lists of ingredients cannot hash the same bytes. */
void cache_key_str(Sha256 *key, const char *label, const char *value);
/* A file's path, size and modification time (nanoseconds), or "absent". */
void cache_key_file_identity(Sha256 *key, const char *label, const char *path);
/* Every *.h and *.def file of a directory, by identity, in name order. */
void cache_key_headers(Sha256 *key, const char *dir);
/* A file's bytes (not its path); returns 0, or -1 when it cannot be read.  *lines gets
 * its number of lines. */
int cache_key_file_content(Sha256 *key, const char *label, const char *path, long *lines);
/* What `argv` prints on standard output (cc --version); -1 when it fails. */
int cache_key_command_output(Sha256 *key, const char *label, char *const *argv);

/* Look up `key`: on a hit, check the entry (its size and SHA-256), copy the
 * executable to `out` (by a temporary file renamed over it), mark the entry
 * used and return 1; else 0.  A damaged or foreign entry is removed and
 * reported in one line on stderr, and counts as a miss. */
int cache_fetch(const CacheOptions *o, const char *key, const char *out);
/* Keep the executable `path` as the entry of `key`, then evict down to the
 * size bound.  Failing to cache is never an error: the build has its
 * result either way. */
void cache_store(const CacheOptions *o, const char *key, const char *path);

/* `shardc cache info|clean`, `shardc cache hash FILE`: returns an exit status. */
int cache_command(const CacheOptions *o, const char *what, const char *file);

#endif
