/* The progress report of `shardc build` and `run` (docs/cli.md, "The
 * progress line").  On a terminal, one line,
 * `shardc: mlp.tdsl (mesh X=2,Y=4): partitioned, scheduled, C 303 lines, cc 0.41 s`,
 * rewritten in place (\r) as each phase ends, and while the C compiler
 * runs its seconds tick; a front end slower than STATUS_SLOW_SECONDS
 * shows its stages as they pass.  Off unless standard error is a
 * terminal: tests and scripts read standard error from a pipe, and a log
 * file has no use for a line that is drawn over.  With -v (verbose), plain
 * lines instead, on any standard error: each front-end stage with its
 * time, the cache's hits and misses, the C compiler's command and time. */
#ifndef SHARDC_STATUS_H
#define SHARDC_STATUS_H

#define STATUS_SLOW_SECONDS 2.0

typedef struct {
    int on;                  /* the rewritten line: standard error is a terminal, and not -v */
    int verbose;             /* -v: plain lines */
    int shown;               /* a line is on screen without its newline */
    int transient;           /* ... a front-end stage's, erased rather than finished */
    int parts;               /* parts after the head */
    char text[512];
    char tail[128];          /* drawn after text, not kept: the ticking part */
    const char *file;        /* the input, for the front end's stages */
    double t0;               /* when the command started */
} Status;

void status_init(Status *s, int verbose);
double status_seconds(void);
/* Start a line with `head` (the file and the mesh). */
void status_begin(Status *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append ": part" (then ", part") and redraw the line; with -v, print
 * "shardc: part" on a line of its own. */
void status_add(Status *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Draw the line with `tail` after it, in place (NULL: none), for a phase in
 * progress; nothing with -v. */
void status_tail(Status *s, const char *tail);
/* A front-end stage has ended (frontend_set_progress): -v prints it with
 * the time so far; on a terminal it is drawn once the front end has taken
 * STATUS_SLOW_SECONDS. */
void status_stage(const char *stage, void *status);
/* -v only: a line "shardc: ..." of its own. */
void status_note(Status *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Finish the line with its newline, before anything else is printed. */
void status_end(Status *s);

#endif
