/* The one-line progress report of `shardc build` and `run` on a terminal:
 * `shardc: mlp.tdsl (mesh X=2,Y=4): scheduled, C 303 lines, cc 0.41 s`,
 * rewritten in place (\r) as each phase ends.  Off unless standard error
 * is a terminal: tests and scripts read standard error from a pipe, and a
 * log file has no use for a line that is drawn over. */
#ifndef SHARDC_STATUS_H
#define SHARDC_STATUS_H

typedef struct {
    int on;                  /* standard error is a terminal */
    int shown;               /* a line is on screen without its newline */
    int parts;               /* parts after the head */
    char text[512];
} Status;

void status_init(Status *s);
/* Start a line with `head` (the file and the mesh). */
void status_begin(Status *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append ": part" (then ", part") and redraw the line. */
void status_add(Status *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Finish the line with its newline, before anything else is printed. */
void status_end(Status *s);

#endif
