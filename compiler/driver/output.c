#include "output.h"

#include "base.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A device or pipe (-o /dev/stdout) is written directly: renaming a file
 * over it would replace it. */
static int write_special(const char *path, int (*write)(FILE *out, void *ctx), void *ctx) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "shardc: error: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    int rc = write(f, ctx), io_error = fflush(f) != 0 || ferror(f);
    io_error |= fclose(f) != 0;
    if (!rc && io_error)
        fprintf(stderr, "shardc: error: cannot write '%s': %s\n", path, strerror(errno ? errno : EIO));
    return rc || io_error;
}

int write_output(const char *path, int (*write)(FILE *out, void *ctx), void *ctx) {
    if (!path)
        return write(stdout, ctx);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return write_special(path, write, ctx);
    Arena arena = {0};
    char *tmp = arena_printf(&arena, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int saved = errno, rc = f ? write(f, ctx) : 0, io_error = !f;
    if (f) {
        io_error = fflush(f) != 0 || ferror(f);
        io_error |= fclose(f) != 0;
    }
    if (!rc && !io_error && rename(tmp, path) != 0)
        io_error = 1;
    if (!rc && io_error)
        fprintf(stderr, "shardc: error: cannot write '%s': %s\n", path, strerror(!f ? saved : errno ? errno : EIO));
    if (rc || io_error)
        remove(tmp);
    arena_free(&arena);
    return rc || io_error;
}
