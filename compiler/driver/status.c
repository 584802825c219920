#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double status_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void status_init(Status *s, int verbose) {
    memset(s, 0, sizeof *s);
    s->verbose = verbose;
    s->on = !verbose && isatty(STDERR_FILENO);
    s->t0 = status_seconds();
}

static void draw(Status *s) {
    fprintf(stderr, "\r\033[K%s%s", s->text, s->tail);   /* \033[K: erase what a longer line left */
    fflush(stderr);
    s->shown = 1;
    s->transient = 0;
}

void status_begin(Status *s, const char *fmt, ...) {
    if (!s || (!s->on && !s->verbose))
        return;
    status_end(s);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->text, sizeof s->text, fmt, ap);
    va_end(ap);
    s->parts = 0;
    s->tail[0] = 0;
    if (s->verbose)
        fprintf(stderr, "%s\n", s->text);
    else
        draw(s);
}

void status_add(Status *s, const char *fmt, ...) {
    if (!s || (!s->on && !s->verbose))
        return;
    char part[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(part, sizeof part, fmt, ap);
    va_end(ap);
    if (s->verbose) {
        fprintf(stderr, "shardc: %s\n", part);
        return;
    }
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof s->text - n, "%s%s", s->parts++ ? ", " : ": ", part);
    s->tail[0] = 0;
    draw(s);
}

void status_tail(Status *s, const char *tail) {
    if (!s || !s->on)
        return;
    snprintf(s->tail, sizeof s->tail, "%s", tail ? tail : "");
    draw(s);
}

void status_stage(const char *stage, void *status) {
    Status *s = status;
    double t = status_seconds() - s->t0;
    if (s->verbose)
        fprintf(stderr, "shardc: %s: %s (%.2f s)\n", s->file ? s->file : "", stage, t);
    else if (s->on && t >= STATUS_SLOW_SECONDS) {
        snprintf(s->text, sizeof s->text, "shardc: %s: %s (%.1f s)", s->file ? s->file : "", stage, t);
        s->tail[0] = 0;
        draw(s);
        s->transient = 1;
    }
}

void status_note(Status *s, const char *fmt, ...) {
    if (!s || !s->verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("shardc: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void status_end(Status *s) {
    if (s && s->on && s->shown)
        fputs(s->transient ? "\r\033[K" : "\n", stderr);
    if (s)
        s->shown = 0;
}
