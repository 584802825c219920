/* entries.c: the main() of a program built with several fns (`shardc build
 * --fn a,b`): `--fn NAME` on its command line picks the one that runs, and
 * the rest of the line is that fn's (sk_main_on, driver.c). */
#include "driver.h"

#include <stdio.h>
#include <string.h>

static void list_fns(FILE *out, const sk_program *const *programs, int n) {
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%s", i ? ", " : "", programs[i]->fn);
}

/* The value of --fn NAME or --fn=NAME, and the arguments without it (argv
 * keeps the rest in order); NULL when absent. */
static const char *take_fn(int *argc, char **argv) {
    for (int i = 1; i < *argc; i++) {
        const char *v = NULL;
        int used = 0;
        if (strcmp(argv[i], "--fn") == 0 && i + 1 < *argc)
            v = argv[i + 1], used = 2;
        else if (strncmp(argv[i], "--fn=", 5) == 0)
            v = argv[i] + 5, used = 1;
        if (!used)
            continue;
        memmove(argv + i, argv + i + used, sizeof(char *) * (size_t)(*argc - i - used + 1));
        *argc -= used;
        return v;
    }
    return NULL;
}

int sk_main_of(int argc, char **argv, const sk_program *const *programs, int n) {
    const char *prog = argc > 0 ? argv[0] : "prog";
    const char *name = take_fn(&argc, argv);
    if (!name) {
        int help = sk_wants_help(argc, argv);
        FILE *out = help ? stdout : stderr;
        fprintf(out, "%s%s holds several fns (", help ? "" : "error: ", prog);
        list_fns(out, programs, n);
        fputs(help ? "): --fn NAME runs one, with these options\n" : "): name the one to run with --fn NAME\n", out);
        return help ? sk_main(argc, argv, programs[0]) : 2;     /* the options are every fn's */
    }
    for (int i = 0; i < n; i++)
        if (strcmp(programs[i]->fn, name) == 0)
            return sk_main(argc, argv, programs[i]);
    fprintf(stderr, "error: %s has no fn named '%s' (it holds ", prog, name);
    list_fns(stderr, programs, n);
    fputs(")\n", stderr);
    return 2;
}
