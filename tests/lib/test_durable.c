/* Files written whole or not at all (lib/host/durable.c, docs/cli.md "Files
 * written whole or not at all"):
 *
 * 1. sk_npy_write and sk_npz_write leave their file, read back the same,
 *    and nothing else in the directory (no temporary); over an old file,
 *    the new one; into a directory that does not exist, an error and no
 *    file.
 * 2. sk_npy_write_temp then sk_commit: nothing under the final name until
 *    the commit.
 * 3. Signals held (sk_signals_hold): a SIGTERM raised meanwhile is noted
 *    (sk_signals_caught), not acted on; sk_signals_release raises it, and
 *    the process (a child) ends by it; without one, release returns. */
#include "../runtime/tap.h"
#include "shardc_npy.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static int entries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void files(void) {
    char path[512], err[512];
    double x[6] = {1, 2, 3, 4, 5, 6.5}, *back = NULL;
    sk_npy_shape s = {.dtype = SK_F32, .rank = 2, .dims = {2, 3}}, got;
    snprintf(path, sizeof path, "%s/a.npy", dir);
    check(sk_npy_write(path, &s, x, err, sizeof err) == 0 && entries() == 1, "sk_npy_write: the file, nothing else");
    x[0] = 9;
    check(sk_npy_write(path, &s, x, err, sizeof err) == 0 && entries() == 1, "sk_npy_write over an old file");
    check(sk_npy_read(path, &s, &got, &back, err, sizeof err) == 0 && memcmp(back, x, sizeof x) == 0,
          "sk_npy_write: reads back the new values");
    free(back);
    sk_npz_entry e[] = {{"w", s, x}, {"v", s, x}};
    snprintf(path, sizeof path, "%s/b.npz", dir);
    check(sk_npz_write(path, e, 2, err, sizeof err) == 0 && entries() == 2, "sk_npz_write: the file, nothing else");
    sk_npy_source src = {path, "v", 0};
    back = NULL;
    check(sk_npy_read_source(&src, &s, &got, &back, NULL, err, sizeof err) == 0 && memcmp(back, x, sizeof x) == 0,
          "sk_npz_write: reads back");
    free(back);
    snprintf(path, sizeof path, "%s/no-such-dir/c.npy", dir);
    check(sk_npy_write(path, &s, x, err, sizeof err) != 0 && strstr(err, "cannot write") && entries() == 2,
          "sk_npy_write into a missing directory: an error (%s), no file", err);
    snprintf(path, sizeof path, "%s/no-such-dir/c.npz", dir);
    check(sk_npz_write(path, e, 2, err, sizeof err) != 0 && entries() == 2, "sk_npz_write there: an error, no file");
}

static void temp_then_commit(void) {
    char path[512], tmp[600], err[512];
    double x[2] = {1, 2};
    sk_npy_shape s = {.dtype = SK_F64, .rank = 1, .dims = {2}};
    snprintf(path, sizeof path, "%s/d.npy", dir);
    check(sk_temp_path(path, tmp, sizeof tmp) == 0 && strncmp(tmp, path, strlen(path)) == 0 &&
              strstr(tmp + strlen(path), ".tmp"), "sk_temp_path: next to the file (%s)", tmp);
    check(sk_npy_write_temp(path, tmp, &s, x, err, sizeof err) == 0 && access(path, F_OK) != 0 &&
              access(tmp, F_OK) == 0, "sk_npy_write_temp: the temporary only");
    check(sk_commit(tmp, path) == 0 && access(path, F_OK) == 0 && access(tmp, F_OK) != 0,
          "sk_commit: the file under its name");
    remove(path);
}

static void signals(void) {
    int fd[2];
    if (pipe(fd) != 0) {
        check(0, "pipe");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        sk_signals_hold();
        raise(SIGTERM);
        char c = sk_signals_caught() == SIGTERM ? 'y' : 'n';
        if (write(fd[1], &c, 1) != 1)
            _exit(3);
        sk_signals_release();
        _exit(0);                           /* not reached: the SIGTERM ends it */
    }
    close(fd[1]);
    char c = 0;
    int st = 0;
    ssize_t n = read(fd[0], &c, 1);
    close(fd[0]);
    waitpid(pid, &st, 0);
    check(n == 1 && c == 'y', "a SIGTERM while held is noted, and the process goes on");
    check(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "sk_signals_release raises it: the process ends by SIGTERM");
    sk_signals_hold();
    check(sk_signals_caught() == 0, "no signal, none noted");
    sk_signals_release();
    check(1, "without a signal, sk_signals_release returns");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/test_durable.XXXXXX");
    if (!mkdtemp(dir)) {
        check(0, "mkdtemp");
        return tap_done();
    }
    files();
    temp_then_commit();
    signals();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        check(0, "rm -rf %s", dir);
    return tap_done();
}
