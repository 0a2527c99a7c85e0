#include "strategy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/status.hpp"

namespace zc::initiator {
namespace {

constexpr std::array read_throughput_steps{step::read, step::finish};
constexpr std::array write_throughput_steps{step::write, step::finish};
constexpr std::array read_only_steps{step::clear, step::read, step::validate, step::finish};
constexpr std::array read_write_steps{step::copy_expected, step::write,    step::clear,
                                      step::read,          step::validate, step::finish};

// The pattern twice over, so that any 256-byte run of it starting at any phase is one slice.
constexpr std::size_t pattern_period = 256;
constexpr auto pattern_table = [] {
  std::array<std::byte, 2 * pattern_period> table{};
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = std::byte(i % pattern_period);
  return table;
}();

std::string hex_bytes(const std::byte* data, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i)
    out += fmt::format("{}{:02X}", i ? " " : "", static_cast<unsigned>(data[i]));
  return out;
}

}  // namespace

std::string_view to_string(step s) noexcept {
  switch (s) {
    case step::copy_expected:
      return "copy_expected";
    case step::write:
      return "write";
    case step::clear:
      return "clear";
    case step::read:
      return "read";
    case step::validate:
      return "validate";
    case step::finish:
      return "finish";
  }
  return "unknown";
}

std::span<const step> steps_of(execution_strategy strategy) noexcept {
  switch (strategy) {
    case execution_strategy::read_throughput_test:
      return read_throughput_steps;
    case execution_strategy::write_throughput_test:
      return write_throughput_steps;
    case execution_strategy::read_only_data_validity_test:
      return read_only_steps;
    case execution_strategy::read_write_data_validity_test:
      return read_write_steps;
  }
  return {};
}

offset_ring::offset_ring(uint64_t first, uint64_t stride, uint64_t count)
    : slots_(count), size_(count) {
  for (uint64_t i = 0; i < count; ++i) slots_[i] = first + i * stride;
}

std::optional<uint64_t> offset_ring::pop() noexcept {
  if (size_ == 0) return std::nullopt;
  uint64_t offset = slots_[head_];
  head_ = (head_ + 1) % slots_.size();
  --size_;
  return offset;
}

bool offset_ring::push(uint64_t offset) noexcept {
  if (size_ == slots_.size()) return false;
  slots_[(head_ + size_) % slots_.size()] = offset;
  ++size_;
  return true;
}

std::vector<worker_slice> slice_workers(uint64_t local_blocks, uint64_t storage_blocks,
                                        uint64_t io_size, uint32_t workers,
                                        uint32_t transaction_count) {
  if (workers == 0) throw status_error(status::invalid_value, "at least one worker is needed");
  if (local_blocks < workers)
    throw status_error(status::invalid_value,
                       fmt::format("Local IO region is too small to give each worker at least one "
                                   "block each ({} blocks of {} bytes for {} workers)",
                                   local_blocks, io_size, workers));
  if (storage_blocks < workers)
    throw status_error(status::invalid_value,
                       fmt::format("Storage IO region is too small to give each worker at least "
                                   "one block each ({} blocks of {} bytes for {} workers)",
                                   storage_blocks, io_size, workers));
  std::vector<worker_slice> slices(workers);
  uint64_t local_next = 0;
  uint64_t storage_next = 0;
  for (uint32_t i = 0; i < workers; ++i) {
    auto& s = slices[i];
    s.local_blocks = local_blocks / workers + (i < local_blocks % workers ? 1 : 0);
    s.storage_blocks = storage_blocks / workers + (i < storage_blocks % workers ? 1 : 0);
    s.local_offset = local_next * io_size;
    s.storage_offset = storage_next * io_size;
    local_next += s.local_blocks;
    storage_next += s.storage_blocks;
    s.transaction_count = static_cast<uint32_t>(
        std::min<uint64_t>({transaction_count, s.local_blocks, s.storage_blocks}));
  }
  return slices;
}

std::string mismatch_report::message() const {
  return fmt::format(
      "Memory read from storage target does not match expected value at storage offset {:#x}: "
      "first difference at byte {} of the IO: expected: {} actual: {}",
      storage_offset, first_difference, expected_hex, actual_hex);
}

expected_content expected_content::pattern(uint64_t capacity) {
  expected_content content;
  content.capacity_ = capacity;
  return content;
}

expected_content expected_content::from_file(const std::string& path, uint64_t capacity) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec)
    throw status_error(status::io_failed,
                       fmt::format("cannot read plain data file {}: {}", path, ec.message()));
  if (size != capacity)
    throw status_error(status::invalid_value,
                       fmt::format("Validation tests require that the plain data: {} size is the "
                                   "same as the storage capacity: {}",
                                   size, capacity));
  expected_content content;
  content.capacity_ = capacity;
  content.bytes_.resize(capacity);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(content.bytes_.data()), static_cast<std::streamsize>(capacity));
  if (!in || static_cast<uint64_t>(in.gcount()) != capacity)
    throw status_error(status::io_failed, fmt::format("cannot read plain data file {}", path));
  return content;
}

void expected_content::copy_to(uint64_t storage_offset, std::span<std::byte> dst) const noexcept {
  if (!bytes_.empty()) {
    std::memcpy(dst.data(), bytes_.data() + storage_offset, dst.size());
    return;
  }
  for (std::size_t done = 0; done < dst.size();) {
    const std::size_t phase = (storage_offset + done) % pattern_period;
    const std::size_t n = std::min(pattern_period, dst.size() - done);
    std::memcpy(dst.data() + done, pattern_table.data() + phase, n);
    done += n;
  }
}

std::optional<mismatch_report> expected_content::compare(uint64_t storage_offset,
                                                         std::span<const std::byte> actual) const {
  // Compared a run at a time (the whole IO for a file, 256 bytes for the pattern) with memcmp;
  // the byte-by-byte search happens only in the run that differs.
  if (storage_offset > capacity_ || actual.size() > capacity_ - storage_offset)
    return mismatch_report{
        storage_offset, 0, "(beyond the storage capacity)",
        hex_bytes(actual.data(), std::min(mismatch_report_bytes, actual.size()))};
  auto expected_run = [&](std::size_t done) -> std::span<const std::byte> {
    if (!bytes_.empty()) return {bytes_.data() + storage_offset + done, actual.size() - done};
    const std::size_t phase = (storage_offset + done) % pattern_period;
    return {pattern_table.data() + phase, std::min(pattern_period, actual.size() - done)};
  };
  for (std::size_t done = 0; done < actual.size();) {
    auto run = expected_run(done);
    if (std::memcmp(run.data(), actual.data() + done, run.size()) != 0) {
      std::size_t first = done;
      while (run[first - done] == actual[first]) ++first;
      const std::size_t shown = std::min(mismatch_report_bytes, actual.size() - first);
      std::array<std::byte, mismatch_report_bytes> expected_bytes{};
      copy_to(storage_offset + first, {expected_bytes.data(), shown});
      return mismatch_report{storage_offset, first, hex_bytes(expected_bytes.data(), shown),
                             hex_bytes(actual.data() + first, shown)};
    }
    done += run.size();
  }
  return std::nullopt;
}

execution_plan::execution_plan(const plan_request& request, const std::string& plain_content_path)
    : request_(request) {
  if (request.block_size == 0)
    throw status_error(status::invalid_value, "the storage reports a block size of 0");
  if (request.blocks_per_io == 0 || request.blocks_per_io > max_blocks_per_io)
    throw status_error(status::invalid_value,
                       fmt::format("blocks-per-io must be between 1 and {}", max_blocks_per_io));
  // 64-bit throughout: the reference's 32-bit segment sizes overflowed at 4 GiB.
  io_size_ = request.blocks_per_io * request.block_size;
  if (io_size_ > std::numeric_limits<uint32_t>::max())
    throw status_error(status::invalid_value,
                       fmt::format("an IO of {} blocks of {} bytes ({} bytes) does not fit the "
                                   "32-bit io_size of an IO message",
                                   request.blocks_per_io, request.block_size, io_size_));
  const uint64_t run_limit_transactions =
      std::min<uint64_t>(request.transaction_count, request.run_limit);
  transaction_count_ = static_cast<uint32_t>(run_limit_transactions);
  if (transaction_count_ == 0)
    throw status_error(status::invalid_value,
                       "transaction-count and run-limit-operation-count must not be zero");
  local_region_size_ =
      request.local_io_region_size ? request.local_io_region_size : request.storage_capacity;
  workers_ = slice_workers(local_region_size_ / io_size_, request.storage_capacity / io_size_,
                           io_size_, request.worker_count, transaction_count_);
  if (is_validity_test(request.strategy)) {
    if (!plain_content_path.empty()) {
      expected_.emplace(expected_content::from_file(plain_content_path, request.storage_capacity));
    } else if (request.strategy == execution_strategy::read_write_data_validity_test) {
      expected_.emplace(expected_content::pattern(request.storage_capacity));
    } else {
      throw status_error(status::invalid_value,
                         "read_only_data_validity_test requires plain data file to be provided");
    }
  }
}

offset_ring execution_plan::local_offsets(std::size_t worker) const {
  const auto& s = workers_.at(worker);
  return offset_ring(s.local_offset, io_size_, s.local_blocks);
}

offset_ring execution_plan::storage_offsets(std::size_t worker) const {
  const auto& s = workers_.at(worker);
  return offset_ring(s.storage_offset, io_size_, s.storage_blocks);
}

std::optional<mismatch_report> execution_plan::validate(std::span<const std::byte> local,
                                                        uint64_t storage_offset) const {
  if (!expected_) return std::nullopt;
  return expected_->compare(storage_offset, local);
}

}  // namespace zc::initiator
