// The tasks of an rdma::context, one type per DOCA RDMA task. Buffers are core::buffer: local
// ones come from local (or PCI-imported) memory maps, remote ones from maps imported from a peer's
// RDMA export. A task owns none of them; they must stay valid until its callback has run.
#pragma once

#include <cstdint>
#include <memory>

#include "core/buffer.hpp"
#include "core/progress_engine.hpp"
#include "core/task.hpp"
#include "rdma/internal/wire.hpp"

namespace zc::rdma {

class context;

namespace internal {
class task_list;
struct context_hooks;
// What a destroyed context leaves behind while UCX still references some of its tasks: their
// pools, freed by the UCX callback that lets go of the last of them.
struct orphanage {
  std::shared_ptr<void> pools;
  uint32_t held = 0;  // tasks UCX still references
};
enum class task_kind : uint8_t {
  receive,
  send,
  send_imm,
  read,
  write,
  write_imm,
  cmp_swp,
  fetch_add,
  event_get,
  event_set,
  event_add,
  count
};
}  // namespace internal

// Common part: in-flight bookkeeping (list links, deadline, wire id, the header UCX reads).
class task : public core::task_base {
 protected:
  task() = default;

 private:
  friend class context;
  friend class internal::task_list;
  friend struct internal::context_hooks;
  task* prev_ = nullptr;
  task* next_in_list_ = nullptr;
  internal::task_list* list_ = nullptr;
  core::steady_clock::time_point deadline_{};
  uint64_t wire_id_ = 0;
  uint32_t generation_ = 0;
  internal::task_kind kind_ = internal::task_kind::receive;
  // A task goes back to its owner only when UCX references nothing of it any more (the header it
  // sends, the source it reads, the buffer a rendezvous writes): until then a decided result
  // waits in `outcome_`.
  void* send_request_ = nullptr;  // UCX send still reading header_ (and the source)
  void* recv_request_ = nullptr;  // UCX rendezvous receive still writing into this task's buffer
  status outcome_ = status::success;
  bool delivered_ = false;  // receive: data in place, waiting for in-order completion
  // Set when its context is gone while UCX still references it: UCX callbacks then only let go
  // of it, and the last one frees what the context left behind (context::orphan_tasks).
  internal::orphanage* orphanage_ = nullptr;
  internal::wire_header header_{};
};

// Posted buffer for the peer's send, send with immediate, or write with immediate. Received
// bytes are appended after the buffer's data section (reset its length before re-posting).
class receive_task final : public task {
 public:
  core::buffer& dst() const noexcept { return *dst_; }
  void set_dst(core::buffer& b) noexcept { dst_ = &b; }
  bool has_immediate() const noexcept { return has_immediate_; }
  uint32_t immediate_data() const noexcept { return immediate_; }
  // Bytes the last message carried.
  size_t received_length() const noexcept { return received_; }
  // Completed by the peer's write with immediate (its bytes went to the written memory, none to
  // dst), not by a send.
  bool from_write() const noexcept { return from_write_; }

 private:
  friend class context;
  core::buffer* dst_ = nullptr;
  bool has_immediate_ = false;
  bool from_write_ = false;
  uint32_t immediate_ = 0;
  size_t received_ = 0;
};

// Sends the source buffer's data section to the peer's next posted receive. Completes when the
// peer acknowledged delivery (status::empty if it had no receive posted, too_big if the message
// did not fit).
class send_task : public task {
 public:
  core::buffer& src() const noexcept { return *src_; }
  void set_src(core::buffer& b) noexcept { src_ = &b; }

 private:
  friend class context;
  core::buffer* src_ = nullptr;

 protected:
  uint32_t immediate_ = 0;
  bool with_immediate_ = false;
};

class send_imm_task final : public send_task {
 public:
  send_imm_task() { with_immediate_ = true; }
  uint32_t immediate_data() const noexcept { return immediate_; }
  void set_immediate_data(uint32_t v) noexcept { immediate_ = v; }
};

// Copies the remote src's data section into the local dst (appended after its data section).
class read_task final : public task {
 public:
  core::buffer& src() const noexcept { return *src_; }
  core::buffer& dst() const noexcept { return *dst_; }
  void set(core::buffer& remote_src, core::buffer& local_dst) noexcept {
    src_ = &remote_src;
    dst_ = &local_dst;
  }

 private:
  friend class context;
  core::buffer* src_ = nullptr;
  core::buffer* dst_ = nullptr;
};

// Copies the local src's data section into the remote dst, appended after dst's data section
// (as DOCA does); on success dst's data length grows by the bytes written.
class write_task : public task {
 public:
  core::buffer& src() const noexcept { return *src_; }
  core::buffer& dst() const noexcept { return *dst_; }
  void set(core::buffer& local_src, core::buffer& remote_dst) noexcept {
    src_ = &local_src;
    dst_ = &remote_dst;
  }

 private:
  friend class context;
  core::buffer* src_ = nullptr;
  core::buffer* dst_ = nullptr;

 protected:
  uint32_t immediate_ = 0;
  bool with_immediate_ = false;
};

// A write that also completes the peer's next posted receive, carrying the immediate value.
class write_imm_task final : public write_task {
 public:
  write_imm_task() { with_immediate_ = true; }
  uint32_t immediate_data() const noexcept { return immediate_; }
  void set_immediate_data(uint32_t v) noexcept { immediate_ = v; }
};

// 64-bit atomics on the first 8 bytes of the remote dst's data section (8-byte aligned). The old
// value is appended to the local result buffer.
class atomic_cmp_swp_task final : public task {
 public:
  core::buffer& dst() const noexcept { return *dst_; }
  core::buffer& result_buffer() const noexcept { return *result_; }
  uint64_t compare_data() const noexcept { return compare_; }
  uint64_t swap_data() const noexcept { return swap_; }
  void set(core::buffer& remote_dst, core::buffer& local_result, uint64_t compare,
           uint64_t swap) noexcept {
    dst_ = &remote_dst;
    result_ = &local_result;
    compare_ = compare;
    swap_ = swap;
  }

 private:
  friend class context;
  core::buffer* dst_ = nullptr;
  core::buffer* result_ = nullptr;
  uint64_t compare_ = 0;
  uint64_t swap_ = 0;
};

class atomic_fetch_add_task final : public task {
 public:
  core::buffer& dst() const noexcept { return *dst_; }
  core::buffer& result_buffer() const noexcept { return *result_; }
  uint64_t add_data() const noexcept { return add_; }
  void set(core::buffer& remote_dst, core::buffer& local_result, uint64_t add) noexcept {
    dst_ = &remote_dst;
    result_ = &local_result;
    add_ = add;
  }

 private:
  friend class context;
  core::buffer* dst_ = nullptr;
  core::buffer* result_ = nullptr;
  uint64_t add_ = 0;
};

// Remote sync events: the remote side is a map imported from core::sync_event::export_remote().
class sync_event_get_task final : public task {
 public:
  core::memory_map& event() const noexcept { return *event_; }
  core::buffer& result_buffer() const noexcept { return *result_; }
  void set(core::memory_map& remote_event, core::buffer& local_result) noexcept {
    event_ = &remote_event;
    result_ = &local_result;
  }

 private:
  friend class context;
  core::memory_map* event_ = nullptr;
  core::buffer* result_ = nullptr;
};

// Sets the remote event to the 8-byte value at the start of src's (local) data section, as one
// atomic store on the owner, so it never tears against a concurrent add.
class sync_event_set_task final : public task {
 public:
  core::memory_map& event() const noexcept { return *event_; }
  core::buffer& src() const noexcept { return *src_; }
  void set(core::memory_map& remote_event, core::buffer& local_src) noexcept {
    event_ = &remote_event;
    src_ = &local_src;
  }

 private:
  friend class context;
  core::memory_map* event_ = nullptr;
  core::buffer* src_ = nullptr;
};

class sync_event_add_task final : public task {
 public:
  core::memory_map& event() const noexcept { return *event_; }
  core::buffer& result_buffer() const noexcept { return *result_; }
  uint64_t add_data() const noexcept { return add_; }
  void set(core::memory_map& remote_event, core::buffer& local_result, uint64_t add) noexcept {
    event_ = &remote_event;
    result_ = &local_result;
    add_ = add;
  }

 private:
  friend class context;
  core::memory_map* event_ = nullptr;
  core::buffer* result_ = nullptr;
  uint64_t add_ = 0;
};

}  // namespace zc::rdma
