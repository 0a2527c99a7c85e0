// Raw UCP baseline for the rdma benchmark (bench/run_rdma.sh): get and put+flush on application
// memory registered with ucp_mem_map (no ALLOCATE flag), between two processes, using UCX
// directly and nothing of zcstore. On these machines UCX emulates RMA on such memory with active
// messages (reference/UCX_MEASURED.md §2), so the target busy-polls its worker.
//
//   zc_ucx_raw_bench server DIR DEVICE [--cpu N] [--max-seconds S]
//   zc_ucx_raw_bench client DIR DEVICE [--cpu N] [--seconds S] [--sizes 4096,65536] [--qd 32]
//                    [--tests get_lat,put_lat,get_bw,put_bw,am_lat,am_rate] [--window 64]
// (am_lat / am_rate are not run unless asked for: 64 B active-message ping-pong, and 64 B messages
// with at most `window` uncredited, the server crediting once per progress pass, as zcstore acks.)
//
// DEVICE is "tcp" (UCX_TLS=tcp) or "sm" (UCX_TLS=sm,self), as zcstore's device selector sets
// them; everything else (UCX_NET_DEVICES, UCX_MM_ERROR_HANDLING, ...) comes from the
// environment. Endpoints use peer error handling, like zcstore's. The two sides exchange the
// worker address, rkey and region address through files in DIR. The client prints one
// "result ..." line per measurement.
#include <sched.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"

namespace {

using namespace zc;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

constexpr size_t region_size = 4 << 20;
constexpr size_t max_samples = 4 << 20;

using bench::die;

void check(ucs_status_t s, const char* what) {
  if (s != UCS_OK) die(std::string(what) + ": " + ucs_status_string(s));
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) die("cannot pin to cpu " + std::to_string(cpu));
}

// ---- UCX setup

struct ucx {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<uint8_t> address;

  explicit ucx(const std::string& device) {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    if (device == "tcp") {
      check(ucp_config_modify(config, "TLS", "tcp"), "UCX_TLS");
    } else if (device == "sm") {
      check(ucp_config_modify(config, "TLS", "sm,self"), "UCX_TLS");
    } else if (device != "auto") {
      die("device must be tcp, sm or auto");
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    ucs_status_t s = ucp_init(&params, config, &context);
    ucp_config_release(config);
    check(s, "ucp_init");
    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    check(ucp_worker_create(context, &wparams, &worker), "ucp_worker_create");
    ucp_address_t* a = nullptr;
    size_t n = 0;
    check(ucp_worker_get_address(worker, &a, &n), "ucp_worker_get_address");
    auto* p = reinterpret_cast<const uint8_t*>(a);
    address.assign(p, p + n);
    ucp_worker_release_address(worker, a);
  }
  ~ucx() {
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
  }

  // Endpoint errors are reported on the client; the server's end sees the client leave.
  ucp_ep_h connect(const std::vector<uint8_t>& peer, bool report_errors) const {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = [](void* report, ucp_ep_h, ucs_status_t s) {
      if (report != nullptr)
        std::fprintf(stderr, "ucx_raw_bench: endpoint error: %s\n", ucs_status_string(s));
    };
    params.err_handler.arg = report_errors ? const_cast<ucx*>(this) : nullptr;
    ucp_ep_h ep = nullptr;
    check(ucp_ep_create(worker, &params, &ep), "ucp_ep_create");
    return ep;
  }

  // Waits for a request returned by an nbx call (busy polling); returns its status.
  ucs_status_t wait(ucs_status_ptr_t req) const {
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    ucs_status_t s;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(worker);
    ucp_request_free(req);
    return s;
  }

  void close(ucp_ep_h ep, uint32_t flags) const {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = flags;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (!UCS_PTR_IS_PTR(req)) return;
    auto give_up = clock_type::now() + std::chrono::seconds(2);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && clock_type::now() < give_up)
      ucp_worker_progress(worker);
    ucp_request_free(req);
  }
};

struct registered {
  const ucx& u;
  uint8_t* data = nullptr;
  ucp_mem_h memh = nullptr;

  registered(const ucx& owner, size_t length) : u(owner) {
    data = static_cast<uint8_t*>(std::aligned_alloc(4096, length));
    if (data == nullptr) die("out of memory");
    for (size_t i = 0; i < length; ++i) data[i] = static_cast<uint8_t>(i % 251);
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = data;
    params.length = length;
    check(ucp_mem_map(u.context, &params, &memh), "ucp_mem_map");
  }
  ~registered() {
    ucp_mem_unmap(u.context, memh);
    std::free(data);
  }
};

// ---- statistics

void print_latency(const std::string& dev, const char* test, size_t size,
                   std::vector<uint32_t>& ns) {
  if (ns.empty()) die(std::string(test) + ": no samples");
  const bench::latency_stats l = bench::summarize_ns(ns);
  std::printf(
      "result impl=raw dev=%s mode=busy test=%s size=%zu n=%zu median_us=%.3f p99_us=%.3f\n",
      dev.c_str(), test, size, l.n, l.median_us, l.p99_us);
  std::fflush(stdout);
}

void print_rate(const std::string& dev, const char* test, size_t size, uint64_t ops,
                double seconds) {
  std::printf("result impl=raw dev=%s mode=busy test=%s size=%zu n=%llu ops_s=%.0f mb_s=%.1f\n",
              dev.c_str(), test, size, static_cast<unsigned long long>(ops), double(ops) / seconds,
              double(ops) * double(size) / seconds / 1e6);
  std::fflush(stdout);
}

// ---- active messages (am_lat / am_rate: raw counterparts of zcstore's send/recv tests)

constexpr unsigned am_to_server = 1;  // 64 B: 'P' answer with a pong, 'S' count for credit
constexpr unsigned am_to_client = 2;  // 'p' pong (64 B), 'c' credit (count in bytes 8..15)

struct am_counters {
  uint64_t pongs_wanted = 0;  // server: pings not answered yet
  uint64_t credits_owed = 0;  // server: 'S' messages received since the last credit
  uint64_t pongs = 0;         // client
  uint64_t credits = 0;       // client
};

ucs_status_t on_am(void* arg, const void*, size_t, void* data, size_t length,
                   const ucp_am_recv_param_t*) {
  auto* c = static_cast<am_counters*>(arg);
  if (length == 0) return UCS_OK;
  switch (static_cast<const char*>(data)[0]) {
    case 'P':
      ++c->pongs_wanted;
      break;
    case 'S':
      ++c->credits_owed;
      break;
    case 'p':
      ++c->pongs;
      break;
    case 'c':
      if (length >= 16) {
        uint64_t n;
        std::memcpy(&n, static_cast<const uint8_t*>(data) + 8, sizeof(n));
        c->credits += n;
      }
      break;
    default:
      break;
  }
  return UCS_OK;
}

void set_am_handler(const ucx& u, unsigned id, am_counters& c) {
  ucp_am_handler_param_t h{};
  h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                 UCP_AM_HANDLER_PARAM_FIELD_ARG;
  h.id = id;
  h.cb = &on_am;
  h.arg = &c;
  check(ucp_worker_set_am_recv_handler(u.worker, &h), "ucp_worker_set_am_recv_handler");
}

// Sends a small active message. The buffer must stay unchanged until UCX has copied it: short and
// bcopy sends copy before returning, and a send UCX had to queue is waited for here.
void send_am(ucp_worker_h worker, ucp_ep_h ep, unsigned id, const void* data, size_t length) {
  ucp_request_param_t param{};
  ucs_status_ptr_t req = ucp_am_send_nbx(ep, id, nullptr, 0, data, length, &param);
  if (req == nullptr) return;
  if (UCS_PTR_IS_ERR(req)) check(UCS_PTR_STATUS(req), "ucp_am_send_nbx");
  while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker);
  ucp_request_free(req);
}

// ---- roles

struct options : bench::pair_options {
  double max_seconds = 300;
};

int server(const options& o) {
  ucx u(o.device);
  registered region(u, region_size);
  void* rkey = nullptr;
  size_t rkey_length = 0;
  check(ucp_rkey_pack(u.context, region.memh, &rkey, &rkey_length), "ucp_rkey_pack");
  bench::blob_writer blob;
  blob.bytes(u.address.data(), u.address.size());
  blob.bytes(rkey, rkey_length);
  blob.u64(reinterpret_cast<uintptr_t>(region.data));
  blob.u64(region_size);
  ucp_rkey_buffer_release(rkey);
  const fs::path dir = o.dir;
  bench::write_blob(dir / "raw.server", blob.data());
  auto client_blob = bench::wait_blob(dir / "raw.client", std::chrono::seconds(30));
  bench::blob_reader r{client_blob};
  ucp_ep_h ep = u.connect(r.bytes(), false);
  am_counters am;
  set_am_handler(u, am_to_server, am);
  static uint8_t pong[64];
  std::memset(pong, 'p', sizeof(pong));
  static uint8_t credit[16];
  // The target side of emulated RMA: keep progressing until the client says it is done. Active
  // messages are answered from this loop, after progress (never from inside the callback): a
  // pong per ping, and one cumulative credit per pass that received 'S' messages (the shape of
  // zcstore's delivery acknowledgements).
  const auto give_up = clock_type::now() + std::chrono::duration<double>(o.max_seconds);
  auto next_check = clock_type::now();
  for (uint64_t i = 0;; ++i) {
    ucp_worker_progress(u.worker);
    for (; am.pongs_wanted != 0; --am.pongs_wanted)
      send_am(u.worker, ep, am_to_client, pong, sizeof(pong));
    if (am.credits_owed != 0) {
      const uint64_t n = am.credits_owed;  // send_am may progress and count more
      am.credits_owed = 0;
      credit[0] = 'c';
      std::memcpy(credit + 8, &n, sizeof(n));
      send_am(u.worker, ep, am_to_client, credit, sizeof(credit));
    }
    if ((i & 1023) != 0) continue;
    auto now = clock_type::now();
    if (now < next_check) continue;
    next_check = now + std::chrono::milliseconds(20);
    if (fs::exists(dir / "raw.done")) break;
    if (now > give_up) {
      std::fprintf(stderr, "ucx_raw_bench server: no end signal, giving up\n");
      break;
    }
  }
  u.close(ep, UCP_EP_CLOSE_FLAG_FORCE);
  return 0;
}

int client(const options& o) {
  ucx u(o.device);
  registered local(u, region_size);
  const fs::path dir = o.dir;
  bench::blob_writer mine;
  mine.bytes(u.address.data(), u.address.size());
  bench::write_blob(dir / "raw.client", mine.data());
  auto server_blob = bench::wait_blob(dir / "raw.server", std::chrono::seconds(30));
  bench::blob_reader r{server_blob};
  auto address = r.bytes();
  auto packed_rkey = r.bytes();
  const uint64_t remote_base = r.get<uint64_t>();
  const uint64_t remote_length = r.get<uint64_t>();
  if (remote_length < region_size) die("remote region too small");
  ucp_ep_h ep = u.connect(address, true);
  ucp_rkey_h rkey = nullptr;
  check(ucp_ep_rkey_unpack(ep, packed_rkey.data(), &rkey), "ucp_ep_rkey_unpack");

  ucp_request_param_t param{};
  // Sanity: the bytes really move (the server's region holds i % 251).
  std::memset(local.data, 0, 65536);
  check(u.wait(ucp_get_nbx(ep, local.data, 65536, remote_base + 4096, rkey, &param)), "get");
  for (size_t i = 0; i < 65536; ++i)
    if (local.data[i] != static_cast<uint8_t>((4096 + i) % 251)) die("get returned wrong bytes");

  std::vector<uint32_t> samples;
  samples.reserve(max_samples);
  const auto duration = std::chrono::duration<double>(o.seconds);
  const auto warmup = std::chrono::milliseconds(200);

  // QD1: one operation (get; or put followed by a flush), waited for, then the next.
  auto latency = [&](const char* test, size_t size, bool put) {
    samples.clear();
    const auto start = clock_type::now();
    const auto record_from = start + warmup;
    const auto end = record_from + duration;
    for (;;) {
      auto t0 = clock_type::now();
      if (t0 >= end || samples.size() == max_samples) break;
      if (put) {
        check(u.wait(ucp_put_nbx(ep, local.data, size, remote_base, rkey, &param)), "put");
        check(u.wait(ucp_ep_flush_nbx(ep, &param)), "flush");
      } else {
        check(u.wait(ucp_get_nbx(ep, local.data, size, remote_base, rkey, &param)), "get");
      }
      auto t1 = clock_type::now();
      if (t0 >= record_from)
        samples.push_back(static_cast<uint32_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    }
    print_latency(o.device, test, size, samples);
  };

  // QD32: a window of operations to distinct offsets, one flush, wait for all; repeat.
  std::vector<ucs_status_ptr_t> window(o.qd);
  auto throughput = [&](const char* test, size_t size, bool put) {
    if (o.qd * size > region_size) die("window does not fit the region");
    const auto start = clock_type::now();
    const auto record_from = start + warmup;
    const auto end = record_from + duration;
    uint64_t ops = 0;
    auto measured_from = clock_type::time_point{};
    for (;;) {
      auto now = clock_type::now();
      if (now >= end) break;
      if (measured_from == clock_type::time_point{} && now >= record_from) {
        measured_from = now;
        ops = 0;
      }
      for (size_t i = 0; i < o.qd; ++i) {
        uint8_t* l = local.data + i * size;
        uint64_t remote = remote_base + i * size;
        window[i] = put ? ucp_put_nbx(ep, l, size, remote, rkey, &param)
                        : ucp_get_nbx(ep, l, size, remote, rkey, &param);
        if (UCS_PTR_IS_ERR(window[i])) check(UCS_PTR_STATUS(window[i]), test);
      }
      ucs_status_ptr_t flush = ucp_ep_flush_nbx(ep, &param);
      for (auto req : window) check(u.wait(req), test);
      check(u.wait(flush), "flush");
      ops += o.qd;
    }
    double seconds = std::chrono::duration<double>(clock_type::now() - measured_from).count();
    print_rate(o.device, test, size, ops, seconds);
  };

  am_counters am;
  set_am_handler(u, am_to_client, am);
  static uint8_t ping[64];
  std::memset(ping, 'P', sizeof(ping));
  static uint8_t stream[64];
  std::memset(stream, 'S', sizeof(stream));

  // 64 B ping-pong over active messages; one-way = round trip / 2, like ucp_am_lat.
  auto am_latency = [&] {
    samples.clear();
    const auto record_from = clock_type::now() + warmup;
    const auto end = record_from + duration;
    for (;;) {
      auto t0 = clock_type::now();
      if (t0 >= end || samples.size() == max_samples) break;
      const uint64_t before = am.pongs;
      send_am(u.worker, ep, am_to_server, ping, sizeof(ping));
      while (am.pongs == before) ucp_worker_progress(u.worker);
      auto t1 = clock_type::now();
      if (t0 >= record_from)
        samples.push_back(static_cast<uint32_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / 2));
    }
    print_latency(o.device, "am_lat", sizeof(ping), samples);
  };

  // 64 B messages with at most `window` not yet credited by the server.
  auto am_rate = [&](uint64_t window) {
    const auto start = clock_type::now();
    const auto record_from = start + warmup;
    const auto end = record_from + duration;
    uint64_t sent = 0, base = 0, last_credits = 0;
    auto measured_from = clock_type::time_point{};
    auto last_change = start;
    for (uint32_t n = 0;; ++n) {
      while (sent - am.credits < window) {
        send_am(u.worker, ep, am_to_server, stream, sizeof(stream));
        ++sent;
      }
      ucp_worker_progress(u.worker);
      if ((n & 63) != 0) continue;
      auto now = clock_type::now();
      if (now >= end) break;
      if (measured_from == clock_type::time_point{} && now >= record_from) {
        measured_from = now;
        base = am.credits;
      }
      if (am.credits != last_credits) {
        last_credits = am.credits;
        last_change = now;
      } else if (now - last_change > std::chrono::seconds(5)) {
        die("am_rate: no credit for 5 s (sent " + std::to_string(sent) + ", credited " +
            std::to_string(am.credits) + ")");
      }
    }
    const auto measured_to = clock_type::now();
    const uint64_t ops = am.credits - base;
    const auto give_up = clock_type::now() + std::chrono::seconds(5);
    while (am.credits != sent) {
      ucp_worker_progress(u.worker);
      if (clock_type::now() > give_up)
        die("am_rate: " + std::to_string(sent - am.credits) + " messages never credited");
    }
    print_rate(o.device, "am_rate", sizeof(stream), ops,
               std::chrono::duration<double>(measured_to - measured_from).count());
  };

  auto wanted = [&](const char* test) { return bench::wanted(o.tests, test); };
  if (wanted("am_lat")) am_latency();
  if (wanted("am_rate")) am_rate(o.window);
  for (size_t size : o.sizes) {
    if (wanted("get_lat")) latency("get_lat", size, false);
    if (wanted("put_lat")) latency("put_lat", size, true);
  }
  for (size_t size : o.sizes) {
    if (wanted("get_bw")) throughput("get_bw", size, false);
    if (wanted("put_bw")) throughput("put_bw", size, true);
  }

  ucp_rkey_destroy(rkey);
  u.close(ep, 0);
  bench::write_blob(dir / "raw.done", {});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  o.tests = {"get_lat", "put_lat", "get_bw", "put_bw"};
  bench::parse_pair_options(
      argc, argv,
      "usage: %s server|client DIR tcp|sm [--cpu N] [--seconds S] [--sizes A,B] [--qd N] "
      "[--tests get_lat,put_lat,get_bw,put_bw,am_lat,am_rate] [--window N] [--max-seconds S]\n",
      o, [&o](const std::string& k, const std::string& v) {
        if (k != "--max-seconds") return false;
        o.max_seconds = std::stod(v);
        return true;
      });
  if (o.cpu >= 0) pin(o.cpu);
  if (o.role == "server") return server(o);
  if (o.role == "client") return client(o);
  std::fprintf(stderr, "role must be server or client\n");
  return 2;
}
