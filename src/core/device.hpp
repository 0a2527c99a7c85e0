// zc::core::device, DOCA's doca_dev: which network the RDMA layer uses. The spec is "auto" (UCX
// picks: shared memory on one host, a network between hosts), "tcp", "sm"/"shm", a network
// interface ("lo", "eth0": TCP over it), an RDMA device ("mlx5_0" or "mlx5_0:1"), or a PCI address
// of either. The host representor (-r) is kept as a label: there is no PCIe function to pick here.
#pragma once

#include <string>

namespace zc::core {

class device {
 public:
  enum class transport { any, tcp, shared_memory };

  // Resolves a -d value; throws status_error(not_found) naming what was looked for.
  static device open(const std::string& spec);

  const std::string& spec() const noexcept { return spec_; }
  transport kind() const noexcept { return kind_; }
  // UCX_NET_DEVICES value, empty for UCX's default.
  const std::string& net_device() const noexcept { return net_device_; }

 private:
  std::string spec_;
  transport kind_ = transport::any;
  std::string net_device_;
};

}  // namespace zc::core
