// The pipeline across machines, as far as one machine can show it: the target runs in its own
// network namespace and is reached over a veth pair, so the control connection and every rdma
// transfer go through UCX's TCP transport on that link (no shared memory, no loopback); the
// service and the initiator stay in the root namespace. Needs root (CAP_NET_ADMIN) and `ip`:
// elsewhere the test says why it skipped.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "integration/pipeline.hpp"

namespace zc::test {
namespace {

// iproute2's `ip`, or "" when it is not installed.
std::string ip_path() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// Runs `ip` with a bound; the exit status, or -1.
int ip(std::vector<std::string> args) {
  args.insert(args.begin(), ip_path());
  subprocess p(args);
  auto code = p.wait(std::chrono::seconds(10));
  return code ? *code : -1;
}

// A network namespace with one end of a veth pair; the other end stays here. Both ends get an
// address in a /30 that depends on the pid, so parallel runs do not collide.
class veth_namespace {
 public:
  veth_namespace() {
    const int n = ::getpid() % 250 + 1;
    name_ = "zc-ns-" + std::to_string(::getpid());
    host_if_ = "zch" + std::to_string(::getpid() % 100000);
    peer_if_ = "zcp" + std::to_string(::getpid() % 100000);
    host_ip_ = "10.231." + std::to_string(n) + ".1";
    peer_ip_ = "10.231." + std::to_string(n) + ".2";
    if (::geteuid() != 0) {
      why_not_ = "not root: cannot create a network namespace";
      return;
    }
    if (ip_path().empty()) {
      why_not_ = "iproute2's ip is not installed";
      return;
    }
    if (ip({"netns", "add", name_}) != 0) {
      why_not_ = "`ip netns add` failed (no CAP_NET_ADMIN?)";
      return;
    }
    made_ = true;
    const bool ok =
        ip({"link", "add", host_if_, "type", "veth", "peer", "name", peer_if_}) == 0 &&
        ip({"link", "set", peer_if_, "netns", name_}) == 0 &&
        ip({"addr", "add", host_ip_ + "/30", "dev", host_if_}) == 0 &&
        ip({"link", "set", host_if_, "up"}) == 0 &&
        ip({"netns", "exec", name_, "ip", "addr", "add", peer_ip_ + "/30", "dev", peer_if_}) == 0 &&
        ip({"netns", "exec", name_, "ip", "link", "set", peer_if_, "up"}) == 0 &&
        ip({"netns", "exec", name_, "ip", "link", "set", "lo", "up"}) == 0;
    if (!ok) why_not_ = "could not set up the veth pair";
  }
  ~veth_namespace() {
    if (made_) {
      (void)ip({"link", "del", host_if_});  // takes its peer with it
      (void)ip({"netns", "del", name_});
    }
  }
  const std::string& why_not() const { return why_not_; }
  std::string name_, host_if_, peer_if_, host_ip_, peer_ip_;

 private:
  bool made_ = false;
  std::string why_not_;
};

TEST(across_machines, the_target_in_another_network_namespace_serves_over_tcp) {
  veth_namespace ns;
  if (!ns.why_not().empty()) GTEST_SKIP() << ns.why_not();
  const auto content = temp_file("content", content_bytes(uint64_t(block_size) * block_count, 3));
  pipeline p({.content = content,
              .target_prefix = {ip_path(), "netns", "exec", ns.name_},
              .target_device = ns.peer_if_,
              .service_device = ns.host_if_,
              .target_host = ns.peer_ip_});
  ASSERT_TRUE(p.start_all("read_write_data_validity_test", 500)) << p.all_output();
  expect_success(p, 500);
  std::filesystem::remove(content);
}

}  // namespace
}  // namespace zc::test
