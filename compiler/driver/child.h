/* The programs shardc starts (cc, the built program, mpirun), owned: each
 * runs in a process group of its own; SIGINT, SIGTERM and SIGHUP to shardc
 * are passed on to that group, and shardc then removes its temporary
 * folder and dies by the same signal; a child whose shardc dies (even by
 * SIGKILL) gets SIGTERM.  docs/cli.md, "Exit status". */
#ifndef SHARDC_CHILD_H
#define SHARDC_CHILD_H

/* Run argv and wait; `quiet`: its standard output goes to /dev/null;
 * `errors` (unless NULL): its standard error goes to that file.  Returns
 * its exit status, 128 + N when signal N killed it, or -1 when it could
 * not be started.  If a stop signal came meanwhile, does not return (see
 * child_stop_if_asked). */
int child_run(char *const *argv, int quiet, const char *errors);
/* The same, calling tick(ctx) about every 0.5 s while it waits (the
 * progress line's seconds). */
int child_run_ticking(char *const *argv, int quiet, const char *errors, void (*tick)(void *ctx), void *ctx);

/* For a child forked elsewhere (cache.c's `cc --version`, whose output it
 * reads), which called setpgid(0, 0): stop signals are passed on to its
 * group from child_own until child_disown, which then stops shardc if one
 * came. */
void child_own(int pid);
void child_disown(void);

/* From now on, a stop signal removes `dir` (a temporary folder, with
 * what is in it; NULL: none) before shardc dies.  Installs the handlers. */
void child_guard_dir(const char *dir);

/* If SIGINT, SIGTERM or SIGHUP came: say so, remove the guarded folder and
 * die by that signal. */
void child_stop_if_asked(void);

/* "SIGSEGV" for SIGSEGV; "signal N" for one without a name here. */
const char *child_signal_name(int sig, char *buf, unsigned cap);

/* Remove `dir` and everything under it. */
void child_remove_tree(const char *dir);

#endif
