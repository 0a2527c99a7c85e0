#include "core/device.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <regex>

#include "core/status.hpp"

namespace zc::core {
namespace fs = std::filesystem;

namespace {

// The first network interface or RDMA device of a PCI function, or "".
std::string from_pci(const std::string& address) {
  std::string full =
      std::count(address.begin(), address.end(), ':') == 1 ? "0000:" + address : address;
  fs::path dev = fs::path("/sys/bus/pci/devices") / full;
  std::error_code ec;
  for (const char* sub : {"infiniband", "net"}) {
    if (!fs::is_directory(dev / sub, ec)) continue;
    for (const auto& entry : fs::directory_iterator(dev / sub, ec)) {
      std::string name = entry.path().filename().string();
      return std::string(sub) == "infiniband" ? name + ":1" : name;
    }
  }
  return {};
}

}  // namespace

device device::open(const std::string& spec) {
  device d;
  d.spec_ = spec;
  std::error_code ec;
  if (spec.empty() || spec == "auto") return d;
  if (spec == "tcp") {
    d.kind_ = transport::tcp;
    return d;
  }
  if (spec == "sm" || spec == "shm") {
    d.kind_ = transport::shared_memory;
    return d;
  }
  if (fs::exists(fs::path("/sys/class/net") / spec, ec)) {
    // Naming a network interface means TCP over it (an RDMA NIC is named by its RDMA device).
    d.kind_ = transport::tcp;
    d.net_device_ = spec;
    return d;
  }
  std::string ib = spec.substr(0, spec.find(':'));
  if (!ib.empty() && fs::exists(fs::path("/sys/class/infiniband") / ib, ec)) {
    d.net_device_ = spec.find(':') == std::string::npos ? spec + ":1" : spec;
    return d;
  }
  static const std::regex pci(R"(^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$)");
  if (std::regex_match(spec, pci)) {
    d.net_device_ = from_pci(spec);
    if (!d.net_device_.empty()) return d;
  }
  throw status_error(status::not_found,
                     fmt::format("device \"{}\" not found: expected auto, tcp, sm, a network "
                                 "interface, an RDMA device or a PCI address",
                                 spec));
}

}  // namespace zc::core
