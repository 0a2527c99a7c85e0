#include "core/random.hpp"

#include <sys/random.h>

#include "core/status.hpp"

namespace zc::core {

uint64_t random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v)))
    throw status_error(status::operating_system, "getrandom failed");
  return v;
}

uint64_t random_nonzero_u64() {
  uint64_t v = 0;
  while (v == 0) v = random_u64();
  return v;
}

uint32_t random_nonzero_u32() {
  uint32_t v = 0;
  while (v == 0) v = static_cast<uint32_t>(random_u64());
  return v;
}

}  // namespace zc::core
