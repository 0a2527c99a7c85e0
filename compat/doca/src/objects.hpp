// The objects behind libzcstore-doca's opaque C handles, and the guard every entry point runs
// its body in. Each DOCA object wraps the zcstore object of DESIGN §3's name table; what DOCA
// configures before a zcstore object can exist (an rdma context before its progress engine is
// known) is kept here and applied when the zcstore object is made.
// Thread rules: DOCA's: a progress engine, its contexts, tasks and buffers belong to one thread.
#pragma once

#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>
#include <doca_sync_event.h>

#include <deque>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/buffer.hpp"
#include "core/context.hpp"
#include "core/device.hpp"
#include "core/log.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "core/status.hpp"
#include "core/sync_event.hpp"

namespace zc::doca {

inline doca_error_t to_doca(status s) noexcept {
  return static_cast<doca_error_t>(s);
}

// Runs an entry point's body: every exception becomes a doca_error_t (none crosses the C ABI).
template <typename Body>
doca_error_t guarded(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const status_error& e) {
    ZC_SDK_LOG_ERROR("{}: {}", function, e.what());
    return to_doca(e.code());
  } catch (const std::bad_alloc&) {
    ZC_SDK_LOG_ERROR("{}: out of memory", function);
    return DOCA_ERROR_NO_MEMORY;
  } catch (const std::exception& e) {
    ZC_SDK_LOG_ERROR("{}: {}", function, e.what());
    return DOCA_ERROR_UNKNOWN;
  } catch (...) {
    ZC_SDK_LOG_ERROR("{}: unknown exception", function);
    return DOCA_ERROR_UNKNOWN;
  }
}

// Says once per function that it is not supported by this facade, and returns NOT_SUPPORTED.
doca_error_t not_supported(const char* function) noexcept;

}  // namespace zc::doca

// An entry point the facade cannot honour: logs once, returns DOCA_ERROR_NOT_SUPPORTED.
#define ZC_DOCA_NOT_SUPPORTED() ::zc::doca::not_supported(__func__)

struct doca_devinfo {
  std::string ibdev_name;
  std::string iface_name;
  std::string pci_addr;      // "0000:03:00.0"
  std::string zc_device;     // zcstore device spec it opens
  bool follows_env = false;  // $ZCSTORE_DOCA_DEVICE overrides zc_device
};

struct doca_dev {
  doca_devinfo info;
  zc::core::device device;
};

struct doca_mmap {
  void* addr = nullptr;
  size_t len = 0;
  uint32_t access = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
  union doca_data user_data {};
  bool from_export = false;
  std::unique_ptr<zc::core::memory_map> map;  // set while started
  std::vector<uint8_t> rdma_export;           // the blob doca_mmap_export_rdma handed out
  std::vector<uint8_t> pci_export;            // the blob doca_mmap_export_pci handed out
  uint32_t buffers = 0;                       // buffers taken from it and not yet released
};

struct doca_buf {
  zc::core::buffer* zc = nullptr;
  doca_buf_inventory* inventory = nullptr;
  doca_mmap* mmap = nullptr;
  uint16_t refcount = 0;
};

struct doca_buf_inventory {
  size_t num_elements = 0;
  union doca_data user_data {};
  std::unique_ptr<zc::core::buffer_inventory> zc;  // set once started
  // One doca_buf per zcstore buffer descriptor, paired on first use (never more than
  // num_elements), so the data path allocates nothing.
  std::vector<doca_buf> bufs;
  std::unordered_map<const zc::core::buffer*, doca_buf*> by_zc;
  uint32_t outstanding = 0;
};

// A DOCA context: the state machine of its zcstore context, with state changes recorded when
// zcstore makes them and reported to the program from doca_pe_progress(), as DOCA does.
struct doca_ctx {
  virtual ~doca_ctx() = default;
  // Makes (first time) and starts the zcstore context.
  virtual doca_error_t start() = 0;
  virtual zc::core::context* zc_context() noexcept = 0;

  doca_pe* pe = nullptr;
  union doca_data user_data {};
  doca_ctx_state_changed_callback_t state_changed = nullptr;
  std::deque<std::pair<doca_ctx_states, doca_ctx_states>> pending;  // not yet reported

  // Delivers one event other than a state change that the context deferred to
  // doca_pe_progress() (a Comch connect or disconnect); false when none is left.
  virtual bool report_event() { return false; }
  virtual bool has_events() const noexcept { return false; }

  // The callback zcstore's context calls on every change: recorded for the next progress call.
  void record(zc::core::context_state previous, zc::core::context_state next) {
    pending.emplace_back(to_doca(previous), to_doca(next));
  }
  static doca_ctx_states to_doca(zc::core::context_state s) noexcept {
    switch (s) {
      case zc::core::context_state::idle:
        return DOCA_CTX_STATE_IDLE;
      case zc::core::context_state::starting:
        return DOCA_CTX_STATE_STARTING;
      case zc::core::context_state::running:
        return DOCA_CTX_STATE_RUNNING;
      case zc::core::context_state::stopping:
        return DOCA_CTX_STATE_STOPPING;
    }
    return DOCA_CTX_STATE_IDLE;
  }
};

struct doca_pe {
  // doca_pe_progress() never sleeps (the program owns its loop), so the engine's wait() policy
  // is never used: busy says so.
  zc::core::progress_engine engine{zc::core::poll_mode::busy};
  std::vector<doca_ctx*> contexts;
  // engine.progress() calls on the stack (a callback may progress again): while any is, zcstore's
  // own poll is below the program's callback, so no context of this engine may be destroyed.
  uint32_t engine_passes = 0;
};

namespace zc::doca {

// True (with an error log naming `function`) while a pass of ctx's progress engine is on the
// stack: a task completion or message callback is running, and the engine goes on to read the
// context (its in-flight count, its state, its poll) after the callback returns. Destroying the
// context there would free that: the destroy is refused with DOCA_ERROR_IN_USE, and succeeds
// after doca_pe_progress() returned. State-changed and Comch connection callbacks run after the
// pass (pe_ctx.cpp), where a destroy is allowed.
inline bool destroyed_inside_progress(const doca_ctx& ctx, const char* function) noexcept {
  if (ctx.pe == nullptr || ctx.pe->engine_passes == 0) return false;
  ZC_SDK_LOG_ERROR(
      "{}: called from a task completion or message callback; destroy it after "
      "doca_pe_progress() returned",
      function);
  return true;
}

}  // namespace zc::doca

// Generic task: what doca_task_* needs, whatever the type. Typed tasks derive from it.
enum class zc_doca_task_type {
  rdma_receive,
  rdma_send,
  rdma_send_imm,
  rdma_write,
  rdma_write_imm,
  rdma_read,
  rdma_atomic_cmp_swp,
  rdma_atomic_fetch_add,
  rdma_remote_sync_event_get,
  rdma_remote_sync_event_notify_set,
  rdma_remote_sync_event_notify_add,
  sync_event_get,
  sync_event_notify_set,
  sync_event_notify_add,
  sync_event_wait_eq,
  sync_event_wait_neq,
  comch_send,
};
struct doca_task {
  zc_doca_task_type type = zc_doca_task_type::rdma_send;
  doca_ctx* ctx = nullptr;
  zc::core::task_base* zc = nullptr;  // the zcstore task while allocated
  union doca_data user_data {};
  doca_buf* src = nullptr;                      // receive, atomics: unused
  doca_buf* dst = nullptr;                      // sends: unused
  doca_buf* result = nullptr;                   // atomics only
  uint32_t immediate = 0;                       // send/write with immediate, as the program gave it
  uint64_t operand0 = 0;                        // compare-and-swap: compare; fetch-and-add: add
  uint64_t operand1 = 0;                        // compare-and-swap: swap
  doca_sync_event_remote_net* event = nullptr;  // remote sync event tasks only
  uint64_t* value_ptr = nullptr;  // sync event get: where the value goes; notify_add: the old one
  doca_error_t status = DOCA_SUCCESS;
  // Submitted and not completed yet: zcstore still holds it, so it cannot be freed or submitted
  // again.
  bool in_flight = false;
  // Submits the task through its context, by type (rdma.cpp, sync_event.cpp).
  doca_error_t (*submit)(doca_task& task) noexcept = nullptr;
};

// A peer's sync event: the map imported from its export (8 bytes, read/write/atomic).
struct doca_sync_event_remote_net {
  std::unique_ptr<zc::core::memory_map> map;
};
