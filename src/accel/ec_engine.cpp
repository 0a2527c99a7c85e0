#include "accel/ec_engine.hpp"

#include <isa-l/erasure_code.h>

#include "core/log.hpp"

namespace zc::accel {

std::string_view to_string(ec_matrix m) noexcept {
  return m == ec_matrix::cauchy ? "cauchy" : "vandermonde";
}

std::optional<ec_matrix> parse_ec_matrix(std::string_view name) noexcept {
  if (name == "vandermonde") return ec_matrix::vandermonde;
  if (name == "cauchy") return ec_matrix::cauchy;
  return std::nullopt;
}

std::array<uint8_t, ec_total_blocks * ec_data_blocks> ec_encode_matrix(ec_matrix m) {
  std::array<uint8_t, ec_total_blocks * ec_data_blocks> a{};
  if (m == ec_matrix::cauchy) {
    gf_gen_cauchy1_matrix(a.data(), ec_total_blocks, ec_data_blocks);
  } else {
    gf_gen_rs_matrix(a.data(), ec_total_blocks, ec_data_blocks);
  }
  return a;
}

ec_engine::ec_engine(core::progress_engine& engine, ec_engine_config config)
    : internal::software_engine(engine), config_(std::move(config)) {
  if (config_.create_tasks == 0 && config_.recover_tasks == 0)
    throw status_error(status::bad_config, "ec engine needs tasks");
  for (ec_matrix m : {ec_matrix::vandermonde, ec_matrix::cauchy}) {
    const auto encode = ec_encode_matrix(m);
    for (uint32_t missing = 0; missing < ec_total_blocks; ++missing) {
      // The survivors' rows of the encode matrix map (D1, D2) to what we still have; their
      // inverse maps what we have back to (D1, D2), and the lost row applied to that rebuilds
      // the lost half: lost = encode[missing] * inverse(survivor rows) * survivors.
      uint8_t survivors[ec_data_blocks * ec_data_blocks];
      for (uint32_t row = 0, r = 0; row < ec_total_blocks; ++row) {
        if (row == missing) continue;
        for (uint32_t c = 0; c < ec_data_blocks; ++c)
          survivors[r * ec_data_blocks + c] = encode[row * ec_data_blocks + c];
        ++r;
      }
      uint8_t inverse[ec_data_blocks * ec_data_blocks];
      if (gf_invert_matrix(survivors, inverse, ec_data_blocks) != 0)
        throw status_error(status::unexpected, "ec engine: singular decode matrix");
      uint8_t decode_row[ec_data_blocks];
      for (uint32_t c = 0; c < ec_data_blocks; ++c) {
        uint8_t v = 0;
        for (uint32_t i = 0; i < ec_data_blocks; ++i)
          v ^= gf_mul(encode[missing * ec_data_blocks + i], inverse[i * ec_data_blocks + c]);
        decode_row[c] = v;
      }
      ec_init_tables(ec_data_blocks, 1, decode_row,
                     tables_[static_cast<size_t>(m)][missing].data());
    }
  }
  create_pool_.configure(*this, config_.create_tasks, config_.on_create_done,
                         config_.on_create_error);
  recover_pool_.configure(*this, config_.recover_tasks, config_.on_recover_done,
                          config_.on_recover_error);
  reserve_queue(config_.create_tasks + config_.recover_tasks);
}

ec_engine::~ec_engine() {
  if (state() != core::context_state::idle)
    ZC_SDK_LOG_ERROR("ec engine destroyed while {}; stop it first", to_string(state()));
}

ec_create_task* ec_engine::allocate_create(ec_matrix m, core::buffer& data_1, core::buffer& data_2,
                                           core::buffer& parity) noexcept {
  ec_create_task* t = create_pool_.allocate();
  if (t != nullptr) t->set(m, data_1, data_2, parity);
  return t;
}

ec_recover_task* ec_engine::allocate_recover(ec_matrix m, uint32_t missing, core::buffer& first,
                                             core::buffer& second, core::buffer& out) noexcept {
  ec_recover_task* t = recover_pool_.allocate();
  if (t != nullptr) t->set(m, missing, first, second, out);
  return t;
}

status ec_engine::submit(ec_create_task& task) noexcept {
  if (task.data_[0] == nullptr || task.data_[1] == nullptr || task.parity_ == nullptr)
    return status::invalid_value;
  return enqueue(task, create_kind);
}

status ec_engine::submit(ec_recover_task& task) noexcept {
  if (task.survivors_[0] == nullptr || task.survivors_[1] == nullptr || task.out_ == nullptr)
    return status::invalid_value;
  return enqueue(task, recover_kind);
}

status ec_engine::execute(core::task_base& task, uint8_t kind) noexcept {
  if (kind == create_kind) {
    auto& t = static_cast<ec_create_task&>(task);
    if (static_cast<size_t>(t.matrix_) >= ec_matrix_count) return status::invalid_value;
    return run(tables_[static_cast<size_t>(t.matrix_)][ec_parity_index], *t.data_[0], *t.data_[1],
               *t.parity_);
  }
  auto& t = static_cast<ec_recover_task&>(task);
  if (static_cast<size_t>(t.matrix_) >= ec_matrix_count || t.missing_ >= ec_total_blocks)
    return status::invalid_value;
  return run(tables_[static_cast<size_t>(t.matrix_)][t.missing_], *t.survivors_[0],
             *t.survivors_[1], *t.out_);
}

status ec_engine::run(const row_tables& tables, core::buffer& first, core::buffer& second,
                      core::buffer& out) noexcept {
  // ISA-L needs no alignment or length multiple (its vector kernels finish a tail with an
  // overlapping or byte-wise step), so any length it can take as an int is accepted.
  const size_t length = first.data_length();
  if (length == 0 || length > ec_max_block_size || second.data_length() != length ||
      out.tail_room() < length)
    return status::invalid_value;
  unsigned char* sources[ec_data_blocks] = {first.data(), second.data()};
  unsigned char* targets[1] = {out.tail()};
  ec_encode_data(static_cast<int>(length), ec_data_blocks, 1,
                 const_cast<unsigned char*>(tables.data()), sources, targets);
  out.append(length);
  return status::success;
}

}  // namespace zc::accel
