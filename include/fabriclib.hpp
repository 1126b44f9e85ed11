/*
 * fabriclib.hpp: the official C++17 interface to fabriclib, header-only,
 * over the C API of fabriclib.h (whose comments are the contract: every
 * call here says which C function it is).
 *
 *  - Handles are move-only RAII objects: Config, Engine, Mr, RemoteMr,
 *    Watcher. `get()` gives the C handle for calls not wrapped here.
 *  - Errors throw fabriclib::Error, which carries the status and the
 *    message. The submits also have a non-throwing form taking
 *    `std::nothrow` first: it returns the status (FABRICLIB_STATUS_AGAIN
 *    when a queue is full) and never throws.
 *  - A Request owns its completion flag: `wait()` sleeps on it (a futex),
 *    `done()` looks. The lifetime rules of fabriclib.h are kept by the
 *    types: a Request holds its engine alive; one dropped before its end
 *    leaves its flag with the engine, which frees it once the engine is
 *    gone; callbacks (submits, receive pools, watchers) are owned by the
 *    library side and freed after their last call.
 *  - Callbacks must be noexcept (checked at compile time): an exception
 *    escaping into fabriclib's threads would abort the process.
 */
#ifndef FABRICLIB_HPP
#define FABRICLIB_HPP

#include "fabriclib.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace fabriclib {

/// A byte blob: an engine's address, a region's descriptor.
using Bytes = std::vector<uint8_t>;

/// A failed call: its status (`fabriclib_status`) and message.
class Error : public std::runtime_error {
 public:
  Error(fabriclib_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
  fabriclib_status status() const noexcept { return status_; }

 private:
  fabriclib_status status_;
};

namespace detail {

inline void check(fabriclib_status s, const char *call) {
  if (s != FABRICLIB_STATUS_OK)
    throw Error(s, std::string(call) + ": " + fabriclib_status_str(s) + ": " + fabriclib_last_error_message());
}

template <class T, void (*Free)(T *)>
struct Deleter {
  void operator()(T *p) const noexcept { Free(p); }
};

/// A blob read by fabriclib's size-then-copy convention.
template <class Get>
Bytes blob(Get &&get, const char *call) {
  size_t len = 0;
  fabriclib_status s = get(nullptr, 0, &len);
  if (s != FABRICLIB_STATUS_BUFFER_TOO_SMALL) check(s, call);
  Bytes out(len);
  check(get(out.data(), out.size(), &len), call);
  out.resize(len);
  return out;
}

/// What an engine shares with its requests and callbacks: the C engine
/// (destroyed with the last of them), the flags of requests dropped before
/// their end, the callbacks of receive pools.
struct EngineState {
  fabriclib_engine *engine = nullptr;
  std::mutex lock;
  std::vector<std::shared_ptr<std::atomic<uint32_t>>> orphans;
  std::vector<std::shared_ptr<void>> pools;
  ~EngineState() {
    // Every request reports (SHUTDOWN) and every pool has its last call
    // before this returns; then the flags and callbacks may go.
    fabriclib_engine_destroy(engine);
  }
};

/// A heap-held callback, deleted after its one call.
template <class F>
void call_once(void *user_data, fabriclib_status status) noexcept {
  std::unique_ptr<F> f(static_cast<F *>(user_data));
  (*f)(status);
}

template <class F>
void call_message(void *user_data, fabriclib_status status, const fabriclib_message *msg) noexcept {
  (*static_cast<F *>(user_data))(status, *msg);
}

template <class F>
void call_watch(void *user_data, uint64_t old_value, uint64_t new_value) noexcept {
  (*static_cast<F *>(user_data))(old_value, new_value);
}

}  // namespace detail

/// Engine settings (`fabriclib_config`). Setters return *this; a bad value throws.
class Config {
 public:
  Config() {
    fabriclib_config *c = nullptr;
    detail::check(fabriclib_config_new(&c), "fabriclib_config_new");
    c_.reset(c);
  }
  /// `fabriclib_config_set_provider` ("tcp", "shm", "efa", "verbs", …).
  Config &provider(const std::string &name) {
    detail::check(fabriclib_config_set_provider(get(), name.c_str()), "fabriclib_config_set_provider");
    return *this;
  }
  /// `fabriclib_config_set_bind_address` (IP providers).
  Config &bind_address(const std::string &addr) {
    detail::check(fabriclib_config_set_bind_address(get(), addr.c_str()), "fabriclib_config_set_bind_address");
    return *this;
  }
  /// `fabriclib_config_set_nic_count`.
  Config &nic_count(uint32_t n) {
    detail::check(fabriclib_config_set_nic_count(get(), n), "fabriclib_config_set_nic_count");
    return *this;
  }
  /// `fabriclib_config_set_manual_progress`.
  Config &manual_progress(bool manual) {
    detail::check(fabriclib_config_set_manual_progress(get(), manual), "fabriclib_config_set_manual_progress");
    return *this;
  }
  /// `fabriclib_config_set_request_timeout` (0: no deadline).
  Config &request_timeout(std::chrono::microseconds t) {
    detail::check(fabriclib_config_set_request_timeout(get(), static_cast<uint64_t>(t.count())),
                  "fabriclib_config_set_request_timeout");
    return *this;
  }
  /// `fabriclib_config_set_keepalive_us`.
  Config &keepalive(std::chrono::microseconds interval, std::chrono::microseconds peer_timeout) {
    detail::check(fabriclib_config_set_keepalive_us(get(), static_cast<uint64_t>(interval.count()),
                                                    static_cast<uint64_t>(peer_timeout.count())),
                  "fabriclib_config_set_keepalive_us");
    return *this;
  }
  /// The C handle, for the setters not wrapped here.
  fabriclib_config *get() const noexcept { return c_.get(); }

 private:
  std::unique_ptr<fabriclib_config, detail::Deleter<fabriclib_config, fabriclib_config_free>> c_;
};

/// A registered local region (`fabriclib_mr`): the source of writes, and
/// through its descriptor the destination of peers' writes. It may outlive
/// its engine.
class Mr {
 public:
  Mr() = default;
  explicit Mr(fabriclib_mr *mr) noexcept : mr_(mr) {}
  /// `fabriclib_mr_descriptor`: what a peer parses into a RemoteMr.
  Bytes descriptor() const {
    return detail::blob([&](uint8_t *b, size_t c, size_t *l) { return fabriclib_mr_descriptor(get(), b, c, l); },
                        "fabriclib_mr_descriptor");
  }
  fabriclib_mr *get() const noexcept { return mr_.get(); }

 private:
  std::unique_ptr<fabriclib_mr, detail::Deleter<fabriclib_mr, fabriclib_mr_deregister>> mr_;
};

/// A peer's region, parsed from its descriptor (`fabriclib_remote_mr`).
class RemoteMr {
 public:
  RemoteMr() = default;
  /// `fabriclib_remote_mr_parse`; a damaged blob throws (MALFORMED).
  static RemoteMr parse(const void *data, size_t len) {
    fabriclib_remote_mr *r = nullptr;
    detail::check(fabriclib_remote_mr_parse(static_cast<const uint8_t *>(data), len, &r), "fabriclib_remote_mr_parse");
    RemoteMr out;
    out.r_.reset(r);
    return out;
  }
  static RemoteMr parse(const Bytes &blob) { return parse(blob.data(), blob.size()); }
  /// `fabriclib_remote_mr_len`.
  uint64_t len() const {
    uint64_t n = 0;
    detail::check(fabriclib_remote_mr_len(get(), &n), "fabriclib_remote_mr_len");
    return n;
  }
  /// `fabriclib_remote_mr_memory`: host or GPU memory.
  fabriclib_region_memory memory() const {
    fabriclib_region_memory m{};
    detail::check(fabriclib_remote_mr_memory(get(), &m), "fabriclib_remote_mr_memory");
    return m;
  }
  /// `fabriclib_remote_mr_owner`: the address of the group that holds it.
  Bytes owner() const {
    return detail::blob([&](uint8_t *b, size_t c, size_t *l) { return fabriclib_remote_mr_owner(get(), b, c, l); },
                        "fabriclib_remote_mr_owner");
  }
  const fabriclib_remote_mr *get() const noexcept { return r_.get(); }

 private:
  std::unique_ptr<fabriclib_remote_mr, detail::Deleter<fabriclib_remote_mr, fabriclib_remote_mr_free>> r_;
};

/// Pages on one side of a paged write (`fabriclib_pages`): page i starts at
/// byte `offset + indices[i] * stride`. The indices are copied by the submit.
struct Pages {
  const std::vector<uint32_t> &indices;
  uint64_t stride;
  uint64_t offset = 0;
  fabriclib_pages c() const noexcept { return fabriclib_pages{indices.data(), indices.size(), stride, offset}; }
};

/// One write of `Engine::writes` (`fabriclib_single_write`): `len` bytes
/// from `src_offset` of the batch's source to `dst_offset` of `dst` (which
/// must outlive the call), with an immediate if given.
struct SingleWrite {
  uint64_t src_offset;
  const RemoteMr &dst;
  uint64_t dst_offset;
  uint64_t len;
  std::optional<uint32_t> imm = std::nullopt;
};

/// A submitted request with a completion flag it owns. Move-only. It holds
/// its engine alive; dropped before its end, its flag stays with the engine.
class Request {
 public:
  Request() = default;
  Request(Request &&) noexcept = default;
  Request &operator=(Request &&other) noexcept {
    if (this != &other) {
      release();
      flag_ = std::move(other.flag_);
      state_ = std::move(other.state_);
      id_ = other.id_;
    }
    return *this;
  }
  Request(const Request &) = delete;
  Request &operator=(const Request &) = delete;
  ~Request() { release(); }

  /// Its id (for `Engine::cancel`).
  uint64_t id() const noexcept { return id_; }
  /// Whether it has ended (an acquire load of its flag).
  bool done() const noexcept { return flag_ && (flag_->load(std::memory_order_acquire) & FABRICLIB_FLAG_DONE); }
  /// How it ended (valid once done(); `INVALID_ARGUMENT` for an empty Request).
  fabriclib_status status() const noexcept {
    if (!flag_) return FABRICLIB_STATUS_INVALID_ARGUMENT;
    return static_cast<fabriclib_status>(flag_->load(std::memory_order_acquire) & FABRICLIB_FLAG_STATUS_MASK);
  }
  /// Sleeps until it ends or `timeout` passes (`fabriclib_engine_flag_await`:
  /// with manual progress it progresses the engine); true if it ended.
  bool wait_for(std::chrono::microseconds timeout) const {
    require();
    uint32_t v = 0;
    fabriclib_status s = fabriclib_engine_flag_await(state_->engine, raw(), static_cast<uint64_t>(timeout.count()), &v);
    if (s == FABRICLIB_STATUS_TIMED_OUT) return false;
    detail::check(s, "fabriclib_engine_flag_await");
    return true;
  }
  /// Sleeps until it ends; throws Error if it failed.
  void wait() const {
    require();
    detail::check(fabriclib_engine_flag_await(state_->engine, raw(), FABRICLIB_NO_TIMEOUT, nullptr),
                  "fabriclib_engine_flag_await");
    fabriclib_status s = status();
    if (s != FABRICLIB_STATUS_OK) {
      char msg[512];
      fabriclib_status why = s;
      size_t len = 0;
      std::string text = fabriclib_request_error(state_->engine, id_, &why, msg, sizeof msg, &len) == FABRICLIB_STATUS_OK
                             ? std::string(msg, len ? len - 1 : 0)
                             : std::string(fabriclib_status_str(s));
      throw Error(s, "request " + std::to_string(id_) + ": " + text);
    }
  }

 private:
  friend class Engine;
  uint32_t *raw() const noexcept { return reinterpret_cast<uint32_t *>(flag_.get()); }
  void require() const {
    if (!flag_) throw Error(FABRICLIB_STATUS_INVALID_ARGUMENT, "an empty fabriclib::Request (default-made or moved from)");
  }
  void release() noexcept {
    if (flag_ && state_ && !done()) {
      std::lock_guard<std::mutex> g(state_->lock);
      state_->orphans.push_back(std::move(flag_));
    }
    flag_.reset();
    state_.reset();
  }
  std::shared_ptr<std::atomic<uint32_t>> flag_;
  std::shared_ptr<detail::EngineState> state_;
  uint64_t id_ = 0;
};

/// A watched 64-bit word and its callback (`fabriclib_watcher`).
class Watcher {
 public:
  Watcher() = default;
  Watcher(Watcher &&other) noexcept : w_(other.w_), cb_(std::move(other.cb_)) { other.w_ = nullptr; }
  Watcher &operator=(Watcher &&other) noexcept {
    if (this != &other) {
      reset();
      w_ = other.w_;
      cb_ = std::move(other.cb_);
      other.w_ = nullptr;
    }
    return *this;
  }
  Watcher(const Watcher &) = delete;
  Watcher &operator=(const Watcher &) = delete;
  ~Watcher() { reset(); }
  /// `fabriclib_watcher_host_ptr`: the word, for the CPU side (store to it
  /// atomically, e.g. through `std::atomic_ref` or `__atomic_store_n`).
  uint64_t *host_ptr() const {
    uint64_t *p = nullptr;
    detail::check(fabriclib_watcher_host_ptr(w_, &p), "fabriclib_watcher_host_ptr");
    return p;
  }
  fabriclib_watcher *get() const noexcept { return w_; }

 private:
  friend class Engine;
  void reset() noexcept {
    // Its callback stops (and a running one returns) before it is freed.
    fabriclib_watcher_destroy(w_);
    w_ = nullptr;
    cb_.reset();
  }
  fabriclib_watcher *w_ = nullptr;
  std::shared_ptr<void> cb_;
};

/// A transfer engine (`fabriclib_engine`). Move-only; the C engine is
/// destroyed when this and every Request of it are gone.
class Engine {
 public:
  /// `fabriclib_engine_create`.
  explicit Engine(const Config &config) : s_(std::make_shared<detail::EngineState>()) {
    detail::check(fabriclib_engine_create(config.get(), &s_->engine), "fabriclib_engine_create");
  }
  /// The C handle (NULL in a moved-from Engine: its calls then throw INVALID_ARGUMENT).
  fabriclib_engine *get() const noexcept { return s_ ? s_->engine : nullptr; }

  /// `fabriclib_engine_address`: the blob a peer needs to reach this engine.
  Bytes address() const {
    return detail::blob([&](uint8_t *b, size_t c, size_t *l) { return fabriclib_engine_address(get(), b, c, l); },
                        "fabriclib_engine_address");
  }
  /// `fabriclib_engine_provider`.
  std::string provider() const {
    const char *p = nullptr;
    detail::check(fabriclib_engine_provider(get(), &p), "fabriclib_engine_provider");
    return p;
  }
  /// `fabriclib_engine_caps`.
  fabriclib_caps caps() const {
    fabriclib_caps c{};
    c.struct_size = sizeof c;
    detail::check(fabriclib_engine_caps(get(), &c), "fabriclib_engine_caps");
    return c;
  }
  /// `fabriclib_engine_event_fd`: readable when requests end (the engine owns it).
  int event_fd() const {
    int fd = -1;
    detail::check(fabriclib_engine_event_fd(get(), &fd), "fabriclib_engine_event_fd");
    return fd;
  }
  /// `fabriclib_engine_progress` (manual progress); true if anything happened.
  bool progress() const {
    bool busy = false;
    detail::check(fabriclib_engine_progress(get(), &busy), "fabriclib_engine_progress");
    return busy;
  }

  /// `fabriclib_mr_register`: `len` bytes at `ptr`, which must outlive the Mr
  /// and every request using it.
  Mr register_memory(void *ptr, size_t len) const {
    fabriclib_mr *mr = nullptr;
    detail::check(fabriclib_mr_register(get(), ptr, len, &mr), "fabriclib_mr_register");
    return Mr(mr);
  }
  /// `fabriclib_peer_add`: greets the engine at `addr` now.
  void peer_add(const Bytes &addr) const {
    detail::check(fabriclib_peer_add(get(), addr.data(), addr.size(), nullptr, nullptr), "fabriclib_peer_add");
  }
  /// `fabriclib_peer_remove`: forgets the engine at `addr`; its pending
  /// requests end CANCELED. Returns how many ended.
  size_t peer_remove(const Bytes &addr) const {
    size_t n = 0;
    detail::check(fabriclib_peer_remove(get(), addr.data(), addr.size(), &n), "fabriclib_peer_remove");
    return n;
  }

  /// `fabriclib_submit_single_write`: `len` bytes from `src` at `src_offset`
  /// to `dst` at `dst_offset`, with an immediate if given.
  Request write(const Mr &src, uint64_t src_offset, const RemoteMr &dst, uint64_t dst_offset, uint64_t len,
                std::optional<uint32_t> imm = std::nullopt) const {
    Request r;
    detail::check(write(std::nothrow, r, src, src_offset, dst, dst_offset, len, imm), "fabriclib_submit_single_write");
    return r;
  }
  /// As above, never throwing: the status (`AGAIN` when a queue is full).
  fabriclib_status write(std::nothrow_t, Request &out, const Mr &src, uint64_t src_offset, const RemoteMr &dst,
                         uint64_t dst_offset, uint64_t len, std::optional<uint32_t> imm = std::nullopt) const noexcept {
    return try_submit(out, [&](const fabriclib_submit_opts *o, uint64_t *id) {
      return fabriclib_submit_single_write(get(), len, imm ? &*imm : nullptr, src.get(), src_offset, dst.get(),
                                           dst_offset, o, id);
    });
  }
  /// As above, reporting to `on_done(status)` (noexcept) on the callback thread.
  template <class F>
  void write(const Mr &src, uint64_t src_offset, const RemoteMr &dst, uint64_t dst_offset, uint64_t len,
             std::optional<uint32_t> imm, F &&on_done) const {
    submit_cb("fabriclib_submit_single_write", std::forward<F>(on_done),
              [&](const fabriclib_submit_opts *o, uint64_t *id) {
                return fabriclib_submit_single_write(get(), len, imm ? &*imm : nullptr, src.get(), src_offset,
                                                     dst.get(), dst_offset, o, id);
              });
  }

  /// `fabriclib_submit_single_writes`: every write of `batch` from `src`,
  /// each a request of its own, in one hand-off to the worker. All or none:
  /// on an error it throws and none was submitted.
  std::vector<Request> writes(const Mr &src, const std::vector<SingleWrite> &batch) const {
    std::vector<Request> out(batch.size());
    std::vector<std::shared_ptr<std::atomic<uint32_t>>> flags;
    std::vector<fabriclib_submit_opts> opts(batch.size());
    std::vector<fabriclib_single_write> w(batch.size());
    for (size_t k = 0; k < batch.size(); k++) {
      const SingleWrite &b = batch[k];
      flags.push_back(std::make_shared<std::atomic<uint32_t>>(0));
      opts[k].struct_size = sizeof opts[k];
      opts[k].flag = reinterpret_cast<uint32_t *>(flags[k].get());
      w[k] = fabriclib_single_write{b.len, b.imm ? &*b.imm : nullptr, b.src_offset, b.dst.get(), b.dst_offset, &opts[k]};
    }
    uint64_t first = 0;
    detail::check(fabriclib_submit_single_writes(get(), src.get(), w.data(), w.size(), &first),
                  "fabriclib_submit_single_writes");
    for (size_t k = 0; k < batch.size(); k++) {
      out[k].flag_ = std::move(flags[k]);
      out[k].state_ = s_;
      out[k].id_ = first + k;
    }
    return out;
  }

  /// `fabriclib_submit_paged_writes`: page i of `src_pages` to page i of
  /// `dst_pages`, `page_len` bytes each (one immediate per page if given).
  Request paged_writes(uint64_t page_len, std::optional<uint32_t> imm, const Mr &src, const Pages &src_pages,
                       const RemoteMr &dst, const Pages &dst_pages) const {
    Request r;
    detail::check(paged_writes(std::nothrow, r, page_len, imm, src, src_pages, dst, dst_pages),
                  "fabriclib_submit_paged_writes");
    return r;
  }
  fabriclib_status paged_writes(std::nothrow_t, Request &out, uint64_t page_len, std::optional<uint32_t> imm,
                                const Mr &src, const Pages &src_pages, const RemoteMr &dst,
                                const Pages &dst_pages) const noexcept {
    return try_submit(out, [&](const fabriclib_submit_opts *o, uint64_t *id) {
      fabriclib_pages sp = src_pages.c(), dp = dst_pages.c();
      return fabriclib_submit_paged_writes(get(), page_len, imm ? &*imm : nullptr, src.get(), &sp, dst.get(), &dp, o,
                                           id);
    });
  }

  /// `fabriclib_submit_send`: a message of `len` bytes (at most
  /// `caps().max_send`) to the engine at `addr`; the bytes are copied.
  Request send(const Bytes &addr, const void *msg, size_t len) const {
    Request r;
    detail::check(send(std::nothrow, r, addr, msg, len), "fabriclib_submit_send");
    return r;
  }
  /// Any contiguous container of bytes (`data()`, `size()`).
  template <class C, class = decltype(std::declval<const C &>().data())>
  Request send(const Bytes &addr, const C &msg) const {
    return send(addr, msg.data(), msg.size() * sizeof(*msg.data()));
  }
  fabriclib_status send(std::nothrow_t, Request &out, const Bytes &addr, const void *msg, size_t len) const noexcept {
    return try_submit(out, [&](const fabriclib_submit_opts *o, uint64_t *id) {
      return fabriclib_submit_send(get(), addr.data(), addr.size(), msg, len, o, id);
    });
  }

  /// `fabriclib_recv_pool_add`: `count` buffers of `len` bytes; every
  /// message goes to `on_message(status, msg)` (noexcept; `msg` a `const
  /// fabriclib_message &`: the bytes and the sender's address, valid during
  /// the call); the last call is CANCELED after `remove_recv_pool`,
  /// SHUTDOWN at destroy. Returns the pool's id. The engine keeps the
  /// callable until it is destroyed.
  template <class F>
  uint64_t recv_pool(size_t len, size_t count, F &&on_message) const {
    using Fn = std::decay_t<F>;
    static_assert(std::is_nothrow_invocable_v<Fn &, fabriclib_status, const fabriclib_message &>,
                  "a receive callback must be noexcept and take (fabriclib_status, const fabriclib_message &)");
    auto keep = std::make_shared<Fn>(std::forward<F>(on_message));
    uint64_t id = 0;
    detail::check(fabriclib_recv_pool_add(get(), len, count, &detail::call_message<Fn>, keep.get(), &id),
                  "fabriclib_recv_pool_add");
    std::lock_guard<std::mutex> g(s_->lock);
    s_->pools.push_back(std::move(keep));
    return id;
  }
  /// `fabriclib_recv_pool_remove`: the pool's callback gets its last call
  /// (CANCELED) after the messages already handed to it.
  void remove_recv_pool(uint64_t pool) const {
    detail::check(remove_recv_pool(std::nothrow, pool), "fabriclib_recv_pool_remove");
  }
  fabriclib_status remove_recv_pool(std::nothrow_t, uint64_t pool) const noexcept {
    return fabriclib_recv_pool_remove(get(), pool);
  }

  /// `fabriclib_expect_imm_count`: ends once `count` writes with immediate
  /// `imm` have landed.
  Request expect_imm_count(uint32_t imm, uint32_t count) const {
    Request r;
    detail::check(try_submit(r, [&](const fabriclib_submit_opts *o, uint64_t *id) {
                    return fabriclib_expect_imm_count(get(), imm, count, o, id);
                  }),
                  "fabriclib_expect_imm_count");
    return r;
  }
  /// `fabriclib_imm_count_get`.
  uint64_t imm_count(uint32_t imm) const {
    uint64_t n = 0;
    detail::check(fabriclib_imm_count_get(get(), imm, &n), "fabriclib_imm_count_get");
    return n;
  }
  /// `fabriclib_cancel`; false if it had already ended.
  bool cancel(const Request &r) const {
    fabriclib_status s = fabriclib_cancel(get(), r.id());
    if (s == FABRICLIB_STATUS_NOT_FOUND) return false;
    detail::check(s, "fabriclib_cancel");
    return true;
  }

  /// `fabriclib_watcher_create` on host memory: `on_change(old, new)`
  /// (noexcept) runs on the watcher thread when the word changes.
  template <class F>
  Watcher watch(F &&on_change) const {
    using Fn = std::decay_t<F>;
    static_assert(std::is_nothrow_invocable_v<Fn &, uint64_t, uint64_t>,
                  "a watcher callback must be noexcept and take (uint64_t old, uint64_t new)");
    auto keep = std::make_shared<Fn>(std::forward<F>(on_change));
    fabriclib_watcher_opts o{};
    o.struct_size = sizeof o;
    o.memory = FABRICLIB_MEMORY_HOST;
    o.callback = &detail::call_watch<Fn>;
    o.user_data = keep.get();
    Watcher w;
    detail::check(fabriclib_watcher_create(get(), &o, &w.w_), "fabriclib_watcher_create");
    w.cb_ = std::move(keep);
    return w;
  }

 private:
  template <class Submit>
  fabriclib_status try_submit(Request &out, Submit &&fn) const noexcept {
    std::shared_ptr<std::atomic<uint32_t>> flag;
    try {
      flag = std::make_shared<std::atomic<uint32_t>>(0);
    } catch (...) {
      return FABRICLIB_STATUS_AGAIN;
    }
    fabriclib_submit_opts o{};
    o.struct_size = sizeof o;
    o.flag = reinterpret_cast<uint32_t *>(flag.get());
    uint64_t id = 0;
    fabriclib_status s = fn(&o, &id);
    if (s == FABRICLIB_STATUS_OK) {
      out = Request();
      out.flag_ = std::move(flag);
      out.state_ = s_;
      out.id_ = id;
    }
    return s;
  }
  template <class F, class Submit>
  void submit_cb(const char *call, F &&on_done, Submit &&fn) const {
    using Fn = std::decay_t<F>;
    static_assert(std::is_nothrow_invocable_v<Fn &, fabriclib_status>,
                  "a completion callback must be noexcept and take (fabriclib_status)");
    auto keep = std::make_unique<Fn>(std::forward<F>(on_done));
    fabriclib_submit_opts o{};
    o.struct_size = sizeof o;
    o.callback = &detail::call_once<Fn>;
    o.user_data = keep.get();
    uint64_t id = 0;
    detail::check(fn(&o, &id), call);  // an error never calls back: `keep` frees it
    keep.release();                     // the callback frees it after its one call
  }

  std::shared_ptr<detail::EngineState> s_;
};

}  // namespace fabriclib

#endif  // FABRICLIB_HPP
