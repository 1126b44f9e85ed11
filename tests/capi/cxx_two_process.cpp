// The C++ header (fabriclib.hpp) between two processes, as a serving stack
// would use it: RAII handles, errors as exceptions (and the non-throwing
// form), requests waited on, noexcept callbacks, a receive pool. Built with
// AddressSanitizer and UndefinedBehaviorSanitizer (CMakeLists.txt).
//
//   cxx_two_process tcp|shm
//
// The target registers a region, expects one immediate per page, and hands
// its address and descriptor to the initiator through a pipe; the
// initiator writes 64 pages in a permuted order with an immediate each, a
// single write with a callback, a batch of four single writes (one
// immediate each, of another value), and a message; the target checks every
// byte and both counts, and answers the message.
#include "fabriclib.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using fabriclib::Bytes;
using namespace std::chrono_literals;

namespace {

constexpr size_t PAGES = 64;
constexpr size_t PAGE = 4096;
constexpr uint32_t IMM = 0x42;

int failures = 0;

#define CHECK(cond, ...)                              \
  do {                                                \
    if (!(cond)) {                                    \
      std::fprintf(stderr, "FAIL %s: ", who);         \
      std::fprintf(stderr, __VA_ARGS__);              \
      std::fprintf(stderr, "\n");                     \
      failures++;                                     \
    }                                                 \
  } while (0)

void put_blob(int fd, const Bytes &b) {
  uint32_t n = static_cast<uint32_t>(b.size());
  if (write(fd, &n, 4) != 4 || write(fd, b.data(), n) != static_cast<ssize_t>(n)) std::perror("write");
}

Bytes get_blob(int fd) {
  uint32_t n = 0;
  if (read(fd, &n, 4) != 4) return {};
  Bytes b(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b.data() + got, n - got);
    if (r <= 0) return {};
    got += static_cast<size_t>(r);
  }
  return b;
}

fabriclib::Config config(const std::string &provider) {
  fabriclib::Config c;
  if (provider == "tcp") {
    c.provider("tcp;ofi_rxm").bind_address("127.0.0.1");
  } else {
    c.provider(provider);
  }
  return c;
}

uint8_t pattern(size_t page, size_t byte) { return static_cast<uint8_t>(page * 7 + byte * 13 + 1); }
uint32_t permuted(size_t k) { return static_cast<uint32_t>((k * 37) % PAGES); }

/// Collects messages from a receive pool, and who sent the last one.
struct Inbox {
  std::atomic<int> count{0};
  char text[64] = {};
  Bytes from;
  void take(fabriclib_status st, const fabriclib_message &m) noexcept {
    if (st != FABRICLIB_STATUS_OK) return;  // the pool's last call, at shutdown
    std::memcpy(text, m.data, m.len < sizeof text - 1 ? m.len : sizeof text - 1);
    from.assign(m.from, m.from + m.from_len);
    count++;
  }
};

bool wait_until(const std::atomic<int> &n, int want) {
  for (int i = 0; i < 20000 && n.load() < want; i++) std::this_thread::sleep_for(1ms);
  return n.load() >= want;
}

int target(const std::string &provider, int to_peer, int from_peer) {
  const char *who = "target";
  fabriclib::Engine e(config(provider));
  std::vector<uint8_t> mem(PAGES * PAGE, 0);
  fabriclib::Mr mr = e.register_memory(mem.data(), mem.size());
  fabriclib::Request pages = e.expect_imm_count(IMM, PAGES);
  fabriclib::Request batch = e.expect_imm_count(IMM + 1, 4);
  Inbox inbox;
  e.recv_pool(256, 8, [&inbox](fabriclib_status s, const fabriclib_message &m) noexcept { inbox.take(s, m); });
  // An expectation dropped before its end: its flag stays with the engine.
  { fabriclib::Request dropped = e.expect_imm_count(0x99, 1); }
  put_blob(to_peer, e.address());
  put_blob(to_peer, mr.descriptor());
  pages.wait();
  CHECK(pages.done() && pages.status() == FABRICLIB_STATUS_OK, "the pages' expectation: %d", pages.status());
  size_t bad = 0;
  for (size_t k = 0; k < PAGES; k++)
    for (size_t i = 0; i < PAGE; i++) bad += mem[permuted(k) * PAGE + i] != pattern(k, i);
  CHECK(bad == 0, "%zu bytes differ", bad);
  CHECK(e.imm_count(IMM) == 0, "immediates beyond the expected: %llu", static_cast<unsigned long long>(e.imm_count(IMM)));
  batch.wait();
  CHECK(e.imm_count(IMM + 1) == 0, "batch immediates beyond the expected: %llu",
        static_cast<unsigned long long>(e.imm_count(IMM + 1)));
  CHECK(wait_until(inbox.count, 1) && std::strcmp(inbox.text, "hello") == 0, "the message: \"%s\"", inbox.text);
  Bytes initiator = get_blob(from_peer);
  CHECK(inbox.from == initiator, "the message's sender is not the initiator's address");
  e.send(inbox.from, std::string("ok")).wait();
  std::printf("target: %zu pages of %zu bytes verified, message \"%s\"\n", PAGES, PAGE, inbox.text);
  return failures != 0;
}

int initiator(const std::string &provider, int from_peer, int to_peer) {
  const char *who = "initiator";
  fabriclib::Engine e(config(provider));
  std::vector<uint8_t> src(PAGES * PAGE);
  for (size_t k = 0; k < PAGES; k++)
    for (size_t i = 0; i < PAGE; i++) src[k * PAGE + i] = pattern(k, i);
  fabriclib::Mr mr = e.register_memory(src.data(), src.size());
  Bytes peer = get_blob(from_peer);
  fabriclib::RemoteMr dst = fabriclib::RemoteMr::parse(get_blob(from_peer));
  CHECK(dst.len() == PAGES * PAGE, "the descriptor's length %llu", static_cast<unsigned long long>(dst.len()));
  CHECK(dst.memory() == FABRICLIB_REGION_MEMORY_HOST, "the descriptor's memory kind %u", static_cast<unsigned>(dst.memory()));
  CHECK(dst.owner() == peer, "the region's owner is not the target's address");

  // Errors: an exception with the status, or the status without one.
  try {
    e.write(mr, 0, dst, dst.len(), 1);
    CHECK(false, "a write past the region did not throw");
  } catch (const fabriclib::Error &x) {
    CHECK(x.status() == FABRICLIB_STATUS_OUT_OF_BOUNDS, "the write past the region threw status %d", x.status());
  }
  fabriclib::Request none;
  CHECK(e.write(std::nothrow, none, mr, 0, dst, dst.len(), 1) == FABRICLIB_STATUS_OUT_OF_BOUNDS,
        "the non-throwing write past the region");
  // An empty request (never submitted) cannot be waited on.
  try {
    none.wait();
    CHECK(false, "waiting on an empty request did not throw");
  } catch (const fabriclib::Error &x) {
    CHECK(x.status() == FABRICLIB_STATUS_INVALID_ARGUMENT && !none.done(), "an empty request: status %d", x.status());
  }
  try {
    fabriclib::RemoteMr::parse(peer);
    CHECK(false, "an address parsed as a descriptor");
  } catch (const fabriclib::Error &x) {
    CHECK(x.status() == FABRICLIB_STATUS_MALFORMED, "parsing an address threw status %d", x.status());
  }

  // The pages, permuted, one immediate each; a request waited on.
  std::vector<uint32_t> s(PAGES), d(PAGES);
  for (size_t k = 0; k < PAGES; k++) s[k] = static_cast<uint32_t>(k), d[k] = permuted(k);
  fabriclib::Request pages =
      e.paged_writes(PAGE, IMM, mr, fabriclib::Pages{s, PAGE}, dst, fabriclib::Pages{d, PAGE});
  CHECK(pages.wait_for(30s), "the paged write did not end in 30 s");
  pages.wait();

  // A single write reporting to a noexcept callback (no immediate: the target counts none).
  std::atomic<int> called{0};
  std::atomic<int> status{-1};
  // A zero-length write without an immediate is refused before it is
  // queued: it throws, and its callback is freed uncalled.
  try {
    e.write(mr, 0, dst, 0, 0, std::nullopt, [&](fabriclib_status st) noexcept {
      status = st;
      called++;
    });
    CHECK(false, "a zero-length write without an immediate did not throw");
  } catch (const fabriclib::Error &x) {
    CHECK(x.status() == FABRICLIB_STATUS_INVALID_ARGUMENT, "the zero-length write threw status %d", x.status());
  }
  CHECK(called.load() == 0, "a refused submit called back");
  e.write(mr, 0, dst, permuted(0) * PAGE, 16, std::nullopt, [&](fabriclib_status st) noexcept {
    status = st;
    called++;
  });
  CHECK(wait_until(called, 1) && status.load() == FABRICLIB_STATUS_OK, "the callback: %d calls, status %d",
        called.load(), status.load());

  // A batch of single writes: pages 0..3 again (the same bytes), one
  // immediate each; consecutive ids. A batch with a bad write submits none.
  std::vector<fabriclib::SingleWrite> batch;
  for (size_t k = 0; k < 4; k++) batch.push_back({k * PAGE, dst, permuted(k) * PAGE, PAGE, IMM + 1});
  std::vector<fabriclib::SingleWrite> bad = {batch[0], {0, dst, dst.len(), 1, IMM + 1}};
  try {
    e.writes(mr, bad);
    CHECK(false, "a batch with a write past the region did not throw");
  } catch (const fabriclib::Error &x) {
    CHECK(x.status() == FABRICLIB_STATUS_OUT_OF_BOUNDS, "the bad batch threw status %d", x.status());
  }
  std::vector<fabriclib::Request> wrote = e.writes(mr, batch);
  for (size_t k = 0; k < wrote.size(); k++) {
    wrote[k].wait();
    CHECK(wrote[k].id() == wrote[0].id() + k, "write %zu of the batch has id %llu", k,
          static_cast<unsigned long long>(wrote[k].id()));
  }

  // A message there, and its answer back.
  Inbox inbox;
  uint64_t pool = e.recv_pool(256, 4, [&inbox](fabriclib_status st, const fabriclib_message &m) noexcept { inbox.take(st, m); });
  put_blob(to_peer, e.address());
  e.send(peer, std::string("hello")).wait();
  CHECK(wait_until(inbox.count, 1) && std::strcmp(inbox.text, "ok") == 0, "the answer: \"%s\"", inbox.text);
  // The answer came from the target; its pool removed, a second removal is refused.
  CHECK(inbox.from == peer, "the answer's sender is not the target's address");
  e.remove_recv_pool(pool);
  CHECK(e.remove_recv_pool(std::nothrow, pool) == FABRICLIB_STATUS_NOT_FOUND, "a pool removed twice");
  CHECK(e.peer_remove(peer) == 0, "removing the idle target ended requests");
  fabriclib_caps caps = e.caps();
  CHECK(caps.nic_count == 1 && caps.group_count == 1 && caps.max_send > 0, "caps");
  std::printf("initiator: %zu pages written, callback and messages ok (%s)\n", PAGES, e.provider().c_str());
  return failures != 0;
}

}  // namespace

int main(int argc, char **argv) {
  std::string provider = argc > 1 ? argv[1] : "tcp";
  int down[2], up[2];  // initiator -> target, target -> initiator
  if (pipe(down) || pipe(up)) return 2;
  // One side of the test; an exception escaping it fails the side.
  auto side = [&provider](const char *who, int (*fn)(const std::string &, int, int), int from, int to) {
    int rc = 1;
    try {
      rc = fn(provider, from, to);
    } catch (const fabriclib::Error &x) {
      std::fprintf(stderr, "%s: %s\n", who, x.what());
    }
    return rc;
  };
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    close(down[1]);
    close(up[0]);
    int rc = side("target", target, up[1], down[0]);
    std::fflush(stdout);
    _exit(rc);
  }
  close(down[0]);
  close(up[1]);
  int rc = side("initiator", initiator, up[0], down[1]);
  int st = 0;
  waitpid(child, &st, 0);
  bool ok = rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  std::printf("cxx_two_process[%s]: %s\n", provider.c_str(), ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
  return ok ? 0 : 1;
}
