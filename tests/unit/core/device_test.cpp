// -d values: transports by name, network interfaces (TCP over them), and a clear not_found for
// anything else.
#include "core/device.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/status.hpp"

namespace zc::core {
namespace {

status open_status(const std::string& spec) {
  try {
    device::open(spec);
  } catch (const status_error& e) {
    return e.code();
  }
  return status::success;
}

TEST(device, auto_lets_ucx_choose) {
  for (const char* spec : {"auto", ""}) {
    const device d = device::open(spec);
    EXPECT_EQ(d.kind(), device::transport::any) << spec;
    EXPECT_TRUE(d.net_device().empty()) << spec;
    EXPECT_EQ(d.spec(), spec);
  }
}

TEST(device, tcp_names_the_transport) {
  const device d = device::open("tcp");
  EXPECT_EQ(d.kind(), device::transport::tcp);
  EXPECT_TRUE(d.net_device().empty());
}

TEST(device, sm_and_shm_name_shared_memory) {
  for (const char* spec : {"sm", "shm"}) {
    const device d = device::open(spec);
    EXPECT_EQ(d.kind(), device::transport::shared_memory) << spec;
    EXPECT_TRUE(d.net_device().empty()) << spec;
  }
}

TEST(device, network_interface_means_tcp_over_it) {
  if (!std::filesystem::exists("/sys/class/net/lo")) GTEST_SKIP() << "no loopback interface";
  const device d = device::open("lo");
  EXPECT_EQ(d.kind(), device::transport::tcp);
  EXPECT_EQ(d.net_device(), "lo");
  EXPECT_EQ(d.spec(), "lo");
}

TEST(device, unknown_name_is_not_found_and_the_message_names_it) {
  try {
    device::open("no-such-device0");
    FAIL() << "opened a device that does not exist";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::not_found);
    EXPECT_NE(std::string(e.what()).find("no-such-device0"), std::string::npos) << e.what();
  }
}

TEST(device, absent_rdma_device_is_not_found) {
  if (std::filesystem::exists("/sys/class/infiniband/mlx5_97")) GTEST_SKIP();
  EXPECT_EQ(open_status("mlx5_97"), status::not_found);
  EXPECT_EQ(open_status("mlx5_97:1"), status::not_found);
}

TEST(device, absent_pci_address_is_not_found) {
  if (std::filesystem::exists("/sys/bus/pci/devices/0000:fe:1f.7")) GTEST_SKIP();
  EXPECT_EQ(open_status("fe:1f.7"), status::not_found);
  EXPECT_EQ(open_status("0000:fe:1f.7"), status::not_found);
}

TEST(device, names_are_case_sensitive_and_exact) {
  EXPECT_EQ(open_status("TCP"), status::not_found);
  EXPECT_EQ(open_status("auto "), status::not_found);
}

}  // namespace
}  // namespace zc::core
