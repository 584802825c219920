/* A world's options (sc_options): read from the environment, the one way
 * to set them from outside a program, and checked when a world is made.
 * Both backends take them from rt_options_check; nothing else in the
 * runtime reads the environment, so a program decides what it honours. */
#include "rt_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_TIMEOUT = 60 };

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return SC_ERR;
}

/* Set and not empty: an empty variable is the same as none, as a shell's
 * `SHARDC_TIMEOUT= prog` means. */
static const char *variable(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Any positive number of seconds, as strtod reads it (0.5, 1e3, inf). */
static int seconds_from(const char *name, double *field, char *err, size_t errlen) {
    const char *v = variable(name);
    if (!v)
        return 0;
    char *end;
    double t = strtod(v, &end);
    if (*end || !(t > 0))
        return fail(err, errlen, "%s=%.64s is not a positive number of seconds", name, v);
    *field = t;
    return 0;
}

/* A whole number of devices from 1 to SC_MAX_DEVICES. */
static int devices_from(const char *name, int *field, char *err, size_t errlen) {
    const char *v = variable(name);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (*end || errno || n < 1 || n > SC_MAX_DEVICES)
        return fail(err, errlen, "%s=%.64s is not a whole number of devices from 1 to %d", name, v, SC_MAX_DEVICES);
    *field = (int)n;
    return 0;
}

/* core or none. */
static int bind_from(const char *name, int *field, char *err, size_t errlen) {
    const char *v = variable(name);
    if (!v)
        return 0;
    if (strcmp(v, "core") && strcmp(v, "none"))
        return fail(err, errlen, "%s=%.64s is neither core nor none", name, v);
    *field = strcmp(v, "core") == 0 ? SC_BIND_CORE : SC_BIND_NONE;
    return 0;
}

/* Every variable is read, so that one bad value does not hide the others'
 * good ones; the message is the first bad one's. */
int sc_options_from_env(sc_options *opt, char *err, size_t errlen) {
    int rc = seconds_from("SHARDC_TIMEOUT", &opt->timeout, err, errlen);
    rc |= devices_from("SHARDC_LOCAL_DEVICES", &opt->local_devices, err, rc ? 0 : errlen);
    rc |= bind_from("SHARDC_BIND", &opt->bind, err, rc ? 0 : errlen);
    return rc ? SC_ERR : 0;
}

int rt_options_check(const sc_options *opt, sc_options *out, char *err, size_t errlen) {
    *out = opt ? *opt : (sc_options){0};
    if (out->timeout == 0)
        out->timeout = DEFAULT_TIMEOUT;
    if (!(out->timeout > 0))
        return fail(err, errlen, "sc_options: the timeout %g is not a positive number of seconds (0: %d s)",
                    out->timeout, DEFAULT_TIMEOUT);
    if (out->local_devices < 0 || out->local_devices > SC_MAX_DEVICES)
        return fail(err, errlen, "sc_options: %d local devices is not a count from 1 to %d (0: the mesh shared evenly)",
                    out->local_devices, SC_MAX_DEVICES);
    if (out->bind != SC_BIND_NONE && out->bind != SC_BIND_CORE)
        return fail(err, errlen, "sc_options: bind %d is neither SC_BIND_NONE nor SC_BIND_CORE", out->bind);
    return 0;
}
