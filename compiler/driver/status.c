#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void status_init(Status *s) {
    memset(s, 0, sizeof *s);
    s->on = isatty(STDERR_FILENO);
}

static void draw(Status *s) {
    fprintf(stderr, "\r\033[K%s", s->text);   /* \033[K: erase what a longer line left */
    fflush(stderr);
    s->shown = 1;
}

void status_begin(Status *s, const char *fmt, ...) {
    if (!s || !s->on)
        return;
    status_end(s);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->text, sizeof s->text, fmt, ap);
    va_end(ap);
    s->parts = 0;
    draw(s);
}

void status_add(Status *s, const char *fmt, ...) {
    if (!s || !s->on)
        return;
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof s->text - n, "%s", s->parts++ ? ", " : ": ");
    n = strlen(s->text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->text + n, sizeof s->text - n, fmt, ap);
    va_end(ap);
    draw(s);
}

void status_end(Status *s) {
    if (s && s->on && s->shown)
        fputc('\n', stderr);
    if (s)
        s->shown = 0;
}
