// CRC-32C (Castagnoli, the iSCSI and ext4 checksum): reflected polynomial 0x82F63B78, initial
// value and final xor 0xFFFFFFFF, so crc32c("123456789") == 0xE3069283. ISA-L's crc32_iscsi does
// the work (it leaves out the final xor). Pure function; any thread.
#pragma once

#include <cstdint>
#include <span>

namespace zc::core {

uint32_t crc32c(std::span<const uint8_t> data) noexcept;

}  // namespace zc::core
