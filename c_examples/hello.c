/* The README's usage example: one engine writes 4 KiB into a region it
 * registered itself (a peer would get the descriptor out of band) and waits
 * for the immediate that says the bytes landed. */
#include <fabriclib.h>
#include <stdio.h>
#include <string.h>

static void landed(void *flag, fabriclib_status st) { *(volatile int *)flag = st == FABRICLIB_STATUS_OK ? 1 : -1; }

int main(void) {
    static char src[4096] = "hello, fabriclib", dst[4096];
    fabriclib_engine *e; fabriclib_mr *s, *d; fabriclib_remote_mr *rd;
    uint8_t desc[256]; size_t n; uint32_t imm = 42; volatile int ok = 0;
    if (fabriclib_engine_create(NULL, &e)) { fprintf(stderr, "%s\n", fabriclib_last_error_message()); return 1; }
    fabriclib_mr_register(e, src, sizeof src, &s);
    fabriclib_mr_register(e, dst, sizeof dst, &d);
    fabriclib_mr_descriptor(d, desc, sizeof desc, &n);      /* what a peer receives */
    fabriclib_remote_mr_parse(desc, n, &rd);
    fabriclib_submit_opts on_landed = {.struct_size = sizeof(fabriclib_submit_opts), .callback = landed, .user_data = (void *)&ok};
    fabriclib_expect_imm_count(e, imm, 1, &on_landed, NULL);     /* the receiver's side */
    fabriclib_submit_single_write(e, sizeof src, &imm, s, 0, rd, 0, NULL, NULL);
    while (!ok) {}
    printf("%s: %s\n", ok == 1 ? "landed" : "failed", dst);
    fabriclib_remote_mr_free(rd); fabriclib_mr_deregister(s); fabriclib_mr_deregister(d);
    fabriclib_engine_destroy(e);
    return ok == 1 && strcmp(dst, src) == 0 ? 0 : 1;
}
