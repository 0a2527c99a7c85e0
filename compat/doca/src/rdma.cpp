// doca_rdma.h over zc::rdma::context. A doca_rdma keeps its configuration until
// doca_ctx_start() makes the zcstore context (which needs the progress engine that
// doca_pe_connect_ctx() names). Each zcstore task has one DOCA task object of the same pool
// index, so completions find their DOCA task without a lookup or an allocation.
#include <doca_rdma.h>

#include <span>

#include "objects.hpp"
#include "rdma/context.hpp"
#include "task_conf.hpp"

struct doca_rdma_task_receive : doca_task {};
struct doca_rdma_task_send : doca_task {};
struct doca_rdma_task_write : doca_task {};
struct doca_rdma_task_read : doca_task {};
struct doca_rdma_task_send_imm : doca_task {};
struct doca_rdma_task_write_imm : doca_task {};
struct doca_rdma_task_atomic_cmp_swp : doca_task {};
struct doca_rdma_task_atomic_fetch_add : doca_task {};
struct doca_rdma_task_remote_net_sync_event_get : doca_task {};
struct doca_rdma_task_remote_net_sync_event_notify_set : doca_task {};
struct doca_rdma_task_remote_net_sync_event_notify_add : doca_task {};

// The context's one connection (multi-connection is not supported in this slice): only its
// address is used, to check that a task or connect names this context's connection.
struct doca_rdma_connection {};

struct doca_rdma final : doca_ctx {
  doca_dev* dev = nullptr;
  uint32_t permissions = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
  std::unique_ptr<zc::rdma::context> zc;
  zc::doca::task_conf<doca_rdma_task_receive> receive;
  zc::doca::task_conf<doca_rdma_task_send> send;
  zc::doca::task_conf<doca_rdma_task_write> write;
  zc::doca::task_conf<doca_rdma_task_read> read;
  zc::doca::task_conf<doca_rdma_task_send_imm> send_imm;
  zc::doca::task_conf<doca_rdma_task_write_imm> write_imm;
  zc::doca::task_conf<doca_rdma_task_atomic_cmp_swp> cmp_swp;
  zc::doca::task_conf<doca_rdma_task_atomic_fetch_add> fetch_add;
  zc::doca::task_conf<doca_rdma_task_remote_net_sync_event_get> event_get;
  zc::doca::task_conf<doca_rdma_task_remote_net_sync_event_notify_set> event_set;
  zc::doca::task_conf<doca_rdma_task_remote_net_sync_event_notify_add> event_add;
  std::vector<uint8_t> local_blob;
  doca_rdma_connection connection;

  doca_error_t start() override;
  zc::core::context* zc_context() noexcept override { return zc.get(); }

  bool idle() const noexcept {
    return zc == nullptr || zc->state() == zc::core::context_state::idle;
  }

  // Enables one task type on the zcstore context (idle) and sizes its DOCA task objects.
  template <typename Zc, typename Typed>
  void apply(zc::doca::task_conf<Typed>& conf) {
    conf.template apply<Zc>(*this, [this](uint32_t count, auto on_success, auto on_error) {
      zc->configure<Zc>(count, std::move(on_success), std::move(on_error));
    });
  }
};

namespace zc::doca {
namespace {

bool live(const doca_buf* b) noexcept {
  return b != nullptr && b->refcount != 0 && b->zc != nullptr;
}

doca_rdma& owner(doca_task& t) noexcept {
  return static_cast<doca_rdma&>(*t.ctx);
}

doca_error_t submit_receive(doca_task& w) noexcept {
  // zcstore appends received bytes to a buffer: a receive needs one here.
  if (!live(w.dst)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::receive_task&>(*w.zc);
  t.set_dst(*w.dst->zc);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_send(doca_task& w) noexcept {
  if (!live(w.src)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::send_task&>(*w.zc);
  t.set_src(*w.src->zc);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_write(doca_task& w) noexcept {
  if (!live(w.src) || !live(w.dst)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::write_task&>(*w.zc);
  t.set(*w.src->zc, *w.dst->zc);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_read(doca_task& w) noexcept {
  if (!live(w.src) || !live(w.dst)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::read_task&>(*w.zc);
  t.set(*w.src->zc, *w.dst->zc);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_send_imm(doca_task& w) noexcept {
  if (!live(w.src)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::send_imm_task&>(*w.zc);
  t.set_src(*w.src->zc);
  t.set_immediate_data(w.immediate);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_write_imm(doca_task& w) noexcept {
  if (!live(w.src) || !live(w.dst)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::write_imm_task&>(*w.zc);
  t.set(*w.src->zc, *w.dst->zc);
  t.set_immediate_data(w.immediate);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_cmp_swp(doca_task& w) noexcept {
  if (!live(w.dst) || !live(w.result)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::atomic_cmp_swp_task&>(*w.zc);
  t.set(*w.dst->zc, *w.result->zc, w.operand0, w.operand1);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_fetch_add(doca_task& w) noexcept {
  if (!live(w.dst) || !live(w.result)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::atomic_fetch_add_task&>(*w.zc);
  t.set(*w.dst->zc, *w.result->zc, w.operand0);
  return to_doca(owner(w).zc->submit(t));
}

// Remote sync events: the event is the map imported from the peer's export.
doca_error_t submit_event_get(doca_task& w) noexcept {
  if (w.event == nullptr || !live(w.dst)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::sync_event_get_task&>(*w.zc);
  t.set(*w.event->map, *w.dst->zc);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_event_set(doca_task& w) noexcept {
  if (w.event == nullptr || !live(w.src)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::sync_event_set_task&>(*w.zc);
  t.set(*w.event->map, *w.src->zc);
  return to_doca(owner(w).zc->submit(t));
}

doca_error_t submit_event_add(doca_task& w) noexcept {
  if (w.event == nullptr || !live(w.result)) return DOCA_ERROR_INVALID_VALUE;
  auto& t = static_cast<rdma::sync_event_add_task&>(*w.zc);
  t.set(*w.event->map, *w.result->zc, w.operand0);
  return to_doca(owner(w).zc->submit(t));
}

// Takes a zcstore task of type Zc and fills in its DOCA task.
template <typename Zc, typename Typed>
doca_error_t allocate(doca_rdma* rdma, doca_rdma_connection* connection, task_conf<Typed>& conf,
                      zc_doca_task_type type, doca_error_t (*submit)(doca_task&) noexcept,
                      const doca_buf* src, doca_buf* dst, union doca_data user_data, Typed** out) {
  if (rdma == nullptr || out == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (connection != nullptr && connection != &rdma->connection) return DOCA_ERROR_INVALID_VALUE;
  if (rdma->zc == nullptr) return DOCA_ERROR_BAD_STATE;
  Zc* t = nullptr;
  auto s = rdma->zc->allocate<Zc>(core::make_user_data(0), t);
  if (!ok(s)) return to_doca(s);
  Typed& task = conf.allocated(*rdma, *t, type, user_data, submit);
  task.src = const_cast<doca_buf*>(src);
  task.dst = dst;
  *out = &task;
  return DOCA_SUCCESS;
}

// Stores a task type's configuration; applies it at once when the zcstore context exists.
template <typename Zc, typename Typed>
doca_error_t set_conf(doca_rdma* rdma, task_conf<Typed>& conf,
                      typename task_conf<Typed>::callback on_success,
                      typename task_conf<Typed>::callback on_error, uint32_t num_tasks) {
  if (!task_conf<Typed>::acceptable(on_success, on_error, num_tasks))
    return DOCA_ERROR_INVALID_VALUE;
  if (!rdma->idle()) return DOCA_ERROR_BAD_STATE;
  return guarded("doca_rdma_task_*_set_conf", [&] {
    conf.store(on_success, on_error, num_tasks);
    if (rdma->zc != nullptr) rdma->apply<Zc>(conf);
    return DOCA_SUCCESS;
  });
}

core::access rdma_rights(uint32_t mask) noexcept {
  return static_cast<core::access>(
      mask &
      (DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC));
}

}  // namespace
}  // namespace zc::doca

doca_error_t doca_rdma::start() {
  if (zc == nullptr) {
    zc = std::make_unique<zc::rdma::context>(pe->engine, dev->device);
    zc->set_state_changed_callback(
        [this](zc::core::context&, zc::core::context_state previous, zc::core::context_state next) {
          record(previous, next);
        });
    apply<zc::rdma::receive_task>(receive);
    apply<zc::rdma::send_task>(send);
    apply<zc::rdma::write_task>(write);
    apply<zc::rdma::read_task>(read);
    apply<zc::rdma::send_imm_task>(send_imm);
    apply<zc::rdma::write_imm_task>(write_imm);
    apply<zc::rdma::atomic_cmp_swp_task>(cmp_swp);
    apply<zc::rdma::atomic_fetch_add_task>(fetch_add);
    apply<zc::rdma::sync_event_get_task>(event_get);
    apply<zc::rdma::sync_event_set_task>(event_set);
    apply<zc::rdma::sync_event_add_task>(event_add);
  }
  if (zc->state() != zc::core::context_state::idle) return DOCA_ERROR_BAD_STATE;
  zc->set_permissions(zc::doca::rdma_rights(permissions));
  local_blob.clear();
  return zc::doca::to_doca(zc->start());
}

using zc::doca::guarded;
using zc::doca::to_doca;

extern "C" {

doca_error_t doca_rdma_create(struct doca_dev* dev, struct doca_rdma** rdma) {
  if (dev == nullptr || rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    auto r = std::make_unique<doca_rdma>();
    r->dev = dev;
    *rdma = r.release();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_rdma_destroy(struct doca_rdma* rdma) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!rdma->idle()) return DOCA_ERROR_BAD_STATE;
  // A completion callback that stopped its context (idle at once when nothing else was in
  // flight): the engine reads the context again when the callback returns.
  if (zc::doca::destroyed_inside_progress(*rdma, __func__)) return DOCA_ERROR_IN_USE;
  return guarded(__func__, [&] {
    if (rdma->pe != nullptr) std::erase(rdma->pe->contexts, static_cast<doca_ctx*>(rdma));
    delete rdma;
    return DOCA_SUCCESS;
  });
}

struct doca_ctx* doca_rdma_as_ctx(struct doca_rdma* rdma) {
  return rdma;
}

doca_error_t doca_rdma_export(struct doca_rdma* rdma, const void** local_rdma_conn_details,
                              size_t* local_rdma_conn_details_size,
                              struct doca_rdma_connection** rdma_connection) {
  if (rdma == nullptr || local_rdma_conn_details == nullptr ||
      local_rdma_conn_details_size == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  if (rdma->zc == nullptr) return DOCA_ERROR_BAD_STATE;
  return guarded(__func__, [&] {
    if (rdma->local_blob.empty()) rdma->local_blob = rdma->zc->export_connection();
    *local_rdma_conn_details = rdma->local_blob.data();
    *local_rdma_conn_details_size = rdma->local_blob.size();
    if (rdma_connection != nullptr) *rdma_connection = &rdma->connection;
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_rdma_connect(struct doca_rdma* rdma, const void* remote_rdma_conn_details,
                               size_t remote_rdma_conn_details_size,
                               struct doca_rdma_connection* rdma_connection) {
  if (rdma == nullptr || remote_rdma_conn_details == nullptr || remote_rdma_conn_details_size == 0)
    return DOCA_ERROR_INVALID_VALUE;
  if (rdma_connection != nullptr && rdma_connection != &rdma->connection)
    return DOCA_ERROR_INVALID_VALUE;
  if (rdma->zc == nullptr) return DOCA_ERROR_BAD_STATE;
  return guarded(__func__, [&] {
    // zcstore checks the blob's framing and contents before UCX sees any of it.
    rdma->zc->connect(std::span(static_cast<const uint8_t*>(remote_rdma_conn_details),
                                remote_rdma_conn_details_size));
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_rdma_set_permissions(struct doca_rdma* rdma, uint32_t permissions) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!rdma->idle()) return DOCA_ERROR_BAD_STATE;
  rdma->permissions = permissions;
  return DOCA_SUCCESS;
}

doca_error_t doca_rdma_get_permissions(const struct doca_rdma* rdma, uint32_t* permissions) {
  if (rdma == nullptr || permissions == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *permissions = rdma->permissions;
  return DOCA_SUCCESS;
}

doca_error_t doca_rdma_set_grh_enabled(struct doca_rdma* rdma, uint8_t grh_enabled) {
  (void)grh_enabled;
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return rdma->idle() ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_rdma_set_gid_index(struct doca_rdma* rdma, uint32_t gid_index) {
  (void)gid_index;
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return rdma->idle() ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_rdma_set_send_queue_size(struct doca_rdma* rdma, uint32_t send_queue_size) {
  if (rdma == nullptr || send_queue_size == 0) return DOCA_ERROR_INVALID_VALUE;
  return rdma->idle() ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_rdma_set_recv_queue_size(struct doca_rdma* rdma, uint32_t recv_queue_size) {
  if (rdma == nullptr || recv_queue_size == 0) return DOCA_ERROR_INVALID_VALUE;
  return rdma->idle() ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_rdma_set_transport_type(struct doca_rdma* rdma,
                                          enum doca_rdma_transport_type transport_type) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (transport_type != DOCA_RDMA_TRANSPORT_TYPE_RC) return ZC_DOCA_NOT_SUPPORTED();
  return rdma->idle() ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_rdma_set_max_num_connections(struct doca_rdma* rdma,
                                               uint16_t max_num_connections) {
  if (rdma == nullptr || max_num_connections == 0) return DOCA_ERROR_INVALID_VALUE;
  if (max_num_connections > 1) return ZC_DOCA_NOT_SUPPORTED();
  return rdma->idle() ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_rdma_cap_task_receive_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_rdma_cap_task_send_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_rdma_cap_task_write_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_rdma_cap_task_read_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_rdma_cap_task_send_imm_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_rdma_cap_task_write_imm_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_rdma_cap_task_atomic_cmp_swp_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_rdma_cap_task_atomic_fetch_add_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_rdma_cap_get_max_send_buf_list_len(const struct doca_devinfo* devinfo,
                                                     uint32_t* max_send_buf_list_len) {
  if (devinfo == nullptr || max_send_buf_list_len == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *max_send_buf_list_len = 1;  // no buffer chains in this slice
  return DOCA_SUCCESS;
}

doca_error_t doca_rdma_cap_get_max_message_size(const struct doca_devinfo* devinfo,
                                                uint32_t* max_message_size) {
  if (devinfo == nullptr || max_message_size == nullptr) return DOCA_ERROR_INVALID_VALUE;
  // What RC allows on hardware (2^31); zcstore carries it in UCX messages.
  *max_message_size = 1u << 31;
  return DOCA_SUCCESS;
}

// ---- receive

doca_error_t doca_rdma_task_receive_set_conf(struct doca_rdma* rdma,
                                             doca_rdma_task_receive_completion_cb_t on_success,
                                             doca_rdma_task_receive_completion_cb_t on_error,
                                             uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::receive_task>(rdma, rdma->receive, on_success, on_error,
                                                    num_tasks);
}

doca_error_t doca_rdma_task_receive_allocate_init(struct doca_rdma* rdma, struct doca_buf* dst_buf,
                                                  union doca_data user_data,
                                                  struct doca_rdma_task_receive** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::allocate<zc::rdma::receive_task>(
      rdma, nullptr, rdma->receive, zc_doca_task_type::rdma_receive, &zc::doca::submit_receive,
      nullptr, dst_buf, user_data, task);
}

struct doca_task* doca_rdma_task_receive_as_task(struct doca_rdma_task_receive* task) {
  return task;
}

void doca_rdma_task_receive_set_dst_buf(struct doca_rdma_task_receive* task,
                                        struct doca_buf* dst_buf) {
  if (task != nullptr) task->dst = dst_buf;
}

struct doca_buf* doca_rdma_task_receive_get_dst_buf(const struct doca_rdma_task_receive* task) {
  return task == nullptr ? nullptr : task->dst;
}

enum doca_rdma_opcode doca_rdma_task_receive_get_result_opcode(
    const struct doca_rdma_task_receive* task) {
  if (task == nullptr || task->zc == nullptr) return DOCA_RDMA_OPCODE_RECV_SEND;
  const auto& t = static_cast<const zc::rdma::receive_task&>(*task->zc);
  if (t.from_write()) return DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM;
  return t.has_immediate() ? DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM : DOCA_RDMA_OPCODE_RECV_SEND;
}

doca_be32_t doca_rdma_task_receive_get_result_immediate_data(
    const struct doca_rdma_task_receive* task) {
  if (task == nullptr || task->zc == nullptr) return 0;
  return static_cast<const zc::rdma::receive_task&>(*task->zc).immediate_data();
}

struct doca_rdma_connection* doca_rdma_task_receive_get_result_rdma_connection(
    const struct doca_rdma_task_receive* task) {
  if (task == nullptr || task->ctx == nullptr) return nullptr;
  return &static_cast<doca_rdma*>(task->ctx)->connection;
}

// ---- send

doca_error_t doca_rdma_task_send_set_conf(struct doca_rdma* rdma,
                                          doca_rdma_task_send_completion_cb_t on_success,
                                          doca_rdma_task_send_completion_cb_t on_error,
                                          uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::send_task>(rdma, rdma->send, on_success, on_error, num_tasks);
}

doca_error_t doca_rdma_task_send_allocate_init(struct doca_rdma* rdma,
                                               struct doca_rdma_connection* rdma_connection,
                                               const struct doca_buf* src_buf,
                                               union doca_data user_data,
                                               struct doca_rdma_task_send** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::allocate<zc::rdma::send_task>(
      rdma, rdma_connection, rdma->send, zc_doca_task_type::rdma_send, &zc::doca::submit_send,
      src_buf, nullptr, user_data, task);
}

struct doca_task* doca_rdma_task_send_as_task(struct doca_rdma_task_send* task) {
  return task;
}

void doca_rdma_task_send_set_src_buf(struct doca_rdma_task_send* task,
                                     const struct doca_buf* src_buf) {
  if (task != nullptr) task->src = const_cast<doca_buf*>(src_buf);
}

const struct doca_buf* doca_rdma_task_send_get_src_buf(const struct doca_rdma_task_send* task) {
  return task == nullptr ? nullptr : task->src;
}

// ---- write

doca_error_t doca_rdma_task_write_set_conf(struct doca_rdma* rdma,
                                           doca_rdma_task_write_completion_cb_t on_success,
                                           doca_rdma_task_write_completion_cb_t on_error,
                                           uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::write_task>(rdma, rdma->write, on_success, on_error,
                                                  num_tasks);
}

doca_error_t doca_rdma_task_write_allocate_init(struct doca_rdma* rdma,
                                                struct doca_rdma_connection* rdma_connection,
                                                const struct doca_buf* src_buf,
                                                struct doca_buf* dst_buf, union doca_data user_data,
                                                struct doca_rdma_task_write** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::allocate<zc::rdma::write_task>(
      rdma, rdma_connection, rdma->write, zc_doca_task_type::rdma_write, &zc::doca::submit_write,
      src_buf, dst_buf, user_data, task);
}

struct doca_task* doca_rdma_task_write_as_task(struct doca_rdma_task_write* task) {
  return task;
}

void doca_rdma_task_write_set_src_buf(struct doca_rdma_task_write* task,
                                      const struct doca_buf* src_buf) {
  if (task != nullptr) task->src = const_cast<doca_buf*>(src_buf);
}

void doca_rdma_task_write_set_dst_buf(struct doca_rdma_task_write* task, struct doca_buf* dst_buf) {
  if (task != nullptr) task->dst = dst_buf;
}

const struct doca_buf* doca_rdma_task_write_get_src_buf(const struct doca_rdma_task_write* task) {
  return task == nullptr ? nullptr : task->src;
}

struct doca_buf* doca_rdma_task_write_get_dst_buf(const struct doca_rdma_task_write* task) {
  return task == nullptr ? nullptr : task->dst;
}

// ---- read

doca_error_t doca_rdma_task_read_set_conf(struct doca_rdma* rdma,
                                          doca_rdma_task_read_completion_cb_t on_success,
                                          doca_rdma_task_read_completion_cb_t on_error,
                                          uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::read_task>(rdma, rdma->read, on_success, on_error, num_tasks);
}

doca_error_t doca_rdma_task_read_allocate_init(struct doca_rdma* rdma,
                                               struct doca_rdma_connection* rdma_connection,
                                               const struct doca_buf* src_buf,
                                               struct doca_buf* dst_buf, union doca_data user_data,
                                               struct doca_rdma_task_read** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::allocate<zc::rdma::read_task>(
      rdma, rdma_connection, rdma->read, zc_doca_task_type::rdma_read, &zc::doca::submit_read,
      src_buf, dst_buf, user_data, task);
}

struct doca_task* doca_rdma_task_read_as_task(struct doca_rdma_task_read* task) {
  return task;
}

void doca_rdma_task_read_set_src_buf(struct doca_rdma_task_read* task,
                                     const struct doca_buf* src_buf) {
  if (task != nullptr) task->src = const_cast<doca_buf*>(src_buf);
}

void doca_rdma_task_read_set_dst_buf(struct doca_rdma_task_read* task, struct doca_buf* dst_buf) {
  if (task != nullptr) task->dst = dst_buf;
}

const struct doca_buf* doca_rdma_task_read_get_src_buf(const struct doca_rdma_task_read* task) {
  return task == nullptr ? nullptr : task->src;
}

struct doca_buf* doca_rdma_task_read_get_dst_buf(const struct doca_rdma_task_read* task) {
  return task == nullptr ? nullptr : task->dst;
}

// ---- send with immediate

doca_error_t doca_rdma_task_send_imm_set_conf(struct doca_rdma* rdma,
                                              doca_rdma_task_send_imm_completion_cb_t on_success,
                                              doca_rdma_task_send_imm_completion_cb_t on_error,
                                              uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::send_imm_task>(rdma, rdma->send_imm, on_success, on_error,
                                                     num_tasks);
}

doca_error_t doca_rdma_task_send_imm_allocate_init(struct doca_rdma* rdma,
                                                   struct doca_rdma_connection* rdma_connection,
                                                   const struct doca_buf* src_buf,
                                                   doca_be32_t immediate_data,
                                                   union doca_data user_data,
                                                   struct doca_rdma_task_send_imm** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate<zc::rdma::send_imm_task>(
      rdma, rdma_connection, rdma->send_imm, zc_doca_task_type::rdma_send_imm,
      &zc::doca::submit_send_imm, src_buf, nullptr, user_data, task);
  if (r == DOCA_SUCCESS) (*task)->immediate = immediate_data;
  return r;
}

struct doca_task* doca_rdma_task_send_imm_as_task(struct doca_rdma_task_send_imm* task) {
  return task;
}

void doca_rdma_task_send_imm_set_src_buf(struct doca_rdma_task_send_imm* task,
                                         const struct doca_buf* src_buf) {
  if (task != nullptr) task->src = const_cast<doca_buf*>(src_buf);
}

const struct doca_buf* doca_rdma_task_send_imm_get_src_buf(
    const struct doca_rdma_task_send_imm* task) {
  return task == nullptr ? nullptr : task->src;
}

void doca_rdma_task_send_imm_set_immediate_data(struct doca_rdma_task_send_imm* task,
                                                doca_be32_t immediate_data) {
  if (task != nullptr) task->immediate = immediate_data;
}

doca_be32_t doca_rdma_task_send_imm_get_immediate_data(const struct doca_rdma_task_send_imm* task) {
  return task == nullptr ? 0 : task->immediate;
}

// ---- write with immediate

doca_error_t doca_rdma_task_write_imm_set_conf(struct doca_rdma* rdma,
                                               doca_rdma_task_write_imm_completion_cb_t on_success,
                                               doca_rdma_task_write_imm_completion_cb_t on_error,
                                               uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::write_imm_task>(rdma, rdma->write_imm, on_success, on_error,
                                                      num_tasks);
}

doca_error_t doca_rdma_task_write_imm_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    const struct doca_buf* src_buf, struct doca_buf* dst_buf, doca_be32_t immediate_data,
    union doca_data user_data, struct doca_rdma_task_write_imm** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate<zc::rdma::write_imm_task>(
      rdma, rdma_connection, rdma->write_imm, zc_doca_task_type::rdma_write_imm,
      &zc::doca::submit_write_imm, src_buf, dst_buf, user_data, task);
  if (r == DOCA_SUCCESS) (*task)->immediate = immediate_data;
  return r;
}

struct doca_task* doca_rdma_task_write_imm_as_task(struct doca_rdma_task_write_imm* task) {
  return task;
}

void doca_rdma_task_write_imm_set_src_buf(struct doca_rdma_task_write_imm* task,
                                          const struct doca_buf* src_buf) {
  if (task != nullptr) task->src = const_cast<doca_buf*>(src_buf);
}

void doca_rdma_task_write_imm_set_dst_buf(struct doca_rdma_task_write_imm* task,
                                          struct doca_buf* dst_buf) {
  if (task != nullptr) task->dst = dst_buf;
}

const struct doca_buf* doca_rdma_task_write_imm_get_src_buf(
    const struct doca_rdma_task_write_imm* task) {
  return task == nullptr ? nullptr : task->src;
}

struct doca_buf* doca_rdma_task_write_imm_get_dst_buf(const struct doca_rdma_task_write_imm* task) {
  return task == nullptr ? nullptr : task->dst;
}

void doca_rdma_task_write_imm_set_immediate_data(struct doca_rdma_task_write_imm* task,
                                                 doca_be32_t immediate_data) {
  if (task != nullptr) task->immediate = immediate_data;
}

doca_be32_t doca_rdma_task_write_imm_get_immediate_data(
    const struct doca_rdma_task_write_imm* task) {
  return task == nullptr ? 0 : task->immediate;
}

// ---- atomic compare-and-swap

doca_error_t doca_rdma_task_atomic_cmp_swp_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_atomic_cmp_swp_completion_cb_t on_success,
    doca_rdma_task_atomic_cmp_swp_completion_cb_t on_error, uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::atomic_cmp_swp_task>(rdma, rdma->cmp_swp, on_success,
                                                           on_error, num_tasks);
}

doca_error_t doca_rdma_task_atomic_cmp_swp_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection, struct doca_buf* dst_buf,
    struct doca_buf* result_buf, uint64_t cmp_data, uint64_t swap_data, union doca_data user_data,
    struct doca_rdma_task_atomic_cmp_swp** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate<zc::rdma::atomic_cmp_swp_task>(
      rdma, rdma_connection, rdma->cmp_swp, zc_doca_task_type::rdma_atomic_cmp_swp,
      &zc::doca::submit_cmp_swp, nullptr, dst_buf, user_data, task);
  if (r == DOCA_SUCCESS) {
    (*task)->result = result_buf;
    (*task)->operand0 = cmp_data;
    (*task)->operand1 = swap_data;
  }
  return r;
}

struct doca_task* doca_rdma_task_atomic_cmp_swp_as_task(
    struct doca_rdma_task_atomic_cmp_swp* task) {
  return task;
}

void doca_rdma_task_atomic_cmp_swp_set_dst_buf(struct doca_rdma_task_atomic_cmp_swp* task,
                                               struct doca_buf* dst_buf) {
  if (task != nullptr) task->dst = dst_buf;
}

void doca_rdma_task_atomic_cmp_swp_set_result_buf(struct doca_rdma_task_atomic_cmp_swp* task,
                                                  struct doca_buf* result_buf) {
  if (task != nullptr) task->result = result_buf;
}

void doca_rdma_task_atomic_cmp_swp_set_cmp_data(struct doca_rdma_task_atomic_cmp_swp* task,
                                                uint64_t cmp_data) {
  if (task != nullptr) task->operand0 = cmp_data;
}

void doca_rdma_task_atomic_cmp_swp_set_swap_data(struct doca_rdma_task_atomic_cmp_swp* task,
                                                 uint64_t swap_data) {
  if (task != nullptr) task->operand1 = swap_data;
}

struct doca_buf* doca_rdma_task_atomic_cmp_swp_get_dst_buf(
    const struct doca_rdma_task_atomic_cmp_swp* task) {
  return task == nullptr ? nullptr : task->dst;
}

struct doca_buf* doca_rdma_task_atomic_cmp_swp_get_result_buf(
    const struct doca_rdma_task_atomic_cmp_swp* task) {
  return task == nullptr ? nullptr : task->result;
}

uint64_t doca_rdma_task_atomic_cmp_swp_get_cmp_data(
    const struct doca_rdma_task_atomic_cmp_swp* task) {
  return task == nullptr ? 0 : task->operand0;
}

uint64_t doca_rdma_task_atomic_cmp_swp_get_swap_data(
    const struct doca_rdma_task_atomic_cmp_swp* task) {
  return task == nullptr ? 0 : task->operand1;
}

// ---- atomic fetch-and-add

doca_error_t doca_rdma_task_atomic_fetch_add_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_atomic_fetch_add_completion_cb_t on_success,
    doca_rdma_task_atomic_fetch_add_completion_cb_t on_error, uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::atomic_fetch_add_task>(rdma, rdma->fetch_add, on_success,
                                                             on_error, num_tasks);
}

doca_error_t doca_rdma_task_atomic_fetch_add_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection, struct doca_buf* dst_buf,
    struct doca_buf* result_buf, uint64_t add_data, union doca_data user_data,
    struct doca_rdma_task_atomic_fetch_add** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate<zc::rdma::atomic_fetch_add_task>(
      rdma, rdma_connection, rdma->fetch_add, zc_doca_task_type::rdma_atomic_fetch_add,
      &zc::doca::submit_fetch_add, nullptr, dst_buf, user_data, task);
  if (r == DOCA_SUCCESS) {
    (*task)->result = result_buf;
    (*task)->operand0 = add_data;
  }
  return r;
}

struct doca_task* doca_rdma_task_atomic_fetch_add_as_task(
    struct doca_rdma_task_atomic_fetch_add* task) {
  return task;
}

void doca_rdma_task_atomic_fetch_add_set_dst_buf(struct doca_rdma_task_atomic_fetch_add* task,
                                                 struct doca_buf* dst_buf) {
  if (task != nullptr) task->dst = dst_buf;
}

void doca_rdma_task_atomic_fetch_add_set_result_buf(struct doca_rdma_task_atomic_fetch_add* task,
                                                    struct doca_buf* result_buf) {
  if (task != nullptr) task->result = result_buf;
}

void doca_rdma_task_atomic_fetch_add_set_add_data(struct doca_rdma_task_atomic_fetch_add* task,
                                                  uint64_t add_data) {
  if (task != nullptr) task->operand0 = add_data;
}

struct doca_buf* doca_rdma_task_atomic_fetch_add_get_dst_buf(
    const struct doca_rdma_task_atomic_fetch_add* task) {
  return task == nullptr ? nullptr : task->dst;
}

struct doca_buf* doca_rdma_task_atomic_fetch_add_get_result_buf(
    const struct doca_rdma_task_atomic_fetch_add* task) {
  return task == nullptr ? nullptr : task->result;
}

uint64_t doca_rdma_task_atomic_fetch_add_get_add_data(
    const struct doca_rdma_task_atomic_fetch_add* task) {
  return task == nullptr ? 0 : task->operand0;
}

// ---- remote sync event get

doca_error_t doca_rdma_cap_task_remote_net_sync_event_get_is_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_rdma_task_remote_net_sync_event_get_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_remote_net_sync_event_get_completion_cb_t on_success,
    doca_rdma_task_remote_net_sync_event_get_completion_cb_t on_error, uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::sync_event_get_task>(rdma, rdma->event_get, on_success,
                                                           on_error, num_tasks);
}

doca_error_t doca_rdma_task_remote_net_sync_event_get_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    const struct doca_sync_event_remote_net* event, struct doca_buf* dst_buf,
    union doca_data user_data, struct doca_rdma_task_remote_net_sync_event_get** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate<zc::rdma::sync_event_get_task>(
      rdma, rdma_connection, rdma->event_get, zc_doca_task_type::rdma_remote_sync_event_get,
      &zc::doca::submit_event_get, nullptr, dst_buf, user_data, task);
  if (r == DOCA_SUCCESS) (*task)->event = const_cast<doca_sync_event_remote_net*>(event);
  return r;
}

struct doca_task* doca_rdma_task_remote_net_sync_event_get_as_task(
    struct doca_rdma_task_remote_net_sync_event_get* task) {
  return task;
}

void doca_rdma_task_remote_net_sync_event_get_set_sync_event(
    struct doca_rdma_task_remote_net_sync_event_get* task,
    const struct doca_sync_event_remote_net* event) {
  if (task != nullptr) task->event = const_cast<doca_sync_event_remote_net*>(event);
}

const struct doca_sync_event_remote_net* doca_rdma_task_remote_net_sync_event_get_get_sync_event(
    const struct doca_rdma_task_remote_net_sync_event_get* task) {
  return task == nullptr ? nullptr : task->event;
}

void doca_rdma_task_remote_net_sync_event_get_set_dst_buf(
    struct doca_rdma_task_remote_net_sync_event_get* task, struct doca_buf* dst_buf) {
  if (task != nullptr) task->dst = dst_buf;
}

struct doca_buf* doca_rdma_task_remote_net_sync_event_get_get_dst_buf(
    const struct doca_rdma_task_remote_net_sync_event_get* task) {
  return task == nullptr ? nullptr : task->dst;
}

// ---- remote sync event notify set

doca_error_t doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
    struct doca_rdma* rdma,
    doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t on_success,
    doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t on_error, uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::sync_event_set_task>(rdma, rdma->event_set, on_success,
                                                           on_error, num_tasks);
}

doca_error_t doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    struct doca_sync_event_remote_net* event, const struct doca_buf* src_buf,
    union doca_data user_data, struct doca_rdma_task_remote_net_sync_event_notify_set** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate<zc::rdma::sync_event_set_task>(
      rdma, rdma_connection, rdma->event_set, zc_doca_task_type::rdma_remote_sync_event_notify_set,
      &zc::doca::submit_event_set, src_buf, nullptr, user_data, task);
  if (r == DOCA_SUCCESS) (*task)->event = event;
  return r;
}

struct doca_task* doca_rdma_task_remote_net_sync_event_notify_set_as_task(
    struct doca_rdma_task_remote_net_sync_event_notify_set* task) {
  return task;
}

void doca_rdma_task_remote_net_sync_event_notify_set_set_sync_event(
    struct doca_rdma_task_remote_net_sync_event_notify_set* task,
    struct doca_sync_event_remote_net* event) {
  if (task != nullptr) task->event = event;
}

struct doca_sync_event_remote_net* doca_rdma_task_remote_net_sync_event_notify_set_get_sync_event(
    const struct doca_rdma_task_remote_net_sync_event_notify_set* task) {
  return task == nullptr ? nullptr : task->event;
}

void doca_rdma_task_remote_net_sync_event_notify_set_set_src_buf(
    struct doca_rdma_task_remote_net_sync_event_notify_set* task, const struct doca_buf* src_buf) {
  if (task != nullptr) task->src = const_cast<doca_buf*>(src_buf);
}

const struct doca_buf* doca_rdma_task_remote_net_sync_event_notify_set_get_src_buf(
    const struct doca_rdma_task_remote_net_sync_event_notify_set* task) {
  return task == nullptr ? nullptr : task->src;
}

// ---- remote sync event notify add

doca_error_t doca_rdma_cap_task_remote_net_sync_event_notify_add_is_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
    struct doca_rdma* rdma,
    doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t on_success,
    doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t on_error, uint32_t num_tasks) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf<zc::rdma::sync_event_add_task>(rdma, rdma->event_add, on_success,
                                                           on_error, num_tasks);
}

doca_error_t doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    struct doca_sync_event_remote_net* event, struct doca_buf* result_buf, uint64_t add_data,
    union doca_data user_data, struct doca_rdma_task_remote_net_sync_event_notify_add** task) {
  if (rdma == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate<zc::rdma::sync_event_add_task>(
      rdma, rdma_connection, rdma->event_add, zc_doca_task_type::rdma_remote_sync_event_notify_add,
      &zc::doca::submit_event_add, nullptr, nullptr, user_data, task);
  if (r == DOCA_SUCCESS) {
    (*task)->event = event;
    (*task)->result = result_buf;
    (*task)->operand0 = add_data;
  }
  return r;
}

struct doca_task* doca_rdma_task_remote_net_sync_event_notify_add_as_task(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task) {
  return task;
}

void doca_rdma_task_remote_net_sync_event_notify_add_set_sync_event(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task,
    struct doca_sync_event_remote_net* event) {
  if (task != nullptr) task->event = event;
}

struct doca_sync_event_remote_net* doca_rdma_task_remote_net_sync_event_notify_add_get_sync_event(
    const struct doca_rdma_task_remote_net_sync_event_notify_add* task) {
  return task == nullptr ? nullptr : task->event;
}

void doca_rdma_task_remote_net_sync_event_notify_add_set_result_buf(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task, struct doca_buf* result_buf) {
  if (task != nullptr) task->result = result_buf;
}

struct doca_buf* doca_rdma_task_remote_net_sync_event_notify_add_get_result_buf(
    const struct doca_rdma_task_remote_net_sync_event_notify_add* task) {
  return task == nullptr ? nullptr : task->result;
}

void doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task, uint64_t add_data) {
  if (task != nullptr) task->operand0 = add_data;
}

uint64_t doca_rdma_task_remote_net_sync_event_notify_add_get_add_data(
    const struct doca_rdma_task_remote_net_sync_event_notify_add* task) {
  return task == nullptr ? 0 : task->operand0;
}

}  // extern "C"
