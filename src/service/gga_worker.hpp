// One worker of the gga offload service (REFERENCE_SPEC §6): a thread pinned to its core, with its
// progress engine, a comch consumer and producer on the client's connection, two rdma contexts per
// target (io_control: IO messages; io_data: the target reads and writes this service's chunks),
// and the software LZ4, EC and DMA engines. Each host IO is a small state machine per
// transaction: k blocks, each two slot reads (or one data slot + parity and an EC recovery),
// checked in image format v2 (FORMATS.md §4.3, falling back to the stripe's other pairs and
// rewriting a bad slot), then LZ4 decompression (or a copy, for a raw block) straight into the
// host's pages; or DMA from the host, crc32c, LZ4 compression (raw when it does not fit), EC
// create and three slot writes; or a flush fanned out to the three targets; or, in v2, a discard
// or write zeroes (the blocks' slots blanked on the three) or an allocation map (the union of the
// targets' maps). An error fails that transaction (its reply carries the status), never the
// worker. A target that fails or stops answering is lost for the session: reads go on degraded
// (the missing half rebuilt through EC); v2 writes go on to the two others, v1 writes are
// refused with not_connected so that no stripe is left half-written. One more transaction per
// worker serves the background rebuild.
// The engine-thread half is service/internal/gga_io_path.hpp, its flows in gga_transaction.cpp,
// gga_read.cpp, gga_write.cpp, gga_rebuild.cpp and gga_sparse.cpp.
// Thread rules: as zero_copy_worker: the public methods are for the control thread and run their
// work on the worker's thread with a bound.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "accel/ec_engine.hpp"
#include "accel/gga_format.hpp"
#include "comch/connection.hpp"
#include "core/device.hpp"
#include "core/memory_map.hpp"
#include "service/gga_layout.hpp"
#include "service/gga_stripes.hpp"
#include "service/worker_host.hpp"
#include "service/zero_copy_worker.hpp"  // max_worker_transactions
#include "storage/control_message.hpp"

namespace zc::service {

// The three targets, in the reference's connect order.
inline constexpr uint32_t gga_target_count = 3;
enum gga_target : uint32_t { gga_data_1 = 0, gga_data_2 = 1, gga_data_p = 2 };

struct gga_worker_stats {
  uint32_t cpu = 0;
  uint64_t operations = 0;  // host IOs answered (failed ones included)
  uint64_t recoveries = 0;  // recovery reads the trigger asked for (§6.3's recovery_count)
  uint64_t errors = 0;      // failed transactions, refused messages, failed sends
  uint64_t pe_hits = 0;
  uint64_t pe_misses = 0;
  // Image format v2 (FORMATS.md §4.3); 0 in v1.
  uint64_t verified = 0;         // block reads whose crc matched
  uint64_t repaired = 0;         // slots rewritten after a read found them bad
  uint64_t unrecoverable = 0;    // block reads that failed: no pair of slots matched its crc
  uint64_t raw_writes = 0;       // blocks stored raw: their LZ4 image did not fit the block
  uint64_t degraded_writes = 0;  // blocks written to two targets, the third being lost
  uint64_t rebuilds = 0;         // halves rebuilt through EC for a lost target or a bad slot
};

struct gga_worker_config {
  gga_geometry geometry;  // as the host sees it
  accel::ec_matrix matrix = accel::ec_matrix::vandermonde;
  uint64_t recovery_every_n = 0;       // 0: off
  core::memory_map* host = nullptr;    // the host's IO region (PCI import)
  core::memory_map* region = nullptr;  // the service's chunks, exported for rdma
  uint64_t first_chunk = 0;            // offset of this worker's first chunk in region
  // How long a transaction waits for a target's answer before it fails with time_out.
  std::chrono::milliseconds storage_timeout{5000};
  // Format v2: the session's repair-against-write order, shared by its workers (outlives them).
  gga_stripe_locks* stripes = nullptr;
};

using gga_worker_limits = worker_limits;

class gga_worker {
  class io_path;  // the engine-thread half, private

 public:
  // transactions: N (1..max_worker_transactions); the maps in config must outlive the worker.
  // Builds and starts the comch consumer before returning (the pairing rule). Throws status_error.
  gga_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
             comch::connection& conn, uint32_t transactions, gga_worker_config config,
             gga_worker_limits limits = {});
  ~gga_worker();
  gga_worker(const gga_worker&) = delete;
  gga_worker& operator=(const gga_worker&) = delete;

  uint32_t cpu() const noexcept { return cpu_; }
  std::vector<uint8_t> export_connection(uint32_t target, storage::rdma_role role);
  void connect(uint32_t target, storage::rdma_role role, std::span<const uint8_t> peer_blob);
  bool ready();
  void start_data_path(uint32_t host_consumer_id);
  // The bounded stop steps, which session_workers takes on every worker at once.
  worker_host<io_path>& steps() noexcept { return host_; }
  void close_comch();
  gga_worker_stats stats();
  // Two targets or more lost: no block can be read any more (one lost is served degraded).
  bool rdma_lost() const noexcept;
  // The targets this worker has lost for good (bit per gga_target), from any thread.
  uint8_t lost_targets() const noexcept;
  // Tells the worker that `target` is gone (its control connection failed): it is fenced and
  // the worker serves degraded from its next pass.
  void lose_target(uint32_t target);

  // Format v2: checks every slot of blocks [first, end) in the background, one block at a time at
  // most `bytes_per_second` of blocks, rewriting the bad or missing ones (a replacement target's),
  // while the host's IOs go on. Progress in the log.
  void begin_rebuild(uint64_t first, uint64_t end, uint64_t bytes_per_second);
  // Before the data path starts: discard and write zeroes are answered INVALID_VALUE for the
  // session (the front end writes zeros as data), as a background rebuild will run.
  void refuse_zeroing();
  bool rebuilding();
  // The rebuild checked every block of this worker's share and rewrote every bad slot it found
  // (false while it runs, when it stopped or a block failed, and when none was begun).
  bool rebuild_complete();
  // Format v2, before the data path starts: the volume's label (role ignored) and the targets
  // its labels name as having missed writes. From then on, a write that a lost target misses is
  // sent or acknowledged only once the two others' labels name that target too, so that it is
  // rebuilt when it comes back (FORMATS.md §4.3).
  void set_volume(const accel::gga_label& volume, uint8_t missed);
  // The session's rebuild made `rebuilt` whole: a target lost from now on is named alone.
  void forget_missed(uint8_t rebuilt);

  // Format v2 volume labels (FORMATS.md §4.3), before the data path starts or, with no rebuild
  // running, after it drained: reads the label of every target in `targets` (bit per
  // gga_target), or writes labels[k] to them; waits until `deadline`. Returns, per target, the
  // label's bytes (a write: the bytes written) when that target answered with success, nullopt when
  // it did not. Throws status_error(time_out) when the targets' rdma connections were not up in
  // time.
  using label_bytes = std::array<uint8_t, accel::gga_label_size>;
  std::array<std::optional<label_bytes>, gga_target_count> label_io(
      bool write, const std::array<label_bytes, gga_target_count>& labels, uint8_t targets,
      core::steady_clock::time_point deadline);

 private:
  uint32_t cpu_;
  worker_host<io_path> host_;
};

// Instantiated in the .cpp, where io_path is complete.
extern template class worker_host<gga_worker::io_path>;

}  // namespace zc::service
