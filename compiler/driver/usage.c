/* The command and option tables (usage.h) and everything printed from
 * them: the global usage, each command's help, the man page, and the lists
 * bash completion reads. */
#include "usage.h"

#include <string.h>

const CommandSpec shardc_commands[] = {
    {"check", CMD_CHECK, "check prog.tdsl [--mesh A=n,...] [--const N=v,...]",
     "parse, type-check and lower; print errors only",
     "Parse and type-check the program, lower it to the IR and propagate shardings. Prints nothing on success, "
     "the first error otherwise.",
     "shardc check samples/mlp.tdsl --mesh=X=4,Y=2"},
    {"dump", CMD_DUMP, "dump prog.tdsl --stage STAGE [--fn F] [-o FILE]",
     "print the IR after a stage (--stage parsed|sharded|partitioned|scheduled)",
     "Compile up to STAGE and print the IR: parsed (global shapes, user shardings), sharded (every value's "
     "sharding and why), partitioned (per-device programs with collectives; warnings on standard error) or "
     "scheduled (collectives split into start/done, buffers and peak bytes per device).",
     "shardc dump samples/mlp.tdsl --stage=sharded --fn mlp"},
    {"show", CMD_SHOW, "show prog.tdsl --fn F (--value V | --format dot | --cost) [--stage sharded|partitioned]",
     "draw which device holds which block of a value (--fn F --value V),\n"
     "or the dataflow graph of a function for Graphviz (--fn F --format dot),\n"
     "or its predicted time on a machine (--fn F --cost [--target T])",
     "Draw which device holds which block of value V of function F (named as dump names it), or with "
     "--format dot write F's dataflow graph with shardings for Graphviz, or with --cost print F's predicted "
     "time on the --target machine (docs/autoshard.md).",
     "shardc show samples/mlp.tdsl --fn mlp --value h"},
    {"interp", CMD_INTERP,
     "interp prog.tdsl --fn F --in NAME=FILE.npy ... --out DIR [--stage parsed|partitioned] [--cast]",
     "run a function with the reference interpreter (slow; for testing):\n"
     "--fn F --in NAME=FILE.npy ... --out DIR writes DIR/result0.npy, ...;\n"
     "--stage partitioned runs the partitioned program on simulated devices",
     "Run function F with the reference interpreter on .npy (or .npz) inputs and write its results to "
     "DIR/result0.npy, ... (or one archive when DIR ends in .npz). --stage partitioned runs the partitioned "
     "program on simulated devices.",
     "shardc interp samples/mlp.tdsl --fn mlp --const B=8,D=4,F=16 --in x=x.npy --in w_in=w_in.npy "
     "--in w_out=w_out.npy --out out"},
    {"compile", CMD_COMPILE, "compile prog.tdsl [-o prog.c] [--fn F]",
     "emit C for the per-device functions: -o prog.c [--fn F adds a main()]",
     "Emit one C11 file for every per-device function and the header prog.h declaring their entry points; "
     "with --fn F, also a main() that runs F (with --fn F,G,...: the one its own --fn names). Without -o the C "
     "goes to standard output.",
     "shardc compile samples/mlp.tdsl -o mlp.c --fn mlp"},
    {"build", CMD_BUILD, "build prog.tdsl -o prog --fn F [--backend threads|mpi]",
     "emit C and link an executable: -o prog --fn F [--backend threads|mpi]",
     "Emit C for F and compile and link it with the compiler the libraries were built with (cc, or $CC; "
     "mpicc for MPI) into the executable prog, which takes --in, --out, --cast, --steps and the other "
     "options run passes it. --fn F,G,... builds one executable of those fns, whose --fn NAME picks the one "
     "that runs. On a terminal a progress line shows the phases; -v prints them as lines.",
     "shardc build samples/mlp.tdsl --fn mlp -o mlp && ./mlp --in x=x.npy --in w_in=w_in.npy "
     "--in w_out=w_out.npy --out out"},
    {"run", CMD_RUN,
     "run prog.tdsl --fn F --in NAME=FILE.npy ... --out DIR [--backend threads|mpi] [--np P] [--check] [--cast] "
     "[--steps N [--log-every K] [--checkpoint FILE.npz [--checkpoint-every K]] [--resume FILE.npz]]",
     "build and run a function:\n"
     "--fn F --in NAME=FILE.npy ... --out DIR [--backend threads|mpi] [--np P] [--check]\n"
     "[--steps N [--log-every K] [--checkpoint FILE.npz [--checkpoint-every K]] [--resume FILE.npz]]",
     "Build F in a temporary directory and run it on the threads backend or under mpirun, with the same "
     "inputs and outputs as interp. --check compares it with F run unpartitioned on one device; --steps N "
     "runs it N times as a training loop.",
     "shardc run samples/mlp.tdsl --fn mlp --const B=8,D=4,F=16 --in inputs.npz --out results.npz"},
    {"autoshard", CMD_AUTOSHARD,
     "autoshard prog.tdsl --fn F [--mesh A=n,...] [--target T] [--device-memory SIZE] [--auto] [--top N]",
     "choose the shardings of F's @auto dims (--auto: of all its dims) and\n"
     "print the chosen signature and the alternatives with their predicted cost",
     "Search the shardings of the @auto dims of F's parameters and results (with --auto, of every dim) for the "
     "plan the cost model predicts fastest on the --target machine within --device-memory (default: the "
     "target's memory per device); print the target, the search's size, the chosen plan's predicted time, "
     "memory and bytes sent per device, its signature as TDSL to paste, and a table of the alternatives "
     "(data parallel, megatron, fsdp, as written, and --top N others) with a one-line explanation each "
     "(docs/autoshard.md, \"The search\"). dump, show, build and run compile the same plan.",
     "shardc autoshard samples/mlp.tdsl --fn mlp --auto --target tpu-v5e"},
    {"cache", CMD_CACHE, "cache info | clean | hash FILE", "the build cache of build and run: info, clean",
     "Print where the build cache of build and run is and what it holds (info), remove its entries "
     "(clean), or print a file's SHA-256 as the cache computes it (hash FILE). SHARDC_CACHE_DIR, "
     "SHARDC_CACHE=0 and SHARDC_CACHE_MAX set it up (docs/cli.md).",
     "shardc cache info"},
    {"help", CMD_HELP, "help [COMMAND]", "print this help, or a command's",
     "Print the usage of shardc, or of COMMAND.", "shardc help run"},
};
const int shardc_ncommands = sizeof shardc_commands / sizeof shardc_commands[0];

/* For tools/shardc-completion.bash, in no help or list: complete-options
 * [COMMAND] prints the command names, or a line per option of COMMAND with
 * its values; complete-fns prog.tdsl the names --fn takes. */
static const CommandSpec internal_commands[] = {
    {"complete-options", CMD_COMPLETE_OPTIONS, NULL, NULL, NULL, NULL},
    {"complete-fns", CMD_COMPLETE_FNS, NULL, NULL, NULL, NULL},
};

const OptionSpec shardc_options[] = {
    {OPT_MESH, "--mesh", "A=n,B=m", CMD_COMPILING, "override the mesh axis sizes (names must match the program)", NULL},
    {OPT_CONST, "--const", "N=v,...", CMD_COMPILING, "override constants defined with const", NULL},
    {OPT_DEVICE_MEMORY, "--device-memory", "SIZE", CMD_COMPILING,
     "the bytes one device may hold (64M, 2G, 512KiB, ...;\n"
     "default unlimited): the partitioner avoids a lowering that\n"
     "would need more when another fits, and gradients checkpoint\n"
     "calls until they fit", NULL},
    {OPT_STAGE, "--stage", "STAGE", CMD_DUMP | CMD_SHOW | CMD_INTERP,
     "with dump: parsed, sharded, partitioned or scheduled; with show and\n"
     "interp: the stage whose program they read", "parsed sharded partitioned scheduled"},
    {OPT_FN, "--fn", "NAME", CMD_SEARCHING,
     "with dump: print only this function (and the specializations it calls);\n"
     "with show, interp, build and run: the function; with compile: add a main();\n"
     "with compile and build, F,G,...: a main() of several, which its own --fn picks from", NULL},
    {OPT_VALUE, "--value", "NAME", CMD_SHOW, "with show: the value to draw, named as dump names it", NULL},
    {OPT_FORMAT, "--format", "FORMAT", CMD_SHOW, "with show: text (default) or dot", "text dot"},
    {OPT_IN, "--in", "NAME=FILE", CMD_INTERP | CMD_RUN,
     "with interp and run: parameter NAME from a .npy file (one per parameter);\n"
     "NAME=FILE.npz takes the array NAME of an archive, NAME=FILE.npz:KEY its\n"
     "array KEY, and FILE.npz alone every parameter by name; for a record NAME,\n"
     "every field (NAME.FIELD, else FIELD)", NULL},
    {OPT_OUT, "--out", "DIR", CMD_INTERP | CMD_RUN,
     "with interp and run: where the results are written (a path ending in .npz:\n"
     "one archive holding result0, result1, ... and the named results)", NULL},
    {OPT_CAST, "--cast", NULL, CMD_INTERP | CMD_RUN,
     "with interp and run: convert float64 inputs to a parameter's f32, bf16 or f16\n"
     "(rounding) and int64 inputs to i32 (each value must fit)", NULL},
    {OPT_BACKEND, "--backend", "B", CMD_BUILD | CMD_RUN,
     "with build and run: threads (default, one thread per device) or mpi\n"
     "(processes launched with mpirun or srun, each with local devices)", "threads mpi"},
    {OPT_NP, "--np", "P", CMD_RUN,
     "with run --backend mpi: the number of processes (default: one per\n"
     "device); each runs devices/P devices", NULL},
    {OPT_CHECK, "--check", NULL, CMD_RUN,
     "with run: also run the function unpartitioned on one device and\n"
     "print the largest absolute and relative error", NULL},
    {OPT_RESHARD_CANDIDATES, "--reshard-candidates", NULL, CMD_DUMP,
     "with dump --stage partitioned: print after each reshard the plans\n"
     "weighed for it and the bytes each sends per device", NULL},
    {OPT_COST, "--cost", NULL, CMD_DUMP | CMD_SHOW,
     "with dump --stage scheduled: each instruction's FLOPs, bytes, bytes sent,\n"
     "predicted time and bound, and each fn's predicted time; with show --fn F:\n"
     "F's predicted time (docs/autoshard.md)", NULL},
    {OPT_TARGET, "--target", "FILE|NAME", CMD_SEARCHING,
     "with --cost, and for the sharding search of @auto dims: the machine\n"
     "description, a .target file or cpu, h100x8, tpu-v5e (default:\n"
     "build/host.target from make bench, else cpu)", NULL},
    {OPT_AUTO, "--auto", NULL, CMD_SEARCHING,
     "with --fn F: every dim of F's parameters and results is @auto, the\n"
     "sharding search chooses them all (replacing the written shardings)", NULL},
    {OPT_TOP, "--top", "N", CMD_AUTOSHARD,
     "with autoshard: how many other plans the search evaluated to list\n"
     "(default 3)", NULL},
    {OPT_NO_CACHE, "--no-cache", NULL, CMD_BUILD | CMD_RUN,
     "with build and run: neither use nor fill the build cache", NULL},
    {OPT_SHARED, "--shared", NULL, CMD_BUILD,
     "with build: link a shared library (-o prog.so) for the Python package, and\n"
     "write the function's signature beside it (prog.sig; docs/python.md)", NULL},
    {OPT_VERBOSE, "--verbose", NULL, CMD_BUILD | CMD_RUN | CMD_AUTOSHARD,
     "with build and run (also -v): say each step on a line of its own, on a\n"
     "terminal or not: the front end's stages and their time, the build\n"
     "cache's hit or miss, the C compiler's command line and time", NULL},
    {OPT_STEPS, "--steps", "N", CMD_RUN,
     "with run: run the function N times, each result named like a\n"
     "parameter (return loss, w) becoming that parameter for the next step;\n"
     "the scalar results are printed, and DIR/NAME.npy is the final parameter", NULL},
    {OPT_LOG_EVERY, "--log-every", "K", CMD_RUN,
     "with run --steps: print the scalar results every K steps (default N/10)", NULL},
    {OPT_CHECKPOINT, "--checkpoint", "FILE.npz", CMD_RUN,
     "with run --steps: write the carried parameters and the step to FILE.npz\n"
     "every K steps (--checkpoint-every K, default --log-every's) and after the last", NULL},
    {OPT_CHECKPOINT_EVERY, "--checkpoint-every", "K", CMD_RUN, "with run --checkpoint: write it every K steps", NULL},
    {OPT_RESUME, "--resume", "FILE.npz", CMD_RUN,
     "with run --steps: go on from a checkpoint's parameters and step to step N", NULL},
    {OPT_OUTPUT, "-o", "FILE", CMD_DUMP | CMD_COMPILE | CMD_BUILD, "output file (dump, compile, build)", NULL},
    {OPT_HELP, "--help", NULL, CMD_ALL, "show this help (after a command: that command's help)", NULL},
    {OPT_VERSION, "--version", NULL, CMD_ALL, "show the version", NULL},
    {OPT_MAN, "--man", NULL, 0, "print the man page (roff) on standard output", NULL},
};
const int shardc_noptions = sizeof shardc_options / sizeof shardc_options[0];

const CommandSpec *find_command(const char *name) {
    for (int i = 0; name && i < shardc_ncommands; i++)
        if (strcmp(shardc_commands[i].name, name) == 0)
            return &shardc_commands[i];
    return NULL;
}

const CommandSpec *find_any_command(const char *name) {
    for (size_t i = 0; name && i < sizeof internal_commands / sizeof internal_commands[0]; i++)
        if (strcmp(internal_commands[i].name, name) == 0)
            return &internal_commands[i];
    return find_command(name);
}

const OptionSpec *find_option(const char *name, size_t len) {
    if (len == 2 && strncmp(name, "-h", 2) == 0)
        return find_option("--help", 6);
    if (len == 2 && strncmp(name, "-v", 2) == 0)
        return find_option("--verbose", 9);
    for (int i = 0; i < shardc_noptions; i++)
        if (strlen(shardc_options[i].name) == len && strncmp(shardc_options[i].name, name, len) == 0)
            return &shardc_options[i];
    return NULL;
}

const char *option_values(const OptionSpec *o, const CommandSpec *c) {
    if (o->id == OPT_STAGE && c)
        return c->bit == CMD_SHOW ? "sharded partitioned" : c->bit == CMD_INTERP ? "parsed partitioned" : o->values;
    return o->values;
}

/* "--stage STAGE", "-h, --help" */
static void option_label(const OptionSpec *o, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s%s", o->id == OPT_HELP ? "-h, " : "", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
}

/* Text whose lines after the first are indented to `col`. */
static void print_indented(FILE *out, const char *text, int col) {
    for (const char *p = text; *p; p++) {
        fputc(*p, out);
        if (*p == '\n')
            fprintf(out, "%*s", col, "");
    }
    fputc('\n', out);
}

static void print_options(FILE *out, unsigned cmds) {
    for (int i = 0; i < shardc_noptions; i++) {
        const OptionSpec *o = &shardc_options[i];
        char label[64];
        if (!(o->cmds & cmds))
            continue;
        option_label(o, label, sizeof label);
        fprintf(out, strlen(label) > 16 ? "  %s\n%19s" : "  %-16s ", label, "");
        print_indented(out, o->help, 19);
    }
}

void print_usage(FILE *out) {
    fputs("usage: shardc COMMAND prog.tdsl [options]\n"
          "       shardc COMMAND --help | shardc help [COMMAND]\n\ncommands:\n", out);
    for (int i = 0; i < shardc_ncommands; i++) {
        fprintf(out, "  %-7s ", shardc_commands[i].name);
        print_indented(out, shardc_commands[i].summary, 10);
    }
    fputs("\noptions:\n", out);
    print_options(out, CMD_ALL);
    fputs("\nAn option's value follows it (--stage parsed) or an = (--stage=parsed).\n", out);
}

/* A paragraph wrapped at 78 columns after `indent` spaces. */
static void print_wrapped(FILE *out, const char *text, int indent) {
    int col = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, " ");
        if (col && col + 1 + (int)n > 78) {
            fputc('\n', out);
            col = 0;
        }
        if (!col)
            col = fprintf(out, "%*s", indent, "");
        else
            col += fprintf(out, " ");
        col += fprintf(out, "%.*s", (int)n, p);
        p += n + (p[n] == ' ');
    }
    fputc('\n', out);
}

void print_command_help(const CommandSpec *c, FILE *out) {
    fprintf(out, "usage: shardc %s\n\n", c->synopsis);
    print_wrapped(out, c->details, 0);
    if (c->bit != CMD_HELP) {
        fputs("\noptions (a value as --opt VALUE or --opt=VALUE):\n", out);
        print_options(out, c->bit);
    }
    fprintf(out, "\nexample:\n  %s\n", c->example);
}

/* roff text: backslashes and minus signs escaped, and a line that would
 * start with a control character protected. */
static void roff(FILE *out, const char *text) {
    int bol = 1;
    for (const char *p = text; *p; p++) {
        if (bol && (*p == '.' || *p == '\''))
            fputs("\\&", out);
        bol = *p == '\n';
        if (*p == '\\')
            fputs("\\e", out);
        else if (*p == '-')
            fputs("\\-", out);
        else
            fputc(*p, out);
    }
}

static void man_options(FILE *out, unsigned cmds) {
    for (int i = 0; i < shardc_noptions; i++) {
        const OptionSpec *o = &shardc_options[i];
        if (!(o->cmds & cmds) && !(cmds == CMD_ALL && o->id == OPT_MAN))
            continue;
        fputs(".TP\n.B ", out);
        roff(out, o->id == OPT_HELP ? "-h, --help" : o->name);
        if (o->arg) {
            fputs(" \" \"\n.I ", out);
            roff(out, o->arg);
        }
        fputc('\n', out);
        char one[1024];
        snprintf(one, sizeof one, "%s", o->help);
        for (char *q = one; *q; q++)
            *q = *q == '\n' ? ' ' : *q;
        roff(out, one);
        fputc('\n', out);
    }
}

void print_man(FILE *out, const char *version) {
    fprintf(out, ".\\\" Generated by `shardc --man` from compiler/driver/usage.c; do not edit.\n"
                 ".TH SHARDC 1 \"\" \"shardc %s\" \"User Commands\"\n.SH NAME\n"
                 "shardc \\- an ahead-of-time sharding compiler for .tdsl tensor programs\n"
                 ".SH SYNOPSIS\n.B shardc\n.I COMMAND prog.tdsl\n[options]\n.br\n.B shardc\n.I COMMAND\n"
                 ".B \\-\\-help\n.SH DESCRIPTION\n", version);
    roff(out, "Every option that takes a value is written --opt VALUE or --opt=VALUE. Options may come before or "
              "after the command and the file.\n");
    fputs(".SH COMMANDS\n", out);
    for (int i = 0; i < shardc_ncommands; i++) {
        const CommandSpec *c = &shardc_commands[i];
        fputs(".SS ", out);
        roff(out, c->name);
        fputs("\n.nf\n.B shardc ", out);
        roff(out, c->synopsis);
        fputs("\n.fi\n", out);
        roff(out, c->details);
        fputs("\n.PP\nOptions:", out);
        for (int k = 0; k < shardc_noptions; k++)
            if (shardc_options[k].cmds & c->bit && shardc_options[k].id != OPT_HELP && shardc_options[k].id != OPT_VERSION) {
                fputs(" \\fB", out);
                roff(out, shardc_options[k].name);
                fputs("\\fR", out);
            }
        fputs(c->bit == CMD_HELP ? " none" : "", out);
        fputs("\n.PP\nExample:\n.PP\n.nf\n.RS\n", out);
        roff(out, c->example);
        fputs("\n.RE\n.fi\n", out);
    }
    fputs(".SH OPTIONS\n", out);
    man_options(out, CMD_ALL);
    fputs(".SH EXIT STATUS\n.TP\n0\nsuccess\n.TP\n1\nan error in the program, an input file that cannot be read, "
          "or output that cannot be written\n.TP\n2\nbad command\\-line use\n.TP\n3\nan internal compiler error\n"
          ".TP\n128+N\nrun: the program was killed by signal N (139: SIGSEGV), named on stderr with how to debug "
          "it\n.PP\nSIGINT, SIGTERM and SIGHUP to build or run are passed on to the compiler or program they "
          "started (its process group); shardc removes its temporary folder and dies by the same signal.\n"
          ".SH SEE ALSO\ndocs/cli.md, docs/language.md (installed in share/doc/shardc)\n", out);
}

void print_completion(const CommandSpec *c, FILE *out) {
    for (int i = 0; !c && i < shardc_ncommands; i++)
        fprintf(out, "%s\n", shardc_commands[i].name);
    for (int i = 0; c && i < shardc_noptions; i++) {
        const OptionSpec *o = &shardc_options[i];
        const char *v = option_values(o, c);
        if (o->cmds & c->bit)
            fprintf(out, "%s%s%s%s\n", o->name, o->arg ? "=" : "", v ? " " : "", v ? v : "");
    }
}
