// zcstore_target_rdma as a child process, driven by this process playing the zero-copy service
// (service_driver.hpp): the whole control sequence with 1 and 2 workers, reads and writes checked
// byte for byte, refused IOs, stop/shutdown and the stats, bad command lines, and the robustness
// cases of issue 4 (bad frames, out-of-sequence messages, a second client, clients that vanish
// at every stage, Ctrl-C). Every wait is bounded; the target runs in event poll mode.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/bytes.hpp"
#include "service_driver.hpp"
#include "storage/sbc_file.hpp"
#include "storage/stats.hpp"
#include "support/raw_client.hpp"
#include "support/subprocess.hpp"

namespace zc::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using storage::io_message_type;
using storage::message;
using storage::message_type;
using storage::rdma_role;

constexpr auto start_timeout = 20s;
constexpr auto exit_timeout = 15s;
constexpr uint32_t read_op = static_cast<uint32_t>(io_message_type::read);
constexpr uint32_t write_op = static_cast<uint32_t>(io_message_type::write);

// ---- files

class temp_dir {
 public:
  temp_dir() {
    std::string templ = (fs::temp_directory_path() / "zc-target-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::vector<uint8_t> pattern(size_t length, uint32_t seed) {
  std::vector<uint8_t> out(length);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

void write_file(const fs::path& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---- the target process

struct target_options {
  std::string device = "tcp";
  int workers = 1;  // --cpu 0 [--cpu 1]
  std::vector<std::string> extra;
  bool any_port = false;  // --listen-port 0: the target picks one and logs it
};

class target {
 public:
  explicit target(target_options o) : port_(o.any_port ? 0 : free_tcp_port()) {
    std::vector<std::string> argv{
        binary("zcstore_target_rdma"), "-d", o.device, "--poll-mode", "event", "--listen-port",
        std::to_string(port_)};
    for (int i = 0; i < o.workers; ++i) {
      argv.push_back("--cpu");
      argv.push_back(std::to_string(i));
    }
    argv.insert(argv.end(), o.extra.begin(), o.extra.end());
    process_ = std::make_unique<subprocess>(argv);
    listening_ = process_->wait_for_output("listening on port", start_timeout);
    if (listening_ && o.any_port) port_ = logged_port();
  }

  bool listening() const { return listening_; }
  uint16_t port() const { return port_; }
  subprocess& process() { return *process_; }
  std::string output() const { return process_->output(); }
  std::optional<int> wait_exit(std::chrono::milliseconds timeout = exit_timeout) {
    return process_->wait(timeout);
  }
  size_t fd_count() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e :
         fs::directory_iterator(fs::path("/proc") / std::to_string(process_->pid()) / "fd"))
      ++n;
    return n;
  }
  // Waits (bounded) until the process holds `n` descriptors: a connection's thread closes its
  // descriptors a moment after the client sees the connection end.
  bool wait_fd_count(size_t n, std::chrono::milliseconds timeout = 10s) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (fd_count() != n) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  // The port of the "listening on port N" line, once its line is complete (0 if it never is).
  uint16_t logged_port() {
    const std::string key = "listening on port ";
    const auto deadline = std::chrono::steady_clock::now() + start_timeout;
    for (;;) {
      const std::string out = output();
      const size_t at = out.find(key);
      const size_t end = at == std::string::npos ? at : out.find('\n', at);
      if (end != std::string::npos)
        return static_cast<uint16_t>(std::stoul(out.substr(at + key.size())));
      if (std::chrono::steady_clock::now() >= deadline || !process_->running()) return 0;
      std::this_thread::sleep_for(10ms);
    }
  }
  // The process's peak resident memory so far (VmHWM), in bytes.
  uint64_t peak_memory() const {
    std::ifstream in(fs::path("/proc") / std::to_string(process_->pid()) / "status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    return 0;
  }
  // How often `text` occurs in the output so far.
  size_t occurrences(const std::string& text) const {
    const std::string out = output();
    size_t n = 0;
    for (size_t at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) ++n;
    return n;
  }
  // Waits (bounded polling of the child's output) until `text` occurs at least `count` times.
  bool wait_occurrences(const std::string& text, size_t count,
                        std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (occurrences(text) < count) {
      if (std::chrono::steady_clock::now() >= deadline || !process_->running())
        return occurrences(text) >= count;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }

 private:
  uint16_t port_;
  std::unique_ptr<subprocess> process_;
  bool listening_ = false;
};

// Every "| Core: c" block of the output with its "| Operation count: n", in order.
std::vector<std::pair<uint32_t, uint64_t>> core_operations(const std::string& output) {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  std::istringstream in(output);
  std::string line;
  int64_t core = -1;  // the block's core, once its "| Core:" line was seen
  while (std::getline(in, line)) {
    if (line.rfind("| Core: ", 0) == 0) core = std::stoll(line.substr(8));
    if (line.rfind("| Operation count: ", 0) == 0 && core >= 0) {
      out.emplace_back(static_cast<uint32_t>(core), std::stoull(line.substr(19)));
      core = -1;
    }
  }
  return out;
}

driver_options on(const std::string& device) {
  driver_options o;
  o.device = device;
  return o;
}

// ---- IO helpers

// The 64 bytes the driver sends for `r` (unused fields zero), as the target must echo them.
std::array<uint8_t, 64> request_bytes(const io_request& r) {
  std::array<uint8_t, 64> b{};
  storage::io_message_view m(b.data());
  m.set_type(static_cast<io_message_type>(r.type));
  m.set_user_data(r.user_data);
  m.set_io_size(r.io_size);
  m.set_requester_offset(r.requester_offset);
  m.set_storage_offset(r.storage_offset);
  return b;
}

// Sends `requests` on worker `w`, waits for every response and checks each: type result, the
// expected result, every other byte as sent. Responses may come in any order (matched by
// user_data, which must be unique in the batch).
void run_ios(driver_worker& w, const std::vector<io_request>& requests,
             status expected = status::success) {
  w.submit_all(requests);
  ASSERT_TRUE(w.wait_responses(requests.size()))
      << "only " << w.responses().size() << " of " << requests.size() << " responses; send errors "
      << w.send_errors() << " (" << status_name(w.last_error()) << ")";
  auto got = w.take_responses();
  ASSERT_EQ(got.size(), requests.size());
  for (const auto& r : requests) {
    auto it = std::find_if(got.begin(), got.end(),
                           [&](const io_response& x) { return x.user_data == r.user_data; });
    ASSERT_NE(it, got.end()) << "no response for user_data " << r.user_data;
    EXPECT_EQ(it->length, storage::io_message_size);
    EXPECT_EQ(it->type, static_cast<uint32_t>(io_message_type::result));
    EXPECT_EQ(it->result, expected)
        << "user_data " << r.user_data << ": " << status_name(it->result);
    auto want = request_bytes(r);
    storage::io_message_view(want.data()).set_type(io_message_type::result);
    storage::io_message_view(want.data()).set_result(expected);
    EXPECT_EQ(it->bytes, want) << "user_data " << r.user_data << ": fields not echoed";
  }
}

// Blocks of [first, first+count) of `storage` read into the region at `region_offset`, in IOs
// of `io_size`, at most `depth` at a time; checked against `expected` (the target's content).
void read_and_check(service_driver& d, driver_worker& w, uint64_t storage_offset, size_t length,
                    uint64_t region_offset, std::span<const uint8_t> expected, uint32_t io_size,
                    uint64_t& user_data, uint64_t& ios, size_t depth = 8) {
  std::memset(d.region_data() + region_offset, 0xA5, length);
  std::vector<io_request> batch;
  for (size_t done = 0; done < length; done += io_size) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(io_size, length - done));
    batch.push_back({read_op, user_data++, n, region_offset + done, storage_offset + done});
    if (batch.size() == depth || done + io_size >= length) {
      run_ios(w, batch);
      ios += batch.size();
      batch.clear();
    }
  }
  ASSERT_EQ(std::memcmp(d.region_data() + region_offset, expected.data() + storage_offset, length),
            0)
      << "read of " << length << " bytes at storage offset " << storage_offset
      << " differs from the content";
}

void write_range(service_driver& d, driver_worker& w, uint64_t storage_offset,
                 std::span<const uint8_t> bytes, uint64_t region_offset, uint32_t io_size,
                 uint64_t& user_data, uint64_t& ios, size_t depth = 8) {
  std::memcpy(d.region_data() + region_offset, bytes.data(), bytes.size());
  std::vector<io_request> batch;
  for (size_t done = 0; done < bytes.size(); done += io_size) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(io_size, bytes.size() - done));
    batch.push_back({write_op, user_data++, n, region_offset + done, storage_offset + done});
    if (batch.size() == depth || done + io_size >= bytes.size()) {
      run_ios(w, batch);
      ios += batch.size();
      batch.clear();
    }
  }
}

// ---- raw TCP clients for the robustness cases

std::vector<uint8_t> frame(uint32_t body_length, std::vector<uint8_t> body) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.u32(body_length);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<uint8_t> header(uint32_t type, uint32_t mid, uint32_t cid) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.u32(type);
  w.u32(mid);
  w.u32(cid);
  return out;
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<uint8_t> be32(uint32_t v) {
  std::vector<uint8_t> out;
  byte_writer(out).u32(v);
  return out;
}

// ---- the session tests, over TCP and shared memory

class target_session : public ::testing::TestWithParam<std::string> {
 protected:
  target_options options(int workers = 1, std::vector<std::string> extra = {}) {
    return {GetParam(), workers, std::move(extra)};
  }
  temp_dir dir_;
};

// Everything a whole session checks, for 1 or 2 workers.
void whole_session(const std::string& device, int workers, bool sbc, const temp_dir& dir) {
  // Raw: 4096 x 48. Sbc: 1024 x 200, with CLI geometry that the header overrides.
  const uint32_t block_size = sbc ? 1024 : 4096;
  const uint32_t block_count = sbc ? 200 : 48;
  const size_t capacity = size_t(block_size) * block_count;
  const auto content = pattern(capacity, 7);
  const fs::path file = dir / (sbc ? "content.sbc" : "content.raw");
  std::vector<std::string> extra{"--binary-content", file.string()};
  if (sbc) {
    storage::write_sbc(file, block_size, block_count, content);
    extra.insert(extra.end(), {"--block-size", "4096", "--block-count", "7"});
  } else {
    write_file(file, content);
    extra.insert(extra.end(), {"--block-size", "4096", "--block-count", "48"});
  }
  const auto file_before = read_file(file);

  target t({device, workers, extra});
  ASSERT_TRUE(t.listening()) << t.output();
  std::vector<uint64_t> ios(workers, 0);
  {
    service_driver d(t.port(), on(device));
    const size_t region_size = 256 * 1024;
    auto geometry = d.open_session(16, workers, region_size);
    EXPECT_EQ(geometry.total_size, capacity);
    EXPECT_EQ(geometry.block_size, block_size);
    ASSERT_EQ(d.worker_count(), size_t(workers));
    for (int i = 0; i < workers; ++i) EXPECT_TRUE(d.worker(i).running());

    // Each worker owns a slice of the storage and of the region.
    const size_t slice = capacity / workers;
    const size_t region_slice = region_size / workers;
    std::vector<uint8_t> expected = content;
    for (int i = 0; i < workers; ++i) {
      SCOPED_TRACE("worker " + std::to_string(i));
      driver_worker& w = d.worker(i);
      uint64_t ud = 1000 * (i + 1);
      const uint64_t base = slice * i;
      const uint64_t rbase = region_slice * i;
      // Reads: whole blocks, odd sizes and offsets, one byte at the very end.
      read_and_check(d, w, base, slice, rbase, expected, block_size, ud, ios[i]);
      read_and_check(d, w, base + 3, 5000, rbase + 7, expected, 1777, ud, ios[i]);
      read_and_check(d, w, base + slice - 1, 1, rbase, expected, 1, ud, ios[i]);
      // Writes, then read back into another part of the region.
      const auto fresh = pattern(3 * block_size + 100, 100 + i);
      const uint64_t at = base + block_size + 50;
      write_range(d, w, at, fresh, rbase, block_size, ud, ios[i]);
      std::memcpy(expected.data() + at, fresh.data(), fresh.size());
      read_and_check(d, w, base, slice, rbase + 4096, expected, block_size, ud, ios[i], 4);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
    }
    // Nothing outside the written ranges changed: the whole store, read by worker 0.
    uint64_t ud = 99999;
    read_and_check(d, d.worker(0), 0, capacity, 0, expected, 8192, ud, ios[0]);
    for (int i = 0; i < workers; ++i) {
      EXPECT_EQ(d.worker(i).send_errors(), 0u);
      EXPECT_EQ(d.worker(i).receive_errors(), 0u);
    }
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  std::vector<std::pair<uint32_t, uint64_t>> want;
  for (int i = 0; i < workers; ++i) want.emplace_back(i, ios[i]);
  EXPECT_EQ(core_operations(t.output()), want) << t.output();
  // Storage is volatile: the content file is as it was.
  EXPECT_EQ(read_file(file), file_before);
}

TEST_P(target_session, whole_sequence_one_worker_raw_content) {
  whole_session(GetParam(), 1, false, dir_);
}

TEST_P(target_session, whole_sequence_two_workers_sbc_content) {
  whole_session(GetParam(), 2, true, dir_);
}

TEST_P(target_session, query_reports_the_command_line_geometry_without_content) {
  target t(options(1, {"--block-size", "512", "--block-count", "10"}));
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    auto geometry = d.query();
    EXPECT_EQ(geometry.total_size, 5120u);
    EXPECT_EQ(geometry.block_size, 512u);
    d.init(16, 1, 8192);
    d.connect_all();
    d.start();
    // Zero-filled without content (the reference left it undefined).
    uint64_t ud = 1, ios = 0;
    std::vector<uint8_t> zeros(5120, 0);
    read_and_check(d, d.worker(0), 0, 5120, 0, zeros, 512, ud, ios);
    d.stop();
    d.shutdown();
  }
  EXPECT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
}

TEST_P(target_session, out_of_range_ios_are_refused_without_transfer) {
  const uint32_t block = 4096, blocks = 16;
  const uint64_t capacity = uint64_t(block) * blocks;
  const auto content = pattern(capacity, 3);
  write_file(dir_ / "c.raw", content);
  target t(options(1, {"--binary-content", (dir_ / "c.raw").string(), "--block-count", "16"}));
  ASSERT_TRUE(t.listening()) << t.output();
  const size_t region_size = 64 * 1024;
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(32, 1, region_size);
    driver_worker& w = d.worker(0);
    const auto region_pattern = pattern(region_size, 11);
    std::memcpy(d.region_data(), region_pattern.data(), region_size);

    const std::vector<io_request> refused = {
        {read_op, 1, 4096, 0, capacity - 100},       // storage range past the end
        {write_op, 2, 1, 0, capacity},               // starts at the end
        {read_op, 3, 4096, 0, ~uint64_t(0) - 10},    // offset + size overflows
        {write_op, 4, 4096, 0, ~uint64_t(0) - 10},   //
        {read_op, 5, 4096, region_size - 10, 0},     // requester range past its end
        {write_op, 6, 16, region_size + 4096, 0},    //
        {write_op, 7, 4096, ~uint64_t(0) - 100, 0},  // requester offset overflows
        {read_op, 8, 0, 0, 0},                       // io_size 0
        {write_op, 9, 0, 100, 100},                  //
        {7, 10, 4096, 0, 0},                         // unknown type
        {0, 11, 4096, 0, 0},                         // a "result" sent as a request
        {read_op, 12, ~uint32_t(0), 0, 0},           // larger than both regions
    };
    run_ios(w, refused, status::invalid_value);
    // No transfer either way: the region is untouched, and so is the store (read it all).
    EXPECT_EQ(std::memcmp(d.region_data(), region_pattern.data(), region_size), 0);
    uint64_t ud = 100, ios = 0;
    read_and_check(d, w, 0, capacity, 0, content, block, ud, ios);
    // Edge cases that are in range are served.
    run_ios(w, {{read_op, 200, 1, region_size - 1, capacity - 1},
                {write_op, 201, 4096, region_size - 4096, capacity - 4096}});
    ios += 2;
    d.stop();
    d.shutdown();
    // The first refusal is logged as a warning, every one is counted in the worker's errors.
    EXPECT_EQ(t.occurrences("IO refused"), 1u) << t.output();
    EXPECT_NE(t.output().find(std::to_string(refused.size()) + " errors"), std::string::npos)
        << t.output();
    // The target exits 1 (errors on the data path) and counts only the transfers it made.
    ASSERT_EQ(t.wait_exit(), std::optional<int>(1)) << t.output();
    EXPECT_EQ(core_operations(t.output()), (std::vector<std::pair<uint32_t, uint64_t>>{{0, ios}}))
        << t.output();
  }
}

TEST_P(target_session, stop_then_shutdown_prints_the_stats) {
  target t(options(2));
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 2, 64 * 1024);
    // 5 IOs on worker 0, 3 on worker 1.
    run_ios(d.worker(0), {{write_op, 1, 4096, 0, 0},
                          {write_op, 2, 4096, 4096, 4096},
                          {read_op, 3, 100, 8192, 0},
                          {read_op, 4, 4096, 12288, 8192},
                          {read_op, 5, 1, 0, 0}});
    run_ios(d.worker(1), {{read_op, 6, 4096, 32768, 0},
                          {write_op, 7, 4096, 36864, 16384},
                          {read_op, 8, 512, 40960, 16384}});
    d.stop();
    EXPECT_EQ(t.occurrences("| Operation count"), 0u) << "stats before shutdown";
    // After stop only shutdown is expected.
    auto reply = d.request(message_type::start_storage_request);
    ASSERT_EQ(reply.type, message_type::error_response);
    EXPECT_EQ(std::get<storage::error_response_payload>(reply.payload).error_code,
              status::unexpected);
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  const std::string out = t.output();
  // The reference's block, one per core, at the very end: rule, core, count, hit rate, with the
  // rate as %2.03lf and the counts behind it. (No std::regex: GCC 12 warns inside it under the
  // sanitizers, and warnings are errors.)
  std::vector<std::string> lines;
  {
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  const std::string rule(storage::stats_rule);
  auto digits = [](const std::string& s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  };
  std::vector<std::pair<uint32_t, uint64_t>> blocks;
  ASSERT_GE(lines.size(), 8u) << out;
  for (size_t i = lines.size() - 8; i < lines.size(); i += 4) {
    EXPECT_EQ(lines[i], rule) << out;
    const std::string core = lines[i + 1].substr(std::min<size_t>(8, lines[i + 1].size()));
    const std::string ops = lines[i + 2].substr(std::min<size_t>(19, lines[i + 2].size()));
    ASSERT_EQ(lines[i + 1].rfind("| Core: ", 0), 0u) << out;
    ASSERT_EQ(lines[i + 2].rfind("| Operation count: ", 0), 0u) << out;
    ASSERT_TRUE(digits(core) && digits(ops)) << out;
    blocks.emplace_back(std::stoul(core), std::stoull(ops));
    // "| PE hit rate: 12.345% (hits:misses)" with hits > 0.
    const std::string& rate = lines[i + 3];
    ASSERT_EQ(rate.rfind("| PE hit rate: ", 0), 0u) << out;
    const size_t dot = rate.find('.'), pct = rate.find("% ("), colon = rate.find(':', 15);
    ASSERT_TRUE(dot != std::string::npos && pct == dot + 4 && colon != std::string::npos &&
                rate.back() == ')')
        << rate;
    EXPECT_TRUE(digits(rate.substr(15, dot - 15)) && digits(rate.substr(dot + 1, 3))) << rate;
    const std::string hits = rate.substr(pct + 3, colon - pct - 3);
    const std::string misses = rate.substr(colon + 1, rate.size() - colon - 2);
    ASSERT_TRUE(digits(hits) && digits(misses)) << rate;
    EXPECT_GT(std::stoull(hits), 0u) << "no PE hits counted";
  }
  EXPECT_EQ(blocks, (std::vector<std::pair<uint32_t, uint64_t>>{{0, 5}, {1, 3}})) << out;
}

// ---- robustness

TEST_P(target_session, malformed_frames_close_the_connection_and_leak_nothing) {
  target t(options());
  ASSERT_TRUE(t.listening()) << t.output();
  size_t baseline = 0;
  {
    service_driver probe(t.port(), on(GetParam()));
    probe.query();
    baseline = t.fd_count();
  }
  // mid/cid 5/6 everywhere; body lengths as declared in the first word.
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> cases = {
      {"body shorter than the header", frame(4, be32(1))},
      {"empty body", frame(0, {})},
      {"oversized body length", frame(0xFFFFFFFF, header(1, 5, 6))},
      {"body just over the limit", frame(64 * 1024 + 1, header(1, 5, 6))},
      {"unknown type 15", frame(12, header(15, 5, 6))},
      {"unknown type 0xFFFFFFFF", frame(12, header(0xFFFFFFFF, 5, 6))},
      {"init without its payload", frame(12, header(3, 5, 6))},
      {"query with trailing bytes", frame(16, cat(header(1, 5, 6), be32(0)))},
      {"blob longer than the frame",
       frame(24, cat(cat(cat(header(5, 5, 6), be32(0)), be32(0)), be32(1000)))},
      {"unknown rdma role", frame(24, cat(cat(cat(header(5, 5, 6), be32(0)), be32(7)), be32(0)))},
      {"error_response with a string past the frame",
       frame(20, cat(cat(header(0, 5, 6), be32(6)), be32(100)))},
      {"garbage", pattern(3000, 1)},
  };
  size_t lost = 1;  // the probe's
  ASSERT_TRUE(t.wait_occurrences("control connection lost", lost)) << t.output();
  for (const auto& [name, bytes] : cases) {
    SCOPED_TRACE(name);
    raw_client c(t.port());
    ASSERT_TRUE(c.connected());
    c.send(bytes);
    auto [got, closed] = c.read(10s);
    EXPECT_TRUE(closed) << "the target kept a connection that sent a bad frame";
    // Either nothing (closed at once) or an error_response frame before the close.
    if (!got.empty()) {
      auto r = storage::decode_frame(got);
      ASSERT_EQ(r.outcome, storage::decode_outcome::message);
      EXPECT_EQ(r.msg.type, message_type::error_response);
    }
    EXPECT_TRUE(t.wait_occurrences("control connection lost", ++lost)) << t.output();
  }
  {
    SCOPED_TRACE("a frame cut short by the client");
    raw_client c(t.port());
    ASSERT_TRUE(c.connected());
    c.send(frame(100, header(1, 5, 6)));
    c.shutdown_write();
    auto [got, closed] = c.read(10s);
    EXPECT_TRUE(closed);
    EXPECT_TRUE(t.wait_occurrences("control connection lost", ++lost)) << t.output();
  }
  // A fresh client gets the whole session, and no descriptor was left behind.
  {
    service_driver d(t.port(), on(GetParam()));
    d.query();
    EXPECT_EQ(t.fd_count(), baseline) << "descriptors leaked";
    d.init(16, 1, 16384);
    d.connect_all();
    d.start();
    run_ios(d.worker(0), {{write_op, 1, 4096, 0, 0}, {read_op, 2, 4096, 4096, 0}});
    EXPECT_EQ(std::memcmp(d.region_data(), d.region_data() + 4096, 4096), 0);
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  EXPECT_EQ(core_operations(t.output()), (std::vector<std::pair<uint32_t, uint64_t>>{{0, 2}}));
}

TEST_P(target_session, out_of_sequence_messages_get_unexpected_and_change_nothing) {
  target t(options());
  ASSERT_TRUE(t.listening()) << t.output();
  service_driver d(t.port(), on(GetParam()));
  auto expect_error = [&](const message& request, status code, const std::string& text) {
    d.send(request);
    message reply = d.receive();
    ASSERT_EQ(reply.type, message_type::error_response) << storage::to_string(reply.type);
    EXPECT_EQ(reply.message_id, request.message_id);
    EXPECT_EQ(reply.correlation_id, request.correlation_id);
    const auto& e = std::get<storage::error_response_payload>(reply.payload);
    EXPECT_EQ(e.error_code, code) << e.message;
    EXPECT_NE(e.message.find(text), std::string::npos) << e.message;
  };
  const storage::empty_payload none;
  expect_error({message_type::start_storage_request, 77, 1234, none}, status::unexpected,
               "Unexpected start_storage_request while expecting a query_storage_request");
  expect_error({message_type::init_storage_request, 78, 9,
                storage::init_storage_request_payload{8, 1, {1, 2, 3}}},
               status::unexpected, "while expecting a query_storage_request");
  expect_error(
      {message_type::query_storage_response, 79, 9, storage::query_storage_response_payload{1, 2}},
      status::unexpected, "Unexpected query_storage_response");
  d.query();
  expect_error({message_type::query_storage_request, 80, 10, none}, status::unexpected,
               "while expecting a init_storage_request");
  // Bad init requests are refused and leave the stage where it was.
  expect_error(
      {message_type::init_storage_request, 81, 11, storage::init_storage_request_payload{8, 2, {}}},
      status::invalid_value, "Requested storage to use 2 cores but only 1 are configured");
  expect_error(
      {message_type::init_storage_request, 82, 12, storage::init_storage_request_payload{0, 1, {}}},
      status::invalid_value, "transaction count");
  expect_error({message_type::init_storage_request, 83, 13,
                storage::init_storage_request_payload{8, 1, {1, 2, 3, 4}}},
               status::invalid_value, "");
  d.init(16, 1, 16384);
  expect_error({message_type::start_storage_request, 84, 14, none}, status::unexpected,
               "while expecting a create_rdma_connection_request");
  // Context index == core count (the reference's off-by-one, §8.5).
  expect_error({message_type::create_rdma_connection_request, 85, 15,
                storage::rdma_connection_payload{
                    1, rdma_role::io_data, d.worker(0).export_connection(rdma_role::io_data)}},
               status::invalid_value, "invalid context idx 1");
  // A connection blob that is not one.
  expect_error({message_type::create_rdma_connection_request, 86, 16,
                storage::rdma_connection_payload{0, rdma_role::io_control, {9, 9, 9, 9}}},
               status::invalid_value, "");
  d.connect(0, rdma_role::io_data);
  expect_error({message_type::create_rdma_connection_request, 87, 17,
                storage::rdma_connection_payload{0, rdma_role::io_data, {1, 2, 3}}},
               status::already_exist, "already has its io_data connection");
  d.connect(0, rdma_role::io_control);
  expect_error({message_type::stop_storage_request, 88, 18, none}, status::unexpected,
               "while expecting a start_storage_request");
  d.start();
  run_ios(d.worker(0), {{write_op, 1, 4096, 0, 0}, {read_op, 2, 4096, 4096, 0}});
  expect_error({message_type::start_storage_request, 89, 19, none}, status::unexpected,
               "while expecting a stop_storage_request");
  d.stop();
  d.shutdown();
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  EXPECT_GE(t.occurrences("unexpected "), 7u) << t.output();
}

// A service beyond --max-sessions (1 here) gets an in_use error that names the limit, on its
// first request, and is closed; the session it found running goes on untouched.
TEST_P(target_session, a_client_beyond_max_sessions_is_refused_in_use_and_the_first_is_unaffected) {
  target t(options());
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.query();
    size_t before = t.fd_count();
    auto turned_away = [&] {
      raw_client other(t.port());
      ASSERT_TRUE(other.connected());
      other.send(frame(12, header(1, 7, 7)));  // a query
      auto [got, closed] = other.read(10s);
      EXPECT_TRUE(closed);
      auto r = storage::decode_frame(got);
      ASSERT_EQ(r.outcome, storage::decode_outcome::message) << got.size() << " bytes";
      ASSERT_EQ(r.msg.type, message_type::error_response) << storage::to_string(r.msg.type);
      EXPECT_EQ(r.msg.message_id, 7u);
      const auto& e = std::get<storage::error_response_payload>(r.msg.payload);
      EXPECT_EQ(e.error_code, status::in_use) << e.message;
      EXPECT_NE(e.message.find("its limit (--max-sessions 1)"), std::string::npos) << e.message;
    };
    turned_away();
    EXPECT_TRUE(t.wait_fd_count(before)) << t.fd_count() << " descriptors, " << before << " before";
    d.init(16, 1, 16384);
    d.connect_all();
    d.start();
    before = t.fd_count();
    turned_away();
    {  // A second service_driver: its query is refused the same way.
      service_driver late(t.port(), on(GetParam()));
      try {
        late.query();
        ADD_FAILURE() << "a second service was served";
      } catch (const status_error& e) {
        EXPECT_EQ(e.code(), status::in_use) << e.what();
      }
    }
    run_ios(d.worker(0), {{write_op, 1, 4096, 0, 0}, {read_op, 2, 4096, 4096, 0}});
    EXPECT_EQ(std::memcmp(d.region_data(), d.region_data() + 4096, 4096), 0);
    EXPECT_TRUE(t.wait_fd_count(before)) << t.fd_count() << " descriptors, " << before << " before";
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  EXPECT_EQ(t.occurrences("refused service"), 3u) << t.output();
}

// --max-sessions 2 (multi-attach): two services hold sessions at once and see one storage: what
// one writes, the other reads back byte for byte. One that vanishes ends only its own session.
TEST_P(target_session, two_sessions_at_once_share_the_storage_and_end_alone) {
  target t(options(1, {"--keep-serving", "--max-sessions", "2"}));
  ASSERT_TRUE(t.listening()) << t.output();
  service_driver a(t.port(), on(GetParam()));
  // Sessions are numbered as they connect: a is session 1 before b comes.
  ASSERT_TRUE(t.wait_occurrences(": session 1\n", 1)) << t.output();
  service_driver b(t.port(), on(GetParam()));
  a.open_session(16, 1, 65536);
  b.open_session(16, 1, 65536);

  const auto first = pattern(4096, 5);
  std::memcpy(a.region_data(), first.data(), first.size());
  run_ios(a.worker(0), {{write_op, 1, 4096, 0, 3 * 4096}});
  run_ios(b.worker(0), {{read_op, 2, 4096, 8192, 3 * 4096}});
  EXPECT_EQ(std::memcmp(b.region_data() + 8192, first.data(), first.size()), 0);

  const auto second = pattern(4096, 6);
  std::memcpy(b.region_data(), second.data(), second.size());
  run_ios(b.worker(0), {{write_op, 3, 4096, 0, 5 * 4096}});
  run_ios(a.worker(0), {{read_op, 4, 4096, 4096, 5 * 4096}});
  EXPECT_EQ(std::memcmp(a.region_data() + 4096, second.data(), second.size()), 0);

  b.disconnect();
  ASSERT_TRUE(t.wait_occurrences("session 2: control connection lost", 1)) << t.output();
  run_ios(a.worker(0), {{read_op, 5, 4096, 12288, 3 * 4096}});
  EXPECT_EQ(std::memcmp(a.region_data() + 12288, first.data(), first.size()), 0);
  a.stop();
  a.shutdown();
  ASSERT_TRUE(t.wait_occurrences("session 1 ended", 1)) << t.output();
  t.process().signal(SIGINT);
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  EXPECT_EQ(t.occurrences("refused service"), 0u) << t.output();
}

// Without --keep-serving the first shutdown ends the program: a client that was waiting for the
// slot meanwhile gets no session, and the target does not wait for it (keep-alive is off here,
// so a session given to it would hold the target for ever).
TEST_P(target_session, a_shutdown_ends_the_program_even_with_a_client_waiting_for_the_slot) {
  target t(options(1, {"--keep-alive-timeout", "0"}));
  ASSERT_TRUE(t.listening()) << t.output();
  service_driver d(t.port(), on(GetParam()));
  d.query();
  raw_client waiting(t.port());
  ASSERT_TRUE(waiting.connected());
  waiting.send(frame(12, header(1, 7, 7)));  // a query
  d.shutdown();
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  auto [got, closed] = waiting.read(10s);
  EXPECT_TRUE(closed);
  if (!got.empty()) {
    auto r = storage::decode_frame(got);
    ASSERT_EQ(r.outcome, storage::decode_outcome::message);
    EXPECT_EQ(r.msg.type, message_type::error_response) << storage::to_string(r.msg.type);
  }
}

enum class stage { connected, queried, initialized, mid_connections, connected_all, started };

const char* stage_name(stage s) {
  switch (s) {
    case stage::connected:
      return "after connect";
    case stage::queried:
      return "after query";
    case stage::initialized:
      return "after init";
    case stage::mid_connections:
      return "in the middle of the rdma connections";
    case stage::connected_all:
      return "after the rdma connections";
    case stage::started:
      return "after start";
  }
  return "?";
}

TEST_P(target_session, client_that_disconnects_at_any_stage_leaves_the_target_serving) {
  target t(options(2));
  ASSERT_TRUE(t.listening()) << t.output();
  const std::vector<stage> stages = {stage::connected,     stage::queried,
                                     stage::initialized,   stage::mid_connections,
                                     stage::connected_all, stage::started};
  size_t lost = 0;
  auto vanish_at = [&](stage s) {
    SCOPED_TRACE(stage_name(s));
    {
      service_driver d(t.port(), on(GetParam()));
      if (s >= stage::queried) d.query();
      if (s >= stage::initialized) d.init(16, 2, 65536);
      if (s == stage::mid_connections) {
        d.connect(0, rdma_role::io_data);
        d.connect(0, rdma_role::io_control);
        d.connect(1, rdma_role::io_data);
      }
      if (s >= stage::connected_all) d.connect_all();
      if (s >= stage::started) {
        d.start();
        run_ios(d.worker(0), {{write_op, 1, 4096, 0, 0}, {read_op, 2, 4096, 4096, 0}});
        run_ios(d.worker(1), {{read_op, 3, 4096, 8192, 4096}});
      }
      d.disconnect();
      ASSERT_TRUE(t.wait_occurrences("control connection lost", ++lost)) << t.output();
    }  // the driver's rdma contexts go too
  };
  // The descriptors the target holds with a client connected after its query.
  // (Each client's departure is waited for, so that the count is of one client's descriptors.)
  auto probe = [&] {
    size_t n = 0;
    {
      service_driver d(t.port(), on(GetParam()));
      d.query();
      n = t.fd_count();
    }
    EXPECT_TRUE(t.wait_occurrences("control connection lost", ++lost)) << t.output();
    return n;
  };
  const size_t initial = probe();
  for (stage s : stages) vanish_at(s);
  const size_t first_round = probe();
  for (stage s : stages) vanish_at(s);
  const size_t second_round = probe();
  EXPECT_EQ(first_round, second_round) << "descriptors leak with every lost client";
  EXPECT_EQ(initial, first_round) << "descriptors kept after the first lost clients";
  // And a new client gets a whole session.
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 2, 65536);
    run_ios(d.worker(1), {{write_op, 1, 4096, 0, 0}, {read_op, 2, 4096, 4096, 0}});
    EXPECT_EQ(std::memcmp(d.region_data(), d.region_data() + 4096, 4096), 0);
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  EXPECT_EQ(core_operations(t.output()),
            (std::vector<std::pair<uint32_t, uint64_t>>{{0, 0}, {1, 2}}))
      << t.output();
}

TEST_P(target_session, ctrl_c_during_a_session_stops_the_target) {
  target t(options());
  ASSERT_TRUE(t.listening()) << t.output();
  service_driver d(t.port(), on(GetParam()));
  d.open_session(16, 1, 65536);
  run_ios(d.worker(0),
          {{write_op, 1, 4096, 0, 0}, {read_op, 2, 4096, 4096, 0}, {read_op, 3, 4096, 8192, 4096}});
  t.process().signal(SIGINT);
  ASSERT_EQ(t.wait_exit(5s), std::optional<int>(0)) << t.output();
  EXPECT_EQ(core_operations(t.output()), (std::vector<std::pair<uint32_t, uint64_t>>{{0, 3}}))
      << t.output();
  // The driver sees the control connection go.
  EXPECT_THROW(d.request(message_type::stop_storage_request), status_error);
}

TEST_P(target_session, ctrl_c_after_refused_ios_exits_1) {
  target t(options());
  ASSERT_TRUE(t.listening()) << t.output();
  service_driver d(t.port(), on(GetParam()));
  d.open_session(16, 1, 65536);
  run_ios(d.worker(0), {{read_op, 1, 4096, 0, 0}});
  run_ios(d.worker(0), {{read_op, 2, 4096, 0, 1 << 20}}, status::invalid_value);
  t.process().signal(SIGINT);
  ASSERT_EQ(t.wait_exit(5s), std::optional<int>(1)) << t.output();
  EXPECT_EQ(core_operations(t.output()), (std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}}))
      << t.output();
}

TEST_P(target_session, an_oversized_io_message_costs_no_transaction_slot) {
  target t(options());
  ASSERT_TRUE(t.listening()) << t.output();
  constexpr uint32_t depth = 16;
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(depth, 1, 64 * 1024);
    driver_worker& w = d.worker(0);
    // A read request with 64 more bytes behind it: too big for the target's 64-byte slot.
    auto oversized = request_bytes({read_op, 1, 512, 0, 0});
    std::vector<uint8_t> bytes(oversized.begin(), oversized.end());
    bytes.resize(2 * storage::io_message_size, 0xAB);
    ASSERT_EQ(w.send_raw(bytes), status::success);
    EXPECT_EQ(w.raw_result(), std::optional<status>(status::too_big));
    EXPECT_TRUE(t.wait_occurrences("receive posted again", 1)) << t.output();
    // Every slot serves again: the whole queue depth at once.
    std::vector<io_request> burst;
    for (uint32_t i = 0; i < depth; ++i) burst.push_back({read_op, 100 + i, 512, i * 512, i * 512});
    run_ios(w, burst);
    EXPECT_EQ(w.send_errors(), 0u);
    d.stop();
    d.shutdown();
  }
  // The refused message is a data-path error of the session.
  ASSERT_EQ(t.wait_exit(), std::optional<int>(1)) << t.output();
  EXPECT_EQ(core_operations(t.output()),
            (std::vector<std::pair<uint32_t, uint64_t>>{{0, uint64_t(depth)}}))
      << t.output();
  EXPECT_NE(t.output().find("1 messages refused"), std::string::npos) << t.output();
}

// REFERENCE_SPEC §7.3: a transfer that cannot even be submitted is answered with the submit's
// status; IO_FAILED is for a transfer that failed on its way.
TEST_P(target_session, a_transfer_that_cannot_be_submitted_is_answered_with_its_status) {
  target t(options());
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * 1024);
    driver_worker& w = d.worker(0);
    run_ios(w, {{read_op, 1, 4096, 0, 0}});
    // The requester's io_data side goes; io_control still carries requests.
    w.stop_context(rdma_role::io_data);
    ASSERT_TRUE(t.wait_occurrences("io_data connection lost", 1)) << t.output();
    run_ios(w, {{read_op, 2, 4096, 0, 0}, {write_op, 3, 4096, 4096, 4096}}, status::bad_state);
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(1)) << t.output();
  EXPECT_EQ(core_operations(t.output()), (std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}}))
      << t.output();
}

TEST_P(target_session, errors_of_an_earlier_session_set_the_exit_status) {
  target t(options());
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * 1024);
    run_ios(d.worker(0), {{read_op, 1, 4096, 0, 1 << 20}}, status::invalid_value);
    d.disconnect();
    ASSERT_TRUE(t.wait_occurrences("control connection lost", 1)) << t.output();
  }
  {  // A clean session after it, and the last one.
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * 1024);
    run_ios(d.worker(0), {{read_op, 2, 4096, 0, 0}});
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(1)) << t.output();
  // The printed stats stay the last session's.
  EXPECT_EQ(core_operations(t.output()), (std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}}))
      << t.output();
}

INSTANTIATE_TEST_SUITE_P(transports, target_session, ::testing::Values("tcp", "sm"),
                         [](const auto& info) { return info.param; });

// ---- without RDMA

TEST(target_process, ctrl_c_while_idle_exits_0_with_the_stats) {
  target t({"tcp", 2, {}});
  ASSERT_TRUE(t.listening()) << t.output();
  t.process().signal(SIGINT);
  ASSERT_EQ(t.wait_exit(5s), std::optional<int>(0)) << t.output();
  EXPECT_EQ(core_operations(t.output()),
            (std::vector<std::pair<uint32_t, uint64_t>>{{0, 0}, {1, 0}}))
      << t.output();
}

TEST(target_process, ctrl_c_while_waiting_for_a_request_exits_0) {
  target t({"tcp", 1, {}});
  ASSERT_TRUE(t.listening()) << t.output();
  service_driver d(t.port());
  d.query();
  t.process().signal(SIGINT);
  ASSERT_EQ(t.wait_exit(5s), std::optional<int>(0)) << t.output();
}

TEST(target_process, listen_port_0_takes_a_free_port_and_logs_it) {
  target_options o;
  o.any_port = true;
  target t(o);
  ASSERT_TRUE(t.listening()) << t.output();
  ASSERT_NE(t.port(), 0) << t.output();
  // The configuration is printed as given; the log line has the port bound.
  EXPECT_NE(t.output().find("listen_port: 0"), std::string::npos) << t.output();
  {
    service_driver d(t.port());
    d.open_session(16, 1, 64 * 1024);
    run_ios(d.worker(0), {{write_op, 1, 4096, 0, 0}, {read_op, 2, 4096, 4096, 0}});
    EXPECT_EQ(std::memcmp(d.region_data(), d.region_data() + 4096, 4096), 0);
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
}

// The content file is read straight into the storage memory: the target's peak memory grows by
// the content's size once, not twice (a staging buffer, then a copy).
TEST(target_process, content_file_is_read_straight_into_the_storage) {
  constexpr uint32_t block_size = 4096, block_count = 16384;
  constexpr uint64_t size = uint64_t(block_size) * block_count;  // 64 MiB
  temp_dir dir;
  const auto content = pattern(size, 9);
  write_file(dir / "c.raw", content);
  storage::write_sbc(dir / "c.sbc", block_size, block_count, content);
  const std::vector<std::string> geometry{"--block-size", "4096", "--block-count",
                                          std::to_string(block_count)};
  auto peak_of = [&](std::vector<std::string> extra) {
    target t({"tcp", 1, std::move(extra)});
    EXPECT_TRUE(t.listening()) << t.output();
    return t.peak_memory();
  };
  // Zero-filled storage is never touched: the baseline holds no content.
  const uint64_t baseline = peak_of(geometry);
  ASSERT_GT(baseline, 0u);
  for (const char* file : {"c.raw", "c.sbc"}) {
    SCOPED_TRACE(file);
    auto extra = geometry;
    extra.insert(extra.end(), {"--binary-content", (dir / file).string()});
    const uint64_t peak = peak_of(extra);
    EXPECT_GE(peak, baseline + size * 9 / 10) << "the content is not resident";
    EXPECT_LT(peak, baseline + size * 3 / 2) << "peak " << peak << " bytes over a baseline of "
                                             << baseline << " for " << size << " bytes of content";
  }
}

// The output minus the version banner: the lines a user reads about the failure.
std::vector<std::string> message_lines(const std::string& output) {
  std::vector<std::string> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line.rfind("zcstore_target_rdma: v", 0) != 0) out.push_back(line);
  return out;
}

struct bad_command_line {
  std::string name;
  std::vector<std::string> args;
  int exit_status;
  std::vector<std::string> must_mention;
};

TEST(target_process, bad_command_lines_give_one_clear_line) {
  temp_dir dir;
  const std::string port = std::to_string(free_tcp_port());
  const auto wrong_size = (dir / "wrong.raw").string();
  write_file(wrong_size, pattern(1000, 1));
  const auto missing = (dir / "missing.raw").string();
  const std::vector<bad_command_line> cases = {
      {"missing --listen-port", {"-d", "tcp", "--cpu", "0"}, 2, {"--listen-port"}},
      {"--listen-port 70000",
       {"-d", "tcp", "--cpu", "0", "--listen-port", "70000"},
       2,
       {"--listen-port", "70000"}},
      {"--block-size 0 without content",
       {"-d", "tcp", "--cpu", "0", "--listen-port", port, "--block-size", "0"},
       2,
       {"block-size and block-count must be non zero when binary-content is not provided"}},
      {"--block-count 0 without content",
       {"-d", "tcp", "--cpu", "0", "--listen-port", port, "--block-count", "0"},
       2,
       {"block-size and block-count must be non zero"}},
      {"missing --cpu", {"-d", "tcp", "--listen-port", port}, 2, {"--cpu"}},
      {"unknown device",
       {"-d", "no-such-device", "--cpu", "0", "--listen-port", port},
       2,
       {"no-such-device"}},
      {"raw file of the wrong size",
       {"-d", "tcp", "--cpu", "0", "--listen-port", port, "--binary-content", wrong_size},
       1,
       {wrong_size, "1000", "524288"}},
      {"missing content file",
       {"-d", "tcp", "--cpu", "0", "--listen-port", port, "--binary-content", missing},
       1,
       {missing}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> argv{binary("zcstore_target_rdma")};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    subprocess p(argv);
    ASSERT_EQ(p.wait(exit_timeout), std::optional<int>(c.exit_status)) << p.output();
    const auto lines = message_lines(p.output());
    ASSERT_EQ(lines.size(), 1u) << p.output();
    for (const auto& word : c.must_mention)
      EXPECT_NE(lines[0].find(word), std::string::npos) << lines[0];
  }
}

// ---- durable targets (--backing-file) and the flush IO message

constexpr uint32_t flush_op = static_cast<uint32_t>(io_message_type::flush);

std::vector<std::string> backing(const fs::path& file, std::vector<std::string> more = {}) {
  std::vector<std::string> args{"--backing-file", file.string()};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The value of the printed configuration's `key: value` line ("" when there is none).
std::string config_value(const std::string& output, const std::string& key) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(key + ": ");
    if (at != std::string::npos && line.find_first_not_of('\t') == at)
      return line.substr(at + key.size() + 2);
  }
  return "";
}

// Stops a target that is idle (no session) with Ctrl-C; it must exit 0.
void ctrl_c(target& t) {
  t.process().signal(SIGINT);
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
}

TEST_P(target_session, flush_on_a_volatile_target_succeeds_and_bad_flushes_are_refused) {
  target t(options(1));
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * 1024);
    driver_worker& w = d.worker(0);
    run_ios(w, {{write_op, 1, 4096, 0, 0}});
    // Offsets are not looked at: a flush covers the whole store, and every field is echoed.
    run_ios(w, {{flush_op, 2, 0, 0, 0}, {flush_op, 3, 0, 77, 4096}});
    run_ios(w,
            {{flush_op, 4, 4096, 0, 0},  // a flush moves no data: io_size must be 0
             {flush_op, 5, 1, 0, 0},
             {4, 6, 0, 0, 0},      // a discard of nothing
             {7, 7, 4096, 0, 0}},  // types past allocation map are unknown
            status::invalid_value);
    d.stop();
    d.shutdown();
  }
  // Refused IOs are data-path errors; a flush is no transfer, so only the write is counted.
  ASSERT_EQ(t.wait_exit(), std::optional<int>(1)) << t.output();
  EXPECT_NE(t.output().find("4 errors"), std::string::npos) << t.output();
  EXPECT_EQ(core_operations(t.output()), (std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}}))
      << t.output();
}

// Resident and dirty kB of the target's mapping of `file`, from /proc/PID/smaps (nullopt when
// it has none). A page written through a shared mapping stays dirty until it has been written
// back to the file system; msync(MS_SYNC) returns only once it has been, and leaves it clean.
struct mapping_pages {
  uint64_t resident_kb = 0;
  uint64_t dirty_kb = 0;
};
std::optional<mapping_pages> mapping_of(pid_t pid, const fs::path& file) {
  std::ifstream in(fs::path("/proc") / std::to_string(pid) / "smaps");
  std::optional<mapping_pages> found;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    const bool field =
        colon != std::string::npos && colon > 0 && std::isupper(line[0]) && line.find(' ') > colon;
    if (!field) {  // a mapping's header line: address range, permissions, ..., path
      inside =
          line.size() > file.string().size() &&
          line.compare(line.size() - file.string().size(), std::string::npos, file.string()) == 0;
      if (inside && !found) found.emplace();
      continue;
    }
    if (!inside) continue;
    const std::string key = line.substr(0, colon);
    if (key == "Rss") found->resident_kb += std::stoull(line.substr(colon + 1));
    if (key == "Shared_Dirty" || key == "Private_Dirty")
      found->dirty_kb += std::stoull(line.substr(colon + 1));
  }
  return found;
}

// Writes land in the file through the shared mapping; after a flush answered SUCCESS the bytes
// are in the file as read() (not the target's mapping) sees it, and nothing else changed.
TEST_P(target_session, flush_answers_success_with_the_writes_in_the_backing_file) {
  const fs::path file = dir_ / "store";
  constexpr uint32_t block = 4096, blocks = 16;
  target t(options(2, backing(file, {"--block-size", "4096", "--block-count", "16"})));
  ASSERT_TRUE(t.listening()) << t.output();
  std::vector<uint8_t> expected(size_t(block) * blocks, 0);
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 2, 128 * 1024);
    uint64_t ud = 1, ios = 0;
    // One write on each worker; the flush on worker 1 covers worker 0's write too.
    const auto a = pattern(3 * block + 10, 21), b = pattern(block, 22);
    write_range(d, d.worker(0), 100, a, 0, block, ud, ios);
    write_range(d, d.worker(1), 10 * block, b, 64 * 1024, block, ud, ios);
    std::memcpy(expected.data() + 100, a.data(), a.size());
    std::memcpy(expected.data() + 10 * block, b.data(), b.size());
    const auto before = mapping_of(t.process().pid(), file);
    ASSERT_TRUE(before.has_value()) << "the target has no mapping of " << file;
    run_ios(d.worker(1), {{flush_op, ud++, 0, 0, 0}});
    // Written back, not only in the mapping: the target's pages of the file are resident and
    // clean (they were dirty before, unless the kernel's own writeback got there first).
    const auto after = mapping_of(t.process().pid(), file);
    ASSERT_TRUE(after.has_value());
    EXPECT_GT(after->resident_kb, 0u);
    EXPECT_EQ(after->dirty_kb, 0u) << "dirty before the flush: " << before->dirty_kb << " kB";
    if (before->dirty_kb == 0) std::cerr << "note: the writes were written back before the flush\n";
    EXPECT_EQ(read_file(file), expected);
    // Flushes mixed with writes in one batch: each is answered SUCCESS, whatever the order in
    // which the flusher thread and the transfers finish; a last flush covers them all.
    std::vector<io_request> mixed;
    for (uint32_t i = 0; i < 6; ++i) {
      const auto bytes = pattern(block, 23 + i);
      std::memcpy(d.region_data() + i * block, bytes.data(), block);
      std::memcpy(expected.data() + (4 + i) * block, bytes.data(), block);
      mixed.push_back({write_op, ud++, block, uint64_t(i) * block, uint64_t(4 + i) * block});
      if (i % 3 == 1) mixed.push_back({flush_op, ud++, 0, 0, 0});
    }
    run_ios(d.worker(0), mixed);
    run_ios(d.worker(0), {{flush_op, ud++, 0, 0, 0}});
    EXPECT_EQ(mapping_of(t.process().pid(), file)->dirty_kb, 0u);
    EXPECT_EQ(read_file(file), expected);
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  EXPECT_EQ(read_file(file), expected);
}

// The whole point of a backing file: a target killed without warning and started again on the
// same file serves every write it had answered.
TEST_P(target_session, a_target_killed_with_sigkill_restarts_with_its_writes) {
  const fs::path file = dir_ / "store";
  constexpr uint32_t block = 4096, blocks = 32;
  constexpr uint64_t capacity = uint64_t(block) * blocks;
  std::vector<uint8_t> expected(capacity, 0);
  {
    target t(options(1, backing(file, {"--block-count", "32"})));
    ASSERT_TRUE(t.listening()) << t.output();
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * 1024);
    uint64_t ud = 1, ios = 0;
    const auto a = pattern(5 * block, 31), b = pattern(777, 32);
    write_range(d, d.worker(0), 2 * block, a, 0, block, ud, ios);
    write_range(d, d.worker(0), capacity - 777, b, 32 * 1024, 777, ud, ios);
    std::memcpy(expected.data() + 2 * block, a.data(), a.size());
    std::memcpy(expected.data() + capacity - 777, b.data(), b.size());
    // No flush and no stop: the target dies with the session open.
    t.process().signal(SIGKILL);
    ASSERT_TRUE(t.wait_exit().has_value()) << t.output();
  }
  // Reopened without geometry flags: the file's size gives 32 blocks of the default 4096 bytes.
  target t(options(1, backing(file)));
  ASSERT_TRUE(t.listening()) << t.output();
  EXPECT_EQ(config_value(t.output(), "block_count"), "32") << t.output();
  EXPECT_NE(t.output().find("reopened"), std::string::npos) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    auto geometry = d.open_session(16, 1, capacity);
    EXPECT_EQ(geometry.total_size, capacity);
    EXPECT_EQ(geometry.block_size, block);
    uint64_t ud = 1, ios = 0;
    read_and_check(d, d.worker(0), 0, capacity, 0, expected, 8192, ud, ios);
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  EXPECT_EQ(read_file(file), expected);
}

TEST(target_process, a_missing_backing_file_is_created_with_the_geometry) {
  temp_dir dir;
  const fs::path file = dir / "store";
  target t({"tcp", 1, backing(file, {"--block-size", "512", "--block-count", "10"})});
  ASSERT_TRUE(t.listening()) << t.output();
  EXPECT_EQ(config_value(t.output(), "backing_file"), "\"" + file.string() + "\"") << t.output();
  EXPECT_NE(t.output().find("created"), std::string::npos) << t.output();
  EXPECT_EQ(read_file(file), std::vector<uint8_t>(5120, 0));
  {
    service_driver d(t.port());
    auto geometry = d.query();
    EXPECT_EQ(geometry.total_size, 5120u);
    EXPECT_EQ(geometry.block_size, 512u);
  }
  ctrl_c(t);
  // Without a backing file the line is there, empty.
  target v({"tcp", 1, {}});
  ASSERT_TRUE(v.listening()) << v.output();
  EXPECT_EQ(config_value(v.output(), "backing_file"), "\"\"") << v.output();
  ctrl_c(v);
}

// Raw content must match the command-line geometry; .sbc content brings its own.
TEST(target_process, binary_content_is_loaded_into_a_new_backing_file) {
  temp_dir dir;
  const auto raw = pattern(4096 * 8, 41);
  const auto sbc = pattern(1024 * 20, 42);
  write_file(dir / "c.raw", raw);
  storage::write_sbc(dir / "c.sbc", 1024, 20, sbc);
  struct loaded {
    std::string content;
    std::vector<std::string> geometry;
    const std::vector<uint8_t>& bytes;
    uint32_t block_size;
  };
  for (const loaded& c :
       {loaded{"c.raw", {"--block-count", "8"}, raw, 4096},
        loaded{"c.sbc", {"--block-size", "4096", "--block-count", "3"}, sbc, 1024}}) {
    SCOPED_TRACE(c.content);
    const fs::path file = dir / ("store-" + c.content);
    auto args = backing(file, {"--binary-content", (dir / c.content).string()});
    args.insert(args.end(), c.geometry.begin(), c.geometry.end());
    target t({"tcp", 1, args});
    ASSERT_TRUE(t.listening()) << t.output();
    EXPECT_EQ(read_file(file), c.bytes);
    {
      service_driver d(t.port());
      auto geometry = d.open_session(16, 1, 64 * 1024);
      EXPECT_EQ(geometry.total_size, c.bytes.size());
      EXPECT_EQ(geometry.block_size, c.block_size);
      uint64_t ud = 1, ios = 0;
      read_and_check(d, d.worker(0), 0, c.bytes.size(), 0, c.bytes, 4096, ud, ios);
      d.stop();
      d.shutdown();
    }
    ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  }
}

// An existing file is reopened as it is. --block-count given: the size must be exact. Not given:
// the size must be a non-zero multiple of the block size, and gives the block count.
TEST(target_process, an_existing_backing_file_decides_the_block_count) {
  temp_dir dir;
  const fs::path file = dir / "store";
  const auto bytes = pattern(3 * 4096, 51);
  write_file(file, bytes);
  struct reopened {
    std::vector<std::string> geometry;
    std::string block_size, block_count;
  };
  for (const reopened& c :
       {reopened{{}, "4096", "3"}, reopened{{"--block-size", "1024"}, "1024", "12"},
        reopened{{"--block-count", "3"}, "4096", "3"},
        reopened{{"--block-size", "512", "--block-count", "24"}, "512", "24"}}) {
    SCOPED_TRACE(c.block_size + " x " + c.block_count);
    target t({"tcp", 1, backing(file, c.geometry)});
    ASSERT_TRUE(t.listening()) << t.output();
    EXPECT_EQ(config_value(t.output(), "block_size"), c.block_size) << t.output();
    EXPECT_EQ(config_value(t.output(), "block_count"), c.block_count) << t.output();
    ctrl_c(t);
    EXPECT_EQ(read_file(file), bytes) << "reopening changed the file";
  }
}

// A reopened sparse file keeps its holes (a trim must not be undone by a restart), and a write
// into one is served: the target allocates the blocks first (on a full file system that write
// would fail IO_FAILED rather than kill the target with SIGBUS).
TEST(target_process, a_sparse_backing_file_keeps_its_holes_and_takes_writes_into_them) {
  temp_dir dir;
  const fs::path file = dir / "store";
  constexpr uint32_t block = 4096;
  constexpr off_t size = 64 * block;
  { std::ofstream create(file); }
  ASSERT_EQ(::truncate(file.c_str(), size), 0);
  auto allocated = [&] {
    struct stat st {};
    return ::stat(file.c_str(), &st) == 0 ? uint64_t(st.st_blocks) * 512 : 0;
  };
  ASSERT_LT(allocated(), uint64_t(size)) << "the file system made no hole: nothing to check";
  target t({"tcp", 1, backing(file, {"--keep-serving"})});
  ASSERT_TRUE(t.listening()) << t.output();
  EXPECT_LT(allocated(), uint64_t(size)) << "the holes were filled at start";
  {
    service_driver d(t.port(), on("tcp"));
    d.open_session(16, 1, 64 * 1024);
    uint64_t ud = 1, ios = 0;
    std::vector<uint8_t> expected(size, 0);
    const auto a = pattern(2 * block, 41);
    write_range(d, d.worker(0), 3 * block, a, 0, block, ud, ios);
    std::memcpy(expected.data() + 3 * block, a.data(), a.size());
    read_and_check(d, d.worker(0), 0, 16 * block, 0, expected, 4 * block, ud, ios);
    d.stop();
    d.shutdown();
  }
  EXPECT_LT(allocated(), uint64_t(size));
  ctrl_c(t);
}

// ---- discard (4), write zeroes (5), allocation map (6): DESIGN §2, FORMATS §2.1

constexpr uint32_t discard_op = static_cast<uint32_t>(io_message_type::discard);
constexpr uint32_t zeroes_op = static_cast<uint32_t>(io_message_type::write_zeroes);
constexpr uint32_t map_op = static_cast<uint32_t>(io_message_type::allocation_map);

// The "target core N: ..." line of the output for core 0 ("" when there is none).
std::string core_line(const std::string& output) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("target core 0: ", 0) == 0) return line;
  return "";
}

// Memory target: a discarded or zeroed block reads back as zeros and leaves the allocation map;
// the blocks around it keep their data; bits past the end of the storage are 0.
TEST_P(target_session, discard_and_write_zeroes_read_back_zeros_and_clear_the_map) {
  constexpr uint32_t block = 4096;
  target t(options(1, {"--block-size", "4096", "--block-count", "16"}));
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * 1024);
    driver_worker& w = d.worker(0);
    uint64_t ud = 1, ios = 0;
    std::vector<uint8_t> expected(16 * block, 0);
    const auto data = pattern(8 * block, 51);
    write_range(d, w, 0, data, 0, block, ud, ios);
    std::memcpy(expected.data(), data.data(), data.size());
    // requester_offset is not looked at: no data moves.
    run_ios(w, {{discard_op, ud++, 2 * block, 12345, 2 * block},
                {zeroes_op, ud++, block, 0, 5 * block}});
    std::memset(expected.data() + 2 * block, 0, 2 * block);
    std::memset(expected.data() + 5 * block, 0, block);
    read_and_check(d, w, 0, 8 * block, 0, expected, 8 * block, ud, ios);
    // Blocks 0, 1, 4, 6, 7 hold data: 0b11010011. Written at the requester offset, nothing else.
    uint8_t* region = d.region_data();
    std::memset(region + 60 * 1024, 0xA5, 8);
    run_ios(w, {{map_op, ud++, 2, 60 * 1024 + 1, 0}});
    EXPECT_EQ(std::vector<uint8_t>(region + 60 * 1024, region + 60 * 1024 + 4),
              (std::vector<uint8_t>{0xA5, 0xD3, 0x00, 0xA5}));
    // 32 blocks from block 4 (16 past the end): blocks 4, 6, 7 -> 0b1101, the rest 0.
    run_ios(w, {{map_op, ud++, 4, 60 * 1024, 4 * block}});
    EXPECT_EQ(std::vector<uint8_t>(region + 60 * 1024, region + 60 * 1024 + 5),
              (std::vector<uint8_t>{0x0D, 0x00, 0x00, 0x00, 0xA5}));
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
  EXPECT_EQ(core_line(t.output()),
            "target core 0: reads 1 (32768 bytes), writes 8 (32768 bytes), discards 1, write "
            "zeroes 1, allocation maps 2")
      << t.output();
}

// Each rule of DESIGN §2 for types 4 to 6 refuses with INVALID_VALUE, moves nothing, and the
// session goes on.
TEST_P(target_session, bad_discards_zeroes_and_maps_are_refused_and_the_session_goes_on) {
  constexpr uint32_t block = 4096, blocks = 16;
  target t(options(1, {"--block-size", "4096", "--block-count", "16"}));
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * 1024);
    driver_worker& w = d.worker(0);
    uint64_t ud = 1, ios = 0;
    const auto data = pattern(blocks * block, 61);
    write_range(d, w, 0, data, 0, 8 * block, ud, ios);
    std::memset(d.region_data(), 0xA5, 64 * 1024);
    run_ios(w,
            {{discard_op, ud++, block, 0, 100},             // misaligned offset
             {zeroes_op, ud++, 1000, 0, 0},                 // not whole blocks
             {discard_op, ud++, 0, 0, 0},                   // zero size
             {zeroes_op, ud++, 0, 0, 0},                    // zero size
             {zeroes_op, ud++, block, 0, blocks * block},   // past the end
             {discard_op, ud++, 2 * block, 0, 15 * block},  // across the end
             {map_op, ud++, 4097, 0, 0},                    // bitmap too large
             {map_op, ud++, 0, 0, 0},                       // zero size
             {map_op, ud++, 2, 64 * 1024 - 1, 0},           // outside the requester region
             {map_op, ud++, 2, 0, 100},                     // misaligned first block
             {map_op, ud++, 2, 0, blocks * block}},         // first block past the end
            status::invalid_value);
    // Nothing moved: the region is untouched and the storage is as written.
    EXPECT_TRUE(std::all_of(d.region_data(), d.region_data() + 64 * 1024,
                            [](uint8_t b) { return b == 0xA5; }));
    read_and_check(d, w, 0, blocks * block, 0, data, 8 * block, ud, ios);
    // The largest map is taken (32768 blocks, of which these 16 exist and hold data).
    run_ios(w, {{map_op, ud++, 4096, 0, 0}});
    EXPECT_EQ(d.region_data()[0], 0xFF);
    EXPECT_EQ(d.region_data()[1], 0xFF);
    EXPECT_TRUE(
        std::all_of(d.region_data() + 2, d.region_data() + 4096, [](uint8_t b) { return b == 0; }));
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(1)) << t.output();
  EXPECT_NE(t.output().find("11 errors"), std::string::npos) << t.output();
}

// --fail-writes-after counts discards and write zeroes as writes (they change the storage); an
// allocation map is no write.
TEST_P(target_session, fault_injection_counts_discards_and_write_zeroes_as_writes) {
  constexpr uint32_t block = 4096;
  target t(options(1, {"--block-count", "16", "--fail-writes-after", "2"}));
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * 1024);
    driver_worker& w = d.worker(0);
    const auto data = pattern(4 * block, 91);
    std::memcpy(d.region_data(), data.data(), data.size());
    run_ios(w, {{write_op, 1, 4 * block, 0, 0}});
    run_ios(w, {{discard_op, 2, block, 0, 0}});
    // The first refusal is the one logged at warning level.
    run_ios(w, {{zeroes_op, 3, block, 0, block}}, status::io_failed);
    run_ios(w, {{write_op, 4, block, 0, 0}}, status::io_failed);
    run_ios(w, {{map_op, 5, 2, 60 * 1024, 0}});
    EXPECT_EQ(d.region_data()[60 * 1024], 0x0E);  // block 0 discarded, 1 to 3 written
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(1)) << t.output();
  EXPECT_NE(t.output().find("write zeroes refused (fault injection: --fail-writes-after)"),
            std::string::npos)
      << t.output();
}

// The blocks of `file` (of `block` bytes, `count` of them) that hold any data byte, as
// SEEK_DATA / SEEK_HOLE see them: what the target's allocation map must say, whatever the file
// system's allocation granularity.
std::vector<bool> data_blocks(const fs::path& file, uint32_t block, uint64_t count) {
  std::vector<bool> out(count, false);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + file.string());
  const off_t end = off_t(block) * off_t(count);
  for (off_t at = 0; at < end;) {
    const off_t data = ::lseek(fd, at, SEEK_DATA);
    if (data < 0 || data >= end) break;
    const off_t hole = std::min(::lseek(fd, data, SEEK_HOLE), end);
    for (off_t b = data / block; b * block < hole; ++b) out[size_t(b)] = true;
    at = hole;
  }
  ::close(fd);
  return out;
}

std::vector<bool> bits_of(const uint8_t* bitmap, uint64_t count) {
  std::vector<bool> out(count);
  for (uint64_t i = 0; i < count; ++i) out[i] = (bitmap[i / 8] >> (i % 8)) & 1;
  return out;
}

uint64_t allocated_bytes(const fs::path& file) {
  struct stat st {};
  return ::stat(file.c_str(), &st) == 0 ? uint64_t(st.st_blocks) * 512 : 0;
}

bool is_hole_at(const fs::path& file, off_t offset) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool hole = ::lseek(fd, offset, SEEK_HOLE) == offset;
  ::close(fd);
  return hole;
}

// Backing file: the map shows the written blocks; a discard punches a hole (blocks freed, zeros
// read back); a write into the hole reads back byte for byte; a restart keeps the hole.
TEST_P(target_session, a_backing_file_punches_holes_maps_its_data_and_keeps_holes_on_restart) {
  const fs::path file = dir_ / "store";
  constexpr uint32_t block = 4096, blocks = 16384;  // 64 MiB
  constexpr uint64_t mib = 1024 * 1024, written_at = 8 * mib, window = 4 * mib;
  constexpr uint64_t hole_at = 9 * mib, refill = 256 * 1024;
  constexpr uint64_t map_at = window;  // in the region, after the data window
  constexpr uint32_t map_bytes = blocks / 8;
  std::vector<uint8_t> expected(uint64_t(block) * blocks, 0);
  uint8_t* region = nullptr;
  auto map_matches_the_file = [&](service_driver& d, uint64_t& ud) {
    std::memset(region + map_at, 0xA5, map_bytes);
    run_ios(d.worker(0), {{map_op, ud++, map_bytes, map_at, 0}});
    const auto seen = data_blocks(file, block, blocks);
    EXPECT_EQ(bits_of(region + map_at, blocks), seen);
    // Every block with data in it is in the map, whatever else the file system holds.
    uint64_t missing = 0;
    for (uint64_t b = 0; b < blocks; ++b)
      if (!seen[b] && std::any_of(expected.begin() + b * block, expected.begin() + (b + 1) * block,
                                  [](uint8_t x) { return x != 0; }))
        ++missing;
    EXPECT_EQ(missing, 0u) << "blocks with data that are not mapped";
    return seen;
  };
  {
    target t(options(1, backing(file, {"--block-size", "4096", "--block-count", "16384"})));
    ASSERT_TRUE(t.listening()) << t.output();
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, window + map_bytes);
    region = d.region_data();
    uint64_t ud = 1, ios = 0;
    const auto data = pattern(window, 71);
    write_range(d, d.worker(0), written_at, data, 0, 256 * 1024, ud, ios);
    std::memcpy(expected.data() + written_at, data.data(), data.size());
    run_ios(d.worker(0), {{flush_op, ud++, 0, 0, 0}});
    const auto seen = map_matches_the_file(d, ud);
    const auto mapped = uint64_t(std::count(seen.begin(), seen.end(), true));
    if (mapped != window / block)
      std::cerr << "note: the file system maps " << mapped << " blocks for " << window / block
                << " written\n";

    const uint64_t before = allocated_bytes(file);
    run_ios(d.worker(0), {{discard_op, ud++, uint32_t(mib), 0, hole_at}});
    std::memset(expected.data() + hole_at, 0, mib);
    EXPECT_LT(allocated_bytes(file), before) << "no block was freed";
    EXPECT_TRUE(is_hole_at(file, hole_at));
    map_matches_the_file(d, ud);
    read_and_check(d, d.worker(0), written_at, window, 0, expected, 256 * 1024, ud, ios);

    // Into the hole: allocated again first, then written.
    const auto again = pattern(refill, 72);
    write_range(d, d.worker(0), hole_at, again, 0, 64 * 1024, ud, ios);
    std::memcpy(expected.data() + hole_at, again.data(), again.size());
    read_and_check(d, d.worker(0), written_at, window, 0, expected, 256 * 1024, ud, ios);
    run_ios(d.worker(0), {{flush_op, ud++, 0, 0, 0}});
    map_matches_the_file(d, ud);
    d.stop();
    d.shutdown();
    ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
    EXPECT_NE(core_line(t.output()).find("discards 1, write zeroes 0, allocation maps 3"),
              std::string::npos)
        << t.output();
  }
  EXPECT_TRUE(is_hole_at(file, hole_at + refill));
  const uint64_t at_stop = allocated_bytes(file);
  target t(options(1, backing(file)));
  ASSERT_TRUE(t.listening()) << t.output();
  EXPECT_EQ(allocated_bytes(file), at_stop) << "the file's holes were filled at start";
  EXPECT_TRUE(is_hole_at(file, hole_at + refill));
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, window + map_bytes);
    region = d.region_data();
    uint64_t ud = 1, ios = 0;
    const auto seen = map_matches_the_file(d, ud);
    for (uint64_t b = (hole_at + refill) / block; b < (hole_at + mib) / block; ++b)
      ASSERT_FALSE(seen[b]) << "block " << b << " of the hole is mapped after the restart";
    read_and_check(d, d.worker(0), written_at, window, 0, expected, 256 * 1024, ud, ios);
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(0)) << t.output();
}

// A small tmpfs of its own, unmounted at the end; nullopt where this process may not mount
// (not root, or no CAP_SYS_ADMIN).
class small_file_system {
 public:
  small_file_system(const fs::path& where, const std::string& size) : path_(where) {
    fs::create_directories(where);
    mounted_ = ::mount("tmpfs", where.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                       ("size=" + size).c_str()) == 0;
  }
  ~small_file_system() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  // Writes `file` until the file system is full.
  void fill(const fs::path& file) const {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    std::vector<uint8_t> chunk(4096, 1);
    while (fd >= 0 && ::write(fd, chunk.data(), chunk.size()) == ssize_t(chunk.size())) {
    }
    if (fd >= 0) ::close(fd);
  }

 private:
  fs::path path_;
  bool mounted_ = false;
};

// The write into a punched hole on a full file system: answered IO_FAILED, with a log line,
// instead of the target dying of SIGBUS when the write lands in the mapping; the target goes on,
// and the same write succeeds once there is room.
TEST_P(target_session, a_write_into_a_hole_on_a_full_file_system_fails_io_failed_not_sigbus) {
  small_file_system small(dir_ / "small", "512k");
  if (!small.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs CAP_SYS_ADMIN)";
  const fs::path file = dir_ / "small" / "store";
  constexpr uint32_t block = 4096;
  target t(options(1, backing(file, {"--block-size", "4096", "--block-count", "64"})));
  ASSERT_TRUE(t.listening()) << t.output();
  {
    service_driver d(t.port(), on(GetParam()));
    d.open_session(16, 1, 64 * block);
    driver_worker& w = d.worker(0);
    uint64_t ud = 1, ios = 0;
    std::vector<uint8_t> expected(64 * block, 0);
    run_ios(w, {{discard_op, ud++, 32 * block, 0, 0}});
    small.fill(dir_ / "small" / "filler");
    const auto a = pattern(block, 81);
    std::memcpy(d.region_data(), a.data(), block);
    run_ios(w, {{write_op, ud++, block, 0, 3 * block}}, status::io_failed);
    EXPECT_TRUE(t.wait_occurrences("write refused: cannot allocate", 1)) << t.output();
    // Outside the hole the blocks are there: that write is served. (Only those are read while
    // the file system is full: on tmpfs even a read of a hole through the mapping takes a page.)
    write_range(d, w, 40 * block, a, 0, block, ud, ios);
    std::memcpy(expected.data() + 40 * block, a.data(), block);
    read_and_check(d, w, 32 * block, 32 * block, 0, expected, 16 * block, ud, ios);
    fs::remove(dir_ / "small" / "filler");
    write_range(d, w, 3 * block, a, 0, block, ud, ios);
    std::memcpy(expected.data() + 3 * block, a.data(), block);
    read_and_check(d, w, 0, 64 * block, 0, expected, 16 * block, ud, ios);
    d.stop();
    d.shutdown();
  }
  ASSERT_EQ(t.wait_exit(), std::optional<int>(1)) << t.output();  // the refused write
}

TEST(target_process, backing_file_errors_give_one_clear_line) {
  temp_dir dir;
  const std::string port = std::to_string(free_tcp_port());
  const auto existing = (dir / "existing").string();
  const auto existing_bytes = pattern(4 * 4096, 61);
  write_file(existing, existing_bytes);
  const auto odd = (dir / "odd").string();
  write_file(odd, pattern(1000, 62));
  const auto empty = (dir / "empty").string();
  write_file(empty, {});
  const auto content = (dir / "c.raw").string();
  write_file(content, pattern(4096 * 4, 63));
  const auto not_made = (dir / "not-made").string();
  const auto in_missing_dir = (dir / "no-such-dir" / "store").string();
  const std::vector<std::string> base{"-d", "tcp", "--cpu", "0", "--listen-port", port};
  auto with = [&](std::vector<std::string> more) {
    auto args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::vector<bad_command_line> cases = {
      {"existing file, another --block-count",
       with({"--backing-file", existing, "--block-count", "5"}),
       1,
       {existing, "16384", "20480"}},
      {"existing file, not a multiple of the block size",
       with({"--backing-file", odd}),
       1,
       {odd, "1000", "4096"}},
      {"existing empty file", with({"--backing-file", empty}), 1, {empty, "0 bytes"}},
      {"content with an existing backing file",
       with({"--backing-file", existing, "--binary-content", content, "--block-count", "4"}),
       1,
       {existing, "--binary-content"}},
      {"missing content for a new backing file",
       with({"--backing-file", not_made, "--binary-content", (dir / "nothing").string()}),
       1,
       {"nothing"}},
      {"backing file in a missing directory",
       with({"--backing-file", in_missing_dir}),
       1,
       {in_missing_dir}},
      {"backing file that is a directory",
       with({"--backing-file", (dir / "").string()}),
       1,
       {"backing file"}},
      {"--backing-file without a path", with({"--backing-file"}), 2, {"--backing-file"}},
      {"--backing-file with an empty path", with({"--backing-file", ""}), 2, {"--backing-file"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> argv{binary("zcstore_target_rdma")};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    subprocess p(argv);
    ASSERT_EQ(p.wait(exit_timeout), std::optional<int>(c.exit_status)) << p.output();
    const auto lines = message_lines(p.output());
    ASSERT_EQ(lines.size(), 1u) << p.output();
    for (const auto& word : c.must_mention)
      EXPECT_NE(lines[0].find(word), std::string::npos) << lines[0];
  }
  // Refused files are left as they were; a store that could not be made is not left behind.
  EXPECT_EQ(read_file(existing), existing_bytes);
  EXPECT_EQ(fs::file_size(odd), 1000u);
  EXPECT_FALSE(fs::exists(not_made));
}

// Two targets writing one file would corrupt each other's blocks: the second is refused.
TEST(target_process, a_backing_file_in_use_by_another_target_is_refused) {
  temp_dir dir;
  const fs::path file = dir / "store";
  target first({"tcp", 1, backing(file)});
  ASSERT_TRUE(first.listening()) << first.output();
  std::vector<std::string> argv{binary("zcstore_target_rdma"),
                                "-d",
                                "tcp",
                                "--cpu",
                                "0",
                                "--listen-port",
                                "0",
                                "--backing-file",
                                file.string()};
  subprocess second(argv);
  ASSERT_EQ(second.wait(exit_timeout), std::optional<int>(1)) << second.output();
  const auto lines = message_lines(second.output());
  ASSERT_EQ(lines.size(), 1u) << second.output();
  EXPECT_NE(lines[0].find("in use"), std::string::npos) << lines[0];
  ctrl_c(first);
}

}  // namespace
}  // namespace zc::test
