// doca_dev.h: a fixed device table mapped onto zcstore devices (docs/DOCA_COMPAT.md).
#include <doca_dev.h>
#include <doca_rdma.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "objects.hpp"

namespace zc::doca {
namespace {

// The names DOCA programs pass with -d (mlx5_*) follow $ZCSTORE_DOCA_DEVICE; "sm" and "tcp" name
// a zcstore transport directly, so one box can run a pair over either.
constexpr const char* device_env = "ZCSTORE_DOCA_DEVICE";

struct table_entry {
  const char* ibdev;
  const char* iface;
  const char* pci;
  const char* zc_device;
  bool follows_env;
};
constexpr table_entry device_table[] = {
    {"mlx5_0", "zcstore0", "0000:03:00.0", "auto", true},
    {"mlx5_1", "zcstore1", "0000:03:00.1", "auto", true},
    {"sm", "zcstore_sm", "0000:00:01.0", "sm", false},
    {"tcp", "zcstore_tcp", "0000:00:02.0", "tcp", false},
};
constexpr size_t device_count = sizeof(device_table) / sizeof(device_table[0]);

doca_error_t copy_name(const std::string& name, char* out, uint32_t size) {
  if (out == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (name.size() + 1 > size) return DOCA_ERROR_INVALID_VALUE;
  std::memcpy(out, name.c_str(), name.size() + 1);
  return DOCA_SUCCESS;
}

// "0000:03:00.0" and "03:00.0" name the same function; anything else is malformed.
bool normalize_pci(const char* in, std::string& out) {
  std::string s(in);
  auto hex = [](const std::string& t) {
    for (char c : t)
      if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    return true;
  };
  if (s.size() == 7) s = "0000:" + s;
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  if (!hex(s.substr(0, 4)) || !hex(s.substr(5, 2)) || !hex(s.substr(8, 2)) || !hex(s.substr(11, 1)))
    return false;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  out = s;
  return true;
}

}  // namespace
}  // namespace zc::doca

using zc::doca::guarded;

extern "C" {

doca_error_t doca_devinfo_create_list(struct doca_devinfo*** dev_list, uint32_t* nb_devs) {
  if (dev_list == nullptr || nb_devs == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    // NULL-terminated array of entries, freed by doca_devinfo_destroy_list.
    auto list = std::make_unique<doca_devinfo*[]>(zc::doca::device_count + 1);
    for (size_t i = 0; i < zc::doca::device_count; ++i) {
      const auto& e = zc::doca::device_table[i];
      list[i] = new doca_devinfo{e.ibdev, e.iface, e.pci, e.zc_device, e.follows_env};
    }
    list[zc::doca::device_count] = nullptr;
    *nb_devs = static_cast<uint32_t>(zc::doca::device_count);
    *dev_list = list.release();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_devinfo_destroy_list(struct doca_devinfo** dev_list) {
  if (dev_list == nullptr) return DOCA_ERROR_INVALID_VALUE;
  for (size_t i = 0; dev_list[i] != nullptr; ++i) delete dev_list[i];
  delete[] dev_list;
  return DOCA_SUCCESS;
}

doca_error_t doca_dev_open(struct doca_devinfo* devinfo, struct doca_dev** dev) {
  if (devinfo == nullptr || dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    std::string spec = devinfo->zc_device;
    if (devinfo->follows_env) {
      const char* env = std::getenv(zc::doca::device_env);
      if (env != nullptr && *env != '\0') spec = env;
    }
    auto opened = std::make_unique<doca_dev>();
    opened->info = *devinfo;
    opened->info.zc_device = spec;
    opened->info.follows_env = false;
    opened->device = zc::core::device::open(spec);
    ZC_SDK_LOG_INFO("doca_dev_open: {} -> zcstore device \"{}\"", devinfo->ibdev_name, spec);
    *dev = opened.release();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_dev_close(struct doca_dev* dev) {
  if (dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  delete dev;
  return DOCA_SUCCESS;
}

struct doca_devinfo* doca_dev_as_devinfo(const struct doca_dev* dev) {
  return dev == nullptr ? nullptr : const_cast<doca_devinfo*>(&dev->info);
}

doca_error_t doca_devinfo_get_ibdev_name(const struct doca_devinfo* devinfo, char* ibdev_name,
                                         uint32_t size) {
  if (devinfo == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::copy_name(devinfo->ibdev_name, ibdev_name, size);
}

doca_error_t doca_devinfo_get_iface_name(const struct doca_devinfo* devinfo, char* iface_name,
                                         uint32_t size) {
  if (devinfo == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::copy_name(devinfo->iface_name, iface_name, size);
}

doca_error_t doca_devinfo_get_pci_addr_str(const struct doca_devinfo* devinfo, char* pci_addr_str) {
  if (devinfo == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::copy_name(devinfo->pci_addr, pci_addr_str, DOCA_DEVINFO_PCI_ADDR_SIZE);
}

doca_error_t doca_devinfo_is_equal_pci_addr(const struct doca_devinfo* devinfo,
                                            const char* pci_addr_str, uint8_t* is_equal) {
  if (devinfo == nullptr || pci_addr_str == nullptr || is_equal == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    std::string wanted;
    if (!zc::doca::normalize_pci(pci_addr_str, wanted)) return DOCA_ERROR_INVALID_VALUE;
    *is_equal = wanted == devinfo->pci_addr ? 1 : 0;
    return DOCA_SUCCESS;
  });
}

}  // extern "C"
