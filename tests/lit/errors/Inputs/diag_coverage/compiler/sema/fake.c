/* A fake front end for diag_coverage_selftest.test.
 * sema_error(s, loc, "in a comment, so never counted"); */
_Noreturn void sema_error(Sema *s, Loc loc, const char *fmt, ...);

static void checks(Sema *s, Loc loc) {
    const char *text = "sema_error(s, loc, \"in a string, so never counted\")";
    sema_error(s, loc, "widget '%s' is "
                       "broken at %d:%d", name, line, col);
    sema_error(s, loc, "gadget has %lld parts, 100%% sure", (long long)n);
    sema_error(s, loc, "unknown expression");
}
