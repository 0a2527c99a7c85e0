// libFuzzer harness for the rdma connection blob decoder: the bytes a peer hands over out of band
// before anything reaches UCX. What decodes must re-encode to the same bytes (the framing is
// canonical) and decode again to the same fields; nothing may crash or read past the input.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "rdma/internal/connection_blob.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zc::rdma::internal;
  // A private copy, so a read past the input is a sanitizer report, not a read of fuzzer memory.
  const std::vector<uint8_t> blob(data, data + size);
  connection_info info;
  if (!zc::ok(decode_connection(blob, info))) return 0;
  check(info.nonce != 0);
  check(info.worker_address.size() >= min_worker_address &&
        info.worker_address.size() <= max_worker_address);
  check(info.worker_address.data() >= blob.data() &&
        info.worker_address.data() + info.worker_address.size() <= blob.data() + blob.size());

  const std::vector<uint8_t> again = encode_connection(info);
  check(again == blob);
  connection_info round;
  check(zc::ok(decode_connection(again, round)));
  check(round.slot == info.slot && round.nonce == info.nonce &&
        round.process.host_id == info.process.host_id &&
        round.process.pid_ns == info.process.pid_ns && round.process.pid == info.process.pid &&
        round.process.start_time == info.process.start_time &&
        std::equal(round.worker_address.begin(), round.worker_address.end(),
                   info.worker_address.begin(), info.worker_address.end()));
  return 0;
}
