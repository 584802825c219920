/* The shardc command line (docs/cli.md).  Exit status: 0 success, 1 an
 * error in the program, 2 bad command-line use, 3 an internal error. */
#include "frontend.h"
#include "output.h"
#include "codegen_cmd.h"
#include "interp_cmd.h"
#include "show.h"
#include "version.h"
#include "usage.h"
#include "../codegen/codegen.h"
#include "../cost/cost.h"

#include "../base/suggest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>


enum { MAX_INS = 1024 };           /* --in options, a bound instead of an allocation */

typedef struct {
    const char *command, *input, *stage, *fn, *output, *value, *format, *backend, *np, *steps, *log_every;
    const char *checkpoint, *checkpoint_every, *resume;   /* run --steps, passed to the program */
    int check, cast;                 /* run --check; interp and run --cast */
    int no_cache;                    /* build and run --no-cache */
    int shared;                      /* build --shared */
    int verbose;                     /* build and run -v */
    int cost;                        /* dump and show --cost */
    const char *target;              /* --target */
    const char *top;                 /* autoshard --top */
    const char *file;                /* cache hash FILE */
    MeshFlag mesh;
    const char *ins[MAX_INS], *out;  /* interp */
    int nins;
} Options;

/* A usage error, with the nearest of sg's names when there is one. */
static int usage_error_near(const char *fmt, const char *arg, const Suggest *sg) {
    char hint[160] = "";
    fputs("shardc: error: ", stderr);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "%s\nrun 'shardc --help' for usage\n", sg ? suggest_text(sg, hint, sizeof hint) : "");
    return 2;
}

static int usage_error(const char *fmt, const char *arg) { return usage_error_near(fmt, arg, NULL); }

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

/* Parse NAME=NUMBER,...; returns NULL or what is wrong.  An integer is
 * kept as one (exact to 2^63, where a double is exact to 2^53). */
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
        int is_int = end != v && (!*end || *end == ',');
        if (is_int && errno == ERANGE)
            return "an integer from -9223372036854775808 to 9223372036854775807 (i64)";
        double x = is_int ? (double)i : strtod(v, &end);
        if (end == v || x != x || !(p = flag_next(end)))
            return "expected NAME=NUMBER,...";
        f->const_value[f->nconsts] = x;
        f->const_int[f->nconsts] = is_int ? i : 0;
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

static int bad_value(const char *name, const char *v, const char *err) {
    fprintf(stderr, "shardc: error: bad %s '%s': %s\n", name, v, err);
    return 2;
}

/* An option that takes a value, with its value.  Returns 0 or 2. */
static int set_option(Options *o, const OptionSpec *s, const char *v) {
    const char *err;
    switch (s->id) {
    case OPT_MESH: return (err = parse_mesh_flag(v, &o->mesh)) ? bad_value(s->name, v, err) : 0;
    case OPT_CONST: return (err = parse_const_flag(v, &o->mesh)) ? bad_value(s->name, v, err) : 0;
    case OPT_DEVICE_MEMORY: return (err = parse_size(v, &o->mesh.device_memory)) ? bad_value(s->name, v, err) : 0;
    case OPT_STAGE: o->stage = v; break;
    case OPT_FN: o->fn = v; break;
    case OPT_VALUE: o->value = v; break;
    case OPT_FORMAT: o->format = v; break;
    case OPT_IN:
        if (o->nins == MAX_INS)
            return usage_error("at most %s --in options", "1024");
        o->ins[o->nins++] = v;
        break;
    case OPT_OUT: o->out = v; break;
    case OPT_BACKEND: o->backend = v; break;
    case OPT_NP: o->np = v; break;
    case OPT_STEPS: o->steps = v; break;
    case OPT_LOG_EVERY: o->log_every = v; break;
    case OPT_CHECKPOINT: o->checkpoint = v; break;
    case OPT_CHECKPOINT_EVERY: o->checkpoint_every = v; break;
    case OPT_RESUME: o->resume = v; break;
    case OPT_OUTPUT: o->output = v; break;
    case OPT_TARGET: o->target = v; break;
    case OPT_TOP: o->top = v; break;
    default: break;
    }
    return 0;
}

/* An unknown option, with the nearest known one. */
static int unknown_option(const char *a, size_t len) {
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(len < 100 ? len : 100), a);
    Suggest sg = suggest_begin(name);
    for (int i = 0; i < shardc_noptions; i++)
        suggest_add(&sg, shardc_options[i].name, -1);
    return usage_error_near("unknown option '%s'", a, &sg);
}

/* Options are --opt VALUE or --opt=VALUE (-o FILE only the first way).
 * Returns 0 or 2 after a usage error. */
/* Where a switch (an option without a value) is kept; NULL for the others. */
static int *switch_of(Options *o, int id) {
    switch (id) {
    case OPT_RESHARD_CANDIDATES: return &o->mesh.reshard_candidates;
    case OPT_CHECK: return &o->check;
    case OPT_CAST: return &o->cast;
    case OPT_NO_CACHE: return &o->no_cache;
    case OPT_VERBOSE: return &o->verbose;
    case OPT_SHARED: return &o->shared;
    case OPT_COST: return &o->cost;
    case OPT_AUTO: return &o->mesh.auto_all;
    default: return NULL;
    }
}

static int parse_args(int argc, char **argv, Options *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) {
            if (!o->command)
                o->command = a;
            else if (!o->input)
                o->input = a;
            else if (!o->file && find_command(o->command) == find_command("cache"))
                o->file = a;
            else
                return usage_error("unexpected argument '%s'", a);
            continue;
        }
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const OptionSpec *s = find_option(a, len);
        if (!s)
            return unknown_option(a, len);
        char name[64];
        snprintf(name, sizeof name, "%s", s->name);
        if (!s->arg && eq)
            return usage_error("%s takes no value", name);
        int *flag = switch_of(o, s->id);
        if (flag) {
            *flag = 1;
            continue;
        }
        if (!s->arg)
            continue;                   /* --help, --version, --man: answered before parsing */
        const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!v)
            return usage_error("%s needs a value", name);
        if (set_option(o, s, v))
            return 2;
    }
    return 0;
}

/* --help, -h, --version and --man are answered wherever they appear, before
 * anything else is checked; with a command anywhere (shardc run --help,
 * shardc --help run), --help gives that command's help.  Returns 1 when
 * one was answered. */
static int answer_help(int argc, char **argv) {
    const CommandSpec *cmd = NULL;
    const OptionSpec *asked = NULL;
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const OptionSpec *s = a[0] == '-' && a[1] ? find_option(a, strcspn(a, "=")) : NULL;
        if (a[0] != '-' || !a[1])
            cmd = positional++ ? cmd : find_command(a);
        else if (s && s->arg && !strchr(a, '='))
            i++;                        /* its value */
        else if (s && !asked && (s->id == OPT_HELP || s->id == OPT_VERSION || s->id == OPT_MAN))
            asked = s;
    }
    if (!asked)
        return 0;
    if (asked->id == OPT_VERSION)
        printf("shardc %s\n", SHARDC_VERSION);
    else if (asked->id == OPT_MAN)
        print_man(stdout, SHARDC_VERSION);
    else if (cmd && cmd->bit != CMD_HELP)
        print_command_help(cmd, stdout);
    else
        print_usage(stdout);
    return 1;
}

/* An unknown command, with the nearest known one. */
static int unknown_command(const char *name) {
    Suggest sg = suggest_begin(name);
    for (int i = 0; i < shardc_ncommands; i++)
        suggest_add(&sg, shardc_commands[i].name, -1);
    return usage_error_near("unknown command '%s'", name, &sg);
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
    const Target *target;        /* dump --cost */
} DumpArgs;

static int write_dump(FILE *out, void *ctx) {
    const DumpArgs *a = ctx;
    if (a->target)
        cost_dump(a->m, out, a->only_fn, a->target);
    else
        ir_dump(a->m, out, a->only_fn, a->show_why);
    return 0;
}

static int fn_index(const Compilation *c, int sym);

typedef struct {
    const Module *m;
    int f;
} SigArgs;

static int write_sig_to(FILE *out, void *ctx) {
    const SigArgs *a = ctx;
    return codegen_emit_signature(a->m, a->f, out);
}

/* build --shared -o prog.so: the signature in prog.sig (prog: prog.sig). */
static int write_signature(const Module *m, int f, const char *out) {
    size_t n = strlen(out), stem = n >= 3 && strcmp(out + n - 3, ".so") == 0 ? n - 3 : n;
    char path[4096];
    snprintf(path, sizeof path, "%.*s.sig", (int)stem, out);
    return write_output(path, write_sig_to, &(SigArgs){m, f});
}

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
    c->off = c->enabled ? NULL : "SHARDC_CACHE=0";
    c->stats = stats && *stats && strcmp(stats, "0") != 0;
    c->max_bytes = (int64_t)1 << 30;
    if (d && *d)
        snprintf(dir, cap, "%s", d);
    else if (xdg && *xdg == '/')           /* the XDG spec: a relative path is to be ignored */
        snprintf(dir, cap, "%s/shardc", xdg);
    else if (home && *home)
        snprintf(dir, cap, "%s/.cache/shardc", home);
    else {
        c->enabled = 0;                    /* nowhere to keep it */
        c->off = "none of SHARDC_CACHE_DIR, XDG_CACHE_HOME (an absolute path) and HOME is set";
        snprintf(dir, cap, "%s", "");
    }
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
    if (!s->verbose)                       /* -v said each stage */
        status_add(s, "partitioned, scheduled");
}

/* A usage error about a value that must be one of `values` (space
 * separated), with the nearest of them. */
static int stage_error(const char *fmt, const char *v, const char *values) {
    Suggest sg = suggest_begin(v);
    for (const char *p = values; *p; p += strcspn(p, " "), p += *p == ' ')
        suggest_add(&sg, p, (int)strcspn(p, " "));
    return usage_error_near(fmt, v, &sg);
}

static const char *suggest_fn(const Compilation *c, const char *name, char *buf, size_t cap) {
    Suggest sg = suggest_begin(name);
    for (int f = 0; f < c->module.nfns; f++)
        if (!c->module.fns[f].spec_of)
            suggest_add(&sg, sym_name(&c->syms, c->module.fns[f].sym), -1);
    return suggest_text(&sg, buf, cap);
}

/* compile and build --fn a,b: the fns as indices into fns[] (at most
 * MAX_ENTRIES); their count, or -1 after a message (the progress line
 * ended first) naming one that is not there or named twice. */
enum { MAX_ENTRIES = 64 };
static int fns_named(const Compilation *c, const char *list, const char *input, int *fns, Status *status) {
    int n = 0;
    for (const char *p = list;; p++) {
        int len = (int)strcspn(p, ",");
        char name[256], hint[160];
        snprintf(name, sizeof name, "%.*s", len, p);
        if (n == MAX_ENTRIES) {
            status_end(status);
            fprintf(stderr, "shardc: error: --fn names more than %d fns\n", MAX_ENTRIES);
            return -1;
        }
        int sym = fn_symbol(c, name);
        if (sym < 0) {
            status_end(status);
            fprintf(stderr, "shardc: error: no function named '%s' in %s%s\n", name, input,
                    suggest_fn(c, name, hint, sizeof hint));
            return -1;
        }
        fns[n] = fn_index(c, sym);
        for (int i = 0; i < n; i++)
            if (fns[i] == fns[n]) {
                status_end(status);
                fprintf(stderr, "shardc: error: --fn names '%s' twice\n", name);
                return -1;
            }
        n++;
        p += len;
        if (!*p)
            return n;
    }
}

/* shardc help [COMMAND] */
static int help_command(const char *name) {
    const CommandSpec *c = find_command(name);
    if (name && !c)
        return unknown_command(name);
    if (c && c->bit != CMD_HELP)
        print_command_help(c, stdout);
    else
        print_usage(stdout);
    return 0;
}

/* shardc complete-fns prog.tdsl: the names --fn takes, one a line, for
 * bash completion; nothing (and status 1) when the program does not
 * compile. */
static int complete_fns(const Options *o) {
    size_t len;
    Compilation c = {0};
    char *text = o->input ? read_file(&c.arena, o->input, &len) : NULL;
    int rc = text ? frontend_compile(&c, o->input, text, len, NULL, &o->mesh, STAGE_PARSED) : 1;
    for (int f = 0; rc == FRONTEND_OK && f < c.module.nfns; f++)
        if (!c.module.fns[f].spec_of)
            printf("%s\n", sym_name(&c.syms, c.module.fns[f].sym));
    compilation_free(&c);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    Options o = {0};
    if (answer_help(argc, argv))
        return 0;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (!o.command)
        return usage_error("%s", "no command given");
    const CommandSpec *cmd = find_any_command(o.command);
    switch (cmd ? cmd->bit : 0) {
    case 0: return unknown_command(o.command);
    case CMD_CACHE: return cache_main(&o);
    case CMD_HELP: return help_command(o.input);
    case CMD_COMPLETE_OPTIONS: print_completion(find_command(o.input), stdout); return 0;
    case CMD_COMPLETE_FNS: return complete_fns(&o);
    default: break;             /* the commands that compile: below */
    }
    unsigned bit = cmd->bit;
    int is_check = bit == CMD_CHECK, is_dump = bit == CMD_DUMP, is_show = bit == CMD_SHOW;
    int is_interp = bit == CMD_INTERP, is_compile = bit == CMD_COMPILE, is_build = bit == CMD_BUILD;
    int is_run = bit == CMD_RUN, is_codegen = is_compile || is_build || is_run, is_autoshard = bit == CMD_AUTOSHARD;
    if (!o.input)
        return usage_error("%s needs an input file", o.command);
    int several = o.fn && strchr(o.fn, ',');
    if (several && ((!is_compile && !is_build) || o.shared || o.mesh.auto_all))
        return usage_error("%s", "--fn names several fns (a,b) only for compile and build, without --shared or --auto");
    if (o.backend && !is_run && !is_build)
        return usage_error("%s", "--backend goes with build and run");
    if (o.backend && strcmp(o.backend, "threads") != 0 && strcmp(o.backend, "mpi") != 0)
        return stage_error("unknown --backend '%s': threads or mpi", o.backend, "threads mpi");
    RunOptions ro = {.mpi = o.backend && strcmp(o.backend, "mpi") == 0};
    if (o.no_cache && !is_run && !is_build)
        return usage_error("%s", "--no-cache goes with build and run");
    if (o.verbose && !is_run && !is_build && !is_autoshard)
        return usage_error("%s", "-v goes with build, run and autoshard");
    if (o.mesh.auto_all && !o.fn)
        return usage_error("%s", "--auto needs --fn F: the fn whose parameters and results the sharding search shards");
    if (is_autoshard && (!o.fn || o.stage || o.output))
        return usage_error("%s", "autoshard needs --fn F (and takes no --stage or -o)");
    if (o.top && !is_autoshard)
        return usage_error("%s", "--top goes with autoshard");
    o.mesh.auto_top = 3;
    if (o.top) {
        char *end;
        long top = strtol(o.top, &end, 10);
        if (!*o.top || *end || top < 0 || top > 1000)
            return usage_error("bad --top '%s': a number of plans, 0 to 1000", o.top);
        o.mesh.auto_top = (int)top;
    }
    o.mesh.entry = several ? NULL : o.fn;
    o.mesh.target = o.target;
    o.mesh.auto_verbose = o.verbose;
    /* The report is held until the search's status line is cleared, which
     * it would otherwise follow on a terminal. */
    char *report_text = NULL;
    size_t report_len = 0;
    if (is_autoshard && !(o.mesh.auto_report = open_memstream(&report_text, &report_len))) {
        fprintf(stderr, "shardc: error: cannot hold the report: %s\n", strerror(errno));
        return 1;
    }
    char cache_dir[4096];
    Status status;
    status_init(&status, o.verbose);
    status.file = o.input;
    ro.status = is_build || is_run ? &status : NULL;
    if (ro.status || is_autoshard)
        frontend_set_progress(status_stage, &status);
    if ((is_build || is_run) && cache_options(&ro.cache, cache_dir, sizeof cache_dir))
        return 2;
    ro.cache.stats |= o.verbose;             /* -v says each hit, miss and store */
    ro.cache.enabled &= !o.no_cache;
    if (o.shared && !is_build)
        return usage_error("%s", "--shared goes with build");
    ro.shared = o.shared;
    ro.cache.off = o.no_cache ? "--no-cache" : ro.cache.off;
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
    if (o.cast && !is_run && !is_interp)
        return usage_error("%s", "--cast goes with interp and run (a program built by build takes it too)");
    ro.cast = o.cast;
    if ((o.steps || o.log_every) && !is_run)
        return usage_error("%s", "--steps and --log-every go with run (a program built by build takes them too)");
    /* The options run passes to the program with --steps, and what each needs. */
    const struct { const char *given, *needs, *message; } passed[] = {
        {o.log_every, o.steps, "--log-every goes with --steps"},
        {o.checkpoint, o.steps, "--checkpoint goes with --steps"},
        {o.resume, o.steps, "--resume goes with --steps"},
        {o.checkpoint_every, o.checkpoint, "--checkpoint-every goes with --checkpoint"},
    };
    for (size_t i = 0; i < sizeof passed / sizeof *passed; i++) {
        if (passed[i].given && !is_run)
            return usage_error("%s", "--checkpoint, --checkpoint-every and --resume go with run (a program built by "
                                     "build takes them too)");
        if (passed[i].given && !passed[i].needs)
            return usage_error("%s", passed[i].message);
    }
    const char *const counts[] = {o.steps, o.log_every, o.checkpoint_every};
    static const char *const count_names[] = {"--steps", "--log-every", "--checkpoint-every"};
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        long n = counts[i] ? strtol(counts[i], &end, 10) : 1;
        if (counts[i] && (!*counts[i] || *end || errno || n < 1 || n > 2000000000L)) {
            fprintf(stderr, "shardc: error: bad %s '%s': a whole number of steps from 1 to 2000000000\n",
                    count_names[i], counts[i]);
            return 2;
        }
    }
    ro.steps = o.steps;
    ro.log_every = o.log_every;
    ro.checkpoint = o.checkpoint;
    ro.checkpoint_every = o.checkpoint_every;
    ro.resume = o.resume;
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
        return stage_error("interp runs the parsed or the partitioned program, not '%s'", o.stage, "parsed partitioned");
    if (is_show) {
        int dot = o.format && strcmp(o.format, "dot") == 0;
        if (o.format && !dot && strcmp(o.format, "text") != 0)
            return stage_error("unknown --format '%s': text or dot", o.format, "text dot");
        if (!o.fn || (!dot && !o.value && !o.cost))
            return usage_error("%s", "show needs --fn, and --value unless --format dot or --cost");
        if (o.output)
            return usage_error("%s", "show writes to standard output");
        if (!o.stage)
            o.stage = o.cost ? "scheduled" : "sharded";
        if (o.cost && (o.value || dot || strcmp(o.stage, "scheduled") != 0))
            return usage_error("%s", "show --cost prints a summary of the scheduled program: no --value, --format or --stage");
        if (!o.cost && strcmp(o.stage, "sharded") != 0 && strcmp(o.stage, "partitioned") != 0)
            return stage_error("show draws the sharded or partitioned stage, not '%s'", o.stage, "sharded partitioned");
    }
    if (is_dump) {
        if (!o.stage)
            return usage_error("%s", "dump needs --stage parsed, sharded, partitioned or scheduled");
        if (strcmp(o.stage, "parsed") != 0 && strcmp(o.stage, "sharded") != 0 && strcmp(o.stage, "partitioned") != 0 &&
            strcmp(o.stage, "scheduled") != 0)
            return stage_error("unknown stage '%s': stages are parsed, sharded, partitioned, scheduled", o.stage,
                               "parsed sharded partitioned scheduled");
    }
    if (o.cost && is_dump && strcmp(o.stage, "scheduled") != 0)
        return usage_error("%s", "--cost goes with dump --stage scheduled");
    if (o.target && is_check)
        return usage_error("%s", "--target goes with --cost and with the commands that compile a fn (--fn)");
    Target target;
    if (o.cost && target_load(&target, o.target, stderr))
        return 2;
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
    if (is_autoshard)
        o.stage = "sharded";
    Stage stage = is_check ? STAGE_SHARDED : strcmp(o.stage, "parsed") == 0 ? STAGE_PARSED
                : strcmp(o.stage, "sharded") == 0 ? STAGE_SHARDED
                : strcmp(o.stage, "partitioned") == 0 ? STAGE_PARTITIONED : STAGE_SCHEDULED;
    rc = frontend_compile(&c, o.input, text, len, stderr, &o.mesh, stage);
    if (is_autoshard) {
        status_end(&status);
        fclose(o.mesh.auto_report);
        fwrite(report_text, 1, report_len, stdout);
        free(report_text);
    }
    if (rc == FRONTEND_OK && ro.status)
        status_head(ro.status, o.input, &c.module);
    if (rc == FRONTEND_OK && !is_check) {
        int only = -1, fns[MAX_ENTRIES], nfns = 0;
        if (several && (nfns = fns_named(&c, o.fn, o.input, fns, ro.status)) < 0)
            rc = 2;
        else if (several)
            rc = (is_compile ? compile_command(&c.module, (Entries){nfns, fns}, o.output)
                             : build_command(&c.module, (Entries){nfns, fns}, o.output, &ro));
        else if (o.fn && (only = fn_symbol(&c, o.fn)) < 0) {
            status_end(ro.status);
            char hint[160];
            fprintf(stderr, "shardc: error: no function named '%s' in %s%s\n", o.fn, o.input,
                    suggest_fn(&c, o.fn, hint, sizeof hint));
            rc = 2;
        } else if (is_autoshard) {
            /* the report was printed by the search (autoshard_stage) */
        } else if (is_dump)
            rc = write_output(o.output, write_dump,
                              &(DumpArgs){&c.module, only, stage == STAGE_SHARDED, o.cost ? &target : NULL});
        else if (is_compile) {
            int f = o.fn ? fn_index(&c, only) : -1;
            rc = compile_command(&c.module, (Entries){f >= 0, &f}, o.output);
        } else if (is_build) {
            int f = fn_index(&c, only);
            rc = build_command(&c.module, (Entries){1, &f}, o.output, &ro);
            if (rc == 0 && o.shared)
                rc = write_signature(&c.module, fn_index(&c, only), o.output);
        }
        else if (is_run && o.check)
            rc = run_checked(&c, only, o.input, text, len, &o.mesh, o.ins, o.nins, o.out, &ro);
        else if (is_run)
            rc = run_command(&c.module, fn_index(&c, only), o.ins, o.nins, o.out, &ro);
        else if (is_interp)
            rc = interp_command(&c.module, fn_index(&c, only), o.ins, o.nins, o.out, o.cast);
        else if (o.cost)
            cost_show(&c.module, stdout, fn_index(&c, only), &target);
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
