/* The shardc command line (docs/cli.md).  Exit status: 0 success, 1 an
 * error in the program, 2 bad command-line use, 3 an internal error. */
#include "frontend.h"
#include "output.h"
#include "codegen_cmd.h"
#include "interp_cmd.h"
#include "show.h"
#include "version.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>


static const char usage[] =
    "usage: shardc COMMAND prog.tdsl [options]\n"
    "\n"
    "commands:\n"
    "  check   parse, type-check and lower; print errors only\n"
    "  dump    print the IR after a stage (--stage parsed|sharded|partitioned|scheduled)\n"
    "  show    draw which device holds which block of a value (--fn F --value V),\n"
    "          or the dataflow graph of a function for Graphviz (--fn F --format dot)\n"
    "  interp  run a function with the reference interpreter (slow; for testing):\n"
    "          --fn F --in NAME=FILE.npy ... --out DIR writes DIR/result0.npy, ...;\n"
    "          --stage partitioned runs the partitioned program on simulated devices\n"
    "  compile emit C for the per-device functions: -o prog.c [--fn F adds a main()]\n"
    "  build   emit C and link an executable: -o prog --fn F [--backend threads|mpi]\n"
    "  run     build and run a function:\n"
    "          --fn F --in NAME=FILE.npy ... --out DIR [--backend threads|mpi] [--np P] [--check]\n"
    "          [--steps N [--log-every K]]\n"
    "  cache   the build cache of build and run: shardc cache info | clean\n"
    "\n"
    "options:\n"
    "  --mesh A=n,B=m   override the mesh axis sizes (names must match the program)\n"
    "  --const N=v,...  override constants defined with const\n"
    "  --device-memory SIZE  the bytes one device may hold (64M, 2G, 512KiB, ...;\n"
    "                   default unlimited): the partitioner avoids a lowering that\n"
    "                   would need more when another fits\n"
    "  --stage STAGE    with dump: parsed, sharded, partitioned or scheduled; with show and\n"
    "                   interp: the stage whose program they read\n"
    "  --fn NAME        with dump: print only this function (and the specializations it calls);\n"
    "                   with show, interp, build and run: the function; with compile: add a main()\n"
    "  --value NAME     with show: the value to draw, named as dump names it\n"
    "  --format FORMAT  with show: text (default) or dot\n"
    "  --in NAME=FILE   with interp and run: parameter NAME from a .npy file (one per parameter)\n"
    "  --out DIR        with interp and run: where the results are written\n"
    "  --backend B      with build and run: threads (default, one thread per device) or mpi\n"
    "                   (processes launched with mpirun or srun, each with local devices)\n"
    "  --np P           with run --backend mpi: the number of processes (default: one per\n"
    "                   device); each runs devices/P devices\n"
    "  --check          with run: also run the function unpartitioned on one device and\n"
    "                   print the largest absolute and relative error\n"
    "  --steps N        with run: run the function N times, each result named like a\n"
    "                   parameter (return loss, w) becoming that parameter for the next step;\n"
    "                   the scalar results are printed, and DIR/NAME.npy is the final parameter\n"
    "  --log-every K    with run --steps: print the scalar results every K steps (default N/10)\n"
    "  --no-cache       with build and run: neither use nor fill the build cache\n"
    "  -o FILE          output file (dump, compile, build)\n"
    "  -h, --help       show this help\n"
    "  --version        show the version\n";

enum { MAX_INS = 1024 };           /* --in options, a bound instead of an allocation */

typedef struct {
    const char *command, *input, *stage, *fn, *output, *value, *format, *backend, *np, *steps, *log_every;
    int check;                       /* run --check */
    int no_cache;                    /* build and run --no-cache */
    const char *file;                /* cache hash FILE */
    MeshFlag mesh;
    const char *ins[MAX_INS], *out;  /* interp */
    int nins;
} Options;

static int usage_error(const char *fmt, const char *arg) {
    fputs("shardc: error: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nrun 'shardc --help' for usage\n", stderr);
    return 2;
}

/* One NAME=VALUE item of a comma-separated flag value: copies NAME (at most
 * `cap` bytes with its NUL) and returns where VALUE starts, or NULL. */
static const char *flag_item(const char *p, char *name, size_t cap) {
    const char *eq = strchr(p, '=');
    if (!eq || eq == p || (size_t)(eq - p) >= cap || memchr(p, ',', (size_t)(eq - p)))
        return NULL;
    memcpy(name, p, (size_t)(eq - p));
    name[eq - p] = '\0';
    return eq + 1;
}

/* After a VALUE that ended at `end`: the next item, or NULL when a trailing
 * comma or junk follows. */
static const char *flag_next(const char *end) {
    if (!*end)
        return end;
    return *end == ',' && end[1] ? end + 1 : NULL;
}

/* Parse NAME=SIZE,...; returns NULL or what is wrong. */
static const char *parse_mesh_flag(const char *spec, MeshFlag *mesh) {
    long long devices = 1;
    mesh->n = 0;
    for (const char *p = spec; *p;) {
        if (mesh->n == MAX_AXES)
            return "a mesh has at most 8 axes";
        const char *v = flag_item(p, mesh->name[mesh->n], sizeof mesh->name[0]);
        if (!v)
            return "expected NAME=SIZE,...";
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (errno || end == v || !(p = flag_next(end)))
            return *end && *end != ',' ? "expected NAME=SIZE,... with integer sizes" : "expected NAME=SIZE,...";
        if (n < 1 || n > 65536 || (devices *= n) > 65536)
            return "sizes must be at least 1 and the mesh at most 65536 devices";
        mesh->size[mesh->n++] = n;
    }
    return mesh->n ? NULL : "expected NAME=SIZE,...";
}

/* Parse NAME=NUMBER,...; returns NULL or what is wrong. */
static const char *parse_const_flag(const char *spec, MeshFlag *f) {
    for (const char *p = spec; *p;) {
        if (f->nconsts == MAX_CONST_OVERRIDES)
            return "too many constants";
        const char *v = flag_item(p, f->const_name[f->nconsts], sizeof f->const_name[0]);
        if (!v)
            return "expected NAME=NUMBER,...";
        char *end;
        errno = 0;
        long long i = strtoll(v, &end, 10);
        int is_int = end != v && (!*end || *end == ',') && !errno;
        double x = is_int ? (double)i : strtod(v, &end);
        if (end == v || x != x || !(p = flag_next(end)))
            return "expected NAME=NUMBER,...";
        f->const_value[f->nconsts] = x;
        f->const_is_int[f->nconsts++] = (uint8_t)is_int;
    }
    return f->nconsts ? NULL : "expected NAME=NUMBER,...";
}

/* A size in bytes: a number (a fraction allowed) and a unit: none or B,
 * K M G T or KiB MiB GiB TiB (powers of 1024, as memory sizes are usually
 * meant), KB MB GB TB (powers of 1000), any case.  Returns NULL or what
 * is wrong. */
static const char *parse_size(const char *spec, int64_t *bytes) {
    static const struct {
        const char *name;
        double unit;
    } units[] = {{"", 1}, {"b", 1}, {"k", 0x1p10}, {"kib", 0x1p10}, {"kb", 1e3}, {"m", 0x1p20}, {"mib", 0x1p20},
                 {"mb", 1e6}, {"g", 0x1p30}, {"gib", 0x1p30}, {"gb", 1e9}, {"t", 0x1p40}, {"tib", 0x1p40},
                 {"tb", 1e12}};
    const char *p = spec;
    double x = 0, scale = 1;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++)
        x = x * 10 + (*p - '0');
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            x += (*p - '0') * (scale /= 10);
    for (size_t i = 0; digits && i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(p, units[i].name) == 0) {
            x *= units[i].unit;
            if (x < 1 || x >= 0x1p62)
                return "a size from 1 byte to 4 EiB";
            *bytes = (int64_t)x;
            return NULL;
        }
    return "expected a size in bytes such as 1048576, 64M, 2G or 512KiB";
}

/* --device-memory SIZE or --device-memory=SIZE at argv[*i]: 0 when it is
 * not that option, 1 when it is and was read (*i at its value), 2 after a
 * usage error. */
static int device_memory_flag(int argc, char **argv, int *i, MeshFlag *f) {
    static const char name[] = "--device-memory";
    const char *a = argv[*i];
    if (strncmp(a, name, sizeof name - 1) != 0 || (a[sizeof name - 1] && a[sizeof name - 1] != '='))
        return 0;
    const char *v = a[sizeof name - 1] ? a + sizeof name : *i + 1 < argc ? argv[++*i] : NULL;
    if (!v)
        return usage_error("%s needs a value", name);
    const char *err = parse_size(v, &f->device_memory);
    if (err) {
        fprintf(stderr, "shardc: error: bad %s '%s': %s\n", name, v, err);
        return 2;
    }
    return 1;
}

/* Returns 0, 2 after a usage error, or -1 after answering --help/--version. */
static int parse_args(int argc, char **argv, Options *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--in") == 0 && o->nins == MAX_INS)
            return usage_error("at most %s --in options", "1024");
        const char **slot = strcmp(a, "--stage") == 0 ? &o->stage
                          : strcmp(a, "--fn") == 0 ? &o->fn
                          : strcmp(a, "-o") == 0 ? &o->output
                          : strcmp(a, "--value") == 0 ? &o->value
                          : strcmp(a, "--format") == 0 ? &o->format
                          : strcmp(a, "--in") == 0 ? &o->ins[o->nins++]
                          : strcmp(a, "--out") == 0 ? &o->out
                          : strcmp(a, "--backend") == 0 ? &o->backend
                          : strcmp(a, "--np") == 0 ? &o->np
                          : strcmp(a, "--steps") == 0 ? &o->steps
                          : strcmp(a, "--log-every") == 0 ? &o->log_every : NULL;
        int is_const = strcmp(a, "--const") == 0, memory = device_memory_flag(argc, argv, &i, &o->mesh);
        if (memory == 2)
            return 2;
        if (memory)
            continue;
        if (slot || is_const || strcmp(a, "--mesh") == 0) {
            if (i + 1 == argc)
                return usage_error("%s needs a value", a);
            const char *v = argv[++i];
            const char *err = slot ? NULL : is_const ? parse_const_flag(v, &o->mesh) : parse_mesh_flag(v, &o->mesh);
            if (slot)
                *slot = v;
            else if (err) {
                fprintf(stderr, "shardc: error: bad %s '%s': %s\n", a, v, err);
                return 2;
            }
        } else if (strcmp(a, "--check") == 0) {
            o->check = 1;
        } else if (strcmp(a, "--no-cache") == 0) {
            o->no_cache = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return -1;
        } else if (strcmp(a, "--version") == 0) {
            printf("shardc %s\n", SHARDC_VERSION);
            return -1;
        } else if (a[0] == '-' && a[1])
            return usage_error("unknown option '%s'", a);
        else if (!o->command)
            o->command = a;
        else if (!o->input)
            o->input = a;
        else if (!o->file && strcmp(o->command, "cache") == 0)
            o->file = a;
        else
            return usage_error("unexpected argument '%s'", a);
    }
    return 0;
}

/* The source, in the compilation's arena: it lives as long as the
 * diagnostics that quote it.  Doubling keeps the copies under twice its size. */
static char *read_file(Arena *arena, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = arena_alloc(arena, cap);
    for (size_t got; (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (cap - n - 1 == 0) {
            buf = arena_realloc(arena, buf, n, 2 * cap);
            cap *= 2;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (failed)
        return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int fn_symbol(const Compilation *c, const char *name) {
    for (int f = 0; f < c->module.nfns; f++)
        if (!c->module.fns[f].spec_of && strcmp(sym_name(&c->syms, c->module.fns[f].sym), name) == 0)
            return c->module.fns[f].sym;
    return -1;
}

typedef struct {
    const Module *m;
    int only_fn, show_why;
} DumpArgs;

static int write_dump(FILE *out, void *ctx) {
    const DumpArgs *a = ctx;
    ir_dump(a->m, out, a->only_fn, a->show_why);
    return 0;
}

static int fn_index(const Compilation *c, int sym);

/* run --check: compile the program again with every mesh axis of size 1,
 * so that the function runs unpartitioned on one device, and compare. */
static int run_checked(const Compilation *c, int fn_sym, const char *path, const char *text, size_t len,
                       const MeshFlag *mesh, const char *const *ins, int nins, const char *out, RunOptions *ro) {
    MeshFlag one = *mesh;
    const Module *m = &c->module;
    one.n = m->naxes;
    for (int a = 0; a < m->naxes; a++) {
        snprintf(one.name[a], sizeof one.name[a], "%s", sym_name(m->syms, m->axis_sym[a]));
        one.size[a] = 1;
    }
    Compilation single = {0};
    int rc = frontend_compile(&single, path, text, len, NULL, &one, STAGE_SCHEDULED);
    const char *fn = sym_name(m->syms, fn_sym);
    int f = rc == FRONTEND_OK ? fn_symbol(&single, fn) : -1;
    if (f < 0) {
        fprintf(stderr, "shardc: error: --check: '%s' does not compile for a mesh of one device\n", fn);
        compilation_free(&single);
        return 1;
    }
    ro->check = &single.module;
    ro->check_fn = fn_index(&single, f);
    rc = run_command(m, fn_index(c, fn_sym), ins, nins, out, ro);
    compilation_free(&single);
    return rc;
}

static int fn_index(const Compilation *c, int sym) {
    for (int f = 0; f < c->module.nfns; f++)
        if (c->module.fns[f].sym == sym)
            return f;
    return -1;
}

/* The build cache's settings from the environment: SHARDC_CACHE=0 turns
 * it off, SHARDC_CACHE_DIR, else $XDG_CACHE_HOME/shardc, else
 * ~/.cache/shardc holds it, SHARDC_CACHE_MAX bounds it (default 1 GiB).
 * Returns 0, or 2 after a bad value. */
static int cache_options(CacheOptions *c, char *dir, size_t cap) {
    const char *on = getenv("SHARDC_CACHE"), *d = getenv("SHARDC_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME"), *max = getenv("SHARDC_CACHE_MAX"), *stats = getenv("SHARDC_CACHE_STATS");
    c->enabled = !on || strcmp(on, "0") != 0;
    c->stats = stats && *stats && strcmp(stats, "0") != 0;
    c->max_bytes = (int64_t)1 << 30;
    if (d && *d)
        snprintf(dir, cap, "%s", d);
    else if (xdg && *xdg == '/')           /* the XDG spec: a relative path is to be ignored */
        snprintf(dir, cap, "%s/shardc", xdg);
    else if (home && *home)
        snprintf(dir, cap, "%s/.cache/shardc", home);
    else
        c->enabled = 0;                    /* nowhere to keep it */
    c->dir = dir;
    const char *err = max && *max ? parse_size(max, &c->max_bytes) : NULL;
    if (err)
        fprintf(stderr, "shardc: error: bad SHARDC_CACHE_MAX '%s': %s\n", max, err);
    return err ? 2 : 0;
}

/* shardc cache info | clean | hash FILE */
static int cache_main(const Options *o) {
    char dir[4096];
    CacheOptions c;
    int rc = cache_options(&c, dir, sizeof dir);
    if (rc)
        return rc;
    const char *what = o->input ? o->input : "";
    int hash = strcmp(what, "hash") == 0;
    if (strcmp(what, "info") != 0 && strcmp(what, "clean") != 0 && !hash)
        return usage_error("%s", "cache takes info or clean");
    if (hash != !!o->file)
        return usage_error("%s", hash ? "cache hash needs a file" : "cache info and clean take no file");
    return cache_command(&c, what, o->file);
}

/* The progress line's head: the file and the mesh it was compiled for. */
static void status_head(Status *s, const char *input, const Module *m) {
    char mesh[256] = "";
    for (int a = 0; a < m->naxes; a++) {
        size_t n = strlen(mesh);
        snprintf(mesh + n, sizeof mesh - n, "%s%s=%lld", a ? "," : "", sym_name(m->syms, m->axis_sym[a]),
                 (long long)m->axis_size[a]);
    }
    status_begin(s, "shardc: %s (mesh %s)", input, m->naxes ? mesh : "of one device");
    status_add(s, "partitioned, scheduled");
}

int main(int argc, char **argv) {
    Options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;     /* -1: --help or --version answered */
    if (!o.command)
        return usage_error("%s", "no command given");
    if (strcmp(o.command, "cache") == 0)
        return cache_main(&o);
    int is_check = strcmp(o.command, "check") == 0, is_dump = strcmp(o.command, "dump") == 0;
    int is_show = strcmp(o.command, "show") == 0, is_interp = strcmp(o.command, "interp") == 0;
    int is_compile = strcmp(o.command, "compile") == 0, is_build = strcmp(o.command, "build") == 0;
    int is_run = strcmp(o.command, "run") == 0, is_codegen = is_compile || is_build || is_run;
    if (!is_check && !is_dump && !is_show && !is_interp && !is_codegen)
        return usage_error("unknown command '%s'", o.command);
    if (!o.input)
        return usage_error("%s needs an input file", o.command);
    if (o.backend && !is_run && !is_build)
        return usage_error("%s", "--backend goes with build and run");
    if (o.backend && strcmp(o.backend, "threads") != 0 && strcmp(o.backend, "mpi") != 0)
        return usage_error("unknown --backend '%s': threads or mpi", o.backend);
    RunOptions ro = {.mpi = o.backend && strcmp(o.backend, "mpi") == 0};
    if (o.no_cache && !is_run && !is_build)
        return usage_error("%s", "--no-cache goes with build and run");
    char cache_dir[4096];
    Status status;
    status_init(&status);
    ro.status = is_build || is_run ? &status : NULL;
    if ((is_build || is_run) && cache_options(&ro.cache, cache_dir, sizeof cache_dir))
        return 2;
    ro.cache.enabled &= !o.no_cache;
    if (o.np && (!is_run || !ro.mpi))
        return usage_error("%s", "--np goes with run --backend mpi");
    if (o.np) {
        char *end;
        long np = strtol(o.np, &end, 10);
        if (*end || np < 1 || np > 65536)
            return usage_error("bad --np '%s': a number of processes, 1 to 65536", o.np);
        ro.np = (int)np;
    }
    if (o.check && !is_run)
        return usage_error("%s", "--check goes with run");
    if ((o.steps || o.log_every) && !is_run)
        return usage_error("%s", "--steps and --log-every go with run (a program built by build takes them too)");
    if (o.log_every && !o.steps)
        return usage_error("%s", "--log-every goes with --steps");
    const char *const counts[] = {o.steps, o.log_every};
    for (int i = 0; i < 2; i++) {
        char *end;
        errno = 0;
        long n = counts[i] ? strtol(counts[i], &end, 10) : 1;
        if (counts[i] && (!*counts[i] || *end || errno || n < 1 || n > 2000000000L)) {
            fprintf(stderr, "shardc: error: bad %s '%s': a whole number of steps from 1 to 2000000000\n",
                    i ? "--log-every" : "--steps", counts[i]);
            return 2;
        }
    }
    ro.steps = o.steps;
    ro.log_every = o.log_every;
    if (is_codegen && o.stage)
        return usage_error("%s takes no --stage", o.command);
    if (is_build && (!o.fn || !o.output))
        return usage_error("%s", "build needs -o FILE and --fn F");
    if (is_run && (!o.fn || !o.out || o.output))
        return usage_error("%s", "run needs --fn and --out (and takes no -o)");
    if (is_check && (o.stage || o.fn || o.output))
        return usage_error("%s", "--stage, --fn and -o go with dump, not check");
    if (!is_show && (o.value || o.format))
        return usage_error("%s", "--value and --format go with show");
    if (!is_interp && !is_run && (o.nins || o.out))
        return usage_error("%s", "--in and --out go with interp and run");
    if (is_interp && (!o.fn || !o.out || o.output))
        return usage_error("%s", "interp needs --fn and --out (and takes no -o)");
    if (is_interp && o.stage && strcmp(o.stage, "parsed") != 0 && strcmp(o.stage, "partitioned") != 0)
        return usage_error("interp runs the parsed or the partitioned program, not '%s'", o.stage);
    if (is_show) {
        int dot = o.format && strcmp(o.format, "dot") == 0;
        if (o.format && !dot && strcmp(o.format, "text") != 0)
            return usage_error("unknown --format '%s': text or dot", o.format);
        if (!o.fn || (!dot && !o.value))
            return usage_error("%s", "show needs --fn, and --value unless --format dot");
        if (o.output)
            return usage_error("%s", "show writes to standard output");
        if (!o.stage)
            o.stage = "sharded";
        if (strcmp(o.stage, "sharded") != 0 && strcmp(o.stage, "partitioned") != 0)
            return usage_error("show draws the sharded or partitioned stage, not '%s'", o.stage);
    }
    if (is_dump) {
        if (!o.stage)
            return usage_error("%s", "dump needs --stage parsed, sharded, partitioned or scheduled");
        if (strcmp(o.stage, "parsed") != 0 && strcmp(o.stage, "sharded") != 0 && strcmp(o.stage, "partitioned") != 0 &&
            strcmp(o.stage, "scheduled") != 0)
            return usage_error("unknown stage '%s': stages are parsed, sharded, partitioned, scheduled", o.stage);
    }
    size_t len;
    Compilation c = {0};
    char *text = read_file(&c.arena, o.input, &len);
    if (!text) {
        fprintf(stderr, "shardc: error: cannot read '%s': %s\n", o.input, strerror(errno ? errno : EIO));
        compilation_free(&c);
        return 1;
    }
    /* check propagates too (spec section 6); dump stops where it is asked to. */
    if (is_interp && !o.stage)
        o.stage = "parsed";
    if (is_codegen)
        o.stage = "scheduled";
    Stage stage = is_check ? STAGE_SHARDED : strcmp(o.stage, "parsed") == 0 ? STAGE_PARSED
                : strcmp(o.stage, "sharded") == 0 ? STAGE_SHARDED
                : strcmp(o.stage, "partitioned") == 0 ? STAGE_PARTITIONED : STAGE_SCHEDULED;
    rc = frontend_compile(&c, o.input, text, len, stderr, &o.mesh, stage);
    if (rc == FRONTEND_OK && ro.status)
        status_head(ro.status, o.input, &c.module);
    if (rc == FRONTEND_OK && !is_check) {
        int only = -1;
        if (o.fn && (only = fn_symbol(&c, o.fn)) < 0) {
            status_end(ro.status);
            fprintf(stderr, "shardc: error: no function named '%s' in %s\n", o.fn, o.input);
            rc = 2;
        } else if (is_dump)
            rc = write_output(o.output, write_dump, &(DumpArgs){&c.module, only, stage == STAGE_SHARDED});
        else if (is_compile)
            rc = compile_command(&c.module, o.fn ? fn_index(&c, only) : -1, o.output);
        else if (is_build)
            rc = build_command(&c.module, fn_index(&c, only), o.output, &ro);
        else if (is_run && o.check)
            rc = run_checked(&c, only, o.input, text, len, &o.mesh, o.ins, o.nins, o.out, &ro);
        else if (is_run)
            rc = run_command(&c.module, fn_index(&c, only), o.ins, o.nins, o.out, &ro);
        else if (is_interp)
            rc = interp_command(&c.module, fn_index(&c, only), o.ins, o.nins, o.out);
        else if (o.format && strcmp(o.format, "dot") == 0)
            show_dot(&c.module, fn_index(&c, only), stdout);
        else
            rc = show_value(&c.module, fn_index(&c, only), o.value, stdout);
    }
    compilation_free(&c);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "shardc: error: cannot write the output\n");
        return 1;
    }
    return rc;
}
