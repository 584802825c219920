/* The shardc command line described once: every command and option with
 * its help text.  `shardc --help`, `shardc COMMAND --help`, the man page
 * (`shardc --man`, built into build/shardc.1) and bash completion
 * (tools/shardc-completion.bash asks `shardc complete-options`) are all
 * printed from these tables, so they cannot disagree. */
#ifndef SHARDC_USAGE_H
#define SHARDC_USAGE_H

#include <stddef.h>
#include <stdio.h>

enum {
    CMD_CHECK = 1, CMD_DUMP = 2, CMD_SHOW = 4, CMD_INTERP = 8, CMD_COMPILE = 16, CMD_BUILD = 32, CMD_RUN = 64,
    CMD_HELP = 128, CMD_CACHE = 256, CMD_AUTOSHARD = 512,
    /* for tools/shardc-completion.bash; in no help text */
    CMD_COMPLETE_OPTIONS = 1024, CMD_COMPLETE_FNS = 2048,
    CMD_COMPILING = CMD_CHECK | CMD_DUMP | CMD_SHOW | CMD_INTERP | CMD_COMPILE | CMD_BUILD | CMD_RUN | CMD_AUTOSHARD,
    /* the commands that compile one fn past sema, where the sharding search runs */
    CMD_SEARCHING = CMD_DUMP | CMD_SHOW | CMD_INTERP | CMD_COMPILE | CMD_BUILD | CMD_RUN | CMD_AUTOSHARD,
    CMD_ALL = CMD_COMPILING | CMD_HELP | CMD_CACHE,
};

typedef struct {
    const char *name;
    unsigned bit;
    const char *synopsis;       /* after "shardc " */
    const char *summary;        /* one line, for `shardc --help` */
    const char *details;        /* a paragraph, for `shardc COMMAND --help` and the man page */
    const char *example;
} CommandSpec;

typedef enum {
    OPT_MESH, OPT_CONST, OPT_DEVICE_MEMORY, OPT_STAGE, OPT_FN, OPT_VALUE, OPT_FORMAT, OPT_IN, OPT_OUT, OPT_CAST,
    OPT_BACKEND, OPT_NP, OPT_CHECK, OPT_NO_CACHE, OPT_SHARED, OPT_VERBOSE, OPT_RESHARD_CANDIDATES, OPT_COST, OPT_TARGET, OPT_STEPS, OPT_LOG_EVERY, OPT_CHECKPOINT,
    OPT_CHECKPOINT_EVERY, OPT_RESUME, OPT_OUTPUT, OPT_HELP, OPT_VERSION, OPT_MAN, OPT_AUTO, OPT_TOP,
} OptionId;

typedef struct {
    OptionId id;
    const char *name;           /* "--stage"; -h is --help's short name, -v --verbose's */
    const char *arg;            /* "STAGE"; NULL for a switch */
    unsigned cmds;              /* the commands that take it */
    const char *help;           /* lines separated by \n */
    const char *values;         /* the values it takes, space-separated (NULL: any) */
} OptionSpec;

extern const CommandSpec shardc_commands[];
extern const int shardc_ncommands;
extern const OptionSpec shardc_options[];
extern const int shardc_noptions;

/* The command called name, or NULL; find_any_command finds the internal
 * ones (complete-options, complete-fns) too. */
const CommandSpec *find_command(const char *name);
const CommandSpec *find_any_command(const char *name);
/* The option spelled name[0..len) ("-h" is --help). */
const OptionSpec *find_option(const char *name, size_t len);
/* The values of an option for a command: --stage depends on it. */
const char *option_values(const OptionSpec *o, const CommandSpec *c);

void print_usage(FILE *out);
void print_command_help(const CommandSpec *c, FILE *out);
void print_man(FILE *out, const char *version);
/* For completion: without a command, the command names; with one, a line
 * per option it takes: the option, then its values if it has fixed ones. */
void print_completion(const CommandSpec *c, FILE *out);

#endif
