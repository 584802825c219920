/* Writing a command's output file so that failure leaves nothing behind. */
#ifndef SHARDC_OUTPUT_H
#define SHARDC_OUTPUT_H

#include <stdio.h>

/* Call write(out, ctx) on stdout when `path` is NULL, else on a temporary
 * file that is renamed to `path` only when everything was written.
 * `write` returns 0, or 1 after reporting its own error.  Returns 0 or 1. */
int write_output(const char *path, int (*write)(FILE *out, void *ctx), void *ctx);

#endif
