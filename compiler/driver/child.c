#include "child.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

enum { GRACE_MS = 5000 };       /* after passing a stop signal on, SIGKILL a child still there this much later */

static volatile sig_atomic_t asked;      /* the stop signal that came, or 0 */
static volatile sig_atomic_t child_pgid; /* the running child's process group, or 0 */
static char guarded[PATH_MAX];

static void on_stop(int sig) {
    if (!asked)
        asked = sig;
    if (child_pgid > 0)
        kill(-(pid_t)child_pgid, sig);
}

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};

void child_guard_dir(const char *dir) {
    snprintf(guarded, sizeof guarded, "%s", dir ? dir : "");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++) {
        struct sigaction old;
        /* A signal the caller ignores (nohup's SIGHUP) stays ignored. */
        if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(stop_signals[i], &sa, NULL);
    }
}

const char *child_signal_name(int sig, char *buf, unsigned cap) {
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"}, {SIGILL, "SIGILL"},
                 {SIGABRT, "SIGABRT"}, {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},
                 {SIGHUP, "SIGHUP"}, {SIGQUIT, "SIGQUIT"}, {SIGPIPE, "SIGPIPE"}, {SIGTRAP, "SIGTRAP"},
                 {SIGSYS, "SIGSYS"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGALRM, "SIGALRM"},
                 {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(buf, cap, "signal %d", sig);
    return buf;
}

void child_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    char path[PATH_MAX + 300];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            child_remove_tree(path);
        else
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

void child_stop_if_asked(void) {
    int sig = asked;
    if (!sig)
        return;
    char buf[32];
    if (guarded[0])
        child_remove_tree(guarded);
    fprintf(stderr, "\nshardc: stopped by %s%s\n", child_signal_name(sig, buf, sizeof buf),
            guarded[0] ? ", its temporary folder removed" : "");
    signal(sig, SIG_DFL);
    raise(sig);
    _exit(128 + sig);            /* raise returned: the signal is blocked */
}

static void start(char *const *argv, int quiet, const char *errors, pid_t parent) {
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);    /* shardc gone, even by SIGKILL: so is the program */
    if (getppid() != parent)
        _exit(127);
#else
    (void)parent;
#endif
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++)
        if (signal(stop_signals[i], SIG_DFL) == SIG_IGN)
            signal(stop_signals[i], SIG_IGN);
    if (quiet && !freopen("/dev/null", "w", stdout))
        _exit(127);
    /* A group of its own is not the terminal's foreground group: reading
     * the terminal (mpirun forwards standard input to rank 0) would stop
     * it with SIGTTIN.  Nothing shardc starts reads standard input. */
    int null = isatty(STDIN_FILENO) ? open("/dev/null", O_RDONLY) : -1;
    if (null >= 0 && (dup2(null, STDIN_FILENO) < 0 || close(null) != 0))
        _exit(127);
    /* dup2, not freopen: stderr stays unbuffered, so the message below
     * reaches the file before _exit. */
    int fd = errors ? open(errors, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    if (errors && (fd < 0 || dup2(fd, STDERR_FILENO) < 0))
        _exit(127);
    execvp(argv[0], argv);
    fprintf(stderr, "shardc: error: cannot run '%s': %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Wait for `pid`, calling tick (unless NULL) about every 0.5 s; once a
 * stop signal has been passed on, give it GRACE_MS to end, then SIGKILL
 * its group. */
static int wait_child(pid_t pid, void (*tick)(void *ctx), void *ctx) {
    int st = 0, waited_ms = 0;
    for (int polls = 0;; polls++) {
        int poll = asked || tick;
        pid_t r = waitpid(pid, &st, poll ? WNOHANG : 0);
        if (r == pid)
            return st;
        if (r < 0 && errno != EINTR)
            return -1;
        if (r != 0)
            continue;
        nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
        if (tick && !asked && polls % 25 == 24)
            tick(ctx);
        if (asked && (waited_ms += 20) == GRACE_MS)
            kill(-pid, SIGKILL);
    }
}

void child_own(int pid) {
    setpgid(pid, pid);           /* also here: the group exists before any kill(-pid) */
    child_pgid = pid;
    if (asked)                   /* came between fork and now */
        kill(-pid, asked);
}

void child_disown(void) {
    child_pgid = 0;
    child_stop_if_asked();
}

int child_run_ticking(char *const *argv, int quiet, const char *errors, void (*tick)(void *ctx), void *ctx) {
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        start(argv, quiet, errors, parent);
    child_own(pid);
    int st = wait_child(pid, tick, ctx);
    child_disown();
    if (st < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int child_run(char *const *argv, int quiet, const char *errors) {
    return child_run_ticking(argv, quiet, errors, NULL, NULL);
}
