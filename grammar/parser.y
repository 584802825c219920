/* TDSL grammar (docs/language.md).  Actions only build the syntax tree;
 * every check beyond syntax happens in compiler/sema. */
%define api.pure full
%define parse.error custom
%define parse.lac full
%define api.location.type {Loc}
%locations
%param {yyscan_t scanner}
%parse-param {ParseCtx *ctx}

%code requires {
#include "parse.h"
typedef void *yyscan_t;
}

%code provides {
int yylex(YYSTYPE *lval, Loc *lloc, yyscan_t scanner);
}

%code {
#include <stdarg.h>
#include <string.h>

#include "suggest.h"

#define YYLLOC_DEFAULT(Cur, Rhs, N) \
    do { (Cur) = (N) ? YYRHSLOC(Rhs, 1) : YYRHSLOC(Rhs, 0); } while (0)
/* Nesting deeper than this is reported as an error, not a stack overflow in
 * the recursive passes behind the parser. */
#define YYMAXDEPTH 2000

static void yyerror(Loc *loc, yyscan_t scanner, ParseCtx *ctx, const char *msg) {
    (void)scanner;
    if (strcmp(msg, "memory exhausted") == 0)     /* the parser stack hit YYMAXDEPTH */
        msg = "the program is nested too deeply";
    parse_error(ctx, *loc, "%s", msg);
}

static void *node(ParseCtx *ctx, size_t size) { return arena_alloc(ctx->arena, size); }

static Expr *expr(ParseCtx *ctx, ExprKind kind, Loc loc) {
    Expr *e = node(ctx, sizeof *e);
    e->kind = kind;
    e->loc = loc;
    return e;
}

static Expr *binary(ParseCtx *ctx, int op, Expr *l, Expr *r, Loc loc) {
    Expr *e = expr(ctx, E_BINARY, loc);
    e->op = op;
    e->lhs = l;
    e->rhs = r;
    return e;
}

/* Left-recursive rules (a + b + c ..., x[1][2]...) build deep trees without
 * growing the parser stack, so depth is bounded here instead. */
enum { MAX_EXPR_DEPTH = 1000 };

static Expr *nest(ParseCtx *ctx, Expr *e) {
    if (!e)
        return NULL;
    int d = 0;
    const Expr *kids[2] = {e->lhs, e->rhs};
    for (int i = 0; i < 2; i++)
        if (kids[i] && kids[i]->depth > d)
            d = kids[i]->depth;
    for (int i = 0; i < e->args.n; i++)
        if (((Expr *)e->args.items[i])->depth > d)
            d = ((Expr *)e->args.items[i])->depth;
    for (int i = 0; e->type && i < e->type->ndims; i++)
        if (e->type->dims[i].size->depth > d)
            d = e->type->dims[i].size->depth;
    e->depth = d + 1;
    if (e->depth > MAX_EXPR_DEPTH) {
        parse_error(ctx, e->loc, "expression is nested more than %d levels deep", MAX_EXPR_DEPTH);
        return NULL;
    }
    return e;
}

static Stmt *stmt(ParseCtx *ctx, StmtKind kind, Loc loc) {
    Stmt *s = node(ctx, sizeof *s);
    s->kind = kind;
    s->loc = loc;
    return s;
}

/* `f(args)` or `sum[i, j](args)`: only names, or names with bracketed index
 * names, can be called; and a call of a name, which sema accepts only for
 * the transforms grad(f, [w]) and value_and_grad(f, [w]). */
static Expr *call(ParseCtx *ctx, Expr *callee, PtrVec args, Loc loc) {
    Expr *e = expr(ctx, E_CALL, callee->kind == E_INDEX ? callee->lhs->loc : callee->loc);
    e->args = args;
    if (callee->kind == E_NAME) {
        e->sym = callee->sym;
        return e;
    }
    if (callee->kind == E_INDEX && callee->lhs->kind == E_NAME) {
        for (int i = 0; i < callee->args.n; i++)
            if (((Expr *)callee->args.items[i])->kind != E_NAME)
                goto bad;
        e->sym = callee->lhs->sym;
        e->binders = callee->args;
        return e;
    }
    if (callee->kind == E_CALL && !callee->lhs && !callee->binders.n) {
        e->sym = callee->sym;
        e->lhs = callee;
        ctx->prog->ntransforms++;
        return e;
    }
bad:
    parse_error(ctx, loc, "only a function or builtin name can be called");
    return NULL;
}

static AstAxes axes_list(ParseCtx *ctx, PtrVec names, Loc loc) {
    AstAxes a = {AXES_LIST, names.n, NULL, NULL, loc};
    /* `@auto` alone: a reserved word after '@', not an axis (sema rejects an axis named auto) */
    if (names.n == 1 && strcmp(sym_name(ctx->syms, ((Expr *)names.items[0])->sym), "auto") == 0)
        a.kind = AXES_AUTO;
    a.syms = node(ctx, sizeof(int) * (size_t)names.n);
    a.locs = node(ctx, sizeof(Loc) * (size_t)names.n);
    for (int i = 0; i < names.n; i++) {
        Expr *n = names.items[i];
        a.syms[i] = n->sym;
        a.locs[i] = n->loc;
    }
    return a;
}

/* `t[i, j] = e`, or with add `t[...] += e`: the left's subscripts are
 * index names, and after `+=` also accesses `idx[s]` (a scatter). */
static Stmt *index_stmt(ParseCtx *ctx, Expr *name, PtrVec indices, Expr *value, int add, Loc loc) {
    Stmt *st = stmt(ctx, S_INDEX, loc);
    st->sym = name->sym;
    st->value = value;
    st->add = add;
    st->nindices = indices.n;
    st->indices = node(ctx, sizeof(AstIndex) * (size_t)(indices.n + 1));
    for (int i = 0; i < indices.n; i++)
        st->indices[i] = *(AstIndex *)indices.items[i];
    return st;
}

static PtrVec one(ParseCtx *ctx, void *p) {
    PtrVec v = {0};
    ptrvec_push(ctx->arena, &v, p);
    return v;
}
}

%union {
    int64_t ival;
    double fval;
    Expr *expr;
    Stmt *stmt;
    PtrVec vec;
    AstType *type;
    AstDim *dim;
    AstAxes axes;
    AstIndex *index;
    AstFn *fn;
    AstTop *top;
}

%token T_NL "end of line"
%token T_MESH "mesh" T_CONST "const" T_FN "fn" T_SPMD "spmd" T_RETURN "return"
%token T_FOR "for" T_IN "in" T_SUBMESH "submesh" T_ON "on" T_RECORD "record"
%token T_AND "and" T_OR "or" T_XOR "xor" T_NOT "not"
%token T_ARROW "->" T_DOTDOT ".." T_LE "<=" T_GE ">=" T_EQ "==" T_NE "!=" T_PLUSEQ "+="
%token <ival> T_INT "integer" T_IDENT "name" T_DTYPE "dtype"
%token <fval> T_FLOAT "number"
%token T_ERROR "invalid token"
%token T_RECOPEN "'{' of a record"

/* The logic ops bind more loosely than comparisons, so `a < b and b < c`
 * needs no parentheses; or < xor < and < not, as | ^ & ! in C. */
%left T_OR
%left T_XOR
%left T_AND
%precedence T_NOT
%nonassoc '<' '>' T_LE T_GE T_EQ T_NE
%left '+' '-'
%left '*' '/' '%'
%precedence UMINUS

%type <expr> expr postfix primary subscript name field_target literal_fields
%type <vec> exprs opt_exprs subscripts names bindings params results types dims opt_dims
%type <vec> stmts indices fields
%type <stmt> stmt
%type <type> type sig_type
%type <dim> dim
%type <axes> axes
%type <index> index
%type <fn> fn
%type <top> top

%%

program:
    %empty
  | program T_NL
  | program top T_NL        { ptrvec_push(ctx->arena, &ctx->prog->tops, $2); }
  ;

top:
    "mesh" bindings         { $$ = node(ctx, sizeof *$$); $$->kind = TOP_MESH; $$->loc = @1; $$->bindings = $2; }
  | "const" bindings        { $$ = node(ctx, sizeof *$$); $$->kind = TOP_CONST; $$->loc = @1; $$->bindings = $2; }
  | "submesh" bindings      { $$ = node(ctx, sizeof *$$); $$->kind = TOP_SUBMESH; $$->loc = @1; $$->bindings = $2; }
  | fn                      { $$ = node(ctx, sizeof *$$); $$->kind = TOP_FN; $$->loc = $1->loc; $$->fn = $1; }
  | "record" name '{' fields '}' {
        $$ = node(ctx, sizeof *$$); $$->kind = TOP_RECORD; $$->loc = $2->loc; $$->sym = $2->sym; $$->fields = $4;
    }
  | "record" name T_RECOPEN fields '}' {    /* the lexer's '{' before `name:` (a literal's, lexer.l) */
        $$ = node(ctx, sizeof *$$); $$->kind = TOP_RECORD; $$->loc = $2->loc; $$->sym = $2->sym; $$->fields = $4;
    }
  | name fn                 {   /* `checkpoint fn f(...)`: no other word may stand before fn */
        if (strcmp(sym_name(ctx->syms, $1->sym), "checkpoint") != 0) {
            char hint[48];
            Suggest sg = suggest_begin(sym_name(ctx->syms, $1->sym));
            suggest_add(&sg, "checkpoint", -1);
            suggest_add(&sg, "spmd", -1);
            parse_error(ctx, $1->loc, "'%s' cannot stand before fn; the only word that can is checkpoint "
                        "(checkpoint fn f: every call of f is checkpointed)%s", sym_name(ctx->syms, $1->sym),
                        suggest_text(&sg, hint, sizeof hint));
            YYABORT;
        }
        $2->checkpoint = 1;
        $$ = node(ctx, sizeof *$$); $$->kind = TOP_FN; $$->loc = $2->loc; $$->fn = $2;
    }
  ;

bindings:
    name '=' expr                   {
        AstBinding *b = node(ctx, sizeof *b);
        *b = (AstBinding){$1->sym, $3, $1->loc};
        $$ = one(ctx, b);
    }
  | bindings ',' name '=' expr      {
        AstBinding *b = node(ctx, sizeof *b);
        *b = (AstBinding){$3->sym, $5, $3->loc};
        ptrvec_push(ctx->arena, &$1, b);
        $$ = $1;
    }
  ;

fn:
    "fn" name '(' params ')' "->" results '{' stmts '}' {
        $$ = node(ctx, sizeof *$$);
        *$$ = (AstFn){.sym = $2->sym, .loc = $2->loc, .params = $4, .results = $7, .body = $9, .end = @10};
    }
  | "fn" name '(' params ')' "->" results "on" name '{' stmts '}' {
        $$ = node(ctx, sizeof *$$);
        *$$ = (AstFn){.sym = $2->sym, .loc = $2->loc, .params = $4, .results = $7, .body = $11, .end = @12,
                      .on = 1, .on_sym = $9->sym, .on_loc = $9->loc};
    }
  | "spmd" "fn" name '(' params ')' "->" results '{' stmts '}' {
        $$ = node(ctx, sizeof *$$);
        *$$ = (AstFn){.sym = $3->sym, .spmd = 1, .loc = $3->loc, .params = $5, .results = $8, .body = $10, .end = @11};
    }
  ;

params:
    %empty                          { $$ = (PtrVec){0}; }
  | name ':' sig_type               {
        AstParam *p = node(ctx, sizeof *p);
        *p = (AstParam){$1->sym, $3, $1->loc};
        $$ = one(ctx, p);
    }
  | params ',' name ':' sig_type    {
        AstParam *p = node(ctx, sizeof *p);
        *p = (AstParam){$3->sym, $5, $3->loc};
        ptrvec_push(ctx->arena, &$1, p);
        $$ = $1;
    }
  ;

/* A record's fields, one a line or separated by commas. */
fields:
    %empty                          { $$ = (PtrVec){0}; }
  | fields T_NL
  | fields ','
  | fields name ':' sig_type        {
        AstParam *p = node(ctx, sizeof *p);
        *p = (AstParam){$2->sym, $4, $2->loc};
        ptrvec_push(ctx->arena, &$1, p);
        $$ = $1;
    }
  ;

results:
    types
  | '(' types ')'                   { $$ = $2; }
  ;

types:
    sig_type                        { $$ = one(ctx, $1); }
  | types ',' sig_type              { ptrvec_push(ctx->arena, &$1, $3); $$ = $1; }
  ;

/* A parameter's or a result's type: a tensor type or a record's name
 * (sema/records.c says "unknown dtype", with the dtypes, when no record has
 * it).  A name with dims is a dtype misspelled: say which dtypes there are,
 * where bison would say only "expecting dtype". */
sig_type:
    type
  | name                            {
        $$ = node(ctx, sizeof *$$);
        $$->loc = $1->loc;
        $$->record = 1 + $1->sym;
    }
  | name '[' opt_dims ']'           {     /* a dtype misspelled (f23) or one that does not exist (i64) */
        char hint[200];
        const char *word = sym_name(ctx->syms, $1->sym);
        parse_error(ctx, $1->loc, "unknown dtype '%s'%s", word, dtype_hint(word, hint, sizeof hint));
        YYABORT;
    }
  ;

type:
    T_DTYPE '[' opt_dims ']'        {
        $$ = node(ctx, sizeof *$$);
        $$->dtype = (Dtype)$1;
        $$->loc = @1;
        $$->ndims = $3.n;
        $$->dims = node(ctx, sizeof(AstDim) * (size_t)$3.n);
        for (int i = 0; i < $3.n; i++)
            $$->dims[i] = *(AstDim *)$3.items[i];
    }
  ;

opt_dims:
    %empty                          { $$ = (PtrVec){0}; }
  | dims
  ;

dims:
    dim                             { $$ = one(ctx, $1); }
  | dims ',' dim                    { ptrvec_push(ctx->arena, &$1, $3); $$ = $1; }
  ;

dim:
    expr                            { $$ = node(ctx, sizeof *$$); $$->size = $1; }
  | expr '@' axes                   { $$ = node(ctx, sizeof *$$); $$->size = $1; $$->axes = $3; }
  ;

axes:
    name                            { $$ = axes_list(ctx, one(ctx, $1), @1); }
  | '(' names ')'                   { $$ = axes_list(ctx, $2, @1); }
  | '?'                             { $$ = (AstAxes){AXES_OPEN, 0, NULL, NULL, @1}; }
  ;

names:
    name                            { $$ = one(ctx, $1); }
  | names ',' name                  { ptrvec_push(ctx->arena, &$1, $3); $$ = $1; }
  ;

name:
    T_IDENT                         { $$ = expr(ctx, E_NAME, @1); $$->sym = (int)$1; }
  ;

stmts:
    %empty                          { $$ = (PtrVec){0}; }
  | stmts T_NL
  | stmts stmt T_NL                 { ptrvec_push(ctx->arena, &$1, $2); $$ = $1; }
  ;

stmt:
    name '=' expr                   { $$ = stmt(ctx, S_ASSIGN, @1); $$->sym = $1->sym; $$->value = $3; }
  | name '[' ']' '=' expr           { $$ = stmt(ctx, S_INDEX, @1); $$->sym = $1->sym; $$->value = $5; }
  | name '[' indices ']' '=' expr   { $$ = index_stmt(ctx, $1, $3, $6, 0, @1); }
  | name '[' ']' "+=" expr          { $$ = index_stmt(ctx, $1, (PtrVec){0}, $5, 1, @1); }
  | name '[' indices ']' "+=" expr  { $$ = index_stmt(ctx, $1, $3, $6, 1, @1); }
  | name ',' names '=' expr         {
        $$ = stmt(ctx, S_MULTI, @1);
        $$->names = one(ctx, $1);
        for (int i = 0; i < $3.n; i++)
            ptrvec_push(ctx->arena, &$$->names, $3.items[i]);
        $$->value = $5;
    }
  | field_target '=' expr           {
        const Expr *root = $1;
        while (root->kind == E_FIELD)
            root = root->lhs;
        $$ = stmt(ctx, S_ASSIGN, @1);
        $$->sym = root->sym;
        $$->field = $1;
        $$->value = $3;
    }
  | "return" exprs                  { $$ = stmt(ctx, S_RETURN, @1); $$->values = $2; }
  | "for" name "in" expr ".." expr '{' stmts '}' {
        $$ = stmt(ctx, S_FOR, @1);
        $$->sym = $2->sym;
        $$->lo = $4;
        $$->hi = $6;
        $$->body = $8;
    }
  ;

 /* p.w or p.a.b on the left of '=': one field of a record set alone. */
field_target:
    name '.' name                   { $$ = expr(ctx, E_FIELD, @2); $$->lhs = $1; $$->sym = $3->sym; if (!nest(ctx, $$)) YYABORT; }
  | field_target '.' name           { $$ = expr(ctx, E_FIELD, @2); $$->lhs = $1; $$->sym = $3->sym; if (!nest(ctx, $$)) YYABORT; }
  ;

/* A record literal's fields `name: expr`, one a line or separated by commas:
 * binders gets the names, args the values. */
literal_fields:
    %empty                          { $$ = expr(ctx, E_RECORD, (Loc){0, 0}); }
  | literal_fields T_NL
  | literal_fields ','
  | literal_fields name ':' expr    {
        ptrvec_push(ctx->arena, &$1->binders, $2);
        ptrvec_push(ctx->arena, &$1->args, $4);
        $$ = $1;
    }
  ;

indices:
    index                           { $$ = one(ctx, $1); }
  | indices ',' index               { ptrvec_push(ctx->arena, &$1, $3); $$ = $1; }
  ;

index:
    name                            { $$ = node(ctx, sizeof *$$); $$->sym = $1->sym; $$->loc = @1; }
  | name '@' axes                   { $$ = node(ctx, sizeof *$$); $$->sym = $1->sym; $$->loc = @1; $$->axes = $3; }
  | ':'                             { $$ = node(ctx, sizeof *$$); $$->loc = @1; $$->whole = 1; }
  | name '[' subscripts ']'         {
        $$ = node(ctx, sizeof *$$);
        $$->sym = $1->sym;
        $$->loc = @1;
        $$->gather = expr(ctx, E_INDEX, @2);
        $$->gather->lhs = $1;
        $$->gather->args = $3;
        if (!nest(ctx, $$->gather)) YYABORT;
    }
  ;

exprs:
    expr                            { $$ = one(ctx, $1); }
  | exprs ',' expr                  { ptrvec_push(ctx->arena, &$1, $3); $$ = $1; }
  ;

opt_exprs:
    %empty                          { $$ = (PtrVec){0}; }
  | exprs
  ;

expr:
    postfix
  | expr '+' expr                   { if (!($$ = nest(ctx, binary(ctx, '+', $1, $3, @2)))) YYABORT; }
  | expr '-' expr                   { if (!($$ = nest(ctx, binary(ctx, '-', $1, $3, @2)))) YYABORT; }
  | expr '*' expr                   { if (!($$ = nest(ctx, binary(ctx, '*', $1, $3, @2)))) YYABORT; }
  | expr '/' expr                   { if (!($$ = nest(ctx, binary(ctx, '/', $1, $3, @2)))) YYABORT; }
  | expr '%' expr                   { if (!($$ = nest(ctx, binary(ctx, '%', $1, $3, @2)))) YYABORT; }
  | expr '<' expr                   { if (!($$ = nest(ctx, binary(ctx, '<', $1, $3, @2)))) YYABORT; }
  | expr '>' expr                   { if (!($$ = nest(ctx, binary(ctx, '>', $1, $3, @2)))) YYABORT; }
  | expr "<=" expr                  { if (!($$ = nest(ctx, binary(ctx, OPR_LE, $1, $3, @2)))) YYABORT; }
  | expr ">=" expr                  { if (!($$ = nest(ctx, binary(ctx, OPR_GE, $1, $3, @2)))) YYABORT; }
  | expr "==" expr                  { if (!($$ = nest(ctx, binary(ctx, OPR_EQ, $1, $3, @2)))) YYABORT; }
  | expr "!=" expr                  { if (!($$ = nest(ctx, binary(ctx, OPR_NE, $1, $3, @2)))) YYABORT; }
  | expr "and" expr                 { if (!($$ = nest(ctx, binary(ctx, OPR_AND, $1, $3, @2)))) YYABORT; }
  | expr "or" expr                  { if (!($$ = nest(ctx, binary(ctx, OPR_OR, $1, $3, @2)))) YYABORT; }
  | expr "xor" expr                 { if (!($$ = nest(ctx, binary(ctx, OPR_XOR, $1, $3, @2)))) YYABORT; }
  | "not" expr                      {
        $$ = expr(ctx, E_UNARY, @1);
        $$->op = OPR_NOT;
        $$->lhs = $2;
        if (!nest(ctx, $$)) YYABORT;
    }
  | '-' expr %prec UMINUS           {
        $$ = expr(ctx, E_UNARY, @1);
        $$->op = '-';
        $$->lhs = $2;
        if (!nest(ctx, $$)) YYABORT;
    }
  ;

postfix:
    primary
  | postfix '[' subscripts ']'      {
        $$ = expr(ctx, E_INDEX, @2);
        $$->lhs = $1;
        $$->args = $3;
        if (!nest(ctx, $$)) YYABORT;
    }
  | postfix '(' opt_exprs ')'       { if (!($$ = nest(ctx, call(ctx, $1, $3, @2)))) YYABORT; }
  | postfix '.' name                {
        $$ = expr(ctx, E_FIELD, @2);
        $$->lhs = $1;
        $$->sym = $3->sym;
        if (!nest(ctx, $$)) YYABORT;
    }
  ;

subscripts:
    subscript                       { $$ = one(ctx, $1); }
  | subscripts ',' subscript        { ptrvec_push(ctx->arena, &$1, $3); $$ = $1; }
  ;

subscript:
    expr
  | expr ':' expr                   { $$ = expr(ctx, E_SLICE, @2); $$->lhs = $1; $$->rhs = $3; if (!nest(ctx, $$)) YYABORT; }
  | expr ':'                        { $$ = expr(ctx, E_SLICE, @2); $$->lhs = $1; if (!nest(ctx, $$)) YYABORT; }
  | ':' expr                        { $$ = expr(ctx, E_SLICE, @1); $$->rhs = $2; if (!nest(ctx, $$)) YYABORT; }
  | ':'                             { $$ = expr(ctx, E_SLICE, @1); }
  ;

primary:
    T_INT                           { $$ = expr(ctx, E_INT, @1); $$->ival = $1; }
  | T_FLOAT                         { $$ = expr(ctx, E_FLOAT, @1); $$->fval = $1; }
  | name
  | '(' expr ')'                    { $$ = $2; }
  | '(' expr ',' exprs ')'          {
        $$ = expr(ctx, E_TUPLE, @1);
        $$->args = one(ctx, $2);
        for (int i = 0; i < $4.n; i++)
            ptrvec_push(ctx->arena, &$$->args, $4.items[i]);
        if (!nest(ctx, $$)) YYABORT;
    }
  | name T_RECOPEN literal_fields '}' {
        $$ = $3;
        $$->sym = $1->sym;
        $$->loc = $1->loc;
        if (!nest(ctx, $$)) YYABORT;
    }
  | '[' opt_exprs ']'               { $$ = expr(ctx, E_LIST, @1); $$->args = $2; if (!nest(ctx, $$)) YYABORT; }
  | type                            { $$ = expr(ctx, E_TYPE, @1); $$->type = $1; if (!nest(ctx, $$)) YYABORT; }
  | T_DTYPE '(' opt_exprs ')'       {
        $$ = expr(ctx, E_CALL, @1);
        $$->sym = sym_intern(ctx->syms, dtype_name[$1], strlen(dtype_name[$1]));
        $$->args = $3;
        if (!nest(ctx, $$)) YYABORT;
    }
  ;

%%

void ptrvec_push(Arena *a, PtrVec *v, void *p) { *VEC_PUSH(a, v->items, v->n, v->cap) = p; }

/* ---- syntax errors ---- */

static int is_keyword(yysymbol_kind_t k) { return k >= YYSYMBOL_T_MESH && k <= YYSYMBOL_T_NOT; }

/* The identifier-like word of the source at loc ("" for none): a name, a
 * keyword, a dtype, inf or nan. */
static const char *word_at(const ParseCtx *ctx, Loc loc, char *buf, size_t cap) {
    const char *p = ctx->diag->text, *end = p + ctx->diag->len;
    for (int line = 1; line < loc.line && p < end; p++)
        line += *p == '\n';
    if (loc.col < 1 || end - p < loc.col - 1)
        return strcpy(buf, "");
    p += loc.col - 1;
    size_t n = 0;
    while (p + n < end && n + 1 < cap && (p[n] == '_' || (p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
                                          (n && p[n] >= '0' && p[n] <= '9')))
        n++;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

/* The keyword among ks[0..n) nearest to word, into *sg. */
static void near_keywords(Suggest *sg, const yysymbol_kind_t *ks, int n) {
    for (int i = 0; i < n; i++)
        if (is_keyword(ks[i]))
            suggest_add(sg, yysymbol_name(ks[i]), -1);
}

/* Bison's "syntax error, unexpected X, expecting Y or Z" (the expected
 * tokens when at most four), and where the parser can tell, what was meant:
 *   - a name where a keyword may stand, near one (`for i inn`, `x adn y`,
 *     `-> f32[4] onn s`): did you mean it;
 *   - a name first on its line, then a token no statement can continue
 *     with: a misspelled keyword that starts a line (`retrun x`, `fro i in`,
 *     `fnn f(`, `mesj X = 2`), among those that may start it there;
 *   - a reserved word where a name is expected (`in = 1`, `inf = x`). */
static int yyreport_syntax_error(const yypcontext_t *yc, yyscan_t scanner, ParseCtx *ctx) {
    (void)scanner;
    yysymbol_kind_t exp[YYNTOKENS], la = yypcontext_token(yc);
    int n = yypcontext_expected_tokens(yc, exp, YYNTOKENS);
    Loc at = *yypcontext_location(yc);
    char msg[400], w[SUGGEST_MAX_LEN + 2], hint[SUGGEST_MAX_LEN + 32];
    const char *word = la == YYSYMBOL_YYEMPTY ? "" : word_at(ctx, at, w, sizeof w);
    size_t len = (size_t)snprintf(msg, sizeof msg, "syntax error");
    if (la == YYSYMBOL_T_IDENT)      /* which name */
        len += (size_t)snprintf(msg + len, sizeof msg - len, ", unexpected name '%s'", word);
    else if (la != YYSYMBOL_YYEMPTY)
        len += (size_t)snprintf(msg + len, sizeof msg - len, ", unexpected %s", yysymbol_name(la));
    if (la != YYSYMBOL_YYEMPTY) {
        for (int i = 0; n <= 4 && i < n && len < sizeof msg; i++)
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s", i ? " or " : ", expecting ",
                                    yysymbol_name(exp[i]));
    }
    /* recent[2] is the unexpected token, recent[1] the word before it. */
    if (la != YYSYMBOL_YYEMPTY && ctx->recent[2].loc.line == at.line && ctx->recent[2].loc.col == at.col &&
        ctx->recent[1].tok == T_IDENT && (ctx->recent[0].tok == 0 || ctx->recent[0].tok == T_NL || ctx->recent[0].tok == '{')) {
        static const yysymbol_kind_t top[] = {YYSYMBOL_T_MESH, YYSYMBOL_T_CONST, YYSYMBOL_T_SUBMESH, YYSYMBOL_T_FN,
                                              YYSYMBOL_T_SPMD};
        static const yysymbol_kind_t body[] = {YYSYMBOL_T_RETURN, YYSYMBOL_T_FOR};
        int in_body = ctx->recent[1].braces > 0;
        char first[SUGGEST_MAX_LEN + 2];
        word_at(ctx, ctx->recent[1].loc, first, sizeof first);
        Suggest line = suggest_begin(first);
        near_keywords(&line, in_body ? body : top, in_body ? 2 : 5);
        if (line.best) {
            parse_error(ctx, ctx->recent[1].loc, "syntax error, unexpected name '%s' at the start of a %s%s", first,
                        in_body ? "statement" : "line", suggest_text(&line, hint, sizeof hint));
            return 0;
        }
    }
    Suggest sg = suggest_begin(word);
    if (la == YYSYMBOL_T_IDENT)
        near_keywords(&sg, exp, n);
    if (sg.best) {
        parse_error(ctx, at, "%s%s", msg, suggest_text(&sg, hint, sizeof hint));
        return 0;
    }
    /* A comparison where a binary operator may stand (after an operand):
     * comparisons are not associative, so this is a chain. */
    int name_expected = 0, after_operand = 0;
    for (int i = 0; i < n; i++) {
        name_expected |= exp[i] == YYSYMBOL_T_IDENT;
        after_operand |= exp[i] == YYTRANSLATE('*');
    }
    int cmp = la == YYTRANSLATE('<') || la == YYTRANSLATE('>') || la == YYSYMBOL_T_LE || la == YYSYMBOL_T_GE ||
              la == YYSYMBOL_T_EQ || la == YYSYMBOL_T_NE;
    if (cmp && after_operand) {
        parse_error(ctx, at, "%s; comparisons do not chain: write a < b and b < c", msg);
        return 0;
    }
    if (word[0] && la != YYSYMBOL_T_IDENT && name_expected) {
        parse_error(ctx, at, "%s; '%s' is a reserved word and cannot be a name", msg, word);
        return 0;
    }
    parse_error(ctx, at, "%s", msg);
    return 0;
}

void parse_error(ParseCtx *ctx, Loc loc, const char *fmt, ...) {
    if (ctx->failed)
        return;
    ctx->failed = 1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_report(ctx->diag, loc, "error", "%s", msg);
}

typedef struct yy_buffer_state *YY_BUFFER_STATE;
int yylex_init_extra(ParseCtx *extra, yyscan_t *scanner);
int yylex_destroy(yyscan_t scanner);
YY_BUFFER_STATE yy_scan_bytes(const char *bytes, int len, yyscan_t scanner);

int parse_program(Arena *arena, Symtab *syms, Diag *diag, AstProgram *prog) {
    ParseCtx ctx = {arena, syms, diag, prog, 1, 1, 0, 1, 0};
    yyscan_t scanner;
    if (diag->len > INT32_MAX / 2) {
        diag_report(diag, (Loc){0, 0}, "error", "source file is too large");
        return -1;
    }
    yylex_init_extra(&ctx, &scanner);
    yy_scan_bytes(diag->text, (int)diag->len, scanner);
    int rc = yyparse(scanner, &ctx);
    yylex_destroy(scanner);
    if (rc != 0 && !ctx.failed)
        parse_error(&ctx, (Loc){ctx.line, ctx.col}, "cannot parse the program");
    return rc == 0 && !ctx.failed ? 0 : -1;
}
