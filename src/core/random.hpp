// Unpredictable numbers from the kernel (getrandom), for identities a peer must not guess: export
// keys, connection nonces, process tokens. Throws status_error(operating_system) if the kernel
// gives none.
#pragma once

#include <cstdint>

namespace zc::core {

uint64_t random_u64();
// Never 0, so 0 can mean "none".
uint64_t random_nonzero_u64();
uint32_t random_nonzero_u32();

}  // namespace zc::core
