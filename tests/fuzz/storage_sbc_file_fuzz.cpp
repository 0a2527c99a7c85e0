// libFuzzer harness for the .sbc decoder (REFERENCE_SPEC §5.1): the input is a whole .sbc image.
// What decodes must be what its header says (block_size x block_count bytes of content, within
// 2 GiB, seen in place at offset 16, the header re-encoding to the same 16 bytes); what does not
// must be a status_error with one of the documented codes. The file reader, given the same bytes
// as a file, must agree with the decoder. Any crash, sanitizer report or abort is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>

#include "storage/sbc_file.hpp"

namespace {

using namespace zc::storage;

void check(bool condition) {
  if (!condition) std::abort();
}

bool documented(zc::status code) {
  return code == zc::status::invalid_value || code == zc::status::too_big ||
         code == zc::status::io_failed;
}

struct outcome {
  std::optional<zc::status> error;
  sbc_header header;
  std::span<const uint8_t> content;
};

outcome decode(std::span<const uint8_t> bytes) {
  try {
    const sbc_view v = decode_sbc(bytes, "fuzz input");
    return {std::nullopt, v.header, v.content};
  } catch (const zc::status_error& e) {
    check(documented(e.code()) && *e.what() != '\0');
    return {e.code(), {}, {}};
  }
}

// The same bytes as a file: a memfd, reopened by path as the target opens its content file.
const std::string& file_of(std::span<const uint8_t> bytes) {
  static const int fd = ::memfd_create("sbc-fuzz", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  check(fd >= 0 && ::ftruncate(fd, 0) == 0);
  check(bytes.empty() ||
        ::pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  const outcome got = decode(bytes);
  if (!got.error) {
    check(size >= sbc_header_size);
    check(got.header.block_size != 0 && got.header.block_count != 0);
    check(got.header.content_size() <= sbc_max_content_size);
    check(got.content.data() == data + sbc_header_size);
    check(got.content.size() == got.header.content_size());
    check(got.content.size() <= size - sbc_header_size);
    const auto header = encode_sbc_header(got.header.block_size, got.header.block_count);
    check(std::equal(header.begin(), header.end(), data));
    // The header alone decodes to the same geometry.
    const sbc_header alone = decode_sbc_header(bytes.first(sbc_header_size), "fuzz header");
    check(alone.block_size == got.header.block_size && alone.block_count == got.header.block_count);
  }

  const std::string& path = file_of(bytes);
  check(is_sbc(path) == (size >= 8 && std::equal(data, data + 8, encode_sbc_header(1, 1).data())));
  try {
    const sbc_content from_file = read_sbc(path);
    check(!got.error);
    check(from_file.block_size == got.header.block_size &&
          from_file.block_count == got.header.block_count);
    check(std::equal(from_file.content.begin(), from_file.content.end(), got.content.begin(),
                     got.content.end()));
  } catch (const zc::status_error& e) {
    check(got.error == e.code());
  }
  return 0;
}
