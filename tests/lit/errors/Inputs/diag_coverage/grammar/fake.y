%%
static void yyerror(Loc *loc, yyscan_t scanner, ParseCtx *ctx, const char *msg) {
    parse_error(ctx, *loc, "%s", msg);
}
%%
void parse_error(ParseCtx *ctx, Loc loc, const char *fmt, ...) { }
static void f(void) { parse_error(ctx, loc, "unexpected byte 0x%02x", c); }
