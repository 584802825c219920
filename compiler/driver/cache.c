/* The build cache (cache.h).  Every operation tolerates other shardc
 * processes working on the same directory at the same time: entries appear
 * by rename, disappear by unlink, and a reader that loses a race (an entry
 * evicted between lookup and link) simply builds. */
#include "cache.h"

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
        int null = open("/dev/null", O_WRONLY);
        dup2(fd[1], STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        close(fd[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    cache_key_str(key, label, argv[0]);
    char buf[4096];
    for (ssize_t n; pid > 0 && ((n = read(fd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR));)
        if (n > 0)
            sha256_update(key, buf, (size_t)n);
    close(fd[0]);
    int st = 0;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
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

static void entries_dir(const CacheOptions *o, char *buf, size_t cap) { snprintf(buf, cap, "%s/v1", o->dir); }

static void entry_path(const CacheOptions *o, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/v1/%s", o->dir, key);
}

static int copy_file(const char *from, const char *to) {
    int in = open(from, O_RDONLY), out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    char buf[1 << 16];
    ssize_t n = 0;
    while (out >= 0 && (n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || write(out, buf, (size_t)n) != n)
            break;
    }
    int bad = in < 0 || out < 0 || n != 0;
    bad |= out >= 0 && close(out) != 0;
    if (in >= 0)
        close(in);
    return bad ? -1 : 0;
}

/* Put `from` at `to` all at once: link or copy to a temporary name in the
 * destination's directory, then rename over `to`.  Nobody ever sees a
 * partly written `to`. */
static int place(const char *from, const char *to, int may_link) {
    char tmp[PATH_MAX + 64];
    const char *slash = strrchr(to, '/');
    int dir_len = slash ? (int)(slash - to + 1) : 0;
    snprintf(tmp, sizeof tmp, "%.*s.tmp-%ld-%s", dir_len, to, (long)getpid(), slash ? slash + 1 : to);
    int rc = may_link && link(from, tmp) == 0 ? 0 : copy_file(from, tmp);
    if (rc == 0 && rename(tmp, to) != 0)
        rc = -1;
    if (rc)
        unlink(tmp);
    return rc;
}

int cache_fetch(const CacheOptions *o, const char *key, const char *out, int may_link) {
    char entry[PATH_MAX];
    entry_path(o, key, entry, sizeof entry);
    int hit = place(entry, out, may_link) == 0;
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

void cache_store(const CacheOptions *o, const char *key, const char *path, int may_link) {
    char dir[PATH_MAX], entry[PATH_MAX];
    entries_dir(o, dir, sizeof dir);
    entry_path(o, key, entry, sizeof entry);
    int ok = make_dirs(dir) == 0 && place(path, entry, may_link) == 0;
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
    int n, removed = 0;
    int64_t total;
    Entry *es = list_entries(o, &n, &total);
    if (strcmp(what, "info") == 0) {
        printf("cache: %s/v1 (%s)\n", o->dir, o->enabled ? "on" : "off: SHARDC_CACHE=0");
        printf("entries: %d, %.1f MiB of %.1f MiB (SHARDC_CACHE_MAX)\n", n, total / 1048576.0, o->max_bytes / 1048576.0);
    } else {
        for (int i = 0; i < n; i++) {
            char path[PATH_MAX + 100];
            entry_path(o, es[i].name, path, sizeof path);
            removed += unlink(path) == 0;
        }
        printf("cache: removed %d entries from %s/v1\n", removed, o->dir);
    }
    free(es);
    return 0;
}
