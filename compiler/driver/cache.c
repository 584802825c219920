/* The build cache (cache.h).  Every operation tolerates other shardc
 * processes working on the same directory at the same time: entries appear
 * by rename, disappear by unlink, and a reader that loses a race (an entry
 * evicted between lookup and link) simply builds. */
#include "cache.h"
#include "child.h"

#include "../../lib/shardc_npy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { STALE_TEMP_SECONDS = 3600 };   /* a temporary file this old was left by a killed shardc */
/* The entries' folder, named by their format: v1 held bare executables,
 * which a shardc of before v2 would still link and run, so the two never
 * share a folder. */
#define LAYOUT "v2"

void cache_key_str(Sha256 *key, const char *label, const char *value) {
    sha256_update(key, label, strlen(label));
    sha256_update(key, "=", 1);
    sha256_update(key, value ? value : "(unset)", strlen(value ? value : "(unset)"));
    sha256_update(key, "\n", 1);
}

void cache_key_file_identity(Sha256 *key, const char *label, const char *path) {
    struct stat st;
    char line[PATH_MAX + 128];
    if (stat(path, &st) != 0)
        snprintf(line, sizeof line, "%s absent", path);
    else
        snprintf(line, sizeof line, "%s %jd %jd.%09ld", path, (intmax_t)st.st_size, (intmax_t)st.st_mtim.tv_sec,
                 (long)st.st_mtim.tv_nsec);
    cache_key_str(key, label, line);
}

static int is_header(const struct dirent *e) {
    size_t n = strlen(e->d_name);
    return (n > 2 && strcmp(e->d_name + n - 2, ".h") == 0) || (n > 4 && strcmp(e->d_name + n - 4, ".def") == 0);
}

void cache_key_headers(Sha256 *key, const char *dir) {
    struct dirent **names;
    int n = scandir(dir, &names, is_header, alphasort);
    cache_key_str(key, "header-dir", dir);
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        cache_key_file_identity(key, "header", path);
        free(names[i]);
    }
    if (n >= 0)
        free(names);
}

int cache_key_file_content(Sha256 *key, const char *label, const char *path, long *lines) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    cache_key_str(key, label, "");          /* not the path: a temporary directory's */
    char buf[1 << 16];
    *lines = 0;
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) {
        sha256_update(key, buf, n);
        for (char *p = buf; (p = memchr(p, '\n', (size_t)(buf + n - p))); p++)
            ++*lines;
    }
    int bad = ferror(f);
    fclose(f);
    return bad ? -1 : 0;
}

int cache_key_command_output(Sha256 *key, const char *label, char *const *argv) {
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);               /* child.h: stop signals reach it */
        int null = open("/dev/null", O_WRONLY);
        dup2(fd[1], STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        close(fd[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    if (pid > 0)
        child_own(pid);
    cache_key_str(key, label, argv[0]);
    char buf[4096];
    for (ssize_t n; pid > 0 && ((n = read(fd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR));)
        if (n > 0)
            sha256_update(key, buf, (size_t)n);
    close(fd[0]);
    int st = 0;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (pid > 0)
        child_disown();
    return pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* mkdir -p, for a cache directory that may not exist yet (~/.cache). */
static int make_dirs(const char *dir) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(path, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void entries_dir(const CacheOptions *o, char *buf, size_t cap) { snprintf(buf, cap, "%s/" LAYOUT, o->dir); }

static void entry_path(const CacheOptions *o, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/" LAYOUT "/%s", o->dir, key);
}

/* An entry's file: a header of ENTRY_HEADER bytes (the format's name, the
 * key, the executable's size and SHA-256, padded with spaces), then the
 * executable.  Checked in full before every use: an entry emptied,
 * truncated, altered, replaced by another file or copied from another
 * key's name is never run. */
enum { ENTRY_HEADER = 256 };
static const char entry_magic[] = "shardc cache entry 1\n";

/* Write all of `n` bytes; 0, or -1. */
static int write_all(int fd, const void *buf, size_t n) {
    for (const char *p = buf; n > 0;) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Copy what is left of `in` to `out`, hashing it; *bytes gets the count.
 * 0, or -1 on a read or write error. */
static int copy_hashing(int in, int out, Sha256 *s, int64_t *bytes) {
    char buf[1 << 16];
    *bytes = 0;
    for (ssize_t n;;) {
        n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        sha256_update(s, buf, (size_t)n);
        if (write_all(out, buf, (size_t)n))
            return -1;
        *bytes += n;
    }
}

/* A temporary file next to `to` (same directory, so that rename is
 * atomic), mode 0755 less the umask; `tmp` gets its name.  An fd, or -1. */
static int temp_beside(const char *to, char *tmp, size_t cap) {
    const char *slash = strrchr(to, '/');
    int dir_len = slash ? (int)(slash - to + 1) : 0;
    snprintf(tmp, cap, "%.*s.tmp-XXXXXX", dir_len, to);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0755 & ~mask);
    return fd;
}

/* Parse an entry's header; returns NULL, or what is wrong with it. */
static const char *parse_header(const char *h, size_t got, const char *key, int64_t *size, char hash[65]) {
    char k[65], fmt_line[64];
    long long n;
    if (got == 0)
        return "empty";
    if (got < ENTRY_HEADER || memcmp(h, entry_magic, sizeof entry_magic - 1) != 0)
        return "not an entry of this shardc";
    snprintf(fmt_line, sizeof fmt_line, "key %%64s\nsize %%lld\nsha256 %%64s");
    if (sscanf(h + sizeof entry_magic - 1, fmt_line, k, &n, hash) != 3 || n < 0)
        return "not an entry of this shardc";
    if (strcmp(k, key) != 0)
        return "the entry of another key";
    *size = n;
    return NULL;
}

/* Say in one line what was wrong with an entry, which is then removed. */
static void report_damaged(const char *key, const char *why) {
    fprintf(stderr, "shardc: cache entry %.12s... was damaged (%s): removed, building again\n", key, why);
}

int cache_fetch(const CacheOptions *o, const char *key, const char *out) {
    char entry[PATH_MAX], tmp[PATH_MAX + 64], header[ENTRY_HEADER + 1] = "", hash[65] = "", got_hash[65];
    entry_path(o, key, entry, sizeof entry);
    int in = open(entry, O_RDONLY), fd = -1, hit = 0;
    struct stat st;
    const char *why = NULL;
    char detail[160];
    int64_t size = 0, copied = 0;
    if (in >= 0 && fstat(in, &st) == 0) {
        ssize_t got = 0;
        for (ssize_t n; got < ENTRY_HEADER && (n = read(in, header + got, (size_t)(ENTRY_HEADER - got))) != 0;)
            if (n > 0)
                got += n;
            else if (errno != EINTR)
                break;
        why = !S_ISREG(st.st_mode) ? "not a file" : parse_header(header, (size_t)got, key, &size, hash);
        if (!why && st.st_size != size + ENTRY_HEADER) {
            snprintf(detail, sizeof detail, "%jd bytes where it should have %jd",
                     (intmax_t)(st.st_size - ENTRY_HEADER), (intmax_t)size);
            why = detail;
        }
        Sha256 s;
        sha256_init(&s);
        if (!why && (fd = temp_beside(out, tmp, sizeof tmp)) >= 0 && copy_hashing(in, fd, &s, &copied) == 0 &&
            close(fd) == 0) {
            fd = -1;
            sha256_hex(&s, got_hash);
            if (copied != size || strcmp(got_hash, hash) != 0)
                why = "its bytes are not the ones stored";
            else
                hit = rename(tmp, out) == 0;
        }
        if (fd >= 0)
            close(fd);
        if (!hit && tmp[0])
            unlink(tmp);
    }
    if (why) {
        struct stat now;       /* remove it only if it is still the file read: another shardc may have replaced it */
        if (stat(entry, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
            unlink(entry);
        report_damaged(key, why);
    }
    if (in >= 0)
        close(in);
    if (hit)
        utimensat(AT_FDCWD, entry, NULL, 0);     /* used now: the last to be evicted */
    if (o->stats)
        fprintf(stderr, "shardc: cache %s %s\n", hit ? "hit" : "miss", key);
    return hit;
}

typedef struct {
    char name[65];           /* the key */
    int64_t bytes;
    struct timespec used;
} Entry;

/* Only files named like a key are entries: a cache directory pointed at the
 * wrong folder loses nothing else to eviction or `cache clean`. */
static int is_key(const char *name) {
    return strlen(name) == 64 && strspn(name, "0123456789abcdef") == 64;
}

static int older(const void *a, const void *b) {
    const struct timespec *x = &((const Entry *)a)->used, *y = &((const Entry *)b)->used;
    return x->tv_sec != y->tv_sec ? (x->tv_sec < y->tv_sec ? -1 : 1)
         : x->tv_nsec != y->tv_nsec ? (x->tv_nsec < y->tv_nsec ? -1 : 1) : 0;
}

/* The entries of the cache (temporary files left by a killed shardc are
 * removed on the way), malloc'd; *n gets their count, *total their bytes. */
static Entry *list_entries(const CacheOptions *o, int *n, int64_t *total) {
    char dir[PATH_MAX], path[PATH_MAX + 300];
    entries_dir(o, dir, sizeof dir);
    DIR *d = opendir(dir);
    Entry *es = NULL;
    int cap = 0;
    *n = 0;
    *total = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!is_key(e->d_name) && strncmp(e->d_name, ".tmp-", 5) != 0)
            continue;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (e->d_name[0] == '.') {
            if (time(NULL) - st.st_mtim.tv_sec > STALE_TEMP_SECONDS)
                unlink(path);
            continue;
        }
        if (*n == cap) {
            Entry *more = realloc(es, sizeof *es * (size_t)(cap ? 2 * cap : 64));
            if (!more)
                break;                   /* the entries so far are still listed */
            es = more;
            cap = cap ? 2 * cap : 64;
        }
        memcpy(es[*n].name, e->d_name, sizeof es[*n].name);
        es[*n].bytes = (int64_t)st.st_size;
        es[*n].used = st.st_mtim;
        *total += es[(*n)++].bytes;
    }
    if (d)
        closedir(d);
    return es;
}

/* Remove the least recently used entries until the rest fit the bound.
 * Two shardc processes evicting at once may remove a little more than
 * needed; never less. */
static void evict(const CacheOptions *o) {
    int n;
    int64_t total;
    Entry *es = list_entries(o, &n, &total);
    if (total > o->max_bytes && es)
        qsort(es, (size_t)n, sizeof *es, older);
    for (int i = 0; i < n && total > o->max_bytes && es; i++) {
        char path[PATH_MAX + 100];
        entry_path(o, es[i].name, path, sizeof path);
        if (unlink(path) == 0 || errno == ENOENT)
            total -= es[i].bytes;
    }
    free(es);
}

/* Write the entry of `key` for the executable `path`: to a temporary file,
 * fsync'd, then renamed into place and the directory fsync'd, so that
 * neither a concurrent reader nor a crash sees part of one. */
static int write_entry(const char *key, const char *path, const char *entry) {
    char tmp[PATH_MAX + 64] = "", header[ENTRY_HEADER];
    int in = open(path, O_RDONLY), fd = in < 0 ? -1 : temp_beside(entry, tmp, sizeof tmp);
    Sha256 s;
    int64_t bytes = 0;
    sha256_init(&s);
    memset(header, ' ', sizeof header);
    header[ENTRY_HEADER - 1] = '\n';
    /* The executable behind a blank header, hashed on the way; then the
     * header, which holds the hash, over the blank. */
    int ok = fd >= 0 && write_all(fd, header, sizeof header) == 0 && copy_hashing(in, fd, &s, &bytes) == 0;
    if (ok) {
        char hex[65];
        sha256_hex(&s, hex);
        int n = snprintf(header, sizeof header, "%skey %s\nsize %jd\nsha256 %s\n", entry_magic, key, (intmax_t)bytes,
                         hex);
        header[n] = ' ';               /* the padding, not a NUL */
        ok = pwrite(fd, header, sizeof header, 0) == (ssize_t)sizeof header;
    }
    ok = ok && fsync(fd) == 0;
    if (fd >= 0)
        ok &= close(fd) == 0;
    ok = ok && sk_commit(tmp, entry) == 0;         /* renamed, the directory fsync'd */
    if (!ok && tmp[0])
        unlink(tmp);
    if (in >= 0)
        close(in);
    return ok ? 0 : -1;
}

void cache_store(const CacheOptions *o, const char *key, const char *path) {
    char dir[PATH_MAX], entry[PATH_MAX];
    entries_dir(o, dir, sizeof dir);
    entry_path(o, key, entry, sizeof entry);
    int ok = make_dirs(dir) == 0 && write_entry(key, path, entry) == 0;
    if (o->stats)
        fprintf(stderr, "shardc: cache %s %s\n", ok ? "stored" : "could not store", key);
    if (ok)
        evict(o);
}

static int cache_hash(const char *file) {
    Sha256 s;
    char hex[65];
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "shardc: error: cannot read '%s': %s\n", file, strerror(errno));
        return 1;
    }
    sha256_init(&s);
    char buf[1 << 16];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;)
        sha256_update(&s, buf, n);
    fclose(f);
    sha256_hex(&s, hex);
    printf("%s  %s\n", hex, file);   /* sha256sum's format */
    return 0;
}

int cache_command(const CacheOptions *o, const char *what, const char *file) {
    if (strcmp(what, "hash") == 0)
        return cache_hash(file);
    if (!o->dir[0]) {                /* nowhere to look: say why, not "SHARDC_CACHE=0" */
        printf("cache: none (off: %s)\n", o->off);
        return 0;
    }
    int n, removed = 0;
    int64_t total;
    Entry *es = list_entries(o, &n, &total);
    if (strcmp(what, "info") == 0) {
        printf("cache: %s/" LAYOUT " (%s%s)\n", o->dir, o->enabled ? "on" : "off: ", o->enabled ? "" : o->off);
        printf("entries: %d, %.1f MiB of %.1f MiB (SHARDC_CACHE_MAX)\n", n, total / 1048576.0, o->max_bytes / 1048576.0);
    } else {
        for (int i = 0; i < n; i++) {
            char path[PATH_MAX + 100];
            entry_path(o, es[i].name, path, sizeof path);
            removed += unlink(path) == 0;
        }
        printf("cache: removed %d entries from %s/" LAYOUT "\n", removed, o->dir);
    }
    free(es);
    return 0;
}
