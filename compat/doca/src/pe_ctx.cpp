// doca_pe.h and doca_ctx.h over zc::core::progress_engine and zc::core::context: state changes
// are recorded when zcstore makes them and reported from doca_pe_progress(), after the engine's
// own pass, so a program's callbacks (which export, connect, submit and stop) never run inside
// doca_ctx_start()/stop() or inside zcstore's poll.
#include <doca_ctx.h>
#include <doca_pe.h>

#include <algorithm>

#include "objects.hpp"

using zc::doca::guarded;

namespace zc::doca {
namespace {

// Reports one recorded state change of some context of `pe`; false when none is left. One at a
// time, from the start each time: a callback may stop, start or destroy any context.
bool report_one(doca_pe& pe) {
  for (doca_ctx* ctx : pe.contexts) {
    if (ctx->report_event()) return true;
    if (ctx->pending.empty()) continue;
    auto [previous, next] = ctx->pending.front();
    ctx->pending.pop_front();
    if (ctx->state_changed != nullptr) ctx->state_changed(ctx->user_data, ctx, previous, next);
    return true;
  }
  return false;
}

}  // namespace
}  // namespace zc::doca

extern "C" {

doca_error_t doca_pe_create(struct doca_pe** pe) {
  if (pe == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    *pe = new doca_pe();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_pe_destroy(struct doca_pe* pe) {
  if (pe == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!pe->contexts.empty()) return DOCA_ERROR_IN_USE;
  return guarded(__func__, [&] {
    delete pe;
    return DOCA_SUCCESS;
  });
}

uint8_t doca_pe_progress(struct doca_pe* pe) {
  if (pe == nullptr) return 0;
  bool hit = false;
  auto r = guarded(__func__, [&] {
    struct pass_scope {
      uint32_t& depth;
      explicit pass_scope(uint32_t& d) : depth(d) { ++depth; }
      ~pass_scope() { --depth; }
    };
    {
      pass_scope in_pass(pe->engine_passes);
      hit = pe->engine.progress();
    }
    while (zc::doca::report_one(*pe)) hit = true;
    return DOCA_SUCCESS;
  });
  return (r == DOCA_SUCCESS && hit) ? 1 : 0;
}

doca_error_t doca_pe_connect_ctx(struct doca_pe* pe, struct doca_ctx* ctx) {
  if (pe == nullptr || ctx == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (ctx->pe != nullptr) return ctx->pe == pe ? DOCA_ERROR_ALREADY_EXIST : DOCA_ERROR_IN_USE;
  return guarded(__func__, [&] {
    pe->contexts.push_back(ctx);
    ctx->pe = pe;
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_pe_get_num_inflight_tasks(const struct doca_pe* pe, size_t* num_inflight_tasks) {
  if (pe == nullptr || num_inflight_tasks == nullptr) return DOCA_ERROR_INVALID_VALUE;
  size_t n = 0;
  for (doca_ctx* ctx : pe->contexts)
    if (auto* c = ctx->zc_context(); c != nullptr) n += c->inflight();
  *num_inflight_tasks = n;
  return DOCA_SUCCESS;
}

doca_error_t doca_pe_get_notification_handle(const struct doca_pe* pe,
                                             doca_notification_handle_t* handle) {
  if (pe == nullptr || handle == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *handle = pe->engine.notification_fd();
  return DOCA_SUCCESS;
}

doca_error_t doca_pe_request_notification(struct doca_pe* pe) {
  if (pe == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    // State changes waiting to be reported are work too: the handle must not look idle.
    bool pending = false;
    for (doca_ctx* ctx : pe->contexts)
      pending = pending || !ctx->pending.empty() || ctx->has_events();
    if (pending || !pe->engine.arm_sources()) pe->engine.notify();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_pe_clear_notification(struct doca_pe* pe, doca_notification_handle_t handle) {
  if (pe == nullptr || handle != pe->engine.notification_fd()) return DOCA_ERROR_INVALID_VALUE;
  pe->engine.clear_notify();
  return DOCA_SUCCESS;
}

// ---- doca_ctx

doca_error_t doca_ctx_start(struct doca_ctx* ctx) {
  if (ctx == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (ctx->pe == nullptr) return DOCA_ERROR_BAD_STATE;
  return guarded(__func__, [&] { return ctx->start(); });
}

doca_error_t doca_ctx_stop(struct doca_ctx* ctx) {
  if (ctx == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    auto* c = ctx->zc_context();
    if (c == nullptr) return DOCA_SUCCESS;
    auto s = c->stop();
    if (!zc::ok(s) && s != zc::status::in_progress) return zc::doca::to_doca(s);
    // DOCA's answer while tasks still have to come back with errors.
    return c->state() == zc::core::context_state::stopping ? DOCA_ERROR_IN_PROGRESS : DOCA_SUCCESS;
  });
}

doca_error_t doca_ctx_get_state(const struct doca_ctx* ctx, enum doca_ctx_states* state) {
  if (ctx == nullptr || state == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto* c = const_cast<doca_ctx*>(ctx)->zc_context();
  *state = c == nullptr ? DOCA_CTX_STATE_IDLE : doca_ctx::to_doca(c->state());
  return DOCA_SUCCESS;
}

doca_error_t doca_ctx_set_state_changed_cb(struct doca_ctx* ctx,
                                           doca_ctx_state_changed_callback_t cb) {
  if (ctx == nullptr) return DOCA_ERROR_INVALID_VALUE;
  ctx->state_changed = cb;
  return DOCA_SUCCESS;
}

doca_error_t doca_ctx_set_user_data(struct doca_ctx* ctx, union doca_data user_data) {
  if (ctx == nullptr) return DOCA_ERROR_INVALID_VALUE;
  ctx->user_data = user_data;
  return DOCA_SUCCESS;
}

doca_error_t doca_ctx_get_user_data(const struct doca_ctx* ctx, union doca_data* user_data) {
  if (ctx == nullptr || user_data == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *user_data = ctx->user_data;
  return DOCA_SUCCESS;
}

doca_error_t doca_ctx_get_num_inflight_tasks(const struct doca_ctx* ctx,
                                             size_t* num_inflight_tasks) {
  if (ctx == nullptr || num_inflight_tasks == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto* c = const_cast<doca_ctx*>(ctx)->zc_context();
  *num_inflight_tasks = c == nullptr ? 0 : c->inflight();
  return DOCA_SUCCESS;
}

// ---- doca_task

doca_error_t doca_task_submit(struct doca_task* task) {
  if (task == nullptr || task->zc == nullptr || task->submit == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  if (task->in_flight) {
    ZC_SDK_LOG_ERROR("doca_task_submit: the task is in flight already (submitted, not completed)");
    return DOCA_ERROR_BAD_STATE;
  }
  return guarded(__func__, [&] {
    const doca_error_t r = task->submit(*task);
    // Completions run from doca_pe_progress(), never inside the submit: set before any can.
    if (r == DOCA_SUCCESS) task->in_flight = true;
    return r;
  });
}

doca_error_t doca_task_try_submit(struct doca_task* task) {
  return doca_task_submit(task);
}

void doca_task_free(struct doca_task* task) {
  if (task == nullptr || task->zc == nullptr) return;
  if (task->in_flight) {
    // Freed now, its memory would be handed out again while zcstore still sends or writes from
    // it, and its completion would come for someone else's task.
    ZC_SDK_LOG_ERROR(
        "doca_task_free: the task is in flight (submitted, not completed); not freed — free it "
        "in its completion callback");
    return;
  }
  task->zc->free();
  task->zc = nullptr;
  task->src = nullptr;
  task->dst = nullptr;
}

doca_error_t doca_task_get_status(const struct doca_task* task) {
  return task == nullptr ? DOCA_ERROR_INVALID_VALUE : task->status;
}

void doca_task_set_user_data(struct doca_task* task, union doca_data user_data) {
  if (task != nullptr) task->user_data = user_data;
}

union doca_data doca_task_get_user_data(const struct doca_task* task) {
  union doca_data none {};
  return task == nullptr ? none : task->user_data;
}

struct doca_ctx* doca_task_get_ctx(const struct doca_task* task) {
  return task == nullptr ? nullptr : task->ctx;
}

}  // extern "C"
