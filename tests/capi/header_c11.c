/* Compiles the public header as strict C11 (-Wpedantic -Werror
 * -Werror=incompatible-pointer-types): the array arguments take what C
 * callers hold, the version and size macros are usable in constant
 * expressions. Nothing to run: compiling is the test. */
#include "fabriclib.h"

_Static_assert(FABRICLIB_VERSION == FABRICLIB_VERSION_NUMBER(FABRICLIB_VERSION_MAJOR, FABRICLIB_VERSION_MINOR,
                                                             FABRICLIB_VERSION_PATCH),
               "one version number");
_Static_assert(FABRICLIB_VERSION_AT_LEAST(0, 2, 0), "this header is 0.2.0 or later");
_Static_assert(!FABRICLIB_VERSION_AT_LEAST(FABRICLIB_VERSION_MAJOR + 1, 0, 0), "not the next major");
_Static_assert(FABRICLIB_MAX_ADDRESS_LEN < FABRICLIB_MAX_DESCRIPTOR_LEN, "a descriptor holds an address");
_Static_assert(FABRICLIB_MAX_SEND == 65536 && FABRICLIB_MAX_RECV_BUFFERS == 4096, "documented limits");

/* Fixed-size control-plane messages sized by the macros. */
struct hello_msg {
    uint8_t addr[FABRICLIB_MAX_ADDRESS_LEN];
    uint8_t desc[FABRICLIB_MAX_DESCRIPTOR_LEN];
};

fabriclib_status arrays_as_callers_hold_them(const fabriclib_engine *e, uint8_t **addrs, size_t *lens,
                                             fabriclib_remote_mr **dsts, uint64_t *group);
fabriclib_status arrays_as_callers_hold_them(const fabriclib_engine *e, uint8_t **addrs, size_t *lens,
                                             fabriclib_remote_mr **dsts, uint64_t *group) {
    uint8_t *fixed[2] = {addrs[0], addrs[1]};
    fabriclib_remote_mr *fixed_dsts[2] = {dsts[0], dsts[1]};
    fabriclib_status s = fabriclib_add_peer_set(e, addrs, lens, 2, group);
    if (s == FABRICLIB_STATUS_OK) s = fabriclib_add_peer_set(e, fixed, lens, 2, group);
    if (s == FABRICLIB_STATUS_OK) s = fabriclib_submit_barrier(e, *group, 7, dsts, 2, NULL, NULL);
    if (s == FABRICLIB_STATUS_OK) s = fabriclib_submit_barrier(e, *group, 7, fixed_dsts, 2, NULL, NULL);
    return s;
}
