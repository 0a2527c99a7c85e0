// The doors into an rdma::context that its UCX worker and UCX's callbacks use: message delivery,
// end-of-pass acknowledgements, and the completion of UCX requests that reference a task. Kept
// out of the public header; only src/rdma/ includes this.
#pragma once

#include <ucp/api/ucp.h>

#include "rdma/context.hpp"
#include "rdma/internal/ucx_worker.hpp"
#include "rdma/internal/wire.hpp"

namespace zc::rdma::internal {

struct context_hooks {
  static int on_message(context& c, const wire_header& h, void* data, size_t length,
                        bool rendezvous) {
    return c.on_message(h, data, length, rendezvous);
  }
  static void flush_acks(context& c) { c.flush_acks(); }
  // Tests only: the connections `c` starts from now on number their sends from `first` (both
  // sides of a connection must agree), to cross 2^32 within a few messages. Idle state only.
  static void start_sequences_at(context& c, uint64_t first) {
    c.require_idle("start_sequences_at");
    c.first_seq_ = first;
  }
  // Tests only: progresses the UCX worker of `c` outside the worker's own poll (as a context
  // closing its endpoint does), so replies stay queued until the worker's next poll.
  static unsigned progress_outside_poll(context& c) {
    return ucp_worker_progress(c.worker_->handle());
  }
  // Tests only: the number of the peer's last send that arrived.
  static uint64_t last_received(const context& c) { return c.last_received_seq_; }
  static void write_landed(context& c, reply* r, int ucs_status) noexcept {
    c.write_landed(r, ucs_status);
  }

  // UCX callbacks whose user data is a task. A task whose context is gone (orphaned) is only
  // let go of, and nothing else is touched; the last one UCX lets go of frees the pools it
  // lives in, so a long-running process does not pile them up.
  static void on_send_complete(void* request, ucs_status_t s, void* user_data) noexcept {
    auto* t = static_cast<task*>(user_data);
    ucp_request_free(request);
    t->send_request_ = nullptr;
    if (t->orphanage_ != nullptr) return let_go(*t);
    static_cast<context&>(t->owner()).send_done(*t, s);
  }
  static void on_rendezvous_received(void* request, ucs_status_t s, size_t,
                                     void* user_data) noexcept {
    auto* t = static_cast<task*>(user_data);
    ucp_request_free(request);
    t->recv_request_ = nullptr;
    if (t->orphanage_ != nullptr) return let_go(*t);
    static_cast<context&>(t->owner()).rendezvous_done(*t, s);
  }
  // t may be freed here: nothing may touch it afterwards.
  static void let_go(task& t) noexcept {
    if (t.send_request_ != nullptr || t.recv_request_ != nullptr) return;
    orphanage* home = t.orphanage_;
    if (--home->held == 0) delete home;
  }
};

}  // namespace zc::rdma::internal
