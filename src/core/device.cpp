#include "core/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string_view>

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

// "[dddd:]bb:dd.f" in hex, function 0-7. Checked by hand: GCC 12 warns (falsely) inside
// std::regex under -fsanitize, and warnings are errors.
bool is_pci_address(const std::string& s) {
  auto hex = [&](size_t from, size_t n) {
    return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(from),
                       s.begin() + static_cast<std::ptrdiff_t>(from + n),
                       [](unsigned char c) { return std::isxdigit(c) != 0; });
  };
  size_t p = 0;
  if (s.size() == 12) {
    if (!hex(0, 4) || s[4] != ':') return false;
    p = 5;
  } else if (s.size() != 7) {
    return false;
  }
  return hex(p, 2) && s[p + 2] == ':' && hex(p + 3, 2) && s[p + 5] == '.' && s[p + 6] >= '0' &&
         s[p + 6] <= '7';
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
  if (is_pci_address(spec)) {
    d.net_device_ = from_pci(spec);
    if (!d.net_device_.empty()) return d;
  }
  throw status_error(status::not_found,
                     fmt::format("device \"{}\" not found: expected auto, tcp, sm, a network "
                                 "interface, an RDMA device or a PCI address",
                                 spec));
}

}  // namespace zc::core
