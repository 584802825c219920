/* `shardc show`: pictures of shardings (docs/cli.md). */
#ifndef SHARDC_SHOW_H
#define SHARDC_SHOW_H

#include "../ir/ir.h"

/* Draw which devices hold which block of value `value` of function `fn`, as
 * jax.debug.visualize_array_sharding does.  Returns 0, or 2 when there is
 * no such value (after saying so on stderr). */
int show_value(const Module *m, int fn, const char *value, FILE *out);

/* Write function `fn`'s dataflow graph, with shardings and collectives, in
 * Graphviz's dot language. */
void show_dot(const Module *m, int fn, FILE *out);

#endif
