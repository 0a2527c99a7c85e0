// rdma::context: deadlines, peer death and connection failure, and the rule that a task goes
// back to its owner only once UCX references nothing of it.
#include <ucp/api/ucp.h>

#include "core/log.hpp"
#include "rdma/context.hpp"
#include "rdma/internal/ucs_status.hpp"
#include "rdma/internal/ucx_worker.hpp"

namespace zc::rdma {

using core::steady_clock;
using internal::from_ucs;

namespace {
// How often a same-host peer process is checked while polling (event mode also sleeps on its
// pidfd, which wakes the engine when the process exits).
constexpr auto liveness_period = std::chrono::milliseconds(250);
}  // namespace

void context::finish(task& t, status result) noexcept {
  if (t.list_ != nullptr) t.list_->remove(t);
  if (t.send_request_ != nullptr || t.recv_request_ != nullptr) {
    t.outcome_ = result;
    parked_.push_back(t);
    return;
  }
  complete(t, result);
}

void context::release_if_unreferenced(task& t) noexcept {
  if (!parked_.contains(t) || t.send_request_ != nullptr || t.recv_request_ != nullptr) return;
  parked_.remove(t);
  complete(t, t.outcome_);
}

void context::fail_all(status result) noexcept {
  // The acknowledgement still owed stays: a stop carries it on its goodbye (close_endpoint).
  for (auto* list : {&posted_, &arrived_, &sends_, &ops_})
    while (!list->empty()) finish(*list->front(), result);
}

void context::note_failure(status why) noexcept {
  if (pending_failure_ != status::success) return;
  pending_failure_ = why;
  // Noted inside UCX's progress, maybe the one an arm makes just before the engine sleeps: the
  // engine passes once more (poll() applies it) instead of sleeping on it until the next event.
  engine().call_at_pass_end(*this);
}

void context::on_endpoint_error(void* arg, ucp_ep_h, int s) {
  // Inside UCX's progress: only note it; poll() fails the tasks and closes the endpoint.
  auto* self = static_cast<context*>(arg);
  if (self->pending_failure_ == status::success)
    ZC_SDK_LOG_ERROR("rdma: connection to peer lost ({})",
                     ucs_status_string(static_cast<ucs_status_t>(s)));
  self->note_failure(from_ucs(s) == status::success ? status::connection_reset : from_ucs(s));
}

void context::apply_failure() noexcept {
  failure_ = pending_failure_;
  if (peer_left_) {
    ZC_SDK_LOG_INFO("rdma: peer stopped; failing {} tasks in flight", inflight());
  } else {
    ZC_SDK_LOG_ERROR("rdma: connection failed ({}); failing {} tasks in flight",
                     status_name(failure_), inflight());
  }
  fail_all(failure_);
  close_endpoint(false);
  if (state() == core::context_state::running || state() == core::context_state::starting)
    set_state(core::context_state::stopping);
  // Nothing was in flight: no completion will come to finish the stop, so finish it here.
  if (state() == core::context_state::stopping && inflight() == 0)
    set_state(core::context_state::idle);
}

steady_clock::time_point context::new_deadline() const noexcept {
  // A fresh read, not the pass's cached time (which serves the checks): a task submitted at the
  // end of a long pass would get a deadline short by the length of the pass. The coarse clock
  // lags the real one by up to its resolution: one resolution more and no deadline is early.
  return core::coarse_now() + core::coarse_resolution() + task_timeout_;
}

void context::check_deadlines(steady_clock::time_point now) noexcept {
  // A task past its deadline may still be acted on by the peer, and UCX may still send it: the
  // connection cannot be trusted any more, as an RC queue pair whose retries ran out.
  const task* late = nullptr;
  for (auto* list : {&sends_, &ops_}) {
    if (!list->empty() && list->front()->deadline_ <= now) late = list->front();
  }
  if (!arrived_.empty() && !arrived_.front()->delivered_ && arrived_.front()->deadline_ <= now)
    late = arrived_.front();
  if (late == nullptr) return;
  ZC_SDK_LOG_ERROR("rdma: a task got no answer within {} ms; failing the connection",
                   task_timeout_.count());
  note_failure(status::time_out);
}

size_t context::poll() {
  size_t done = 0;
  if (pending_failure_ != status::success && failure_ == status::success) {
    apply_failure();
    return 1;
  }
  if (ep_ == nullptr) return done;
  const bool watching = peer_process_.watching();
  if (!watching && sends_.empty() && ops_.empty() && arrived_.empty()) return done;
  const auto now = engine().coarse_time();
  if (watching && (peer_fd_ready_ || now >= next_liveness_check_)) {
    peer_fd_ready_ = false;
    next_liveness_check_ = now + liveness_period;
    if (peer_process_.exited()) {
      ZC_SDK_LOG_ERROR("rdma: peer process {} has exited", peer_process_.pid());
      note_failure(status::connection_reset);
    }
  }
  check_deadlines(now);
  if (pending_failure_ != status::success && failure_ == status::success) {
    apply_failure();
    ++done;
  }
  return done;
}

bool context::arm() {
  // The peer's pidfd is in the engine's set: its exit wakes us (fd_ready), so no look here.
  return !(pending_failure_ != status::success && failure_ == status::success);
}

int context::wait_fd() const {
  return peer_process_.watching() ? peer_process_.fd() : -1;
}

steady_clock::time_point context::next_deadline() const {
  // Deadlines are kept on the coarse clock: wake once it has surely passed them.
  auto deadline = steady_clock::time_point::max();
  if (ep_ != nullptr && peer_process_.watching()) deadline = next_liveness_check_;
  if (!sends_.empty()) deadline = std::min(deadline, sends_.front()->deadline_);
  if (!ops_.empty()) deadline = std::min(deadline, ops_.front()->deadline_);
  if (!arrived_.empty() && !arrived_.front()->delivered_)
    deadline = std::min(deadline, arrived_.front()->deadline_);
  return deadline == steady_clock::time_point::max() ? deadline
                                                     : deadline + core::coarse_resolution();
}

}  // namespace zc::rdma
