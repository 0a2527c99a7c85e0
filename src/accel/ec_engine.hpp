// zc::accel::ec_engine, DOCA's doca_ec for the gga pipeline: 2+1 Reed-Solomon over GF(2^8) on
// ISA-L. A stripe is two data halves D1, D2 and one parity half P = a*D1 + b*D2, where (a, b) is
// the parity row of the chosen matrix as ISA-L generates it: vandermonde (gf_gen_rs_matrix,
// row [1, 1]: plain XOR) or cauchy (gf_gen_cauchy1_matrix, row [1/2, 1/3]). Recovery of any one
// lost half uses a decode matrix built for that index with gf_invert_matrix, not the encode
// matrix (the reference's bug, REFERENCE_SPEC §8.4). Every table is built in the constructor.
//
//   zc::accel::ec_engine ec(pe, {.create_tasks = 4, .recover_tasks = 4, ...callbacks});
//   ec.start();
//   auto* t = ec.allocate_create(ec_matrix::cauchy, d1, d2, parity);
//   ec.submit(*t);  // completes in pe.progress()
//
// Thread rules: the thread of its progress engine. No allocation after construction. Destroy it
// idle.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "accel/internal/software_engine.hpp"
#include "core/buffer.hpp"
#include "core/task.hpp"

namespace zc::accel {

enum class ec_matrix : uint8_t { vandermonde, cauchy };
inline constexpr size_t ec_matrix_count = 2;
// "vandermonde" / "cauchy", the reference's --matrix-type values.
std::string_view to_string(ec_matrix m) noexcept;
std::optional<ec_matrix> parse_ec_matrix(std::string_view name) noexcept;

inline constexpr uint32_t ec_data_blocks = 2;
inline constexpr uint32_t ec_parity_blocks = 1;
inline constexpr uint32_t ec_total_blocks = ec_data_blocks + ec_parity_blocks;
// Stripe indices: 0 = D1, 1 = D2, 2 = P.
inline constexpr uint32_t ec_parity_index = 2;
// ISA-L takes an int length.
inline constexpr size_t ec_max_block_size = INT32_MAX;

// Encodes P from D1 and D2: the data sections of data_1 and data_2 (same length H, H > 0); P (H
// bytes) is appended at the parity buffer's tail. invalid_value when the lengths differ, are 0
// or too big, or the parity buffer has less than H bytes of tail room.
class ec_create_task final : public core::task_base {
 public:
  ec_matrix matrix() const noexcept { return matrix_; }
  core::buffer& data_1() const noexcept { return *data_[0]; }
  core::buffer& data_2() const noexcept { return *data_[1]; }
  core::buffer& parity() const noexcept { return *parity_; }
  void set(ec_matrix m, core::buffer& data_1, core::buffer& data_2, core::buffer& parity) noexcept {
    matrix_ = m;
    data_ = {&data_1, &data_2};
    parity_ = &parity;
  }

 private:
  friend class ec_engine;
  ec_matrix matrix_ = ec_matrix::vandermonde;
  std::array<core::buffer*, 2> data_{};
  core::buffer* parity_ = nullptr;
};

// Rebuilds the half at `missing` (0, 1 or 2) from the other two, given in stripe order (missing
// 0: D2, P; missing 1: D1, P; missing 2: D1, D2). The rebuilt H bytes are appended at out's tail.
// invalid_value on a missing index over 2, survivors of different or zero length, or less than H
// bytes of tail room.
class ec_recover_task final : public core::task_base {
 public:
  ec_matrix matrix() const noexcept { return matrix_; }
  uint32_t missing() const noexcept { return missing_; }
  core::buffer& survivor(size_t i) const noexcept { return *survivors_[i]; }
  core::buffer& out() const noexcept { return *out_; }
  void set(ec_matrix m, uint32_t missing, core::buffer& first, core::buffer& second,
           core::buffer& out) noexcept {
    matrix_ = m;
    missing_ = missing;
    survivors_ = {&first, &second};
    out_ = &out;
  }

 private:
  friend class ec_engine;
  ec_matrix matrix_ = ec_matrix::vandermonde;
  uint32_t missing_ = 0;
  std::array<core::buffer*, 2> survivors_{};
  core::buffer* out_ = nullptr;
};

struct ec_engine_config {
  uint32_t create_tasks = 16;
  uint32_t recover_tasks = 16;
  core::task_pool<ec_create_task>::callback on_create_done;
  core::task_pool<ec_create_task>::callback on_create_error;
  core::task_pool<ec_recover_task>::callback on_recover_done;
  core::task_pool<ec_recover_task>::callback on_recover_error;
};

// The 3x2 encode matrix of a type, row-major, exactly as ISA-L generates it (rows 0-1 identity).
std::array<uint8_t, ec_total_blocks * ec_data_blocks> ec_encode_matrix(ec_matrix m);

class ec_engine final : public internal::software_engine {
 public:
  // Throws status_error(bad_config) for no tasks at all.
  ec_engine(core::progress_engine& engine, ec_engine_config config);
  ~ec_engine() override;

  // A task, or nullptr when all of that kind are in flight (or none were configured).
  ec_create_task* allocate_create(ec_matrix m, core::buffer& data_1, core::buffer& data_2,
                                  core::buffer& parity) noexcept;
  ec_recover_task* allocate_recover(ec_matrix m, uint32_t missing, core::buffer& first,
                                    core::buffer& second, core::buffer& out) noexcept;
  // bad_state when the engine is not running; otherwise the task runs in the next progress().
  status submit(ec_create_task& task) noexcept;
  status submit(ec_recover_task& task) noexcept;

 private:
  enum kind : uint8_t { create_kind, recover_kind };
  // ISA-L's expanded tables for one output row over the two inputs (32 bytes per coefficient).
  using row_tables = std::array<uint8_t, 32 * ec_data_blocks>;
  status execute(core::task_base& task, uint8_t kind) noexcept override;
  status run(const row_tables& tables, core::buffer& first, core::buffer& second,
             core::buffer& out) noexcept;

  ec_engine_config config_;
  // [matrix][missing index]: the row that rebuilds that index from the other two. Index 2 (P from
  // D1, D2) is the encode row, so creation uses the same tables.
  std::array<std::array<row_tables, ec_total_blocks>, ec_matrix_count> tables_{};
  core::task_pool<ec_create_task> create_pool_;
  core::task_pool<ec_recover_task> recover_pool_;
};

}  // namespace zc::accel
