// The gga offload service's handling of a client session (REFERENCE_SPEC §2.8): every request is
// fanned out to the three targets (data_1, data_2, data_p) with the client's correlation id; their
// geometries must agree and are doubled for the host; the service's own chunk region (§6.1) is
// exported for rdma to all three; each worker connects io_data then io_control to every target.
// Every wait is bounded by --control-timeout. Once the data path runs, one lost target (control
// connection, rdma connection or a silent one) degrades the session instead of ending it.
// Thread rules: the control thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accel/ec_engine.hpp"
#include "core/device.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "service/client_session.hpp"
#include "service/gga_layout.hpp"
#include "service/gga_stripes.hpp"
#include "service/gga_worker.hpp"
#include "service/session_workers.hpp"
#include "service/target_set.hpp"
#include "storage/stats.hpp"

namespace zc::service {

// The most memory the service's chunk region may take.
inline constexpr uint64_t gga_max_region_size = uint64_t(16) << 30;

struct gga_options {
  std::vector<uint32_t> cpus;
  core::poll_mode poll_mode = core::poll_mode::adaptive;
  std::chrono::milliseconds control_timeout{5000};
  accel::ec_matrix matrix = accel::ec_matrix::vandermonde;
  uint64_t recovery_every_n = 0;
  // How blocks are stored on the targets (FORMATS.md §4.3): v2 verifies every read.
  accel::gga_format format = accel::gga_format::v2;
  // MiB/s of blocks the background rebuild of a replacement target checks (0: none; the reads
  // repair what they find).
  uint32_t rebuild_rate_mib = 64;
};

// The geometry the three answers give the host: all must be query_storage_responses with the same
// capacity and block size (the reference's texts, §2.8), turned into the host's geometry in
// `format`. Throws status_error: the
// target's own code and text for an error_response, unexpected for another type, bad_state for a
// mismatch, invalid_value for a geometry that cannot be doubled.
gga_geometry agree_geometry(const std::vector<storage::message>& answers, accel::gga_format format);

class gga_session final : public request_handler {
 public:
  // targets: exactly three, data_1, data_2, data_p; both must outlive the session.
  gga_session(gga_options options, const core::device& device, target_set& targets,
              client_link& client);
  ~gga_session() override;

  storage::message on_query(const storage::message& request) override;
  storage::message on_init(const storage::message& request) override;
  storage::message on_start(const storage::message& request) override;
  storage::message on_stop(const storage::message& request) override;
  storage::message on_shutdown(const storage::message& request) override;
  void check_health() override;
  void abort(const std::string& why) noexcept override;

  // One block per worker, with its recovery count (one empty block per --cpu when none ran).
  std::vector<storage::core_stats> stats() const;
  uint64_t data_path_errors() const noexcept { return workers_.errors(); }
  // The targets lost while the data path ran (bit per gga_target). With one lost, the session
  // goes on degraded: reads rebuilt through EC, writes refused; a second ends it.
  uint8_t lost_targets() const noexcept { return lost_; }

 private:
  // Every target's answer to `type` (same request to each), or the first error_response among
  // them (returned for the caller to relay); throws as target_set does.
  std::vector<storage::message> fan_out(const storage::message& request, storage::message_type type,
                                        storage::message_payload payload,
                                        storage::message_type expected,
                                        std::optional<storage::message>& error);
  // Finds targets lost since the last look (a control connection failed, or a worker lost one)
  // and degrades the session for each; throws session_lost when that is not possible.
  void notice_lost_targets();
  // The labels of the three targets checked (blank ones labelled, the others naming what is
  // rebuilt); returns the targets to rebuild (bit per target: blank targets beside labelled
  // ones, and targets that the others' labels name as lacking writes). Throws status_error on a
  // mismatch, or when two targets need a rebuild.
  uint8_t check_volume();
  // Format v1: throws status_error when a target holds a v2 volume label.
  void refuse_v2_volume();
  // The three targets' label bytes, read through the first worker; throws status_error when one
  // does not answer in time.
  std::array<gga_worker::label_bytes, gga_target_count> read_labels();
  void begin_rebuild(uint8_t replaced);
  // The volume's label for `target`, naming `missed`.
  accel::gga_label label_of(uint32_t target, uint8_t missed) const;
  // "d1 and d2 <what>" for the targets in `targets` ("" for none).
  std::string describe_targets(uint8_t targets, const char* what) const;
  // After the drain: the labels stop naming the targets rebuilt this session (all of them
  // checked, none lost); otherwise they keep naming them, for the next session.
  void clear_marks() noexcept;
  // Every worker's rebuild checked its whole share with every bad slot rewritten, and no target
  // was lost (the session's or a worker's).
  bool rebuild_complete();
  void degrade(size_t target, const std::string& why);
  void stop_workers() noexcept;
  void teardown() noexcept;

  gga_options options_;
  const core::device& device_;
  target_set& targets_;
  client_link& client_;
  std::optional<gga_geometry> geometry_;
  std::unique_ptr<core::memory_map> host_map_;
  std::unique_ptr<core::memory_map> region_;   // the chunks, exported for rdma
  std::unique_ptr<gga_stripe_locks> stripes_;  // format v2: shared by the workers
  session_workers<gga_worker, gga_worker_stats> workers_;
  uint8_t lost_ = 0;
  // Format v2: the volume's label (its role data_1) and the targets its labels name as lacking
  // writes (rebuilt this session).
  std::optional<accel::gga_label> volume_;
  uint8_t marked_ = 0;
  bool rebuilt_ = false;  // the workers were told that the rebuild of marked_ completed
  uint32_t last_correlation_id_ = 0;
};

}  // namespace zc::service
