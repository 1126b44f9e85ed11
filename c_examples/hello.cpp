// The README's C++ example (include/fabriclib.hpp): one engine writes 4 KiB
// into a region it registered itself (a peer would get the descriptor out
// of band) and waits for the immediate that says the bytes landed.
#include <fabriclib.hpp>

#include <cstdio>
#include <cstring>

int main() try {
    static char src[4096] = "hello, fabriclib", dst[4096];
    fabriclib::Engine e{fabriclib::Config{}};  // FABRICLIB_PROVIDER, FABRICLIB_BIND_ADDR apply
    fabriclib::Mr s = e.register_memory(src, sizeof src);
    fabriclib::Mr d = e.register_memory(dst, sizeof dst);
    fabriclib::RemoteMr rd = fabriclib::RemoteMr::parse(d.descriptor());  // what a peer receives
    fabriclib::Request landed = e.expect_imm_count(42, 1);               // the receiver's side
    e.write(s, 0, rd, 0, sizeof src, 42).wait();                          // throws if it fails
    landed.wait();
    std::printf("landed: %s\n", dst);
    return std::strcmp(dst, src) == 0 ? 0 : 1;
} catch (const fabriclib::Error &x) {
    std::fprintf(stderr, "%s (status %d)\n", x.what(), x.status());
    return 1;
}
