// Two rdma contexts, each on its own engine thread, connected to each other; each side owns a
// region with guard bytes around its exported middle, so tests can prove refused accesses wrote
// nothing. Parameterised by device ("tcp", "sm").
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "core/blob.hpp"
#include "core/buffer.hpp"
#include "core/bytes.hpp"
#include "core/engine_thread.hpp"
#include "core/memory_map.hpp"
#include "core/sync_event.hpp"
#include "rdma/context.hpp"

namespace zc::rdma::testing {

inline constexpr size_t region_size = 1024 * 1024;
inline constexpr size_t guard_size = 4096;
inline constexpr uint8_t guard_byte = 0xEE;

struct completion {
  std::string kind;
  status result;
  core::task_base* task;
};

struct side {
  core::engine_thread thread;
  std::vector<uint8_t> backing = std::vector<uint8_t>(region_size + 2 * guard_size, guard_byte);
  std::unique_ptr<core::memory_map> local;   // the exported middle of backing
  std::unique_ptr<core::memory_map> remote;  // the peer's export, imported
  std::unique_ptr<core::buffer_inventory> inventory;
  std::unique_ptr<context> ctx;
  std::unique_ptr<core::sync_event> event;
  std::vector<completion> done;  // engine thread only
  // Called on the engine thread, inside the completion callback, after it was recorded: a test
  // may submit from there (in the pass that completed the task). Set it through thread.call.
  std::function<void(const completion&)> on_completion;
  std::chrono::milliseconds task_timeout = std::chrono::seconds(3);
  std::vector<uint8_t> conn_blob;  // what this side exported for its peer

  uint8_t* region() { return backing.data() + guard_size; }
  bool guards_intact() const {
    for (size_t i = 0; i < guard_size; ++i)
      if (backing[i] != guard_byte || backing[backing.size() - 1 - i] != guard_byte) return false;
    return true;
  }
  size_t count(const std::string& kind) {
    return thread.call([&] {
      size_t n = 0;
      for (auto& c : done) n += c.kind == kind;
      return n;
    });
  }
  bool wait_for(const std::string& kind, size_t n,
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    return thread.wait_until(
        [this, kind, n] {
          size_t k = 0;
          for (auto& c : done) k += c.kind == kind;
          return k >= n;
        },
        timeout);
  }
  std::vector<completion> completions(const std::string& kind) {
    return thread.call([&] {
      std::vector<completion> out;
      for (auto& c : done)
        if (c.kind == kind) out.push_back(c);
      return out;
    });
  }

  template <typename T>
  void enable(const std::string& kind, uint32_t count = 16) {
    auto record = [this, kind](T& t) {
      completion c;
      c.kind = kind;
      c.result = t.result();
      c.task = static_cast<core::task_base*>(&t);
      done.push_back(c);
      if (on_completion) on_completion(c);
    };
    ctx->configure<T>(count, record, record);
  }

  void create(const std::string& device_spec, core::access permissions) {
    thread.call([&] {
      for (size_t i = 0; i < region_size; ++i) region()[i] = static_cast<uint8_t>(i % 251);
      local = core::memory_map::wrap(region(), region_size,
                                     core::access::local_read_write | core::rdma_all);
      inventory = std::make_unique<core::buffer_inventory>(256);
      event = std::make_unique<core::sync_event>(0);
      ctx = std::make_unique<context>(thread.engine(), core::device::open(device_spec));
      ctx->set_permissions(permissions);
      ctx->set_task_timeout(task_timeout);
      enable<receive_task>("receive");
      enable<send_task>("send");
      enable<send_imm_task>("send_imm");
      enable<read_task>("read");
      enable<write_task>("write");
      enable<write_imm_task>("write_imm");
      enable<atomic_cmp_swp_task>("cmp_swp");
      enable<atomic_fetch_add_task>("fetch_add");
      enable<sync_event_get_task>("event_get");
      enable<sync_event_set_task>("event_set");
      enable<sync_event_add_task>("event_add");
      EXPECT_EQ(ctx->start(), status::success);
    });
  }

  void destroy() {
    thread.call([&] {
      ctx.reset();
      remote.reset();
      local.reset();
      event.reset();
    });
  }

  // On the engine thread: takes a T from its pool, lets `fill` set it up, submits it, and expects
  // the submit to succeed.
  template <typename T, typename Fill>
  void submit(uint64_t user_data, Fill fill) {
    T* t = nullptr;
    ASSERT_EQ(ctx->allocate(core::make_user_data(user_data), t), status::success);
    fill(*t);
    ASSERT_EQ(ctx->submit(*t), status::success);
  }

  // Blocks the engine thread for `how_long` from another thread (a slow or stopped peer); returns
  // once the stall has begun. Join the thread to wait for its end.
  std::thread stall(std::chrono::milliseconds how_long) {
    std::promise<void> started;
    auto begun = started.get_future();
    std::thread t([this, how_long, p = std::move(started)]() mutable {
      thread.call(
          [&] {
            p.set_value();
            std::this_thread::sleep_for(how_long);
          },
          how_long + std::chrono::seconds(10));
    });
    begun.wait();
    return t;
  }

  // A buffer over [offset, offset+length) of the local region, data section empty or full.
  core::buffer* local_buffer(size_t offset, size_t length, bool full) {
    core::buffer* b = nullptr;
    auto s = full ? inventory->get_by_data(*local, region() + offset, length, b)
                  : inventory->get_by_addr(*local, region() + offset, length, b);
    EXPECT_EQ(s, status::success);
    return b;
  }
  // A remote source (data section = the bytes to read or to operate on).
  core::buffer* remote_buffer(core::memory_map& map, size_t offset, size_t length) {
    core::buffer* b = nullptr;
    EXPECT_EQ(inventory->get_by_data(map, map.data() + offset, length, b), status::success);
    return b;
  }
  // A remote write destination: empty data section at `offset`, since a write appends after it.
  core::buffer* remote_target(core::memory_map& map, size_t offset, size_t length) {
    core::buffer* b = nullptr;
    EXPECT_EQ(inventory->get_by_addr(map, map.data() + offset, length, b), status::success);
    return b;
  }
};

class rdma_pair : public ::testing::TestWithParam<std::string> {
 protected:
  void connect(core::access a_permissions = core::rdma_all,
               core::access b_permissions = core::rdma_all) {
    a.create(GetParam(), a_permissions);
    b.create(GetParam(), b_permissions);
    auto a_blob = a.conn_blob = a.thread.call([&] { return a.ctx->export_connection(); });
    auto b_blob = b.conn_blob = b.thread.call([&] { return b.ctx->export_connection(); });
    auto a_mem = a.thread.call([&] { return a.local->export_rdma(); });
    auto b_mem = b.thread.call([&] { return b.local->export_rdma(); });
    a.thread.call([&] {
      a.ctx->connect(b_blob);
      a.remote = core::memory_map::import_rdma(b_mem);
    });
    b.thread.call([&] {
      b.ctx->connect(a_blob);
      b.remote = core::memory_map::import_rdma(a_mem);
    });
  }
  void TearDown() override {
    a.destroy();
    b.destroy();
  }

  side a;
  side b;
};

// An RDMA export blob saying whatever `r` says (memory_map::export_rdma's layout).
inline std::vector<uint8_t> export_blob(const core::remote_region& r) {
  std::vector<uint8_t> payload;
  byte_writer w(payload);
  w.u64(r.owner_token);
  w.u64(r.export_id);
  w.u64(r.key);
  w.u64(r.base);
  w.u64(r.length);
  w.u32(static_cast<uint32_t>(r.permissions));
  return core::frame_blob(core::blob_kind::rdma_memory, payload);
}

// An RDMA export blob naming `map`'s export but with a different range or permissions: what a
// misbehaving peer could send. The owner must refuse what the real export does not allow.
inline std::vector<uint8_t> forged_export(const core::memory_map& imported, uint64_t base_shift,
                                          uint64_t length, core::access permissions) {
  core::remote_region r = imported.remote();
  r.base -= base_shift;
  r.length = length;
  r.permissions = permissions;
  return export_blob(r);
}

}  // namespace zc::rdma::testing
