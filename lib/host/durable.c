/* durable.c: files that are whole or absent (shardc_npy.h).  Every .npy and
 * .npz that a program writes (results, --out, --checkpoint) goes to a
 * temporary file next to its final name, which is flushed to the disk
 * (fsync) before it is renamed into place, and the directory is flushed
 * after the rename: a crash or a power loss at any moment leaves either the
 * old file or the new one under the final name, never a truncated one.  A
 * rename alone is atomic for running processes but not for the disk: the
 * file's data may reach it after the rename does. */
#include "npy_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sk_temp_path(const char *path, char *tmp, size_t cap) {
    int n = snprintf(tmp, cap, "%s.tmp%ld", path, (long)getpid());
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int sk_close_synced(FILE *f) {
    int ok = fflush(f) == 0 && !ferror(f);
    int e = ok ? 0 : errno ? errno : EIO;
    if (ok && fsync(fileno(f)) != 0)
        ok = 0, e = errno;
    if (fclose(f) != 0 && ok)
        ok = 0, e = errno ? errno : EIO;
    errno = e;
    return ok ? 0 : -1;
}

/* The directory holding path, flushed so that a rename in it is on the
 * disk.  A file system that cannot sync directories (EINVAL) has nothing
 * more to do. */
static int sync_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if ((size_t)(slash - path) >= sizeof dir)
        return 0;
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd) != 0 && errno != EINVAL ? -1 : 0, e = errno;
    close(fd);
    errno = e;
    return rc;
}

int sk_commit(const char *tmp, const char *path) {
    if (rename(tmp, path) != 0)
        return -1;
    return sync_dir_of(path);
}

/* ---- signals held while a set of files is renamed into place ---- */

static const int held[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction before[sizeof held / sizeof *held];
static volatile sig_atomic_t caught;

static void note(int sig) {
    caught = sig;
}

void sk_signals_hold(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = note;
    sa.sa_flags = SA_RESTART;            /* the writes go on; the flag says what came */
    sigemptyset(&sa.sa_mask);
    caught = 0;
    for (size_t k = 0; k < sizeof held / sizeof *held; k++)
        sigaction(held[k], &sa, &before[k]);
}

int sk_signals_caught(void) {
    return caught;
}

void sk_signals_release(void) {
    for (size_t k = 0; k < sizeof held / sizeof *held; k++)
        sigaction(held[k], &before[k], NULL);
    if (caught)
        raise(caught);                   /* what it would have done: with the default action, end */
}
