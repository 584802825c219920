/* trace.c: SHARDC_TRACE, the call timings of pipeline stages
 * (shardc_trace.h).  The state is process-wide because the variable is: it
 * is read once, records from every device thread go to one list under a
 * mutex, and the list is written at exit, after sc_run has joined the
 * devices, so timing never waits on file I/O. */
#include "shardc_trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int device;
    int64_t begin, end;
    const char *name;
} Record;

static struct {
    pthread_once_t once;
    const char *path;            /* NULL: tracing is off */
    pthread_mutex_t lock;
    Record *rec;
    size_t n, cap;
    int process, processes;      /* of the world the first record came from */
    int registered;              /* the exit handler */
    int failed;                  /* out of memory: records were lost */
} trace = {PTHREAD_ONCE_INIT, NULL, PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, 1, 0, 0};

static void read_env(void) {
    const char *p = getenv("SHARDC_TRACE");
    trace.path = p && *p ? p : NULL;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t sk_trace_begin(void) {
    pthread_once(&trace.once, read_env);
    return trace.path ? now_ns() : -1;
}

static void write_trace(void) {
    char name[4096];
    if (trace.processes > 1)
        snprintf(name, sizeof name, "%s.p%d", trace.path, trace.process);
    else
        snprintf(name, sizeof name, "%s", trace.path);
    FILE *f = fopen(name, "w");
    if (!f) {
        fprintf(stderr, "shardc: cannot write the trace %s\n", name);
        return;
    }
    for (size_t i = 0; i < trace.n; i++)
        fprintf(f, "%d %lld %lld %s\n", trace.rec[i].device, (long long)trace.rec[i].begin,
                (long long)trace.rec[i].end, trace.rec[i].name);
    if (fclose(f) != 0)
        fprintf(stderr, "shardc: cannot write the trace %s\n", name);
    if (trace.failed)
        fprintf(stderr, "shardc: out of memory while tracing: %s misses records\n", name);
    free(trace.rec);
    trace.rec = NULL;
}

void sk_trace_end(sc_device *dev, const char *name, int64_t begin) {
    if (begin < 0)
        return;
    int64_t end = now_ns();
    pthread_mutex_lock(&trace.lock);
    if (!trace.registered) {
        const sc_world *w = sc_device_world(dev);
        trace.process = sc_world_process(w);
        trace.processes = sc_world_process_count(w);
        trace.registered = 1;
        if (atexit(write_trace) != 0)
            trace.failed = 1;
    }
    if (trace.n == trace.cap) {
        size_t cap = trace.cap ? 2 * trace.cap : 256;
        Record *r = realloc(trace.rec, cap * sizeof *r);
        if (r) {
            trace.rec = r;
            trace.cap = cap;
        }
    }
    if (trace.n < trace.cap)
        trace.rec[trace.n++] = (Record){sc_device_id(dev), begin, end, name};
    else
        trace.failed = 1;
    pthread_mutex_unlock(&trace.lock);
}
