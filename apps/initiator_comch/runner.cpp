#include "runner.hpp"

#include <fmt/format.h>

#include <cstring>

#include "core/log.hpp"

namespace zc::initiator {

using storage::io_message_type;

worker_run::worker_run(const execution_plan& plan, std::size_t worker, host::io_queue& queue,
                       core::memory_map& region, core::progress_engine& engine)
    : plan_(plan),
      queue_(queue),
      region_(region),
      engine_(engine),
      steps_(plan.steps()),
      io_size_(plan.io_size()),
      run_limit_(plan.run_limit()),
      local_(plan.local_offsets(worker)),
      storage_(plan.storage_offsets(worker)),
      transactions_(plan.workers()[worker].transaction_count) {
  if (transactions_.size() > queue.slots())
    throw status_error(status::invalid_value, "more transactions than the worker has slots");
  queue_.set_on_complete([this](uint32_t slot, status result) { on_complete(slot, result); });
}

worker_run::~worker_run() {
  queue_.set_on_complete(nullptr);
}

void worker_run::start() {
  started_ = true;
  hits_at_start_ = engine_.hits();
  misses_at_start_ = engine_.misses();
  stats_.start_time = std::chrono::steady_clock::now();
  const uint64_t first = std::min<uint64_t>(transactions_.size(), run_limit_);
  for (uint32_t slot = 0; slot < first && !stopping_; ++slot) launch(slot);
  check_done();
}

void worker_run::request_stop() noexcept {
  stopping_ = true;
  check_done();
}

std::span<std::byte> worker_run::local_bytes(const transaction& t) const noexcept {
  return {reinterpret_cast<std::byte*>(region_.data() + t.local_offset), io_size_};
}

bool worker_run::launch(uint32_t slot) noexcept {
  auto local = local_.pop();
  auto storage = storage_.pop();
  if (!local || !storage) {  // cannot happen: a ring holds at least T_i offsets
    if (local) local_.push(*local);
    if (storage) storage_.push(*storage);
    fail("no free offset for a new transaction");
    return false;
  }
  transaction& t = transactions_[slot];
  t = {*local, *storage, 0, std::chrono::steady_clock::now()};
  ++launched_;
  ++active_;
  advance(slot);
  return true;
}

void worker_run::advance(uint32_t slot) noexcept {
  transaction& t = transactions_[slot];
  while (t.step < steps_.size()) {
    const step s = steps_[t.step++];
    switch (s) {
      case step::copy_expected:
        plan_.expected()->copy_to(t.storage_offset, local_bytes(t));
        break;
      case step::clear:
        std::memset(region_.data() + t.local_offset, 0, io_size_);
        break;
      case step::write:
      case step::read: {
        const status r = queue_.submit(
            slot, {s == step::write ? io_message_type::write : io_message_type::read,
                   static_cast<uint32_t>(io_size_), t.local_offset, t.storage_offset});
        if (ok(r)) return;  // resumes in on_complete
        fail(fmt::format("cannot submit the {} at storage offset {:#x}: {}", to_string(s),
                         t.storage_offset, status_name(r)));
        finish(slot);
        return;
      }
      case step::validate:
        if (auto mismatch = plan_.validate(local_bytes(t), t.storage_offset)) {
          fail(mismatch->message());
          finish(slot);
          return;
        }
        break;
      case step::finish:
        stats_.record_transaction(std::chrono::steady_clock::now() - t.started);
        completed_.fetch_add(1, std::memory_order_relaxed);
        stats_.end_time = std::chrono::steady_clock::now();
        finish(slot);
        return;
    }
  }
}

void worker_run::on_complete(uint32_t slot, status result) noexcept {
  if (slot >= transactions_.size()) return;
  transaction& t = transactions_[slot];
  if (!ok(result)) {
    const step s = steps_[t.step - 1];
    fail(fmt::format("IO error at storage offset {:#x}: the {} failed: {}", t.storage_offset,
                     to_string(s), status_name(result)));
    finish(slot);
    return;
  }
  advance(slot);
}

// The transaction's offsets go back to the rings; the slot starts the next transaction while the
// run goes on.
void worker_run::finish(uint32_t slot) noexcept {
  transaction& t = transactions_[slot];
  local_.push(t.local_offset);
  storage_.push(t.storage_offset);
  --active_;
  if (!stopping_ && launched_ < run_limit_) launch(slot);
  check_done();
}

void worker_run::fail(std::string what) noexcept {
  if (failure_.empty()) {
    ZC_LOG_ERROR("{}", what);
    failure_ = std::move(what);
  }
  stopping_ = true;
}

void worker_run::check_done() noexcept {
  if (!started_ || active_ != 0) return;
  if (stopping_ || launched_ >= run_limit_) done_.store(true, std::memory_order_release);
}

worker_stats worker_run::stats() const {
  worker_stats s = stats_;
  s.pe_hits = engine_.hits() - hits_at_start_;
  s.pe_misses = engine_.misses() - misses_at_start_;
  return s;
}

}  // namespace zc::initiator
