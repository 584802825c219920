/* progress.c: what a --steps run says as it goes (docs/cli.md, "Training
 * steps").  Standard output gets the loss lines, the data: the scalar
 * results that are not carried, after the run's first step (so the loss of
 * the parameters it started from is seen at once: a step's loss is
 * computed before its update), every --log-every K steps and after the
 * last, "step 100: l 0.0123457".  Standard error gets the progress, for
 * people: on a terminal one line rewritten at most four times a second
 * (the step, the time per step, steps per second, the time left and the
 * scalars); otherwise a plain line with each loss line after the first,
 * and a last one with the totals (none with SHARDC_PROGRESS=0 in the
 * environment: for a caller that shows only the loss).  Device 0 (on process 0) calls it from
 * its thread: every device holds a copy of a scalar, and device 0's pace
 * is the run's, the collectives keeping the devices together. */
#include "driver.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double sk_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* " l 0.0123457 result2 3": the scalar results that are not carried, by
 * name (result4 when unnamed), as %.6g (integers and bool as integers).
 * Returns how many. */
static int scalars(const Run *r, char *line, size_t cap) {
    const sk_program *p = r->p;
    int w = 0, any = 0;
    line[0] = 0;
    for (int i = 0; i < p->nresults && w < (int)cap - 96; i++) {
        const sk_arg_desc *a = &p->results[i];
        const void *x = r->results[0][i];
        if (a->global.rank || r->carry[i] >= 0)
            continue;
        char *o = line + w;
        size_t n = cap - (size_t)w;
        w += snprintf(o, n, " %s ", a->var ? a->var : a->name);
        o = line + w, n = cap - (size_t)w;
        switch (a->global.dtype) {
        case SK_F32: w += snprintf(o, n, "%.6g", *(const float *)x); break;
        case SK_F64: w += snprintf(o, n, "%.6g", *(const double *)x); break;
        case SK_BF16: w += snprintf(o, n, "%.6g", sc_bf16_to_float(*(const uint16_t *)x)); break;
        case SK_F16: w += snprintf(o, n, "%.6g", sc_f16_to_float(*(const uint16_t *)x)); break;
        case SK_I32: w += snprintf(o, n, "%d", (int)*(const int32_t *)x); break;
        case SK_U32: w += snprintf(o, n, "%u", (unsigned)*(const uint32_t *)x); break;
        case SK_I64: w += snprintf(o, n, "%lld", (long long)*(const int64_t *)x); break;
        case SK_U8: w += snprintf(o, n, "%u", (unsigned)*(const uint8_t *)x); break;
        default: w += snprintf(o, n, "%d", *(const uint8_t *)x != 0); break;
        }
        any++;
    }
    return any;
}

/* "42 s", "3m05s", "2h01m": a duration as people read it. */
static void duration(double t, char *buf, size_t cap) {
    long s = (long)(t + 0.5);
    if (t < 10)
        snprintf(buf, cap, "%.1f s", t);
    else if (s < 100)
        snprintf(buf, cap, "%ld s", s);
    else if (s < 3600)
        snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
}

/* "1.52 ms/step, 657 steps/s" for `per` seconds a step. */
static void rates(double per, char *buf, size_t cap) {
    double hz = per > 0 ? 1.0 / per : 0.0;
    if (per >= 1)
        snprintf(buf, cap, "%.3g s/step, %.3g steps/s", per, hz);
    else
        snprintf(buf, cap, "%.3g ms/step, %.*f steps/s", 1e3 * per, hz < 100 ? 1 : 0, hz);
}

/* "step 2000 of 20000, 1.52 ms/step, 657 steps/s, ETA 27 s": the pace is
 * the average since this run's start (r->started, set before its first
 * step, which is included). */
static void pace(const Run *r, long s, double now, char *buf, size_t cap) {
    long done = s - r->resumed_at;
    double t = now - r->started, per = t / (double)(done > 0 ? done : 1);
    char eta[32];
    duration(per * (double)(r->steps - s), eta, sizeof eta);
    char rate[64];
    rates(per, rate, sizeof rate);
    snprintf(buf, cap, "step %ld of %ld, %s, ETA %s", s, r->steps, rate, eta);
}

void sk_progress_step(Run *r, long s) {
    double now = sk_seconds();
    int first = s == r->resumed_at + 1, last = s == r->steps;
    char line[1024], text[256];
    if (first || s % r->log_every == 0 || last) {
        if (scalars(r, line, sizeof line)) {
            if (r->tty && r->drawn > 0) {        /* the loss line takes the progress line's place */
                fputs("\r\033[K", stderr);
                r->drawn = 0;                     /* and it is drawn again below at once */
            }
            printf("step %ld:%s\n", s, line);
            fflush(stdout);
        }
        if (!r->tty && !r->quiet && !first && !last) {
            pace(r, s, now, text, sizeof text);
            fprintf(stderr, "progress: %s\n", text);
        }
    }
    if (r->tty && !last && (r->drawn == 0 || now - r->drawn >= 0.25)) {
        scalars(r, line, sizeof line);
        pace(r, s, now, text, sizeof text);
        fprintf(stderr, "\r\033[K%s%s%s", text, line[0] ? ":" : "", line);
        fflush(stderr);
        r->drawn = now;
    }
}

/* The totals, after the last step: "progress: 100 steps in 1.52 s,
 * 15.2 ms/step, 65.8 steps/s" (steps 61 to 100 after --resume). */
void sk_progress_end(Run *r) {
    long done = r->steps - r->resumed_at;
    double t = sk_seconds() - r->started, per = t / (double)(done > 0 ? done : 1);
    char took[32], from[64] = "";
    duration(t, took, sizeof took);
    if (r->resumed_at)
        snprintf(from, sizeof from, " (steps %ld to %ld)", r->resumed_at + 1, r->steps);
    if (r->tty && r->drawn > 0)
        fputs("\r\033[K", stderr);
    char rate[64];
    rates(per, rate, sizeof rate);
    fprintf(stderr, "progress: %ld step%s%s in %s, %s\n", done, done == 1 ? "" : "s", from, took, rate);
    fflush(stderr);
}
