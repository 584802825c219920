/* .npz archives (a zip of .npy members, as np.savez writes them): finding a
 * member's bytes for lib/host/npy.c's reader, and writing archives.  The .npy
 * format itself is lib/host/npy.c's. */
#include "npy_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- .npz archives ----
 * np.savez writes a zip archive of NAME.npy members, stored (not
 * compressed), with zip64 extra fields; np.savez_compressed deflates them,
 * which would need zlib: those are refused with the fix.  Reading finds
 * the central directory from the end record, then the member's local
 * header, whose data is read as a .npy file at that offset. */

enum {
    ZIP_EOCD = 0x06054b50, ZIP64_LOCATOR = 0x07064b50, ZIP64_EOCD = 0x06064b50, ZIP_CENTRAL = 0x02014b50,
    ZIP_LOCAL = 0x04034b50, ZIP_EOCD_MAX = 22 + 65535, ZIP_CD_MAX = 64 << 20,
};

static int pread_all(int fd, void *buf, size_t n, int64_t at) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(at + (int64_t)got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

typedef struct {
    int64_t cd_at, cd_size, entries;
} ZipDir;

/* The end of central directory record (and its zip64 twin). */
static int zip_dir(int fd, int64_t size, ZipDir *z) {
    int64_t tail = size < ZIP_EOCD_MAX ? size : ZIP_EOCD_MAX;
    unsigned char *b = malloc((size_t)tail + 1);
    int64_t at = -1;
    if (b && pread_all(fd, b, (size_t)tail, size - tail) == 0)
        for (int64_t i = tail - 22; i >= 0 && at < 0; i--)
            at = npy_load_le(b + i, 4) == ZIP_EOCD ? i : -1;
    if (at < 0) {
        free(b);
        return -1;
    }
    z->entries = (int64_t)npy_load_le(b + at + 10, 2);
    z->cd_size = (int64_t)npy_load_le(b + at + 12, 4);
    z->cd_at = (int64_t)npy_load_le(b + at + 16, 4);
    unsigned char loc[20], e64[56];
    int zip64 = at >= 20 && npy_load_le(b + at - 20, 4) == ZIP64_LOCATOR;
    if (zip64)
        memcpy(loc, b + at - 20, 20);
    free(b);
    if (zip64) {
        if (pread_all(fd, e64, 56, (int64_t)npy_load_le(loc + 8, 8)) || npy_load_le(e64, 4) != ZIP64_EOCD)
            return -1;
        z->entries = (int64_t)npy_load_le(e64 + 32, 8);
        z->cd_size = (int64_t)npy_load_le(e64 + 40, 8);
        z->cd_at = (int64_t)npy_load_le(e64 + 48, 8);
    }
    return z->cd_at >= 0 && z->cd_size >= 0 && z->cd_at + z->cd_size <= size && z->cd_size <= ZIP_CD_MAX ? 0 : -1;
}

typedef struct {
    int method;
    int64_t size, local_at;
} ZipEntry;

/* A central directory entry's sizes and offset, from its zip64 extra field
 * where the 32-bit ones are 0xffffffff. */
static void zip_entry(const unsigned char *e, const unsigned char *extra, size_t extra_len, ZipEntry *z) {
    uint64_t csize = npy_load_le(e + 20, 4), usize = npy_load_le(e + 24, 4), off = npy_load_le(e + 42, 4);
    for (size_t p = 0; p + 4 <= extra_len;) {
        size_t id = (size_t)npy_load_le(extra + p, 2), n = (size_t)npy_load_le(extra + p + 2, 2), q = p + 4;
        if (id == 1) {
            if (usize == 0xffffffffu && q + 8 <= p + 4 + n && q + 8 <= extra_len)
                usize = npy_load_le(extra + q, 8), q += 8;
            if (csize == 0xffffffffu && q + 8 <= p + 4 + n && q + 8 <= extra_len)
                csize = npy_load_le(extra + q, 8), q += 8;
            if (off == 0xffffffffu && q + 8 <= p + 4 + n && q + 8 <= extra_len)
                off = npy_load_le(extra + q, 8);
        }
        p += 4 + n;
    }
    (void)usize;
    z->method = (int)npy_load_le(e + 10, 2);
    z->size = (int64_t)csize;
    z->local_at = (int64_t)off;
}

/* Find NAME.npy (or NAME) in the central directory; `names` gets the
 * archive's array names for the message when it is missing. */
static int zip_lookup(const unsigned char *cd, int64_t cd_size, int64_t entries, const char *member, ZipEntry *z,
                      char *names, size_t cap) {
    size_t mlen = strlen(member), w = 0;
    names[0] = '\0';
    int64_t p = 0;
    for (int64_t k = 0; k < entries && p + 46 <= cd_size && npy_load_le(cd + p, 4) == ZIP_CENTRAL; k++) {
        size_t nlen = (size_t)npy_load_le(cd + p + 28, 2), xlen = (size_t)npy_load_le(cd + p + 30, 2),
               clen = (size_t)npy_load_le(cd + p + 32, 2);
        if (p + 46 + (int64_t)(nlen + xlen + clen) > cd_size)
            break;
        const char *name = (const char *)cd + p + 46;
        size_t stem = nlen >= 4 && memcmp(name + nlen - 4, ".npy", 4) == 0 ? nlen - 4 : nlen;
        if (stem == mlen && memcmp(name, member, mlen) == 0) {
            zip_entry(cd + p, cd + p + 46 + nlen, xlen, z);
            return 0;
        }
        if (w + stem + 4 < cap)
            w += (size_t)snprintf(names + w, cap - w, "%s%.*s", w ? ", " : "", (int)stem, name);
        p += 46 + (int64_t)(nlen + xlen + clen);
    }
    return -1;
}

/* The central directory entry of `member` in the archive fd (of `size`
 * bytes), or -1 with a message naming what the archive holds. */
static int zip_find(int fd, const char *path, const char *member, int64_t size, ZipEntry *z, char *err,
                    size_t errlen) {
    ZipDir zd;
    if (zip_dir(fd, size, &zd))
        return npy_fail(err, errlen, "'%s' is not a .npz archive (no zip directory at its end)", path);
    unsigned char *cd = malloc((size_t)zd.cd_size + 1);
    char names[512];
    int rc = !cd || pread_all(fd, cd, (size_t)zd.cd_size, zd.cd_at)
                 ? npy_fail(err, errlen, "cannot read '%s': %s", path, cd ? strerror(errno ? errno : EIO) : "out of memory")
             : zip_lookup(cd, zd.cd_size, zd.entries, member, z, names, sizeof names)
                 ? npy_fail(err, errlen, "'%s' has no array named '%s' (it has: %s)", path, member,
                            names[0] ? names : "none")
             : 0;
    free(cd);
    return rc;
}

/* A regular file's size, or -1. */
static int64_t regular_size(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
}

/* The .npy header of a member must end inside the member: the .npy reader
 * reads the header by its declared length, and one cut off by the member's
 * end would take the zip records after it for its text. */
static int member_header_fits(int fd, const char *path, const char *member, int64_t at, int64_t size, char *err,
                              size_t errlen) {
    unsigned char pre[12] = {0};
    size_t n = size < 12 ? (size_t)size : 12;
    if (pread_all(fd, pre, n, at))
        return npy_fail(err, errlen, "'%s' is a damaged .npz archive (array '%s')", path, member);
    if (memcmp(pre, "\x93NUMPY", n < 6 ? n : 6) != 0)
        return 0;                    /* not .npy: the .npy reader says so */
    int lenbytes = n > 6 && pre[6] >= 2 ? 4 : 2;
    if (8 + lenbytes > size)
        return npy_fail(err, errlen, "'%s' array '%s' is cut off inside its header (a damaged .npz archive)", path,
                        member);
    int64_t end = 8 + lenbytes + (int64_t)npy_load_le(pre + 8, lenbytes);
    if (end > size)
        return npy_fail(err, errlen, "'%s' array '%s' is cut off inside its header: it declares %lld bytes of header, "
                        "the member has %lld (a damaged .npz archive)", path, member, (long long)end,
                        (long long)size);
    return 0;
}

int npz_member_data(int fd, const char *path, const char *member, int64_t *at, int64_t *size, char *err,
                    size_t errlen) {
    int64_t file_size = regular_size(fd);
    unsigned char local[30];
    ZipEntry z = {0, 0, 0};
    if (file_size < 0)
        return npy_fail(err, errlen, "cannot read the .npz archive '%s': not a regular file", path);
    if (zip_find(fd, path, member, file_size, &z, err, errlen))
        return -1;
    if (z.method != 0)
        return npy_fail(err, errlen, "'%s': array '%s' is compressed (zip method %d); shardc reads archives written by "
                        "np.savez, not np.savez_compressed", path, member, z.method);
    if (pread_all(fd, local, 30, z.local_at) || npy_load_le(local, 4) != ZIP_LOCAL)
        return npy_fail(err, errlen, "'%s' is a damaged .npz archive (array '%s')", path, member);
    *at = z.local_at + 30 + (int64_t)npy_load_le(local + 26, 2) + (int64_t)npy_load_le(local + 28, 2);
    *size = z.size;
    if (*at + z.size > file_size)
        return npy_fail(err, errlen, "'%s' is a damaged .npz archive (array '%s')", path, member);
    return member_header_fits(fd, path, member, *at, z.size, err, errlen);
}

int sk_npz_has(const char *path, const char *member) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    char err[600];
    ZipEntry z;
    int64_t size = regular_size(fd);
    int has = size >= 0 && zip_find(fd, path, member, size, &z, err, sizeof err) == 0;
    close(fd);
    return has;
}

/* The ':' of the last ".npz:" in file, or NULL. */
static const char *member_colon(const char *file) {
    const char *colon = NULL;
    for (const char *p = strstr(file, ".npz:"); p; p = strstr(p + 1, ".npz:"))
        colon = p + 4;
    return colon;
}

int sk_npy_record_file(const char *file, const char *record, const char *field, char *out, size_t cap) {
    size_t n = strlen(file);
    const char *colon = member_colon(file);
    int w;
    if (n >= 4 && strcmp(file + n - 4, ".npz") == 0) {
        char full[4096];
        snprintf(full, sizeof full, "%s.%s", record, field);
        w = snprintf(out, cap, "%s:%s", file, sk_npz_has(file, full) ? full : field);
    } else if (colon && colon[1])
        w = snprintf(out, cap, "%s.%s", file, field);
    else
        return -1;
    return w < 0 || (size_t)w >= cap ? -2 : 0;
}

int sk_npy_split_npz(const char *file, const char *name, char *path, size_t cap, const char **member) {
    size_t n = strlen(file);
    const char *colon = member_colon(file);
    *member = NULL;
    if (n >= 4 && strcmp(file + n - 4, ".npz") == 0)
        *member = name;
    else if (colon && colon[1])
        *member = colon + 1, n = (size_t)(colon - file);
    if ((size_t)snprintf(path, cap, "%.*s", (int)n, file) >= cap)
        return -1;
    return *member != NULL;
}

/* ---- writing .npz ---- */

static uint32_t crc32_of(const unsigned char *p, size_t n) {
    uint32_t table[256];                 /* the reflected CRC-32 of zip (polynomial 0xedb88320) */
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* A zip header: the fields after the signature, each 2 or 4 bytes. */
static size_t zip_header(unsigned char *b, uint32_t sig, const uint32_t *fields, const int *sizes, int n) {
    size_t w = 4;
    npy_store_le(b, sig, 4);
    for (int i = 0; i < n; i++) {
        npy_store_le(b + w, fields[i], sizes[i]);
        w += (size_t)sizes[i];
    }
    return w;
}

typedef struct {
    uint32_t crc, size, at;
    const char *name;
} Member;

static int write_member(FILE *f, Member *m, const sk_npz_entry *e, int64_t *at, char *err, size_t errlen) {
    size_t len = 0, nlen = strlen(e->name) + 4;
    unsigned char *b = npy_member_bytes(e, &len, err, errlen), h[64];
    if (!b)
        return -1;
    if (*at + (int64_t)len + 64 + (int64_t)nlen >= 0xffffffffll) {
        free(b);
        return npy_fail(err, errlen, "the results are over 4 GiB, more than a .npz archive without zip64 holds: "
                    "write a directory instead");
    }
    *m = (Member){crc32_of(b, len), (uint32_t)len, (uint32_t)*at, e->name};
    /* version 20, no flags, stored, no time (1980-01-01), crc, sizes, name length, no extra */
    static const int sizes[] = {2, 2, 2, 2, 2, 4, 4, 4, 2, 2};
    uint32_t fields[] = {20, 0, 0, 0, 0x21, m->crc, m->size, m->size, (uint32_t)nlen, 0};
    size_t hl = zip_header(h, ZIP_LOCAL, fields, sizes, 10);
    int ok = fwrite(h, 1, hl, f) == hl && fprintf(f, "%s.npy", e->name) == (int)nlen && fwrite(b, 1, len, f) == len;
    free(b);
    *at += (int64_t)(hl + nlen + len);
    return ok ? 0 : npy_fail(err, errlen, "%s", strerror(errno ? errno : EIO));
}

static int write_directory(FILE *f, const Member *m, int n, int64_t at) {
    static const int cs[] = {2, 2, 2, 2, 2, 2, 4, 4, 4, 2, 2, 2, 2, 2, 4, 4};
    static const int es[] = {2, 2, 2, 2, 4, 4, 2};
    unsigned char h[64];
    uint32_t cd_size = 0;
    for (int i = 0; i < n; i++) {
        uint32_t nlen = (uint32_t)strlen(m[i].name) + 4;
        uint32_t fields[] = {20, 20, 0, 0, 0, 0x21, m[i].crc, m[i].size, m[i].size, nlen, 0, 0, 0, 0, 0, m[i].at};
        size_t hl = zip_header(h, ZIP_CENTRAL, fields, cs, 16);
        if (fwrite(h, 1, hl, f) != hl || fprintf(f, "%s.npy", m[i].name) != (int)nlen)
            return -1;
        cd_size += (uint32_t)(hl + nlen);
    }
    uint32_t end[] = {0, 0, (uint32_t)n, (uint32_t)n, cd_size, (uint32_t)at, 0};
    size_t hl = zip_header(h, ZIP_EOCD, end, es, 7);
    return fwrite(h, 1, hl, f) == hl ? 0 : -1;
}

int sk_npz_write(const char *path, const sk_npz_entry *e, int n, char *err, size_t errlen) {
    char tmp[4096 + 32], why[256] = "";
    Member *m = calloc((size_t)n + 1, sizeof *m);
    if (!m)
        return npy_fail(err, errlen, "out of memory writing '%s'", path);
    if (sk_temp_path(path, tmp, sizeof tmp)) {
        free(m);
        return npy_fail(err, errlen, "cannot write '%s': the path is too long", path);
    }
    errno = 0;
    FILE *f = fopen(tmp, "wb");
    int64_t at = 0;
    int rc = f ? 0 : npy_fail(why, sizeof why, "%s", strerror(errno));
    for (int i = 0; i < n && !rc; i++)
        rc = write_member(f, &m[i], &e[i], &at, why, sizeof why);
    if (!rc && write_directory(f, m, n, at))
        rc = npy_fail(why, sizeof why, "%s", strerror(errno ? errno : EIO));
    if (f && sk_close_synced(f) != 0 && !rc)           /* on the disk before it takes the name */
        rc = npy_fail(why, sizeof why, "%s", strerror(errno ? errno : EIO));
    if (!rc && sk_commit(tmp, path) != 0)
        rc = npy_fail(why, sizeof why, "%s", strerror(errno));
    if (rc) {
        npy_fail(err, errlen, "cannot write '%s': %s", path, why);
        remove(tmp);
    }
    free(m);
    return rc;
}
