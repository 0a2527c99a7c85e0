// The zero-copy pipeline's three programs as test processes: zcstore_target_rdma,
// zcstore_comch_to_rdma_zero_copy and zcstore_initiator_comch on this machine (the target
// optionally in another network namespace), every wait bounded, every process polling in event
// mode and SIGKILLed if still running when the test ends. Header-only, for tests/integration.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/subprocess.hpp"

namespace zc::test {

using namespace std::chrono_literals;

constexpr auto start_timeout = 20s;
constexpr auto run_timeout = 60s;
constexpr int control_timeout_s = 3;
// A process told to end, or whose peer died, is gone within the control timeout plus this.
constexpr auto exit_margin = 5s;
constexpr uint32_t block_size = 4096;
constexpr uint32_t block_count = 256;

inline std::string temp_file(const std::string& prefix, const std::vector<char>& bytes) {
  const auto path = std::filesystem::temp_directory_path() / unique_name(prefix);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

inline std::vector<char> content_bytes(uint64_t size, uint32_t seed) {
  std::vector<char> bytes(size);
  uint32_t x = seed;
  for (auto& b : bytes) {
    x = x * 1103515245u + 12345u;
    b = static_cast<char>(x >> 16);
  }
  return bytes;
}

inline std::vector<std::string> cpu_flags(uint32_t workers) {
  std::vector<std::string> flags;
  for (uint32_t i = 0; i < workers; ++i) {
    flags.push_back("--cpu");
    flags.push_back(std::to_string(i % std::max(1u, std::thread::hardware_concurrency())));
  }
  return flags;
}

struct pipeline_options {
  uint32_t workers = 1;
  uint32_t block_count = zc::test::block_count;
  std::string content;       // the target's --binary-content
  std::string backing_file;  // the target's --backing-file
  // Where the target runs and how the service reaches it (tests across network namespaces).
  std::vector<std::string> target_prefix;  // e.g. {"ip", "netns", "exec", "ns1"}
  std::string target_device = "auto";
  std::string service_device = "auto";
  std::string target_host = "127.0.0.1";
  // Added to the target's and the service's command lines (--keep-serving, --tls-psk FILE, ...).
  std::vector<std::string> target_flags;
  std::vector<std::string> service_flags;
  // The initiator's --control-timeout (its IOs' own deadline is twice it).
  int initiator_control_timeout_s = control_timeout_s;
};

// The three processes; each is SIGKILLed if still running when the test ends.
class pipeline {
 public:
  explicit pipeline(pipeline_options o = {}) : options_(std::move(o)) {}

  bool start_target() {
    std::vector<std::string> argv = options_.target_prefix;
    for (const std::string& a :
         {binary("zcstore_target_rdma"), std::string("-d"), options_.target_device,
          std::string("--poll-mode"), std::string("event"), std::string("--listen-port"),
          std::to_string(port_), std::string("--block-size"), std::to_string(block_size),
          std::string("--block-count"), std::to_string(options_.block_count)})
      argv.push_back(a);
    for (auto& f : cpu_flags(options_.workers)) argv.push_back(f);
    if (!options_.content.empty()) {
      argv.push_back("--binary-content");
      argv.push_back(options_.content);
    }
    if (!options_.backing_file.empty()) {
      argv.push_back("--backing-file");
      argv.push_back(options_.backing_file);
    }
    for (auto& f : options_.target_flags) argv.push_back(f);
    target = std::make_unique<subprocess>(argv);
    if (!target->wait_for_output("listening on port", start_timeout)) return false;
    if (port_ == 0) {
      const std::string out = target->output();
      const std::string key = "listening on port ";
      const auto at = out.find(key);
      if (at == std::string::npos) return false;
      port_ = static_cast<uint16_t>(std::strtoul(out.c_str() + at + key.size(), nullptr, 10));
      if (port_ == 0) return false;
    }
    return true;
  }

  // With wait = false the service is started without waiting for its channel (it may be waiting
  // for its target).
  bool start_service(bool wait = true) {
    if (port_ == 0) port_ = free_tcp_port();
    std::vector<std::string> argv{binary("zcstore_comch_to_rdma_zero_copy"),
                                  "-d",
                                  options_.service_device,
                                  "-r",
                                  "auto",
                                  "--poll-mode",
                                  "event",
                                  "--storage-server",
                                  options_.target_host + ":" + std::to_string(port_),
                                  "--command-channel-name",
                                  channel_,
                                  "--control-timeout",
                                  std::to_string(control_timeout_s)};
    for (auto& f : cpu_flags(options_.workers)) argv.push_back(f);
    for (auto& f : options_.service_flags) argv.push_back(f);
    service = std::make_unique<subprocess>(argv);
    return !wait || service->wait_for_output("listening on channel", start_timeout);
  }

  void start_initiator(const std::string& strategy, uint64_t run_limit,
                       std::vector<std::string> extra = {}) {
    initiator = make_initiator(strategy, run_limit, std::move(extra));
  }

  // An initiator of this pipeline's service that the caller owns (several may run at once).
  std::unique_ptr<subprocess> make_initiator(const std::string& strategy, uint64_t run_limit,
                                             std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{binary("zcstore_initiator_comch"),
                                  "-d",
                                  "auto",
                                  "--poll-mode",
                                  "event",
                                  "--execution-strategy",
                                  strategy,
                                  "--run-limit-operation-count",
                                  std::to_string(run_limit),
                                  "--command-channel-name",
                                  channel_,
                                  "--control-timeout",
                                  std::to_string(options_.initiator_control_timeout_s)};
    for (auto& f : cpu_flags(options_.workers)) argv.push_back(f);
    for (auto& f : extra) argv.push_back(f);
    return std::make_unique<subprocess>(argv);
  }

  bool start_all(const std::string& strategy, uint64_t run_limit,
                 std::vector<std::string> extra = {}) {
    if (!start_target() || !start_service()) return false;
    start_initiator(strategy, run_limit, std::move(extra));
    return true;
  }

  std::string all_output() const {
    std::string out;
    if (target) out += "--- target\n" + target->output();
    if (service) out += "--- service\n" + service->output();
    if (initiator) out += "--- initiator\n" + initiator->output();
    return out;
  }

  std::unique_ptr<subprocess> target, service, initiator;
  // The service's comch channel, for a front end other than the initiator (zcstore_nbd).
  const std::string& channel() const { return channel_; }
  // The target's control port, once start_target() or start_service() settled it.
  uint16_t port() const { return port_; }
  // Points this pipeline's service at a target another pipeline started.
  void use_target_port(uint16_t port) { port_ = port; }

 private:
  pipeline_options options_;
  std::string channel_ = unique_name("pipeline");
  uint16_t port_ = 0;
};

// A run that must succeed: the initiator prints its stats and exits 0, then the service and the
// target end their session and exit 0.
inline void expect_success(pipeline& p, uint64_t operations) {
  auto code = p.initiator->wait(run_timeout);
  ASSERT_EQ(code, std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.target->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  const std::string out = p.initiator->output();
  EXPECT_NE(out.find("| Operation count: " + std::to_string(operations) + "\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("| \tp99: "), std::string::npos) << out;
  EXPECT_EQ(out.find("Test failed"), std::string::npos) << out;
  EXPECT_NE(p.service->output().find("| Core: "), std::string::npos) << p.all_output();
}

}  // namespace zc::test
