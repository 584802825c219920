#include "base.h"

#include <stdarg.h>
#include <string.h>

/* Find the start of 1-based line `line` in the source. */
static const char *line_start(const Diag *d, int line) {
    const char *p = d->text, *end = d->text + d->len;
    for (int l = 1; l < line && p < end; p++)
        if (*p == '\n')
            l++;
    return p;
}

static void show_line(const Diag *d, Loc loc) {
    const char *start = line_start(d, loc.line), *end = d->text + d->len;
    const char *stop = start;
    while (stop < end && *stop != '\n')
        stop++;
    fprintf(d->out, "%.*s\n", (int)(stop - start), start);
    /* Copy tabs so the caret lines up with the source as the terminal shows it. */
    for (int i = 1; i < loc.col && start + i - 1 < stop; i++)
        fputc(start[i - 1] == '\t' ? '\t' : ' ', d->out);
    fputs("^\n", d->out);
}

static void vreport(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap) {
    if (!d->out)
        return;
    if (loc.line > 0)
        fprintf(d->out, "%s:%d:%d: %s: ", d->path, loc.line, loc.col, kind);
    else
        fprintf(d->out, "%s: %s: ", d->path, kind);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    if (loc.line > 0 && d->text)
        show_line(d, loc);
}

void diag_report(Diag *d, Loc loc, const char *kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(d, loc, kind, fmt, ap);
    va_end(ap);
    if (strcmp(kind, "error") == 0)
        d->errors++;
}

void diag_fatal(Diag *d, Loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(d, loc, "error", fmt, ap);
    va_end(ap);
    d->errors++;
    longjmp(*d->bail, 1);
}
