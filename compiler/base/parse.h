/* The parser's entry point and the state the flex scanner and the bison
 * parser share.  Both are reentrant: no globals, so the fuzzer and the
 * driver can parse any number of inputs in one process. */
#ifndef SHARDC_PARSE_H
#define SHARDC_PARSE_H

#include "ast.h"

typedef struct {
    Arena *arena;
    Symtab *syms;
    Diag *diag;
    AstProgram *prog;
    int line, col;      /* scanner position */
    int nesting;        /* open ( and [: newlines inside them are spaces */
    int last_was_nl;    /* to insert the newline a '}' or EOF implies */
    int failed;         /* an error was reported: report no more */
    int braces;         /* open { (0: top level) */
    struct {
        int tok;        /* 0 before the first */
        Loc loc;
        int braces;     /* open { where it stands */
    } recent[3];        /* the last three tokens, newest last: the hints of syntax errors */
} ParseCtx;

/* Parse `diag->text` into `*prog`.  Returns 0, or -1 after reporting the
 * first syntax error. */
int parse_program(Arena *arena, Symtab *syms, Diag *diag, AstProgram *prog);

/* Called by the scanner and the parser to report an error at `loc`. */
void parse_error(ParseCtx *ctx, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
