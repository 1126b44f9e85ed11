// Compiles the public header as C++ (cpp_compat, -Wpedantic -Werror): the
// array arguments take arrays of pointers to const and to non-const alike.
// Nothing to run: compiling is the test.
#include "fabriclib.h"
#include <vector>
static_assert(FABRICLIB_STATUS_OK == 0, "OK is 0");
static_assert(FABRICLIB_VERSION_AT_LEAST(0, 2, 0), "this header is 0.2.0 or later");

fabriclib_status arrays(const fabriclib_engine *e, std::vector<const uint8_t *> &caddrs,
                        std::vector<uint8_t *> &addrs, std::vector<size_t> &lens,
                        std::vector<fabriclib_remote_mr *> &dsts, std::vector<const fabriclib_remote_mr *> &cdsts) {
    uint64_t g = 0;
    fabriclib_status s = fabriclib_add_peer_set(e, caddrs.data(), lens.data(), lens.size(), &g);
    if (s == FABRICLIB_STATUS_OK) s = fabriclib_add_peer_set(e, addrs.data(), lens.data(), lens.size(), &g);
    if (s == FABRICLIB_STATUS_OK) s = fabriclib_submit_barrier(e, g, 7, dsts.data(), dsts.size(), nullptr, nullptr);
    if (s == FABRICLIB_STATUS_OK) s = fabriclib_submit_barrier(e, g, 7, cdsts.data(), cdsts.size(), nullptr, nullptr);
    return s;
}

// Callbacks declared as the header asks (noexcept), and a std::atomic flag.
#include <atomic>
static void on_end(void *, fabriclib_status) FABRICLIB_NOEXCEPT {}
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a flag may be a std::atomic<uint32_t>");
fabriclib_status opts_from_cpp(const fabriclib_engine *e, std::atomic<uint32_t> &flag) {
    fabriclib_submit_opts o{};
    o.struct_size = sizeof o;
    o.callback = on_end;
    fabriclib_status s = fabriclib_expect_imm_count(e, 1, 1, &o, nullptr);
    if (s == FABRICLIB_STATUS_OK) s = fabriclib_flag_await(reinterpret_cast<const uint32_t *>(&flag), 0, nullptr);
    return s;
}

// In C++ fabriclib_status is the enum (underlying type int32_t): the same
// ABI as C's int32_t, statuses convert to int, and the status in a flag word
// goes to fabriclib_status_str without a cast.
static_assert(sizeof(fabriclib_status) == sizeof(int32_t), "fabriclib_status is 32 bits");
const char *flag_status_text(uint32_t flag) {
    int32_t code = FABRICLIB_STATUS_TIMED_OUT;
    if (flag & FABRICLIB_FLAG_DONE) code = static_cast<int32_t>(flag & FABRICLIB_FLAG_STATUS_MASK);
    return fabriclib_status_str(code);
}
