// The background rebuild of gga_worker::io_path (format v2): every slot of a range of blocks
// read and checked as a host read would, the bad or missing ones (a blank replacement target's)
// rewritten, one block after the other in the last transaction, paced to a rate.
#include "service/internal/gga_io_path.hpp"

#include <algorithm>
#include <chrono>

#include "core/log.hpp"

namespace zc::service {

namespace {
// How many times the rebuild checks a block again that a host write came to while it was read.
constexpr uint32_t rebuild_retry_limit = 8;
}  // namespace

// ---- the rebuild: one block after the other in the last transaction, paced

void gga_worker::io_path::begin_rebuild(uint64_t first, uint64_t end,
                                        uint64_t bytes_per_second) noexcept {
  if (bytes_per_second == 0) return;
  if (first >= end) {
    rebuild_completed_ = true;  // an empty share
    return;
  }
  rebuild_next_ = first;
  rebuild_end_ = end;
  rebuild_total_ = end - first;
  rebuild_checked_ = 0;
  rebuild_repaired_at_start_ = repaired_;
  rebuild_interval_ = std::chrono::nanoseconds(
      std::max<uint64_t>(1, uint64_t(block_size()) * 1'000'000'000ull / bytes_per_second));
  rebuild_due_ = engine_.pass_time();
  rebuilding_ = true;
  ZC_LOG_INFO("worker {}: rebuild of blocks {}..{} begins", cpu_, first, end - 1);
}

// Every slot of the next block is read and checked, the bad or missing ones rewritten (as a
// host read would, check_block), at most one block per interval.
size_t gga_worker::io_path::rebuild_step() noexcept {
  transaction& t = txns_[host_transactions_];
  if (!rebuilding_ || !serving_ || t.op != operation::none) return 0;
  if (t.retired) {
    // A target left its block unanswered: its chunk is not used again, nor the rebuild.
    rebuilding_ = false;
    rebuild_failed_ = true;
    ZC_LOG_ERROR(
        "worker {}: rebuild stopped after {} of {} blocks: a storage target did not "
        "answer",
        cpu_, rebuild_checked_, rebuild_total_);
    return 0;
  }
  const auto now = engine_.pass_time();
  if (now < rebuild_due_) return 0;
  rebuild_due_ = std::max(rebuild_due_ + rebuild_interval_, now);
  ++in_flight_;
  t.plan = gga_io_plan{
      .blocks = 1, .host_offset = 0, .target_offset = rebuild_next_++ * layout_.slots().slot()};
  t.op = operation::read;
  t.result = status::success;
  t.block = 0;
  t.sending = 0;
  t.awaiting = 0;
  t.forced = -1;
  t.have = t.got = t.refused = t.tried = t.repair = 0;
  observe_stripe(t);
  begin_step(t);
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if (!is_lost(k)) ask_half(t, k);
  t.issuing = false;
  settle(t);
  return 1;
}

void gga_worker::io_path::rebuild_block_done(transaction& t, status result) noexcept {
  t.op = operation::none;
  if (in_flight_ > 0) --in_flight_;
  if (rebuild_again_) {
    // A write of the block came while it was read: checked again at the next interval, a few
    // times; a block that is written all the while is left to the next session's rebuild.
    rebuild_again_ = false;
    if (++rebuild_retries_ <= rebuild_retry_limit) {
      --rebuild_next_;
      return;
    }
    rebuild_failed_ = true;
    ZC_LOG_WARN("worker {}: rebuild: block at slot offset {} is written too often to be checked",
                cpu_, t.plan.target_offset);
  }
  rebuild_retries_ = 0;
  ++rebuild_checked_;
  if (!ok(result)) {
    rebuild_failed_ = true;
    ZC_LOG_ERROR("worker {}: rebuild: block at slot offset {} not rebuilt: {}", cpu_,
                 t.plan.target_offset, status_name(result));
  }
  const uint64_t quarter = std::max<uint64_t>(1, rebuild_total_ / 4);
  if (rebuild_next_ == rebuild_end_) {
    rebuilding_ = false;
    rebuild_completed_ = true;
    ZC_LOG_INFO("worker {}: rebuild done: {} blocks checked, {} slots rewritten", cpu_,
                rebuild_checked_, repaired_ - rebuild_repaired_at_start_);
  } else if (rebuild_checked_ % quarter == 0) {
    ZC_LOG_INFO("worker {}: rebuild: {} of {} blocks checked", cpu_, rebuild_checked_,
                rebuild_total_);
  }
}

}  // namespace zc::service
