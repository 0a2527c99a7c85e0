// zcstore target benchmark (bench/run_target.sh): this process plays the zero-copy service
// against a running zcstore_target_rdma (tests/integration/service_driver.hpp) and drives 4 KiB
// reads and writes straight at it, closed loop, at each queue depth.
//
//   zc_target_bench --port P --device sm|tcp [--cpu N] [--poll busy|event] [--seconds S]
//                   [--qd 1,32,64] [--size 4096] [--tests read,write]
//
// One session: query, init (transactions = 2 x the largest depth, REFERENCE_SPEC §3.3), one
// worker's two rdma connections, start; then per (test, depth): `depth` IOs in flight, each
// response resubmits its slot at the next block, 0.2 s warm-up, S seconds measured; then stop
// and shutdown (the target exits). One line per case:
//   result impl=target dev=D mode=M test=read qd=32 size=4096 n=... iops=... mb_s=...
//          median_us=... p99_us=... errors=...
// Latency = request send submitted -> response received (the target's transfer included).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "../tests/integration/service_driver.hpp"
#include "common.hpp"

namespace {

using namespace zc;
using clock_type = std::chrono::steady_clock;

constexpr size_t max_samples = 8u << 20;

struct options {
  uint16_t port = 0;
  std::string device = "sm";
  core::poll_mode poll = core::poll_mode::busy;
  std::optional<uint32_t> cpu;
  double seconds = 2.0;
  std::vector<uint32_t> depths{1, 32, 64};
  uint32_t size = 4096;
  std::vector<std::string> tests{"read", "write"};
};

using bench::die;

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) die("missing value for " + k);
    const std::string v = argv[++i];
    if (k == "--port") {
      o.port = static_cast<uint16_t>(std::stoul(v));
    } else if (k == "--device") {
      o.device = v;
    } else if (k == "--cpu") {
      o.cpu = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--poll") {
      o.poll = bench::parse_poll(v);
    } else if (k == "--seconds") {
      o.seconds = std::stod(v);
    } else if (k == "--qd") {
      o.depths.clear();
      for (auto& d : bench::split_list(v)) o.depths.push_back(static_cast<uint32_t>(std::stoul(d)));
    } else if (k == "--size") {
      o.size = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--tests") {
      o.tests = bench::split_list(v);
    } else {
      die("unknown option " + k);
    }
  }
  if (o.port == 0) die("--port is required");
  if (o.depths.empty() || o.size == 0) die("--qd and --size must be non-empty / non-zero");
  return o;
}

// Closed-loop state; engine thread only (reached through call()).
struct loop_state {
  uint32_t type = 0;
  uint32_t size = 0;
  uint64_t blocks = 0;  // storage blocks of `size` the IOs cycle through
  uint64_t next_block = 0;
  std::vector<clock_type::time_point> started;  // per slot (= user_data)
  std::vector<uint32_t> samples_ns;
  bool measuring = false;
  bool stopping = false;
  uint32_t outstanding = 0;
  uint64_t completed = 0;  // while measuring
  uint64_t errors = 0;
  status first_error = status::success;
};

zc::test::io_request next_request(loop_state& s, uint32_t slot) {
  const uint64_t block = s.next_block++ % s.blocks;
  return {s.type, slot, s.size, uint64_t(slot) * s.size, block * s.size};
}

struct result {
  uint64_t n = 0;
  double seconds = 0;
  double median_us = 0;
  double p99_us = 0;
  double mean_us = 0;
  double p999_us = 0;
  double max_us = 0;
  uint64_t errors = 0;
  status first_error = status::success;
};

result run_case(zc::test::service_driver& d, zc::test::driver_worker& w, uint32_t type,
                uint32_t depth, uint32_t size, uint64_t capacity, double seconds) {
  loop_state s;
  s.type = type;
  s.size = size;
  s.blocks = capacity / size;
  s.started.resize(depth);
  s.samples_ns.reserve(max_samples);
  auto on_response = [&s](zc::test::driver_worker& self, const zc::test::io_response& r) {
    const auto now = clock_type::now();
    const auto slot = static_cast<uint32_t>(r.user_data);
    if (!ok(r.result)) {
      if (s.errors++ == 0) s.first_error = r.result;
    }
    if (s.measuring) {
      ++s.completed;
      if (s.samples_ns.size() < max_samples)
        s.samples_ns.push_back(static_cast<uint32_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - s.started[slot]).count()));
    }
    if (s.stopping) {
      --s.outstanding;
      return;
    }
    s.started[slot] = clock_type::now();
    if (status st = self.submit_here(next_request(s, slot)); !ok(st)) {
      if (s.errors++ == 0) s.first_error = st;
      --s.outstanding;
    }
  };
  w.set_handler(on_response);
  w.thread().call([&] {
    for (uint32_t slot = 0; slot < depth; ++slot) {
      s.started[slot] = clock_type::now();
      if (status st = w.submit_here(next_request(s, slot)); !ok(st))
        die(std::string("submit failed: ") + std::string(status_name(st)));
      ++s.outstanding;
    }
  });
  d.keep_alive_for(std::chrono::milliseconds(200));  // warm-up
  const auto t0 = w.thread().call([&] {
    s.measuring = true;
    return clock_type::now();
  });
  d.keep_alive_for(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds)));
  result out;
  const auto t1 = w.thread().call([&] {
    s.measuring = false;
    s.stopping = true;
    out.n = s.completed;
    return clock_type::now();
  });
  if (!w.thread().wait_until([&] { return s.outstanding == 0; }, std::chrono::seconds(10)))
    die("IOs still in flight 10 s after the end of a case");
  if (!w.wait_idle(std::chrono::seconds(10))) die("sends not acknowledged after a case");
  w.set_handler({});
  out.seconds = std::chrono::duration<double>(t1 - t0).count();
  out.errors = s.errors;
  out.first_error = s.first_error;
  const bench::latency_stats l = bench::summarize_ns(s.samples_ns);
  out.median_us = l.median_us;
  out.p99_us = l.p99_us;
  out.p999_us = l.p999_us;
  out.max_us = l.max_us;
  out.mean_us = l.mean_us;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  try {
    zc::test::driver_options d_options;
    d_options.device = o.device;
    d_options.mode = o.poll;
    if (o.cpu) d_options.cpus = {*o.cpu};
    d_options.timeout = std::chrono::seconds(30);
    zc::test::service_driver d(o.port, d_options);
    const uint32_t max_depth = *std::max_element(o.depths.begin(), o.depths.end());
    const uint32_t transactions = 2 * max_depth;
    const auto geometry =
        d.open_session(transactions, 1, size_t(max_depth) * o.size);  // one slot per depth
    if (geometry.total_size < uint64_t(max_depth) * o.size)
      die("the target's storage is smaller than one IO per slot");
    for (const auto& test : o.tests) {
      const uint32_t type = test == "read" ? static_cast<uint32_t>(storage::io_message_type::read)
                            : test == "write"
                                ? static_cast<uint32_t>(storage::io_message_type::write)
                                : 0;
      if (type == 0) die("unknown test " + test);
      for (uint32_t depth : o.depths) {
        result r = run_case(d, d.worker(0), type, depth, o.size, geometry.total_size, o.seconds);
        std::printf(
            "result impl=target dev=%s mode=%s test=%s qd=%u size=%u n=%llu iops=%.0f mb_s=%.1f "
            "median_us=%.3f p99_us=%.3f mean_us=%.3f p999_us=%.3f max_us=%.3f errors=%llu\n",
            o.device.c_str(), bench::poll_name(o.poll), test.c_str(), depth, o.size,
            static_cast<unsigned long long>(r.n), double(r.n) / r.seconds,
            double(r.n) * o.size / r.seconds / 1e6, r.median_us, r.p99_us, r.mean_us, r.p999_us,
            r.max_us, static_cast<unsigned long long>(r.errors));
        std::fflush(stdout);
        if (r.errors != 0)
          std::fprintf(stderr, "target_bench: %s qd %u: %llu IOs failed (first: %s)\n",
                       test.c_str(), depth, static_cast<unsigned long long>(r.errors),
                       std::string(status_name(r.first_error)).c_str());
      }
    }
    d.stop();
    d.shutdown();
  } catch (const std::exception& e) {
    die(e.what());
  }
  return 0;
}
