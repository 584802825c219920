#include "frontend.h"

#include "../grad/grad.h"
#include "../partition/partition.h"
#include "../propagate/propagate.h"
#include "../schedule/schedule.h"

#include "../base/suggest.h"

#include <string.h>

/* For the first --mesh name that is not an axis of the program: the
 * nearest axis. */
static const char *suggest_axis(const Compilation *c, const AstTop *mesh, const MeshFlag *flag, char *buf,
                                size_t cap) {
    int n = mesh ? mesh->bindings.n : 0;
    for (int k = 0; k < flag->n; k++) {
        Suggest sg = suggest_begin(flag->name[k]);
        int known = 0;
        for (int i = 0; i < n; i++) {
            const char *axis = sym_name(&c->syms, ((AstBinding *)mesh->bindings.items[i])->sym);
            int named = 0;              /* an axis the flag names already is not the one meant */
            for (int j = 0; j < flag->n; j++)
                named |= strcmp(axis, flag->name[j]) == 0;
            known |= strcmp(axis, flag->name[k]) == 0;
            if (!named)
                suggest_add(&sg, axis, -1);
        }
        if (!known)
            return suggest_text(&sg, buf, cap);
    }
    buf[0] = '\0';
    return buf;
}

/* Match `--mesh` to the program's mesh line: same axes, same order. */
static int match_mesh(Compilation *c, const MeshFlag *flag, MeshOverride *ov) {
    const AstTop *mesh = NULL;
    for (int i = 0; i < c->ast.tops.n && !mesh; i++)
        if (((AstTop *)c->ast.tops.items[i])->kind == TOP_MESH)
            mesh = c->ast.tops.items[i];
    FILE *out = c->diag.out;
    int n = mesh ? mesh->bindings.n : 0, same = n == flag->n;
    for (int i = 0; same && i < n; i++)
        same = strcmp(sym_name(&c->syms, ((AstBinding *)mesh->bindings.items[i])->sym), flag->name[i]) == 0;
    if (!same) {
        if (out) {
            fprintf(out, "shardc: error: --mesh names axes ");
            for (int i = 0; i < flag->n; i++)
                fprintf(out, "%s%s", i ? "," : "", flag->name[i]);
            fprintf(out, " but the program's mesh has %s", n ? "" : "none");
            for (int i = 0; i < n; i++)
                fprintf(out, "%s%s", i ? "," : "", sym_name(&c->syms, ((AstBinding *)mesh->bindings.items[i])->sym));
            char hint[160];
            fprintf(out, "%s\n", suggest_axis(c, mesh, flag, hint, sizeof hint));
        }
        return -1;
    }
    ov->n = n;
    memcpy(ov->size, flag->size, sizeof ov->size);
    return 0;
}

/* Match `--const` names to the program's constants. */
static int match_consts(Compilation *c, const MeshFlag *flag, MeshOverride *ov) {
    for (int k = 0; k < flag->nconsts; k++) {
        int found = -1;
        for (int i = 0; i < c->ast.tops.n && found < 0; i++) {
            const AstTop *top = c->ast.tops.items[i];
            for (int j = 0; top->kind == TOP_CONST && j < top->bindings.n; j++) {
                const AstBinding *b = top->bindings.items[j];
                if (strcmp(sym_name(&c->syms, b->sym), flag->const_name[k]) == 0)
                    found = b->sym;
            }
        }
        if (found < 0) {
            Suggest sg = suggest_begin(flag->const_name[k]);
            char hint[160];
            for (int i = 0; i < c->ast.tops.n; i++) {
                const AstTop *top = c->ast.tops.items[i];
                for (int j = 0; top->kind == TOP_CONST && j < top->bindings.n; j++)
                    suggest_add(&sg, sym_name(&c->syms, ((AstBinding *)top->bindings.items[j])->sym), -1);
            }
            if (c->diag.out)
                fprintf(c->diag.out, "shardc: error: --const names '%s', which the program does not define with const%s\n",
                        flag->const_name[k], suggest_text(&sg, hint, sizeof hint));
            return -1;
        }
        ov->const_sym[ov->nconsts] = found;
        ov->const_value[ov->nconsts] = flag->const_value[k];
        ov->const_is_int[ov->nconsts++] = flag->const_is_int[k];
    }
    return 0;
}

static int verified(Compilation *c, const char *after, FILE *diag_out) {
    char msg[VERIFY_MSG_SIZE];
    const char *err = ir_verify(&c->module, msg);
    if (!err)
        return FRONTEND_OK;
    if (diag_out)
        fprintf(diag_out, "shardc: internal error: the IR after %s is invalid: %s\n", after, err);
    return FRONTEND_INTERNAL_ERROR;
}

int frontend_compile(Compilation *c, const char *path, const char *text, size_t len,
                     FILE *diag_out, const MeshFlag *mesh, Stage stage) {
    c->syms.arena = &c->arena;
    c->diag = (Diag){path, text, len, diag_out, 0, NULL};
    if (parse_program(&c->arena, &c->syms, &c->diag, &c->ast) != 0)
        return FRONTEND_USER_ERROR;
    MeshOverride ov = {0};
    if (mesh && ((mesh->n && match_mesh(c, mesh, &ov) != 0) || match_consts(c, mesh, &ov) != 0))
        return FRONTEND_USAGE_ERROR;
    module_init(&c->module, &c->arena, &c->syms);
    c->module.device_memory = mesh ? mesh->device_memory : 0;
    if (sema_program(&c->module, &c->diag, &c->ast, &ov) != 0 || grad_module(&c->module, &c->diag) != 0)
        return FRONTEND_USER_ERROR;
    int rc = verified(c, "sema", diag_out);
    if (rc != FRONTEND_OK || stage == STAGE_PARSED)
        return rc;
    propagate_module(&c->module);
    rc = verified(c, "sharding propagation", diag_out);
    if (rc == FRONTEND_OK && stage == STAGE_SHARDED)
        partition_note_choices(&c->module);  /* the sharded program says what partitioning will choose */
    if (rc != FRONTEND_OK || stage == STAGE_SHARDED)
        return rc;
    partition_module(&c->module, &c->diag);
    rc = verified(c, "partitioning", diag_out);
    if (rc != FRONTEND_OK || stage == STAGE_PARTITIONED)
        return rc;
    schedule_module(&c->module);
    return verified(c, "scheduling", diag_out);
}

void compilation_free(Compilation *c) { arena_free(&c->arena); }
