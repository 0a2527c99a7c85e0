#include "service/gga_session.hpp"

#include <fmt/format.h>

#include <bit>
#include <exception>

#include "core/log.hpp"
#include "core/random.hpp"
#include "service/worker_connections.hpp"

namespace zc::service {

using storage::message;
using storage::message_type;

namespace {
// The stripe locks' buckets (8 bytes each): a repair skipped or a write delayed by a collision
// is rare while the host has up to a few hundred writes in flight.
constexpr size_t gga_stripe_buckets = size_t(1) << 16;
}  // namespace

gga_geometry agree_geometry(const std::vector<message>& answers, accel::gga_format format) {
  std::optional<storage::query_storage_response_payload> first;
  for (const message& m : answers) {
    if (const auto* e = std::get_if<storage::error_response_payload>(&m.payload))
      throw status_error(e->error_code, e->message);
    const auto* q = std::get_if<storage::query_storage_response_payload>(&m.payload);
    if (m.type != message_type::query_storage_response || q == nullptr)
      throw status_error(
          status::unexpected,
          fmt::format("Unexpected {} while expecting a {}", storage::to_string(m.type),
                      storage::to_string(message_type::query_storage_response)));
    if (!first) {
      first = *q;
      continue;
    }
    if (q->total_size != first->total_size)
      throw status_error(status::bad_state, fmt::format("Mismatch in storage capacity: {} vs {}",
                                                        first->total_size, q->total_size));
    if (q->block_size != first->block_size)
      throw status_error(status::bad_state, fmt::format("Mismatch in block_size: {} vs {}",
                                                        first->block_size, q->block_size));
  }
  if (!first) throw status_error(status::invalid_value, "no storage answered");
  return double_geometry(first->total_size, first->block_size, format);
}

gga_session::gga_session(gga_options options, const core::device& device, target_set& targets,
                         client_link& client)
    : options_(std::move(options)), device_(device), targets_(targets), client_(client) {
  if (targets_.size() != gga_target_count)
    throw status_error(status::invalid_value, fmt::format("gga needs {} storage targets, not {}",
                                                          gga_target_count, targets_.size()));
}

gga_session::~gga_session() {
  teardown();
}

std::vector<message> gga_session::fan_out(const message& request, message_type type,
                                          storage::message_payload payload, message_type expected,
                                          std::optional<message>& error) {
  last_correlation_id_ = request.correlation_id;
  // A target that died during the run is given up before the request, not found by it.
  if (workers_.started()) notice_lost_targets();
  std::vector<message> answers = on_targets([&] {
    return targets_.request_all({type, request.correlation_id, std::move(payload)}, expected);
  });
  // Any answer that is not the expected one becomes the client's error; the others are dropped.
  for (const message& m : answers)
    if (m.type == message_type::error_response && !error) error = relay(m, request);
  return answers;
}

message gga_session::on_query(const message& request) {
  std::optional<message> error;
  auto answers = fan_out(request, message_type::query_storage_request, storage::empty_payload{},
                         message_type::query_storage_response, error);
  if (error) return *error;
  const gga_geometry g = agree_geometry(answers, options_.format);
  const auto* q = std::get_if<storage::query_storage_response_payload>(&answers.front().payload);
  ZC_LOG_INFO(
      "storage: {} bytes in blocks of {} on each target. Doubling this to an effective block "
      "size of {} and a capacity of {} (image format {})",
      q->total_size, g.half(), g.block_size, g.capacity, accel::to_string(options_.format));
  geometry_ = g;
  return storage::make_response(request, message_type::query_storage_response,
                                storage::query_storage_response_payload{g.capacity, g.block_size});
}

message gga_session::on_init(const message& request) {
  const auto* init = std::get_if<storage::init_storage_request_payload>(&request.payload);
  if (init == nullptr) throw status_error(status::invalid_value, "init without its payload");
  if (!geometry_) throw status_error(status::bad_state, "init before a successful query");
  if (!workers_.empty() || host_map_)
    throw status_error(status::bad_state, "the storage is initialised already");
  if (init->core_count == 0 || init->core_count > options_.cpus.size())
    throw status_error(status::invalid_value,
                       fmt::format("Unable to create {} threads as only {} were defined",
                                   init->core_count, options_.cpus.size()));
  // 2T for the host and one for the rebuild; the targets get two receives for each (below), all
  // within their limit.
  constexpr uint32_t most = (max_worker_transactions / 2 - 1) / 2;
  if (init->transaction_count == 0 || init->transaction_count > most)
    throw status_error(status::invalid_value, fmt::format("transaction count {} is outside 1..{}",
                                                          init->transaction_count, most));
  const uint32_t n = init->transaction_count * 2;
  // A transaction's next request to a target may come right behind its answer (a repair after
  // a read, the next block's read): it carries the acknowledgement of that answer, and the target
  // posts that slot's receive again only once the acknowledgement has completed its send. So
  // each transaction may hold two of a target's receives for a moment; with one each, two such
  // steps at once found none posted, and the target was taken for lost.
  const uint32_t target_slots = 2 * (n + 1);
  const gga_chunk_layout layout{geometry_->block_size, geometry_->entry};
  // Each worker's chunks: its n transactions and the rebuild's.
  const uint64_t region_size =
      gga_region_size(init->core_count, n + 1, layout, gga_max_region_size);

  try {
    host_map_ = core::memory_map::import_pci(init->mmap_export);
    region_ = core::memory_map::allocate(
        region_size, core::access::local_read_write | core::access::pci_read_write |
                         core::access::rdma_read | core::access::rdma_write);
    std::vector<uint8_t> blob = region_->export_rdma();
    std::optional<message> error;
    fan_out(request, message_type::init_storage_request,
            storage::init_storage_request_payload{target_slots, init->core_count, blob},
            message_type::init_storage_response, error);
    if (error) {
      teardown();
      return *error;
    }
    comch::connection* conn = client_.channel().connection();
    if (conn == nullptr) throw session_lost(status::not_connected, "client connection lost");
    if (geometry_->verified()) stripes_ = std::make_unique<gga_stripe_locks>(gga_stripe_buckets);
    for (uint32_t i = 0; i < init->core_count; ++i) {
      gga_worker& w = workers_.add(std::make_unique<gga_worker>(
          options_.cpus[i], options_.poll_mode, device_, *conn, n,
          gga_worker_config{*geometry_, options_.matrix, options_.recovery_every_n, host_map_.get(),
                            region_.get(), gga_chunk_offset(i, n + 1, 0, layout),
                            options_.control_timeout, stripes_.get()},
          gga_worker_limits{options_.control_timeout, options_.control_timeout}));
      last_correlation_id_ = request.correlation_id;
      const std::optional<message> refused = on_targets([&] {
        return connect_worker(
            targets_, request, i,
            {[&w](uint32_t k, storage::rdma_role role) { return w.export_connection(k, role); },
             [&w](uint32_t k, storage::rdma_role role, std::span<const uint8_t> blob) {
               w.connect(k, role, blob);
             }});
      });
      if (refused) {
        teardown();
        return *refused;
      }
    }
    ZC_LOG_INFO(
        "init: {} workers with {} transactions each, {} bytes of chunks, host region of {} "
        "bytes",
        init->core_count, n, region_size, host_map_->size());
    // Empty, whatever the targets said (§2.8).
    return storage::make_response(request, message_type::init_storage_response);
  } catch (const session_lost&) {
    throw;
  } catch (...) {
    teardown();
    throw;
  }
}

message gga_session::on_start(const message& request) {
  if (workers_.empty()) throw status_error(status::bad_state, "start before a successful init");
  std::optional<message> error;
  fan_out(request, message_type::start_storage_request, storage::empty_payload{},
          message_type::start_storage_response, error);
  if (error) return *error;
  uint8_t replaced = 0;
  if (options_.format == accel::gga_format::v2) {
    replaced = check_volume();
    // Not for_each_worker: a worker left without the volume would skip its marks.
    for (const auto& w : workers_) w->set_volume(*volume_, replaced);
  } else {
    refuse_v2_volume();
  }
  // A rebuild rewrites slots from what it read: one that lands between the steps of a zeroing
  // would leave a block with a written slot beside blank ones (gga_sparse.cpp).
  if (replaced != 0 && options_.rebuild_rate_mib != 0)
    for (const auto& w : workers_) w->refuse_zeroing();
  workers_.start(client_, options_.control_timeout);
  ZC_LOG_INFO("data path started on {} workers", workers_.size());
  if (replaced != 0) begin_rebuild(replaced);
  return storage::make_response(request, message_type::start_storage_response);
}

message gga_session::on_stop(const message& request) {
  // With every worker drained no write comes any more, so no worker can name a target on the
  // labels after the clear.
  if (workers_.drain() && marked_ != 0) clear_marks();
  std::optional<message> error;
  std::exception_ptr failure;
  try {
    fan_out(request, message_type::stop_storage_request, storage::empty_payload{},
            message_type::stop_storage_response, error);
  } catch (...) {
    failure = std::current_exception();
  }
  stop_workers();
  workers_.close_comch();
  if (failure) std::rethrow_exception(failure);
  if (error) return *error;
  return storage::make_response(request, message_type::stop_storage_response);
}

message gga_session::on_shutdown(const message& request) {
  // A shutdown in the middle of the data path ends it as a stop would first (drain, the targets'
  // stop, fence, the host's IOs answered), so no target goes away under IOs we sent it.
  if (workers_.started() && !workers_.stopped()) (void)on_stop(request);
  if (!client_.pump_until([&] { return client_.consumers().empty(); }, options_.control_timeout))
    ZC_LOG_WARN("{} client consumers still live at shutdown", client_.consumers().size());
  std::optional<message> error;
  fan_out(request, message_type::shutdown_request, storage::empty_payload{},
          message_type::shutdown_response, error);
  teardown();
  if (error) return *error;
  return storage::make_response(request, message_type::shutdown_response);
}

// The three targets' volume labels (FORMATS.md §4.3), read through the first worker before any
// host IO: each must be blank or a label of this volume, in its place, with this matrix and
// geometry; blank ones are labelled (a new volume, or replacements).
std::array<gga_worker::label_bytes, gga_target_count> gga_session::read_labels() {
  const auto deadline = core::steady_clock::now() + 2 * options_.control_timeout;
  const auto got = (**workers_.begin()).label_io(false, {}, 0b111, deadline);
  std::array<gga_worker::label_bytes, gga_target_count> out{};
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    if (!got[k])
      throw status_error(
          status::not_connected,
          fmt::format("storage {} did not answer the read of its volume label", targets_.name(k)));
    out[k] = *got[k];
  }
  return out;
}

uint8_t gga_session::check_volume() {
  static constexpr const char* role_names[] = {"data 1", "data 2", "parity"};
  gga_worker& worker = **workers_.begin();
  const auto got = read_labels();
  std::array<accel::gga_label, gga_target_count> labels{};
  std::optional<accel::gga_label> volume;
  uint8_t blank = 0;
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    const std::string name = targets_.name(k);
    const auto state = accel::decode_gga_label(got[k], labels[k]);
    if (state == accel::gga_label_state::blank) {
      blank = static_cast<uint8_t>(blank | (1u << k));
      continue;
    }
    const accel::gga_label& l = labels[k];
    if (state == accel::gga_label_state::foreign)
      throw status_error(status::invalid_value,
                         fmt::format("storage {}: its last block holds no gga volume label: not "
                                     "a format v2 volume (the reference's images need "
                                     "--gga-format v1)",
                                     name));
    if (l.role != accel::gga_role(k))
      throw status_error(status::invalid_value,
                         fmt::format("storage {} holds the {} halves of volume {:016x}, not the "
                                     "{} halves: are the targets given in another order?",
                                     name, role_names[uint32_t(l.role)], l.volume, role_names[k]));
    if (l.matrix != static_cast<uint8_t>(options_.matrix))
      throw status_error(
          status::invalid_value,
          fmt::format("storage {}: volume {:016x} was written with the {} matrix, and this "
                      "service has --matrix-type {}",
                      name, l.volume, accel::to_string(accel::ec_matrix(l.matrix)),
                      accel::to_string(options_.matrix)));
    if (l.half != geometry_->half() || l.blocks != geometry_->blocks())
      throw status_error(status::invalid_value,
                         fmt::format("storage {}: volume {:016x} has {} blocks of {} bytes, the "
                                     "targets now give {} blocks of {}",
                                     name, l.volume, l.blocks, l.half * 2, geometry_->blocks(),
                                     geometry_->block_size));
    if (volume && volume->volume != l.volume)
      throw status_error(status::invalid_value,
                         fmt::format("storage {} belongs to volume {:016x}, the others to volume "
                                     "{:016x}: targets of two volumes",
                                     name, l.volume, volume->volume));
    volume = l;
  }
  if (volume && std::popcount(blank) >= 2)
    throw status_error(status::invalid_value,
                       fmt::format("volume {:016x}: two of its three targets are blank, and the "
                                   "one left cannot rebuild them (blank all three for a new "
                                   "volume)",
                                   volume->volume));
  // The targets that another target's label names as lacking writes (lost while writes went on,
  // or being rebuilt when the last session ended): rebuilt as blank ones are. A target that both
  // other labels name was away when they were written: its own label's names are older than
  // theirs (written before it went, and since made good), so they do not count.
  uint8_t named = 0;
  uint8_t away = 0;
  for (uint32_t r = 0; r < gga_target_count; ++r) {
    int naming = 0;
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if (k != r && (blank & (1u << k)) == 0 && (labels[k].missed & (1u << r)) != 0) ++naming;
    if (naming == 2) away = static_cast<uint8_t>(away | (1u << r));
  }
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if ((blank & (1u << k)) == 0 && (away & (1u << k)) == 0)
      named = static_cast<uint8_t>(named | labels[k].missed);
  // All three blank: a new volume, nothing to rebuild.
  const uint8_t rebuild = volume ? static_cast<uint8_t>(blank | named) : uint8_t(0);
  if (volume && std::popcount(rebuild) >= 2)
    throw status_error(
        status::invalid_value,
        fmt::format("volume {:016x}: two of its targets lack writes ({}{}), and the one left "
                    "cannot rebuild them",
                    volume->volume, describe_targets(named, "named on the others' labels"),
                    blank != 0 ? ", " + describe_targets(blank, "blank") : std::string()));
  const uint64_t id = volume ? volume->volume : core::random_nonzero_u64();
  volume_ = accel::gga_label{accel::gga_role::data_1, static_cast<uint8_t>(options_.matrix),
                             geometry_->half(), geometry_->blocks(), id};
  // Every label as it must be now: blank ones written, and the others naming the targets that
  // are rebuilt, so that a rebuild the session does not finish is begun again by the next one.
  std::array<gga_worker::label_bytes, gga_target_count> bytes{};
  uint8_t stale = 0;
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    accel::encode_gga_label(label_of(k, static_cast<uint8_t>(rebuild & ~(1u << k))), bytes[k]);
    if (bytes[k] != got[k]) stale = static_cast<uint8_t>(stale | (1u << k));
  }
  if (stale != 0) {
    // Its own deadline: the read may have used most of one.
    const auto written = worker.label_io(true, bytes, stale,
                                         core::steady_clock::now() + 2 * options_.control_timeout);
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if ((stale & (1u << k)) != 0 && !written[k])
        throw status_error(
            status::io_failed,
            fmt::format("storage {}: its volume label could not be written", targets_.name(k)));
  }
  if (!volume) {
    ZC_LOG_INFO("volume {:016x}: a new volume on three blank targets", id);
    return 0;
  }
  if (rebuild == 0) {
    ZC_LOG_INFO("volume {:016x}: three targets in place", id);
    return 0;
  }
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    if ((blank & (1u << k)) != 0)
      ZC_LOG_WARN(
          "storage {} is blank: it joins volume {:016x} as the {} target; each half it "
          "lacks is rebuilt from the other two when its block is read",
          targets_.name(k), id, role_names[k]);
    else if ((named & (1u << k)) != 0)
      ZC_LOG_WARN(
          "storage {} missed writes of volume {:016x} (the other targets' labels name it): "
          "it is rebuilt from the other two; until then a half of it is used only where its "
          "entry matches the others'",
          targets_.name(k), id);
  }
  marked_ = rebuild;
  return rebuild;
}

accel::gga_label gga_session::label_of(uint32_t target, uint8_t missed) const {
  accel::gga_label l = *volume_;
  l.role = accel::gga_role(target);
  l.missed = missed;
  return l;
}

std::string gga_session::describe_targets(uint8_t targets, const char* what) const {
  std::string out;
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if ((targets & (1u << k)) != 0) out += (out.empty() ? "" : " and ") + targets_.name(k);
  return out.empty() || *what == '\0' ? out : out + " " + what;
}

bool gga_session::rebuild_complete() {
  if (lost_ != 0) return false;
  for (const auto& w : workers_)
    if (w->lost_targets() != 0 || !w->rebuild_complete()) return false;
  return true;
}

// After a session that rebuilt what the labels named, with no target lost since, the labels no
// longer name anyone. Otherwise they keep naming them: the next session rebuilds them again.
void gga_session::clear_marks() noexcept {
  try {
    if (!rebuild_complete()) {
      ZC_LOG_WARN(
          "volume {:016x}: the rebuild of {} did not complete in this session: the labels keep "
          "naming it, and the next session rebuilds it again",
          volume_->volume, describe_targets(marked_, ""));
      return;
    }
    std::array<gga_worker::label_bytes, gga_target_count> bytes{};
    for (uint32_t k = 0; k < gga_target_count; ++k)
      accel::encode_gga_label(label_of(k, 0), bytes[k]);
    const auto written =
        (**workers_.begin())
            .label_io(true, bytes, 0b111, core::steady_clock::now() + 2 * options_.control_timeout);
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if (!written[k])
        throw status_error(status::io_failed,
                           fmt::format("storage {} did not take its label", targets_.name(k)));
    ZC_LOG_INFO("volume {:016x}: {} rebuilt: the labels name no target any more", volume_->volume,
                describe_targets(marked_, ""));
    marked_ = 0;
  } catch (const std::exception& e) {
    ZC_LOG_WARN(
        "volume {:016x}: the labels still name the targets rebuilt in this session ({}): the "
        "next session checks them again",
        volume_->volume, e.what());
  } catch (...) {
    ZC_LOG_WARN("volume {:016x}: the labels still name the targets rebuilt in this session",
                volume_->volume);
  }
}

// Format v1 reads a half without its entry: on a v2 volume it would return other bytes than were
// written. A target whose last block holds a v2 label is refused before any host IO.
void gga_session::refuse_v2_volume() {
  const auto got = read_labels();
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    accel::gga_label label{};
    if (accel::decode_gga_label(got[k], label) == accel::gga_label_state::valid)
      throw status_error(status::invalid_value,
                         fmt::format("storage {} holds gga volume {:016x} in format v2, and this "
                                     "service has --gga-format v1: run it with --gga-format v2",
                                     targets_.name(k), label.volume));
  }
}

// The replacement targets in `replaced` get every block of the volume, rebuilt in the
// background by the workers, each over its share of the blocks at its share of the rate.
void gga_session::begin_rebuild(uint8_t replaced) {
  const uint64_t blocks = geometry_->blocks();
  if (options_.rebuild_rate_mib == 0) {
    ZC_LOG_WARN(
        "--rebuild-rate 0: the replacement target's halves are rebuilt only as their "
        "blocks are read");
    return;
  }
  const uint64_t rate = uint64_t(options_.rebuild_rate_mib) << 20;
  const uint64_t n = workers_.size();
  ZC_LOG_INFO("rebuild of {} blocks for the replacement target(s) (mask {:#x}) at {} MiB/s", blocks,
              replaced, options_.rebuild_rate_mib);
  uint64_t i = 0;
  for (const auto& w : workers_) {
    w->begin_rebuild(blocks * i / n, blocks * (i + 1) / n, std::max<uint64_t>(1, rate / n));
    ++i;
  }
}

void gga_session::check_health() {
  notice_lost_targets();
  // Once every worker's rebuild made the named targets whole (and none was lost), a target lost
  // later is named alone: the labels would otherwise name it beside the rebuilt one, and the next
  // start would refuse two (the labels' names are dropped on disk at the stop, clear_marks).
  if (marked_ == 0 || rebuilt_ || !workers_.started() || workers_.stopped() || !rebuild_complete())
    return;
  for (const auto& w : workers_) w->forget_missed(marked_);
  rebuilt_ = true;
  ZC_LOG_INFO("volume {:016x}: rebuild of {} complete", volume_->volume,
              describe_targets(marked_, ""));
}

void gga_session::notice_lost_targets() {
  for (size_t attempt = 0; attempt <= gga_target_count; ++attempt) {
    try {
      targets_.check_connections();
      break;
    } catch (const target_lost& e) {
      if (!workers_.started()) throw session_lost(e.code(), e.what());
      degrade(e.target(), e.what());
    }
  }
  for (const auto& w : workers_) {
    const uint8_t fresh = static_cast<uint8_t>(w->lost_targets() & ~lost_);
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if ((fresh & (1u << k)) != 0)
        degrade(k, fmt::format("worker on cpu {} lost its rdma connection to it, or it stopped "
                               "answering",
                               w->cpu()));
    if (w->rdma_lost())
      throw session_lost(
          status::connection_reset,
          fmt::format("worker on cpu {} lost its rdma connections to two targets", w->cpu()));
  }
}

void gga_session::degrade(size_t target, const std::string& why) {
  const uint8_t bit = static_cast<uint8_t>(1u << target);
  if ((lost_ & bit) != 0) return;
  lost_ = static_cast<uint8_t>(lost_ | bit);
  targets_.forget(target);
  if (std::popcount(lost_) >= 2)
    throw session_lost(status::not_connected, fmt::format("a second storage target lost ({}): {}",
                                                          targets_.name(target), why));
  ZC_LOG_ERROR("storage {} lost ({}): serving degraded, reads rebuilt through EC recovery, {}",
               targets_.name(target), why,
               options_.format == accel::gga_format::v2 ? "writes go to the two others"
                                                        : "writes refused (image format v1)");
  for_each_worker(workers_,
                  [target](gga_worker& w) { w.lose_target(static_cast<uint32_t>(target)); });
}

void gga_session::abort(const std::string& why) noexcept {
  log_session_end(why);
  teardown();
  targets_.shutdown_all(last_correlation_id_);
}

// The targets reach only the session's chunks (region_), never the host's pages: the fence is
// the chunks' export withdrawn and drained, and every rdma context stopped.
void gga_session::stop_workers() noexcept {
  if (region_) region_->withdraw_rdma_export();
  workers_.stop([this] { return !region_ || region_->rdma_export_drained(); });
}

void gga_session::teardown() noexcept {
  // Withdrawn first: workers that never started (no IO relayed) are torn down without a fence.
  if (region_) region_->withdraw_rdma_export();
  if (workers_.started()) stop_workers();
  workers_.clear();
  stripes_.reset();
  region_.reset();
  host_map_.reset();
}

std::vector<storage::core_stats> gga_session::stats() const {
  std::vector<storage::core_stats> out;
  const bool v2 = options_.format == accel::gga_format::v2;
  for (const auto& s : workers_.stats()) {
    out.push_back(
        {s.cpu, s.operations, s.recoveries, s.pe_hits, s.pe_misses, std::nullopt, s.rebuilds});
    if (v2)
      out.back().integrity = {s.verified, s.repaired, s.unrecoverable, s.raw_writes,
                              s.degraded_writes};
  }
  if (out.empty())
    for (uint32_t cpu : options_.cpus) out.push_back({cpu, 0, uint64_t(0), 0, 0});
  return out;
}

}  // namespace zc::service
