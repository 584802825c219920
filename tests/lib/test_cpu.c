/* The ISA dispatch (lib/cpu.c and the GEMM engine of lib/dot.c).
 *
 * 1. sk_isa_from_cpuid on the registers of known CPUs, the model name
 *    nowhere: a Sapphire Rapids VM, Zen 3, Zen 4, an old SSE4 part, and a
 *    hypervisor that reports AVX-512 but does not enable its state.
 * 2. This CPU: sk_cpu_isa() against the flags the kernel lists in
 *    /proc/cpuinfo (which it clears for state the OS does not save).
 * 3. The GEMM engine with OpenBLAS forced to its fallback (the test runs
 *    itself again with OPENBLAS_CORETYPE=Prescott, what OpenBLAS picks on a
 *    CPU it does not know): f32 GEMMs still run on oneDNN's kernels for the
 *    ISA of 2., and compute the right product. */
#include "../runtime/tap.h"
#include "shardc_lib.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Register values as CPUID and XGETBV give them (the bits lib/cpu.c
 * reads; the others are left 0). */
#define SSE41 (1u << 19)
#define FMA (1u << 12)
#define OSXSAVE (1u << 27)
#define AVX (1u << 28)
#define AVX2 (1u << 5)
#define AVX512 ((1u << 16) | (1u << 17) | (1u << 30) | (1u << 31))
#define AMX ((1u << 22) | (1u << 24))
#define AVX512_BF16 (1u << 5)
#define XCR0_YMM 0x7u
#define XCR0_ZMM 0xe7u
#define XCR0_AMX 0x600e7u

static void known_cpus(void) {
    static const struct {
        const char *what;
        sk_cpu_regs r;
        sk_isa want;
    } cases[] = {
        {"Sapphire Rapids VM (model name 'Intel(R) Xeon(R) Processor')",
         {SSE41 | FMA | OSXSAVE | AVX, AVX2 | AVX512, AMX, AVX512_BF16, XCR0_AMX}, SK_ISA_AVX512_AMX},
        {"Sapphire Rapids, AMX state not enabled by the OS",
         {SSE41 | FMA | OSXSAVE | AVX, AVX2 | AVX512, AMX, AVX512_BF16, XCR0_ZMM}, SK_ISA_AVX512_BF16},
        {"Zen 4 (AVX-512 with BF16)", {SSE41 | FMA | OSXSAVE | AVX, AVX2 | AVX512, 0, AVX512_BF16, XCR0_ZMM},
         SK_ISA_AVX512_BF16},
        {"Skylake-X", {SSE41 | FMA | OSXSAVE | AVX, AVX2 | AVX512, 0, 0, XCR0_ZMM}, SK_ISA_AVX512},
        {"AVX-512 reported, ZMM state not enabled (hypervisor)",
         {SSE41 | FMA | OSXSAVE | AVX, AVX2 | AVX512, 0, 0, XCR0_YMM}, SK_ISA_AVX2},
        {"Zen 3", {SSE41 | FMA | OSXSAVE | AVX, AVX2, 0, 0, XCR0_YMM}, SK_ISA_AVX2},
        {"AVX2 without FMA", {SSE41 | OSXSAVE | AVX, AVX2, 0, 0, XCR0_YMM}, SK_ISA_SSE41},
        {"AVX without OSXSAVE", {SSE41 | FMA | AVX, AVX2 | AVX512, 0, 0, XCR0_ZMM}, SK_ISA_SSE41},
        {"Nehalem", {SSE41, 0, 0, 0, 0}, SK_ISA_SSE41},
        {"x86-64 baseline", {0, 0, 0, 0, 0}, SK_ISA_BASELINE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sk_isa got = sk_isa_from_cpuid(&cases[i].r);
        check(got == cases[i].want, "%s: %s (want %s)", cases[i].what, sk_isa_name(got),
              sk_isa_name(cases[i].want));
    }
}

/* The ISA that /proc/cpuinfo's flags add up to, by sk_isa's definition. */
static int has_flag(const char *flags, const char *f) {
    size_t n = strlen(f);
    for (const char *p = flags; (p = strstr(p, f)) != NULL; p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
            return 1;
    return 0;
}

static int cpuinfo_isa(sk_isa *isa) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    static char line[1 << 14];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strncmp(line, "flags", 5) == 0;
    if (f)
        fclose(f);
    if (!found)
        return 0;
    int avx2 = has_flag(line, "avx2") && has_flag(line, "fma") && has_flag(line, "avx");
    int avx512 = avx2 && has_flag(line, "avx512f") && has_flag(line, "avx512dq") &&
                 has_flag(line, "avx512bw") && has_flag(line, "avx512vl");
    *isa = avx512 && has_flag(line, "amx_tile") && has_flag(line, "amx_bf16") ? SK_ISA_AVX512_AMX
         : avx512 && has_flag(line, "avx512_bf16")                           ? SK_ISA_AVX512_BF16
         : avx512                                                            ? SK_ISA_AVX512
         : avx2                                                              ? SK_ISA_AVX2
         : has_flag(line, "sse4_1")                                          ? SK_ISA_SSE41
                                                                             : SK_ISA_BASELINE;
    return 1;
}

/* The oneDNN kernels expected for an ISA: its best f32 GEMM kernels. */
static int dnnl_matches(sk_isa isa, dnnl_cpu_isa_t d) {
    switch (isa) {
    case SK_ISA_AVX512_AMX: return d == dnnl_cpu_isa_avx512_core_amx;
    case SK_ISA_AVX512_BF16: return d == dnnl_cpu_isa_avx512_core_bf16;
    case SK_ISA_AVX512: return d == dnnl_cpu_isa_avx512_core || d == dnnl_cpu_isa_avx512_core_vnni;
    case SK_ISA_AVX2: return d == dnnl_cpu_isa_avx2 || d == dnnl_cpu_isa_avx2_vnni;
    default: return d == dnnl_cpu_isa_sse41 || d == dnnl_cpu_isa_avx;
    }
}

/* bf16 GEMMs follow the ISA too: oneDNN's matmul kernels where the CPU has
 * AVX512-BF16 (or AMX), widened to the f32 GEMM where it has no AVX-512; and the product
 * is exact for small integers, through a transposed operand as well. */
static void this_cpu_bf16(sk_isa want, const char *line) {
    const char *bf16 = strstr(line, "bf16 GEMM: ");
    int on_onednn = bf16 && strncmp(bf16 + 11, "oneDNN matmul", 13) == 0;
    if (want >= SK_ISA_AVX512_BF16)
        check(on_onednn, "bf16 GEMM on oneDNN's kernels for %s: %s", sk_isa_name(want), line);
    else if (want < SK_ISA_AVX512)
        check(bf16 && strncmp(bf16 + 11, "widened to the f32 GEMM", 23) == 0, "bf16 GEMM widened to f32 without AVX-512: %s", line);
    enum { M = 40, K = 96, N = 24 };
    static uint16_t a[M * K], bt[N * K], c[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = sc_bf16_from_float((float)(i % 5) - 2);
    for (int i = 0; i < N * K; i++)
        bt[i] = sc_bf16_from_float((float)(i % 3) - 1);
    sk_dot_dims dd = {0, 1, {0}, {0}, {1}, {1}};   /* a[m,k] * bt[n,k] */
    int64_t c0 = sk_dot_copied_elems();
    int rc = sk_dot(NULL, SK_BF16, SC_SHAPE(M, K), a, SC_SHAPE(N, K), bt, &dd, c, NULL);
    int right = rc == 0 && (!on_onednn || sk_dot_copied_elems() == c0);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0;
            for (int k = 0; k < K; k++)
                s += sc_bf16_to_float(a[i * K + k]) * sc_bf16_to_float(bt[j * K + k]);
            right &= sc_bf16_to_float(c[i * N + j]) == s;
        }
    check(right, "sk_dot bf16 [%d,%d] x [%d,%d]^T: exact product%s", M, K, N, K,
          on_onednn ? ", operands read in place" : "");
}

static void this_cpu(void) {
    sk_isa want, got = sk_cpu_isa();
    if (!cpuinfo_isa(&want)) {
        check(1, "# skip: no /proc/cpuinfo flags line");
        return;
    }
    check(got == want, "this CPU: CPUID says %s, /proc/cpuinfo's flags say %s", sk_isa_name(got), sk_isa_name(want));

    const char *core = openblas_get_corename();
    check(strcmp(core, "Prescott") == 0, "OpenBLAS forced to its fallback kernels: %s", core);
    dnnl_cpu_isa_t d = dnnl_get_effective_cpu_isa();
    check(dnnl_matches(want, d), "f32 GEMM kernels follow the ISA (%s), not OpenBLAS's choice: oneDNN isa 0x%x",
          sk_isa_name(want), (unsigned)d);
    char line[512];
    sk_gemm_engine(line, sizeof line);
    const char *f32 = strstr(line, "f32 GEMM: oneDNN");
    char segment[256];
    snprintf(segment, sizeof segment, "%.*s", f32 ? (int)strcspn(f32, ";") : 0, f32 ? f32 : "");
    int says_avx512 = strstr(segment, "avx512") != NULL;
    check(f32 && says_avx512 == (want >= SK_ISA_AVX512), "engine: %s", line);

    /* And the product is right: [3 x 4] x [4 x 5], exact in f32. */
    float a[12], b[20], c[15];
    for (int i = 0; i < 12; i++)
        a[i] = (float)(i % 5) - 2;
    for (int i = 0; i < 20; i++)
        b[i] = (float)(i % 7) * 0.5f;
    sk_dot_dims dd = {0, 1, {0}, {0}, {1}, {0}};
    int rc = sk_dot(NULL, SK_F32, SC_SHAPE(3, 4), a, SC_SHAPE(4, 5), b, &dd, c, NULL);
    int right = rc == 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            float s = 0;
            for (int k = 0; k < 4; k++)
                s += a[i * 4 + k] * b[k * 5 + j];
            right &= c[i * 5 + j] == s;
        }
    check(right, "sk_dot f32 through oneDNN: exact product");
    this_cpu_bf16(want, line);
}

int main(int argc, char **argv) {
    (void)argc;
    const char *ct = getenv("OPENBLAS_CORETYPE");
    if (!ct || strcmp(ct, "Prescott") != 0) {   /* OpenBLAS reads it when loaded */
        setenv("OPENBLAS_CORETYPE", "Prescott", 1);
        execv("/proc/self/exe", argv);
        perror("test_cpu: execv");
        return 1;
    }
    known_cpus();
    this_cpu();
    return tap_done();
}
