/* bench/gemm.c: the cost of going through sk_dot (lib/dot.c) rather than
 * calling BLAS directly, on one f32 einsum out[m,n] = x[m,k] * w[k,n] with
 * m = n = k = 1024, at 1 thread and at all cores.  Best of several runs,
 * the two alternating so that drift of the machine hits both alike; prints
 * GFLOP/s and the ratio, and rewrites the "GEMM" section of the file named
 * on the command line (docs/performance.md).  `make bench` runs it. */
#include "shardc_lib.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { DIM = 1024, RUNS = 7 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, len, "%s", p);
            }
            break;
        }
    if (f)
        fclose(f);
}

typedef struct {
    int threads;
    double direct, via;   /* GFLOP/s */
} result;

static result measure(int threads, const float *x, const float *w, float *out) {
    openblas_set_num_threads(threads);
    sk_dot_dims d = {0, 1, {0}, {0}, {1}, {0}};
    double best_direct = 1e30, best_via = 1e30;
    for (int r = 0; r < RUNS + 1; r++) {   /* run 0 warms up */
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, DIM, DIM, DIM, 1.0f, x, DIM, w, DIM,
                    0.0f, out, DIM);
        double t1 = now_s();
        if (sk_dot(SK_F32, SC_SHAPE(DIM, DIM), x, SC_SHAPE(DIM, DIM), w, &d, out, NULL) != 0) {
            fprintf(stderr, "gemm: sk_dot failed\n");
            exit(1);
        }
        double t2 = now_s();
        if (r > 0) {
            best_direct = t1 - t0 < best_direct ? t1 - t0 : best_direct;
            best_via = t2 - t1 < best_via ? t2 - t1 : best_via;
        }
    }
    double flop = 2.0 * DIM * DIM * DIM;
    return (result){threads, flop / best_direct * 1e-9, flop / best_via * 1e-9};
}

/* Replaces the text between the GEMM markers of `path` (or appends it). */
static int update_doc(const char *path, const char *section) {
    static const char *begin = "<!-- bench/gemm: begin -->\n", *end = "<!-- bench/gemm: end -->\n";
    char *old = NULL;
    size_t n = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        fseek(f, 0, SEEK_END);
        n = (size_t)ftell(f);
        rewind(f);
        old = calloc(n + 1, 1);
        if (!old || fread(old, 1, n, f) != n)
            n = 0;
        fclose(f);
    }
    const char *b = old ? strstr(old, begin) : NULL, *e = b ? strstr(b, end) : NULL;
    f = fopen(path, "w");
    if (!f) {
        free(old);
        return -1;
    }
    if (!old || n == 0)
        fputs("# Performance\n\nMeasurements of shardc's kernels; each section is rewritten by the "
              "benchmark named in it.\n\n", f);
    else if (b && e)
        fwrite(old, 1, (size_t)(b - old), f);
    else
        fputs(old, f), fputs("\n", f);
    fputs(begin, f);
    fputs(section, f);
    fputs(end, f);
    if (b && e)
        fputs(e + strlen(end), f);
    fclose(f);
    free(old);
    return 0;
}

int main(int argc, char **argv) {
    size_t sz = (size_t)DIM * DIM;
    float *x = malloc(sz * sizeof *x), *w = malloc(sz * sizeof *w), *out = malloc(sz * sizeof *out);
    if (!x || !w || !out)
        return 1;
    for (size_t i = 0; i < sz; i++) {
        x[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        w[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    result res[2] = {measure(1, x, w, out), measure(cores > 1 ? cores : 1, x, w, out)};
    int nres = cores > 1 ? 2 : 1;

    /* For reference: the same einsum in bf16, which has no BLAS and runs
     * the f32-accumulating C loop (one thread); best of 3. */
    uint16_t *xb = malloc(sz * 2), *wb = malloc(sz * 2), *ob = malloc(sz * 2);
    if (!xb || !wb || !ob)
        return 1;
    sk_convert(SK_F32, SK_BF16, (int64_t)sz, x, xb);
    sk_convert(SK_F32, SK_BF16, (int64_t)sz, w, wb);
    sk_dot_dims d = {0, 1, {0}, {0}, {1}, {0}};
    double best_bf16 = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        sk_dot(SK_BF16, SC_SHAPE(DIM, DIM), xb, SC_SHAPE(DIM, DIM), wb, &d, ob, NULL);
        double t = now_s() - t0;
        best_bf16 = t < best_bf16 ? t : best_bf16;
    }
    double bf16_gflops = 2.0 * DIM * DIM * DIM / best_bf16 * 1e-9;
    free(xb);
    free(wb);
    free(ob);

    char cpu[256], date[32], section[4096];
    cpu_model(cpu, sizeof cpu);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    int len = snprintf(section, sizeof section,
                       "## GEMM: `sk_dot` against `cblas_sgemm`\n\n"
                       "`make bench` (bench/gemm.c), %s: one f32 einsum `out[m,n] = x[m,k] * w[k,n]`, "
                       "m = n = k = %d, best of %d runs, OpenBLAS threads set with "
                       "`openblas_set_num_threads`.\nMachine: %s, %d cores.\n\n"
                       "| threads | cblas_sgemm GFLOP/s | sk_dot GFLOP/s | ratio |\n"
                       "| --- | --- | --- | --- |\n",
                       date, DIM, RUNS, cpu, cores);
    for (int i = 0; i < nres; i++) {
        printf("threads %d: cblas_sgemm %.1f GFLOP/s, sk_dot %.1f GFLOP/s, ratio %.3f\n",
               res[i].threads, res[i].direct, res[i].via, res[i].via / res[i].direct);
        len += snprintf(section + len, sizeof section - (size_t)len, "| %d | %.1f | %.1f | %.3f |\n",
                        res[i].threads, res[i].direct, res[i].via, res[i].via / res[i].direct);
    }
    printf("bf16 sk_dot (C loop, f32 accumulation, 1 thread): %.1f GFLOP/s\n", bf16_gflops);
    snprintf(section + len, sizeof section - (size_t)len,
             "\nThe same einsum in bf16 (no BLAS: packed f32 panels and a blocked C loop that "
             "accumulates in f32, one thread): %.1f GFLOP/s.\n\n", bf16_gflops);
    printf("machine: %s, %d cores; %s\n", cpu, cores, date);
    if (argc > 1) {
        if (update_doc(argv[1], section) != 0) {
            perror(argv[1]);
            return 1;
        }
        printf("updated %s\n", argv[1]);
    }
    free(x);
    free(w);
    free(out);
    return 0;
}
