// Tasks and task pools, DOCA's asynchronous unit of work. A context configures one pool per task
// type at configure time (count + success/error callbacks); the data path then only takes tasks
// from the pool, submits them and gets them back through a callback run inside
// progress_engine::progress(). No allocation happens after configuration. A completed task may
// be submitted again (typical for receives) or freed back to its pool.
// Thread rules: a pool and its tasks belong to the thread that drives their progress engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/status.hpp"

namespace zc::core {

class context;
class task_pool_base;

// DOCA's doca_data: a pointer or a 64-bit value the caller attaches to a task or context.
union user_data {
  void* ptr;
  uint64_t u64;
};
template <typename I>
requires std::is_integral_v<I> user_data make_user_data(I v) {
  return user_data{.u64 = static_cast<uint64_t>(v)};
}
inline user_data make_user_data(void* p) {
  user_data d{.u64 = 0};
  d.ptr = p;
  return d;
}

class task_base {
 public:
  task_base() = default;
  task_base(const task_base&) = delete;
  task_base& operator=(const task_base&) = delete;

  status result() const noexcept { return status_; }
  user_data get_user_data() const noexcept { return user_data_; }
  void set_user_data(user_data d) noexcept { user_data_ = d; }
  context& owner() const noexcept { return *context_; }
  // Returns the task to its pool. Only for a task that is not in flight.
  void free() noexcept;
  // Position inside its pool, fixed at configure time (names the task on the wire).
  uint32_t pool_index() const noexcept { return index_; }

 protected:
  ~task_base() = default;

 private:
  friend class task_pool_base;
  friend class progress_engine;
  friend class context;
  template <typename T>
  friend class task_pool;

  status status_ = status::success;
  user_data user_data_{.u64 = 0};
  context* context_ = nullptr;
  task_pool_base* pool_ = nullptr;
  task_base* next_ = nullptr;  // progress engine completion queue
  uint32_t index_ = 0;
  bool allocated_ = false;
};

class task_pool_base {
 public:
  virtual ~task_pool_base() = default;
  uint32_t capacity() const noexcept { return capacity_; }
  uint32_t in_use() const noexcept { return in_use_; }

 protected:
  friend class task_base;
  friend class progress_engine;
  virtual void release(task_base& t) noexcept = 0;
  virtual void dispatch(task_base& t) = 0;
  uint32_t capacity_ = 0;
  uint32_t in_use_ = 0;
};

namespace internal {
// Takes the pool's tasks off their progress engine's completion queue (progress_engine.cpp).
void forget_queued(const task_pool_base& pool, const context& owner) noexcept;
}  // namespace internal

// A fixed set of tasks of one type, with their callbacks. T derives from task_base.
template <typename T>
class task_pool final : public task_pool_base {
 public:
  using callback = std::function<void(T&)>;

  task_pool() = default;
  // A completion still queued must not outlive its task in the engine's (intrusive) queue. The
  // pool does this, not ~context: a derived context's pools die before its base destructor runs.
  ~task_pool() override { forget_queued(); }

  // Sizes the pool; the tasks are created here and never again.
  void configure(context& owner, uint32_t count, callback on_success, callback on_error) {
    forget_queued();
    tasks_.clear();
    free_.clear();
    tasks_.reserve(count);
    free_.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      tasks_.push_back(std::make_unique<T>());
      T& t = *tasks_.back();
      t.context_ = &owner;
      t.pool_ = this;
      t.index_ = i;
      free_.push_back(&t);
    }
    capacity_ = count;
    in_use_ = 0;
    on_success_ = std::move(on_success);
    on_error_ = std::move(on_error);
  }
  bool configured() const noexcept { return capacity_ != 0; }

  // A free task, or nullptr when all are taken (the caller reports status::again/no_memory).
  T* allocate() noexcept {
    if (free_.empty()) return nullptr;
    T* t = free_.back();
    free_.pop_back();
    t->allocated_ = true;
    t->status_ = status::success;
    ++in_use_;
    return t;
  }

  T* at(uint32_t index) noexcept { return index < tasks_.size() ? tasks_[index].get() : nullptr; }

  // The owner is gone, and nothing of this pool is queued in its engine any more (~context made
  // its engine forget its completions): the pool may outlive it, and its destructor touches no
  // owner (rdma: tasks UCX still references after their context was destroyed).
  void detach() noexcept {
    for (auto& t : tasks_) t->context_ = nullptr;
  }

 private:
  void release(task_base& t) noexcept override {
    if (!t.allocated_) return;
    t.allocated_ = false;
    --in_use_;
    free_.push_back(static_cast<T*>(&t));
  }
  void dispatch(task_base& t) override {
    auto& task = static_cast<T&>(t);
    if (ok(t.status_)) {
      if (on_success_) on_success_(task);
    } else if (on_error_) {
      on_error_(task);
    }
  }

  void forget_queued() noexcept {
    if (!tasks_.empty() && tasks_.front()->context_ != nullptr)
      internal::forget_queued(*this, *tasks_.front()->context_);
  }

  std::vector<std::unique_ptr<T>> tasks_;
  std::vector<T*> free_;
  callback on_success_;
  callback on_error_;
};

inline void task_base::free() noexcept {
  if (pool_ != nullptr) pool_->release(*this);
}

}  // namespace zc::core
