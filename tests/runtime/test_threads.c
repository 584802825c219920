/* The threads backend beyond single collectives: element conversions,
 * meshes and groups, options (given, and read from SHARDC_TIMEOUT,
 * SHARDC_LOCAL_DEVICES and SHARDC_BIND, bad values refused), device threads
 * bound to cores or not, start/done with work in between,
 * in-place all-reduce, 1000 rounds of mixed collectives (barrier reuse),
 * timeouts naming the devices that did not arrive (without burning CPU),
 * and argument errors and mismatches failing every device promptly. */
#define _GNU_SOURCE 1        /* sched_getcpu, sched_getaffinity */
#include "tap.h"

#include <sched.h>
#include <stdlib.h>

static void sleep_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0) {
    }
}

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static const sc_mesh mesh24 = {2, {2, 4}, {"X", "Y"}};

/* ---- element types ---- */

static void test_elements(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {       /* every f16 survives a round trip */
        float x = sc_f16_to_float((uint16_t)h);
        bad += isnan(x) ? !isnan(sc_f16_to_float(sc_f16_from_float(x))) : sc_f16_from_float(x) != h;
    }
    check(!bad, "f16: every bit pattern converts to f32 and back (%d wrong)", bad);
    bad = 0;
    /* Between neighbours a < b (positive, finite): below the midpoint gives a,
     * above gives b, the midpoint the even one. */
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double a = sc_f16_to_float((uint16_t)h), b = sc_f16_to_float((uint16_t)(h + 1)), mid = (a + b) / 2;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        bad += sc_f16_from_float((float)(mid - (b - a) / 8)) != h;
        bad += sc_f16_from_float((float)(mid + (b - a) / 8)) != h + 1;
        bad += sc_f16_from_float((float)mid) != even;
        bad += sc_f16_from_float((float)-mid) != (even | 0x8000);
    }
    check(!bad, "f16: rounds to nearest, ties to even (%d wrong)", bad);
    check(sc_f16_from_float(65519.0f) == 0x7bff && sc_f16_from_float(65520.0f) == 0x7c00 &&
              sc_f16_from_float(1e30f) == 0x7c00 && sc_f16_from_float(-INFINITY) == 0xfc00 &&
              isnan(sc_f16_to_float(sc_f16_from_float(NAN))) && sc_f16_from_float(0x1p-25f) == 0 &&
              sc_f16_from_float(0x1.0001p-25f) == 1,
          "f16: overflow gives inf, NaN stays NaN, subnormals round");
    bad = 0;
    for (uint32_t b = 0; b < 0x7f7f; b += 7) {
        double a = sc_bf16_to_float((uint16_t)b), c = sc_bf16_to_float((uint16_t)(b + 1)), mid = (a + c) / 2;
        uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
        bad += sc_bf16_from_float((float)a) != b;
        bad += sc_bf16_from_float((float)(mid - (c - a) / 8)) != b;
        bad += sc_bf16_from_float((float)(mid + (c - a) / 8)) != b + 1;
        bad += sc_bf16_from_float((float)mid) != even;
    }
    check(!bad, "bf16: exact values stay, others round to nearest, ties to even (%d wrong)", bad);
    check(sc_bf16_from_float(3.4e38f) == 0x7f80 && isnan(sc_bf16_to_float(sc_bf16_from_float(NAN))) &&
              sc_bf16_from_float(-0.0f) == 0x8000,
          "bf16: overflow gives inf, NaN stays NaN, -0 stays");
}

/* ---- worlds, meshes, groups ---- */

static int ids[8][3][8];

static int record_groups(sc_device *dev, void *arg) {
    (void)arg;
    const sc_axes ax[3] = {SC_AXES(1), SC_AXES(0), SC_AXES(1, 0)};
    int me = sc_device_id(dev);
    for (int a = 0; a < 3; a++)
        for (int j = 0; j < sc_group_size(dev, ax[a]); j++)
            ids[me][a][j] = sc_group_member(dev, ax[a], j);
    return !(sc_coord(dev, 0) == me / 4 && sc_coord(dev, 1) == me % 4 &&
             sc_group_rank(dev, SC_AXES(1, 0)) == sc_coord(dev, 1) * 2 + sc_coord(dev, 0) &&
             sc_group_size(dev, SC_AXES(0, 0)) == SC_ERR && sc_coord(dev, 2) == SC_ERR);
}

static void test_world(void) {
    char err[256];
    sc_world *w = sc_threads_create(&mesh24, NULL, err, sizeof err);
    check(w && sc_device_count(w) == 8 && sc_timeout(w) == 60, "mesh 2x4: 8 devices, timeout 60 s by default");
    check(w && sc_run(w, record_groups, NULL) == 0, "devices know their coordinates and group ranks");
    /* docs/ir.md's table for mesh X=2, Y=4, seen from device 5. */
    static const int want[3][8] = {{4, 5, 6, 7}, {1, 5}, {0, 4, 1, 5, 2, 6, 3, 7}};
    int good = 1;
    for (int a = 0; a < 3; a++)
        for (int j = 0; j < (a == 0 ? 4 : a == 1 ? 2 : 8); j++)
            good &= ids[5][a][j] == want[a][j];
    check(good, "groups {Y}, {X}, {Y,X} match docs/ir.md");
    sc_set_timeout(w, 0.5);
    check(sc_timeout(w) == 0.5, "sc_set_timeout");
    sc_world_destroy(w);
    sc_mesh bad = {1, {0}, {"X"}};
    w = sc_threads_create(&bad, NULL, err, sizeof err);
    check(!w, "a mesh axis of size 0 is refused: %s", w ? "" : err);
    sc_world_destroy(w);
}

/* ---- options: given by the program, or read from the environment ---- */

/* A world made with `opt` (or its message in err). */
static sc_world *with(sc_options opt, char *err, size_t errlen) {
    err[0] = 0;
    return sc_threads_create(&mesh24, &opt, err, errlen);
}

static void test_options(void) {
    char err[256];
    setenv("SHARDC_TIMEOUT", "0.25", 1);        /* the runtime itself must not read it */
    setenv("SHARDC_LOCAL_DEVICES", "2", 1);
    sc_world *w = sc_threads_create(&mesh24, NULL, err, sizeof err);
    check(w && sc_timeout(w) == 60, "NULL options are the defaults, whatever the environment says (%g s)",
          w ? sc_timeout(w) : 0.0);
    sc_world_destroy(w);
    w = with((sc_options){.timeout = 7}, err, sizeof err);
    check(w && sc_timeout(w) == 7, "options {.timeout = 7}: the timeout is 7 s");
    sc_world_destroy(w);
    w = with((sc_options){.local_devices = 3}, err, sizeof err);
    check(w && sc_world_local_count(w) == 8 && sc_world_process_count(w) == 1 && sc_timeout(w) == 60,
          "the threads backend runs every device in its one process, whatever local_devices says");
    sc_world_destroy(w);
    w = with((sc_options){.timeout = -1}, err, sizeof err);
    check(!w && strstr(err, "timeout -1 is not a positive number of seconds"), "a negative timeout is refused: %s", err);
    sc_world_destroy(w);
    w = with((sc_options){.timeout = NAN}, err, sizeof err);
    check(!w && strstr(err, "timeout nan is not"), "a NaN timeout is refused: %s", err);
    sc_world_destroy(w);
    w = with((sc_options){.local_devices = -2}, err, sizeof err);
    check(!w && strstr(err, "-2 local devices is not a count from 1 to 65536"), "a negative local count is refused: %s",
          err);
    sc_world_destroy(w);

    sc_options opt = {0};
    check(sc_options_from_env(&opt, err, sizeof err) == 0 && opt.timeout == 0.25 && opt.local_devices == 2,
          "sc_options_from_env: SHARDC_TIMEOUT=0.25, SHARDC_LOCAL_DEVICES=2");
    w = sc_threads_create(&mesh24, &opt, err, sizeof err);
    check(w && sc_timeout(w) == 0.25, "... and a world made with them times out after 0.25 s");
    sc_world_destroy(w);
    unsetenv("SHARDC_TIMEOUT");
    setenv("SHARDC_LOCAL_DEVICES", "", 1);
    opt = (sc_options){.timeout = 9, .local_devices = 4};
    check(sc_options_from_env(&opt, err, sizeof err) == 0 && opt.timeout == 9 && opt.local_devices == 4,
          "unset and empty variables leave their fields as they were");
    unsetenv("SHARDC_LOCAL_DEVICES");

    setenv("SHARDC_BIND", "core", 1);
    opt = (sc_options){0};
    check(sc_options_from_env(&opt, err, sizeof err) == 0 && opt.bind == SC_BIND_CORE, "SHARDC_BIND=core");
    setenv("SHARDC_BIND", "none", 1);
    check(sc_options_from_env(&opt, err, sizeof err) == 0 && opt.bind == SC_BIND_NONE, "SHARDC_BIND=none");
    unsetenv("SHARDC_BIND");
    w = with((sc_options){.bind = 2}, err, sizeof err);
    check(!w && strstr(err, "bind 2 is neither SC_BIND_NONE nor SC_BIND_CORE"), "an unknown bind is refused: %s", err);
    sc_world_destroy(w);
}

/* ---- device threads bound to cores ---- */

typedef struct {
    int cpu[64], after[64], allowed[64];
    cpu_set_t mask[64];
} Where;

static int where_body(sc_device *dev, void *arg) {
    Where *wh = arg;
    int d = sc_device_id(dev);
    wh->cpu[d] = sched_getcpu();
    sched_getaffinity(0, sizeof wh->mask[d], &wh->mask[d]);
    int32_t x = d, sum = 0;
    for (int i = 0; i < 200; i++)   /* collectives: spinning and yielding keep the thread there */
        if (sc_all_reduce(dev, SC_AXES(0), SC_I32, SC_SUM, &x, &sum, 1))
            return 1;
    wh->after[d] = sched_getcpu();
    return 0;
}

/* The i-th core of the process's mask. */
static int nth_cpu(const cpu_set_t *all, int i) {
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, all) && seen++ == i)
            return c;
    return -1;
}

static void bind_case(int ndev, int bind, const cpu_set_t *all, int cores) {
    static Where wh;
    memset(&wh, 0, sizeof wh);
    sc_mesh mesh = {1, {ndev}, {"X"}};
    sc_options opt = {.bind = bind};
    sc_world *w = sc_threads_create(&mesh, &opt, NULL, 0);
    int rc = w ? sc_run(w, where_body, &wh) : SC_ERR;
    int bound = bind == SC_BIND_CORE && ndev <= cores, good = rc == 0;
    char why[160] = "";
    for (int d = 0; d < ndev && good; d++) {
        int want = nth_cpu(all, d);
        if (bound && (CPU_COUNT(&wh.mask[d]) != 1 || !CPU_ISSET(want, &wh.mask[d]) || wh.cpu[d] != want ||
                      wh.after[d] != want))
            good = 0, snprintf(why, sizeof why, ": device %d ran on %d then %d, %d cores allowed, want only %d", d,
                               wh.cpu[d], wh.after[d], CPU_COUNT(&wh.mask[d]), want);
        if (!bound && !CPU_EQUAL(&wh.mask[d], all))
            good = 0, snprintf(why, sizeof why, ": device %d may run on %d cores, not the process's %d", d,
                               CPU_COUNT(&wh.mask[d]), cores);
    }
    check(good, "%d devices on %d cores, %s: %s%s", ndev, cores, bind == SC_BIND_CORE ? "SC_BIND_CORE" : "SC_BIND_NONE",
          bound ? "device i only on the i-th core, before and after collectives" : "every core allowed", why);
    sc_world_destroy(w);
}

static void test_bind(void) {
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) != 0) {
        check(0, "sched_getaffinity");
        return;
    }
    int cores = CPU_COUNT(&all);
    int fit = cores < 2 ? 1 : cores < 4 ? cores : 4;
    bind_case(fit, SC_BIND_CORE, &all, cores);
    bind_case(fit, SC_BIND_NONE, &all, cores);
    bind_case(cores + 1, SC_BIND_CORE, &all, cores);   /* more devices than cores: not bound */
}

/* One variable's bad values: each refused with `want` in the message, its
 * field left alone. */
static void bad_values(const char *name, const char *const *values, int n, const char *want) {
    int good = 1;
    char err[256] = "", last[600] = "";
    for (int i = 0; i < n; i++) {
        sc_options opt = {.timeout = 9, .local_devices = 4};
        char expect[256];
        snprintf(expect, sizeof expect, "%s=%s %s", name, values[i], want);
        setenv(name, values[i], 1);
        err[0] = 0;
        int rc = sc_options_from_env(&opt, err, sizeof err);
        good &= rc == SC_ERR && strcmp(err, expect) == 0 && opt.timeout == 9 && opt.local_devices == 4;
        if (strcmp(err, expect) != 0 && !last[0])
            snprintf(last, sizeof last, " (got \"%s\", want \"%s\")", err, expect);
    }
    unsetenv(name);
    check(good, "%s: %d bad values refused, the field unchanged: \"%s\"%s", name, n, err, last);
}

static void test_env_errors(void) {
    static const char *const seconds[] = {"soon", "0", "-1", "nan", "5s", " "};
    bad_values("SHARDC_TIMEOUT", seconds, 6, "is not a positive number of seconds");
    static const char *const counts[] = {"two", "0", "-1", "65537", "4x", "2.0", "99999999999999999999"};
    bad_values("SHARDC_LOCAL_DEVICES", counts, 7, "is not a whole number of devices from 1 to 65536");
    static const char *const binds[] = {"cores", "1", "Core", "socket"};
    bad_values("SHARDC_BIND", binds, 4, "is neither core nor none");
    /* Both bad: the first is named; a good one is still read. */
    char err[256] = "";
    sc_options opt = {0};
    setenv("SHARDC_TIMEOUT", "soon", 1);
    setenv("SHARDC_LOCAL_DEVICES", "0", 1);
    check(sc_options_from_env(&opt, err, sizeof err) == SC_ERR && strstr(err, "SHARDC_TIMEOUT=soon"),
          "two bad variables: the first is named: %s", err);
    setenv("SHARDC_LOCAL_DEVICES", "2", 1);
    check(sc_options_from_env(&opt, NULL, 0) == SC_ERR && opt.local_devices == 2 && opt.timeout == 0,
          "a bad SHARDC_TIMEOUT does not stop SHARDC_LOCAL_DEVICES=2 (and err may be NULL)");
    unsetenv("SHARDC_TIMEOUT");
    unsetenv("SHARDC_LOCAL_DEVICES");
}

/* ---- start/done with work in between; in place ---- */

enum { N = 64 };

static int overlap(sc_device *dev, void *arg) {
    int *fails = arg, me = sc_device_id(dev), x = sc_coord(dev, 0), y = sc_coord(dev, 1);
    float a[N], a_sum[N], b[N], b_all[4 * N], c[8 * N], c_part[N], d[N], d_sum[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)(me * N + i), b[i] = (float)(me + i), d[i] = (float)(i - me);
    for (int i = 0; i < 8 * N; i++)
        c[i] = (float)(i % 13 + me);
    sc_handle *h1 = sc_start_all_reduce(dev, SC_AXES(0), SC_F32, SC_SUM, a, a_sum, N);
    sc_handle *h2 = sc_start_all_gather(dev, SC_AXES(1), SC_F32, SC_SHAPE(N), 0, b, b_all);
    sc_handle *h3 = sc_start_reduce_scatter(dev, SC_AXES(0, 1), SC_F32, SC_MAX, SC_SHAPE(8 * N), 0, c, c_part);
    sc_handle *h4 = sc_start_all_reduce(dev, SC_AXES(0), SC_F32, SC_MIN, d, d_sum, N);
    double work = 0;                               /* independent compute meanwhile */
    for (int i = 1; i < 200000; i++)
        work += 1.0 / i;
    int rc = sc_done(h1) | sc_done(h2) | sc_done(h3) | sc_done(h4);
    int bad = rc != 0 || work < 12;
    for (int i = 0; i < N; i++) {
        int p0 = y, p1 = 4 + y;                    /* the {X} group */
        bad |= a_sum[i] != (float)(p0 * N + i + p1 * N + i);
        bad |= d_sum[i] != (float)(i - p1);
        for (int j = 0; j < 4; j++)
            bad |= b_all[j * N + i] != (float)(x * 4 + j + i);
        bad |= c_part[i] != (float)((me * N + i) % 13 + 7);
    }
    /* In place: send == recv. */
    int32_t v[5] = {me, 1, -me, 100, me * me};
    rc = sc_all_reduce(dev, SC_AXES(1, 0), SC_I32, SC_SUM, v, v, 5);
    bad |= rc != 0 || v[0] != 28 || v[1] != 8 || v[2] != -28 || v[3] != 800 || v[4] != 140;
    fails[me] = bad;
    return 0;
}

static void test_overlap(void) {
    int fails[8] = {0}, any = 0;
    sc_world *w = sc_threads_create(&mesh24, NULL, NULL, 0);
    int rc = sc_run(w, overlap, fails);
    for (int i = 0; i < 8; i++)
        any |= fails[i];
    check(rc == 0 && !any, "start/done: four collectives in flight on three groups, compute in between");
    rc = sc_run(w, overlap, fails);
    for (int i = 0; i < 8; i++)
        any |= fails[i];
    check(rc == 0 && !any, "the same world runs again");
    sc_world_destroy(w);
}

/* ---- many rounds ---- */

enum { ROUNDS = 1000 };

static int rounds(sc_device *dev, void *arg) {
    int *fails = arg, me = sc_device_id(dev), x = sc_coord(dev, 0), y = sc_coord(dev, 1);
    int bad = 0;
    for (int r = 0; r < ROUNDS && !bad; r++) {
        int32_t s[2] = {me + r, 1}, sum[2], all[8], shifted;
        int32_t mine = me * 1000 + r;
        static const int shift[] = {0, 1, 1, 2, 2, 3, 3, 0};
        sc_handle *h = sc_start_collective_permute(dev, SC_AXES(1), SC_I32, shift, 4, &mine, &shifted, 1);
        bad |= sc_all_reduce(dev, SC_AXES(1), SC_I32, SC_SUM, s, sum, 2) != 0;
        bad |= sc_all_gather(dev, SC_AXES(0, 1), SC_I32, SC_SHAPE(1), 0, &mine, all) != 0;
        bad |= sc_done(h) != 0;
        bad |= sum[0] != 4 * x * 4 + 6 + 4 * r || sum[1] != 4;
        for (int j = 0; j < 8; j++)
            bad |= all[j] != j * 1000 + r;
        bad |= shifted != (x * 4 + (y + 3) % 4) * 1000 + r;
        if (r % 10 == 0) {
            double t = r, tx;
            bad |= sc_all_reduce(dev, SC_AXES(0), SC_F64, SC_MAX, &t, &tx, 1) != 0 || tx != r;
        }
    }
    fails[me] = bad;
    return 0;
}

static void test_rounds(void) {
    int fails[8] = {0}, any = 0;
    sc_world *w = sc_threads_create(&mesh24, NULL, NULL, 0);
    double t0 = now_s();
    int rc = sc_run(w, rounds, fails);
    double t = now_s() - t0;
    for (int i = 0; i < 8; i++)
        any |= fails[i];
    check(rc == 0 && !any, "%d rounds of permute, all-reduce, all-gather over {Y}, {X,Y}, {X} (%.2f s)", ROUNDS, t);
    if (rc)
        printf("#   %s\n", sc_world_error(w));
    sc_world_destroy(w);
}

/* ---- timeouts ---- */

typedef struct {
    int late[8];             /* devices that come 0.7 s late */
    sc_axes first;           /* the collective that times out */
    double gap[8];           /* pause before the second collective */
    int rc[8], rc2[8];
    double took[8];
    char msg[8][512];
} Late;

static int late_body(sc_device *dev, void *arg) {
    Late *l = arg;
    int me = sc_device_id(dev);
    float x = 1, y;
    if (l->late[me])
        sleep_s(0.7);
    double t0 = now_s();
    l->rc[me] = sc_all_reduce(dev, l->first, SC_F32, SC_SUM, &x, &y, 1);
    if (l->gap[me] > 0)
        sleep_s(l->gap[me]);
    l->rc2[me] = l->rc[me] ? SC_ERR : sc_all_reduce(dev, SC_AXES(0, 1), SC_F32, SC_SUM, &x, &y, 1);
    l->took[me] = now_s() - t0;
    snprintf(l->msg[me], sizeof l->msg[me], "%s", sc_device_error(dev));
    return 0;
}

static void test_timeout(void) {
    static Late l;
    sc_world *w = sc_threads_create(&mesh24, &(sc_options){.timeout = 0.3}, NULL, 0);
    memset(&l, 0, sizeof l);
    l.late[3] = l.late[7] = 1;
    l.first = SC_AXES(0, 1);
    double cpu0 = cpu_s();
    int rc = sc_run(w, late_body, &l);
    double cpu = cpu_s() - cpu0;
    int good = rc == SC_ERR, prompt = 1;
    for (int d = 0; d < 8; d++) {
        if (l.late[d])
            continue;
        /* The first to time out fails the world; the others are woken. */
        good &= l.rc[d] == SC_ERR && (strcmp(l.msg[d], "all-reduce over {X,Y}: devices 3, 7 did not arrive within 0.3 s") == 0 ||
                                      strstr(l.msg[d], "all-reduce over {X,Y}: aborted: all-reduce over {X,Y}: devices 3, 7 did not arrive within 0.3 s"));
        prompt &= l.took[d] > 0.25 && l.took[d] < 0.9;
    }
    check(good, "6 devices wait for 2 late ones: \"%s\"", l.msg[0]);
    check(prompt, "... and fail after the 0.3 s timeout (%.2f s)", l.took[0]);
    check(l.rc[3] == SC_ERR && strstr(l.msg[3], "aborted: all-reduce over {X,Y}: devices 3, 7"),
          "the late device fails too: \"%s\"", l.msg[3]);
    check(cpu < 0.2, "waiting devices do not spin (%.3f s of CPU)", cpu);
    check(sc_run(w, late_body, &l) == SC_ERR, "a failed world does not run again");
    sc_world_destroy(w);

    /* Only {Y} group 0 waits for device 3; group 1 goes on and is woken
     * from its next collective by the failure. */
    w = sc_threads_create(&mesh24, NULL, NULL, 0);
    sc_set_timeout(w, 0.3);
    memset(&l, 0, sizeof l);
    l.late[3] = 1;
    l.first = SC_AXES(1);
    for (int d = 4; d < 8; d++)
        l.gap[d] = 0.1;      /* so that group 1 does not time out itself first */
    rc = sc_run(w, late_body, &l);
    good = rc == SC_ERR;
    prompt = 1;
    for (int d = 0; d < 3; d++)
        good &= l.rc[d] == SC_ERR && strstr(l.msg[d], "all-reduce over {Y}: device 3 did not arrive within 0.3 s");
    for (int d = 4; d < 8; d++) {
        good &= l.rc[d] == 0 && l.rc2[d] == SC_ERR && strstr(l.msg[d], "all-reduce over {X,Y}: aborted: ");
        prompt &= l.took[d] < 1.0;
    }
    check(good, "one group times out naming device 3: \"%s\"; the other is aborted: \"%s\"", l.msg[0], l.msg[4]);
    check(prompt, "... promptly (%.2f s)", l.took[4]);
    sc_world_destroy(w);
}

/* ---- argument errors and mismatches ---- */

typedef struct {
    int which, rc[8];
    double took[8];
    char msg[8][512];
} Err;

static int err_body(sc_device *dev, void *arg) {
    Err *e = arg;
    int me = sc_device_id(dev), rc;
    float x[8] = {0}, y[64];
    double t0 = now_s();
    switch (e->which) {
    case 0:                  /* device 0 calls something else */
        if (me == 0)
            rc = sc_all_gather(dev, SC_AXES(1), SC_F32, SC_SHAPE(8), 0, x, y);
        else
            rc = sc_all_reduce(dev, SC_AXES(1), SC_F32, SC_SUM, x, y, 8);
        break;
    case 1:
        rc = sc_reduce_scatter(dev, SC_AXES(1), SC_F32, SC_SUM, SC_SHAPE(6), 0, x, y);
        break;
    case 2:
        rc = me == 5 ? sc_all_reduce(dev, SC_AXES(2), SC_F32, SC_SUM, x, y, 8)
                     : sc_all_reduce(dev, SC_AXES(0), SC_F32, SC_SUM, x, y, 8);
        break;
    case 5:                  /* device 6 gives up without a collective */
        if (me == 6) {
            e->took[me] = 0;
            return 7;
        }
        rc = sc_all_reduce(dev, SC_AXES(0, 1), SC_F32, SC_SUM, x, y, 8);
        break;
    case 3:
        rc = sc_collective_permute(dev, SC_AXES(1), SC_F32, (const int[]){0, 1, 2, 1}, 2, x, y, 8);
        break;
    case 6:                  /* device 0's strided block has its rows further apart */
        rc = sc_all_reduce_strided(dev, SC_AXES(1), SC_F32, SC_SUM, y, 2, 4, me == 0 ? 9 : 8);
        break;
    default: {               /* too many started and not done */
        sc_handle *h[SC_MAX_PENDING + 1];
        for (int i = 0; i <= SC_MAX_PENDING; i++)
            h[i] = sc_start_all_reduce(dev, SC_AXES(1), SC_F32, SC_SUM, x, y + i, 1);
        rc = 0;
        for (int i = 0; i <= SC_MAX_PENDING; i++)
            rc |= sc_done(h[i]);
    }
    }
    e->rc[me] = rc;
    e->took[me] = now_s() - t0;
    snprintf(e->msg[me], sizeof e->msg[me], "%s", sc_device_error(dev));
    return 0;
}

static void test_errors(void) {
    static const struct { const char *what, *want; int dev; } cases[] = {
        {"a mismatch", "calls all-gather f32 [8] dim 0 where another member calls all-reduce f32 sum [8]", 0},
        {"an indivisible reduce-scatter", "reduce-scatter over {Y}: the dim to split is not divisible", 0},
        {"invalid axes on one device", "all-reduce: invalid axes (2): not distinct axes of the 2-axis mesh", 5},
        {"a rank targeted twice", "collective-permute over {Y}: a rank is the source or the target of two pairs", 0},
        {"too many pending", "more than 8 collectives started and not done", 0},
        {"a device returning an error", "all-reduce over {X,Y}: aborted: device 6 returned 7", 0},
        {"a strided mismatch", "calls all-reduce f32 sum [2,4] rows 9 apart where another member calls all-reduce f32 "
                               "sum [2,4] rows 8 apart", 0},
    };
    /* A mismatch is seen by whoever compares the calls: look at the world,
     * where the calls may be named in either order. */
    static const char *const swapped[] = {
        "calls all-reduce f32 sum [8] where another member calls all-gather f32 [8] dim 0", NULL, NULL, NULL, NULL,
        NULL, "calls all-reduce f32 sum [2,4] rows 8 apart where another member calls all-reduce f32 sum [2,4] rows 9 "
              "apart"};
    for (int c = 0; c < 7; c++) {
        static Err e;
        memset(&e, 0, sizeof e);
        e.which = c;
        sc_world *w = sc_threads_create(&mesh24, NULL, NULL, 0);
        sc_set_timeout(w, 5);
        int rc = sc_run(w, err_body, &e), all_fail = 1, prompt = 1;
        for (int d = 0; d < 8; d++) {
            /* groups without the culprit finish */
            all_fail &= e.rc[d] == SC_ERR || c == 0 || c == 2 || c == 6 || (c == 5 && d == 6);
            prompt &= e.took[d] < 2;
        }
        all_fail &= e.rc[cases[c].dev] == SC_ERR;
        const char *msg = swapped[c] ? sc_world_error(w) : e.msg[cases[c].dev];
        int named = strstr(msg, cases[c].want) != NULL || (swapped[c] && strstr(msg, swapped[c]));
        check(rc == SC_ERR && all_fail && prompt && named, "%s fails the world at once: \"%s\"", cases[c].what, msg);
        sc_world_destroy(w);
    }
}

int main(void) {
    test_elements();
    test_world();
    test_options();
    test_env_errors();
    test_bind();
    test_overlap();
    test_rounds();
    test_timeout();
    test_errors();
    return tap_done();
}
