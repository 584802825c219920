/* trace.c: SHARDC_TRACE, the timings of a generated program's kernels,
 * loops, collectives and calls (shardc_trace.h).
 *
 * The variable is read before main (a constructor), so the flag the inline
 * sk_trace_begin tests is never written while device threads read it.
 * Records go to a buffer per device, which only the thread running the
 * device writes (one at a time: sc_run joins a run's threads before the
 * next run starts others), so recording takes no lock: only a device's
 * first record does, to link its buffer into the list that the exit
 * handler writes, after sc_run has joined the devices, so timing never
 * waits on file I/O.  Per device rather than per thread, because each
 * sc_run starts new threads: a buffer per thread cost every run of a
 * program that runs many (--repeat, --steps) an allocation per device.
 * Two worlds running at once in one process would share their devices'
 * buffers: only one is traced at a time. */
#include "shardc_trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int device;
    const char *name;
    int64_t bytes, begin, end;
} Record;

typedef struct Buf {
    Record *rec;
    size_t n, cap;
    int failed;                  /* out of memory: records were lost */
    int process, processes;      /* of the device's world */
    int first_local, nlocal;     /* that process's devices */
    struct Buf *next;
} Buf;

int sk_trace_on;

static const char *trace_path;
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static Buf *buffers;             /* every device's, newest first */
static Buf *device_buf[SC_MAX_DEVICES];

static void write_trace(void);

__attribute__((constructor)) static void read_env(void) {
    const char *p = getenv("SHARDC_TRACE");
    if (!p || !*p)
        return;
    trace_path = p;
    if (atexit(write_trace) == 0)
        sk_trace_on = 1;
    else
        fprintf(stderr, "shardc: cannot trace to %s (atexit failed)\n", p);
}

int64_t sk_trace_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The device's buffer, made and listed at its first record. */
static Buf *device_buffer(sc_device *dev, int id) {
    if (device_buf[id])
        return device_buf[id];
    Buf *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    const sc_world *w = sc_device_world(dev);
    b->process = sc_world_process(w);
    b->processes = sc_world_process_count(w);
    b->nlocal = sc_world_local_count(w);
    b->first_local = b->process * b->nlocal;
    pthread_mutex_lock(&list_lock);
    b->next = buffers;
    buffers = b;
    pthread_mutex_unlock(&list_lock);
    return device_buf[id] = b;
}

void sk_trace_record(sc_device *dev, const char *name, int64_t bytes, int64_t begin) {
    int64_t end = sk_trace_now();
    int id = sc_device_id(dev);
    Buf *b = device_buffer(dev, id);
    if (!b)
        return;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        Record *r = realloc(b->rec, cap * sizeof *r);
        if (!r) {
            b->failed = 1;
            return;
        }
        b->rec = r;
        b->cap = cap;
    }
    b->rec[b->n++] = (Record){id, name, bytes, begin, end};
}

/* ---- writing at exit ---- */

/* By device, then by begin; of two that begin together, the longer first
 * (a call before the kernels it runs), so that viewers nest them. */
static int by_device_time(const void *pa, const void *pb) {
    const Record *a = pa, *b = pb;
    if (a->device != b->device)
        return a->device < b->device ? -1 : 1;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    return (a->end < b->end) - (a->end > b->end);
}

/* Every device's records in one sorted array (*n of them), or NULL. */
static Record *gather(size_t *n, int *failed) {
    size_t total = 0;
    for (Buf *b = buffers; b; b = b->next)
        total += b->n;
    Record *all = malloc((total ? total : 1) * sizeof *all);
    *n = 0;
    if (!all)
        return NULL;
    for (Buf *b = buffers; b; b = b->next) {
        if (b->n)
            memcpy(all + *n, b->rec, b->n * sizeof *all);
        *n += b->n;
        *failed |= b->failed;
    }
    qsort(all, *n, sizeof *all, by_device_time);
    return all;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The event's category, from the first word of its name (the generated
 * names begin with "call", "loop", an op or a collective's op). */
static const char *category(const char *name) {
    static const char *const collectives[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                              "collective-permute"};
    if (strncmp(name, "call ", 5) == 0)
        return "call";
    if (strncmp(name, "loop ", 5) == 0)
        return "loop";
    for (size_t i = 0; i < sizeof collectives / sizeof *collectives; i++) {
        size_t k = strlen(collectives[i]);
        if (strncmp(name, collectives[i], k) == 0 && strchr(" -", name[k]) && name[k])
            return "collective";
    }
    return "kernel";
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Nanoseconds as microseconds, exactly: 1234567 is 1234.567. */
static void micros(FILE *f, int64_t ns) { fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000)); }

/* The metadata events: the process's name, and a track named "device N"
 * for each of its devices, in device order. */
static void json_metadata(FILE *f, const Buf *b) {
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
               "\"args\": {\"name\": \"process %d\"}}",
            b->process, b->first_local, b->process);
    for (int d = b->first_local; d < b->first_local + b->nlocal; d++) {
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                   "\"args\": {\"name\": \"device %d\"}}",
                b->process, d, d);
        fprintf(f, ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                   "\"args\": {\"sort_index\": %d}}",
                b->process, d, d);
    }
}

/* Does `name` begin with an op word ending in `phase` ("-start", "-done")?
 * Then *op is the op's length without it. */
static int has_phase(const char *name, const char *phase, size_t *op) {
    size_t word = strcspn(name, " "), k = strlen(phase);
    *op = word - k;
    return word > k && strncmp(name + *op, phase, k) == 0;
}

/* Is done the done of start: the same op, and the same words after it? */
static int is_done_of(const char *done, const char *start) {
    size_t d, s;
    return has_phase(done, "-done", &d) && has_phase(start, "-start", &s) && d == s &&
           strncmp(done, start, d) == 0 && strcmp(done + d + 5, start + s + 6) == 0;
}

/* One async span ("b" and "e" events, id `id`) from a start's begin to its
 * done's end, named by the device and the collective without the phase
 * ("device 3: all-reduce f32 sum [32,128] over {Y}"): the time the
 * collective was in flight, which viewers draw on a track of its own (one
 * per name, under the process), over the compute it overlaps. */
static void json_span(FILE *f, const Record *start, const Record *done, const Buf *b, long id) {
    size_t op;
    char name[512];
    has_phase(start->name, "-start", &op);
    snprintf(name, sizeof name, "device %d: %.*s%s", start->device, (int)op, start->name, start->name + op + 6);
    for (int end = 0; end < 2; end++) {
        fputs(",\n{\"name\": ", f);
        json_string(f, name);
        fprintf(f, ", \"cat\": \"in flight\", \"ph\": \"%s\", \"id\": %ld, \"pid\": %d, \"tid\": %d, \"ts\": ",
                end ? "e" : "b", id, b->process, start->device);
        micros(f, end ? done->end : start->begin);
        fprintf(f, ", \"args\": {\"bytes\": %lld}}", (long long)start->bytes);
    }
}

/* The spans of the started collectives in r[0 .. n) (sorted by device and
 * begin): each done pairs with its device's earliest start of the same
 * collective not yet done, as the members of a group call done in start
 * order.  `pending` holds the unpaired starts, a few at a time. */
static void json_spans(FILE *f, const Record *r, size_t n, const Buf *b) {
    size_t *pending = NULL, npending = 0, cap = 0;
    long id = 0;
    for (size_t i = 0; i < n; i++) {
        size_t op;
        if (i && r[i].device != r[i - 1].device)
            npending = 0;            /* a start left without its done: none to draw */
        if (has_phase(r[i].name, "-start", &op)) {
            if (npending == cap) {
                size_t *p = realloc(pending, (cap = cap ? 2 * cap : 16) * sizeof *p);
                if (!p)
                    break;
                pending = p;
            }
            pending[npending++] = i;
            continue;
        }
        for (size_t k = 0; k < npending && has_phase(r[i].name, "-done", &op); k++)
            if (is_done_of(r[i].name, r[pending[k]].name)) {
                json_span(f, &r[pending[k]], &r[i], b, id++);
                memmove(pending + k, pending + k + 1, (npending - k - 1) * sizeof *pending);
                npending--;
                break;
            }
    }
    free(pending);
}

static void write_json(FILE *f, const Record *r, size_t n, const Buf *b) {
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
    json_metadata(f, b);
    for (size_t i = 0; i < n; i++) {
        fputs(",\n{\"name\": ", f);
        json_string(f, r[i].name);
        fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": ", category(r[i].name),
                b->process, r[i].device);
        micros(f, r[i].begin);
        fputs(", \"dur\": ", f);
        micros(f, r[i].end - r[i].begin);
        fprintf(f, ", \"args\": {\"bytes\": %lld}}", (long long)r[i].bytes);
    }
    json_spans(f, r, n, b);
    fputs("\n]}\n", f);
}

static void write_text(FILE *f, const Record *r, size_t n) {
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%d %lld %lld %s\n", r[i].device, (long long)r[i].begin, (long long)r[i].end, r[i].name);
}

/* PATH, or with several processes PATH.pN (BASE.pN.json for BASE.json). */
static void file_name(char *out, size_t len, const Buf *b, int json) {
    size_t base = strlen(trace_path) - (json ? 5 : 0);
    if (b->processes <= 1)
        snprintf(out, len, "%s", trace_path);
    else
        snprintf(out, len, "%.*s.p%d%s", (int)base, trace_path, b->process, json ? ".json" : "");
}

static void write_trace(void) {
    pthread_mutex_lock(&list_lock);
    Buf *first = buffers;
    size_t n = 0;
    int failed = 0;
    Record *all = first ? gather(&n, &failed) : NULL;
    pthread_mutex_unlock(&list_lock);
    if (!first)                  /* no device ran: nothing to say */
        return;
    int json = ends_with(trace_path, ".json");
    char name[4096];
    file_name(name, sizeof name, first, json);
    FILE *f = all ? fopen(name, "w") : NULL;
    if (!f) {
        fprintf(stderr, "shardc: cannot write the trace %s\n", name);
        free(all);
        return;
    }
    if (json)
        write_json(f, all, n, first);
    else
        write_text(f, all, n);
    if (fclose(f) != 0)
        fprintf(stderr, "shardc: cannot write the trace %s\n", name);
    if (failed)
        fprintf(stderr, "shardc: out of memory while tracing: %s misses records\n", name);
    free(all);
}
