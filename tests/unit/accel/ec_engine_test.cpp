// ec_engine: parity against GF(2^8) arithmetic written in the test (not ISA-L), recovery of every
// index for both matrices on random data, lengths ISA-L's vector kernels finish with a tail, bad
// arguments, and the task model.
#include "accel/ec_engine.hpp"

#include <gtest/gtest.h>

#include "core/progress_engine.hpp"
#include "unit/accel/accel_test_support.hpp"

namespace zc::accel {
namespace {

using test::buffers;

struct accel_ec : ::testing::Test {
  core::progress_engine pe{core::poll_mode::busy};
  int done = 0;
  int failed = 0;
  status last = status::success;
  std::unique_ptr<ec_engine> engine;
  buffers bufs;

  void SetUp() override { make(4); }
  void make(uint32_t tasks) {
    if (engine) engine->stop();
    engine = std::make_unique<ec_engine>(
        pe, ec_engine_config{.create_tasks = tasks,
                             .recover_tasks = tasks,
                             .on_create_done = [this](ec_create_task& t) { finish(t, true); },
                             .on_create_error = [this](ec_create_task& t) { finish(t, false); },
                             .on_recover_done = [this](ec_recover_task& t) { finish(t, true); },
                             .on_recover_error = [this](ec_recover_task& t) { finish(t, false); }});
    ASSERT_EQ(engine->start(), status::success);
  }
  void finish(core::task_base& t, bool success) {
    (success ? done : failed) += 1;
    last = t.result();
    t.free();
  }
  void TearDown() override {
    engine->stop();
    pe.progress();
  }
  status wait_one() {
    const int before = done + failed;
    EXPECT_TRUE(pe.run_until([&] { return done + failed > before; }, std::chrono::seconds(5)));
    return last;
  }
  std::vector<uint8_t> create(ec_matrix m, const std::vector<uint8_t>& d1,
                              const std::vector<uint8_t>& d2) {
    core::buffer& p = bufs.empty(d1.size());
    auto* t = engine->allocate_create(m, bufs.with_data(d1), bufs.with_data(d2), p);
    EXPECT_NE(t, nullptr);
    EXPECT_EQ(engine->submit(*t), status::success);
    EXPECT_EQ(wait_one(), status::success);
    return buffers::data_of(p);
  }
  std::vector<uint8_t> recover(ec_matrix m, uint32_t missing, const std::vector<uint8_t>& a,
                               const std::vector<uint8_t>& b) {
    core::buffer& out = bufs.empty(a.size());
    auto* t = engine->allocate_recover(m, missing, bufs.with_data(a), bufs.with_data(b), out);
    EXPECT_NE(t, nullptr);
    EXPECT_EQ(engine->submit(*t), status::success);
    EXPECT_EQ(wait_one(), status::success);
    return buffers::data_of(out);
  }
};

TEST(accel_ec_matrix, names_and_isal_rows_match_the_test_arithmetic) {
  EXPECT_EQ(parse_ec_matrix("vandermonde"), ec_matrix::vandermonde);
  EXPECT_EQ(parse_ec_matrix("cauchy"), ec_matrix::cauchy);
  EXPECT_EQ(parse_ec_matrix("Cauchy"), std::nullopt);
  EXPECT_EQ(to_string(ec_matrix::cauchy), "cauchy");
  const auto v = ec_encode_matrix(ec_matrix::vandermonde);
  const auto c = ec_encode_matrix(ec_matrix::cauchy);
  EXPECT_EQ((std::array<uint8_t, 6>{1, 0, 0, 1, 1, 1}), v);
  EXPECT_EQ((std::array<uint8_t, 6>{1, 0, 0, 1, test::gf_inv(2), test::gf_inv(3)}), c);
  // The values docs/FORMATS.md states.
  EXPECT_EQ(test::gf_inv(2), 0x8E);
  EXPECT_EQ(test::gf_inv(3), 0xF4);
}

TEST_F(accel_ec, parity_matches_gf256_arithmetic_for_both_matrices) {
  for (size_t length :
       {size_t(64), size_t(2048), size_t(4096), size_t(1), size_t(33), size_t(100), size_t(4064)}) {
    SCOPED_TRACE(length);
    const auto d1 = test::random_bytes(length, 1 + length);
    const auto d2 = test::random_bytes(length, 2 + length);
    EXPECT_EQ(create(ec_matrix::vandermonde, d1, d2),
              test::parity(test::vandermonde_row(), d1, d2));
    EXPECT_EQ(create(ec_matrix::cauchy, d1, d2), test::parity(test::cauchy_row(), d1, d2));
  }
}

TEST_F(accel_ec, every_index_is_recovered_for_both_matrices) {
  for (ec_matrix m : {ec_matrix::vandermonde, ec_matrix::cauchy}) {
    for (uint32_t seed = 0; seed < 4; ++seed) {
      SCOPED_TRACE(std::string(to_string(m)) + " seed " + std::to_string(seed));
      const size_t length = 2048 + 64 * seed;
      const auto d1 = test::random_bytes(length, 10 + seed);
      const auto d2 = test::random_bytes(length, 20 + seed);
      const auto p = test::parity(
          m == ec_matrix::cauchy ? test::cauchy_row() : test::vandermonde_row(), d1, d2);
      EXPECT_EQ(recover(m, 0, d2, p), d1);
      EXPECT_EQ(recover(m, 1, d1, p), d2);
      EXPECT_EQ(recover(m, 2, d1, d2), p);
    }
  }
}

TEST_F(accel_ec, cauchy_recovery_is_not_the_reference_bug) {
  // REFERENCE_SPEC §8.4: recovering with the encode row instead of a decode matrix happens to work
  // for XOR parity only. With Cauchy it would give a*D1 + b*P, not D2.
  const auto d1 = test::random_bytes(256, 5);
  const auto d2 = test::random_bytes(256, 6);
  const auto p = test::parity(test::cauchy_row(), d1, d2);
  const auto buggy = test::parity(test::cauchy_row(), d1, p);
  ASSERT_NE(buggy, d2);
  EXPECT_EQ(recover(ec_matrix::cauchy, 1, d1, p), d2);
}

TEST_F(accel_ec, bad_arguments_fail_the_task_and_write_nothing) {
  const auto a = test::random_bytes(128, 1);
  const auto b = test::random_bytes(64, 2);
  {
    core::buffer& p = bufs.empty(128);
    engine->submit(
        *engine->allocate_create(ec_matrix::vandermonde, bufs.with_data(a), bufs.with_data(b), p));
    EXPECT_EQ(wait_one(), status::invalid_value);  // halves of different length
    EXPECT_EQ(p.data_length(), 0u);
  }
  {
    core::buffer& p = bufs.empty(127);
    engine->submit(
        *engine->allocate_create(ec_matrix::vandermonde, bufs.with_data(a), bufs.with_data(a), p));
    EXPECT_EQ(wait_one(), status::invalid_value);  // parity room short
    EXPECT_EQ(p.data_length(), 0u);
  }
  {
    core::buffer& p = bufs.empty(128);
    engine->submit(*engine->allocate_create(ec_matrix::vandermonde, bufs.with_data({}),
                                            bufs.with_data({}), p));
    EXPECT_EQ(wait_one(), status::invalid_value);  // empty halves
  }
  {
    core::buffer& out = bufs.empty(128);
    engine->submit(
        *engine->allocate_recover(ec_matrix::cauchy, 3, bufs.with_data(a), bufs.with_data(a), out));
    EXPECT_EQ(wait_one(), status::invalid_value);  // no index 3 in a 2+1 stripe
    EXPECT_EQ(out.data_length(), 0u);
  }
  {
    core::buffer& out = bufs.empty(128);
    engine->submit(*engine->allocate_recover(static_cast<ec_matrix>(7), 0, bufs.with_data(a),
                                             bufs.with_data(a), out));
    EXPECT_EQ(wait_one(), status::invalid_value);  // no such matrix
  }
  EXPECT_EQ(done, 0);
}

TEST_F(accel_ec, pool_exhaustion_and_completion_in_progress) {
  make(1);
  const auto a = test::random_bytes(64, 1);
  core::buffer& d = bufs.with_data(a);
  core::buffer& p1 = bufs.empty(64);
  auto* t = engine->allocate_create(ec_matrix::vandermonde, d, d, p1);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(engine->allocate_create(ec_matrix::vandermonde, d, d, p1), nullptr);
  auto* r = engine->allocate_recover(ec_matrix::vandermonde, 2, d, d, p1);
  ASSERT_NE(r, nullptr);  // a separate pool
  r->free();
  ASSERT_EQ(engine->submit(*t), status::success);
  EXPECT_EQ(done, 0);
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(done, 1);
  EXPECT_EQ(buffers::data_of(p1), std::vector<uint8_t>(64, 0));  // D xor D
  EXPECT_NE(engine->allocate_create(ec_matrix::vandermonde, d, d, p1), nullptr);
}

}  // namespace
}  // namespace zc::accel
