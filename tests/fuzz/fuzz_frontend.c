/* libFuzzer target: the whole compiler so far (scanner, parser, sema,
 * sharding propagation, partitioning, scheduling, verifier, dump) on arbitrary bytes.
 * Any crash, sanitizer report, leak, hang or internal error (an IR that
 * fails verification) is a bug. */
#include "../../compiler/driver/frontend.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    Compilation c = {0};
    int rc = frontend_compile(&c, "fuzz.tdsl", text, size, NULL, NULL, STAGE_SCHEDULED);
    if (rc == FRONTEND_INTERNAL_ERROR)
        abort();
    if (rc == FRONTEND_OK) {
        FILE *sink = fopen("/dev/null", "w");
        if (sink) {
            ir_dump(&c.module, sink, -1, 1);
            fclose(sink);
        }
    }
    compilation_free(&c);
    free(text);
    return 0;
}
