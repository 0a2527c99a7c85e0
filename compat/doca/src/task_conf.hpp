// One DOCA task type of a context (doca_rdma's, a sync event context's): what its *_set_conf
// gave, kept until the zcstore pool is made, and one DOCA task object per zcstore task of the
// same pool index, so a completion finds its DOCA task without a lookup or an allocation.
// Thread rules: DOCA's (objects.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/task.hpp"
#include "objects.hpp"

namespace zc::doca {

template <typename Typed>
struct task_conf {
  // Every DOCA task completion callback has this shape: the task, its user data, its context's.
  using callback = void (*)(Typed* task, union doca_data task_user_data,
                            union doca_data ctx_user_data);

  callback on_success = nullptr;
  callback on_error = nullptr;
  uint32_t num_tasks = 0;
  std::vector<Typed> tasks;  // index = the zcstore task's pool index

  // What every *_set_conf refuses before it looks at the context: a missing callback, no task.
  static bool acceptable(callback success, callback error, uint32_t count) noexcept {
    return success != nullptr && error != nullptr && count != 0;
  }

  void store(callback success, callback error, uint32_t count) noexcept {
    on_success = success;
    on_error = error;
    num_tasks = count;
  }

  // Sizes the DOCA task objects and hands configure(num_tasks, on_success, on_error) the two
  // handlers that report a finished zcstore task of type Zc to the program, with ctx's user data
  // as DOCA passes it. Nothing when the program did not configure this type.
  template <typename Zc, typename Configure>
  void apply(const doca_ctx& ctx, Configure&& configure) {
    if (num_tasks == 0) return;
    tasks.assign(num_tasks, Typed{});
    configure(
        num_tasks, [this, &ctx](Zc& t) { complete(ctx, t, on_success); },
        [this, &ctx](Zc& t) { complete(ctx, t, on_error); });
  }

  // The DOCA task of zcstore task `t`, reset for its new allocation (the type's own fields are
  // set by the caller).
  Typed& allocated(doca_ctx& ctx, core::task_base& t, zc_doca_task_type type,
                   union doca_data user_data, doca_error_t (*submit)(doca_task&) noexcept) {
    Typed& task = tasks[t.pool_index()];
    task = Typed{};
    task.type = type;
    task.ctx = &ctx;
    task.zc = &t;
    task.user_data = user_data;
    task.submit = submit;
    return task;
  }

 private:
  void complete(const doca_ctx& ctx, const core::task_base& t, callback cb) {
    Typed& task = tasks[t.pool_index()];
    task.status = to_doca(t.result());
    task.in_flight = false;  // the callback may free it or submit it again
    if (cb != nullptr) cb(&task, task.user_data, ctx.user_data);
  }
};

}  // namespace zc::doca
