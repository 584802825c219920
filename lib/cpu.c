/* cpu.c: the instruction set this CPU can run, from CPUID and XGETBV.
 *
 * Never from the model name: a virtual machine may call a Sapphire Rapids
 * "Intel(R) Xeon(R) Processor", and a library that picks kernels from a
 * table of model names falls back to SSE3 there (Debian's OpenBLAS 0.3.21
 * does, at a fifth of the machine's speed).  An ISA counts only when the
 * CPU has it and the OS saves its registers (XCR0): a hypervisor may hide
 * the AVX-512 state even where CPUID reports the instructions. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* The bits read, in the order of sk_cpu_regs's fields:
 * leaf 1 ecx: SSE4.1 19, FMA 12, OSXSAVE 27, AVX 28;
 * leaf 7 ebx: AVX2 5, AVX512F 16, AVX512DQ 17, AVX512BW 30, AVX512VL 31;
 * leaf 7 edx: AMX-BF16 22, AMX-TILE 24;  leaf 7.1 eax: AVX512_BF16 5;
 * XCR0: SSE 1, AVX 2, opmask 5, ZMM 6-7, AMX tile config 17, tile data 18. */
#define BIT(x, n) (((x) >> (n)) & 1u)

sk_isa sk_isa_from_cpuid(const sk_cpu_regs *r) {
    int osxsave = BIT(r->leaf1_ecx, 27);
    uint64_t xcr0 = osxsave ? r->xcr0 : 0;
    int ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0;
    int amx_os = (xcr0 & 0x60000) == 0x60000;
    int avx2 = ymm_os && BIT(r->leaf1_ecx, 28) && BIT(r->leaf1_ecx, 12) && BIT(r->leaf7_ebx, 5);
    int avx512 = avx2 && zmm_os && BIT(r->leaf7_ebx, 16) && BIT(r->leaf7_ebx, 17) &&
                 BIT(r->leaf7_ebx, 30) && BIT(r->leaf7_ebx, 31);
    if (avx512 && amx_os && BIT(r->leaf7_edx, 24) && BIT(r->leaf7_edx, 22))
        return SK_ISA_AVX512_AMX;
    if (avx512 && BIT(r->leaf7_1_eax, 5))
        return SK_ISA_AVX512_BF16;
    if (avx512)
        return SK_ISA_AVX512;
    if (avx2)
        return SK_ISA_AVX2;
    if (BIT(r->leaf1_ecx, 19))
        return SK_ISA_SSE41;
    return SK_ISA_BASELINE;
}

void sk_cpu_read(sk_cpu_regs *r) {
    memset(r, 0, sizeof *r);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d, max = __get_cpuid_max(0, NULL);
    if (max >= 1 && __get_cpuid(1, &a, &b, &c, &d))
        r->leaf1_ecx = c;
    if (max >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        r->leaf7_ebx = b;
        r->leaf7_edx = d;
        unsigned subleaves = a;
        if (subleaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
            r->leaf7_1_eax = a;
    }
    if (BIT(r->leaf1_ecx, 27)) {   /* XGETBV is legal only with OSXSAVE */
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        r->xcr0 = (uint64_t)hi << 32 | lo;
    }
#endif
}

sk_isa sk_cpu_isa(void) {
    sk_cpu_regs r;
    sk_cpu_read(&r);
    return sk_isa_from_cpuid(&r);
}

const char *sk_isa_name(sk_isa isa) {
    static const char *const names[] = {"baseline", "sse4.1", "avx2", "avx512", "avx512_bf16",
                                        "avx512_amx"};
    return (int)isa >= 0 && (int)isa < (int)(sizeof names / sizeof *names) ? names[isa] : "?";
}

