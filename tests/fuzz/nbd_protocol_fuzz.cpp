// libFuzzer harness for the NBD decoders, fed what a client may send: the first byte picks the
// decoder (option header, request header, NBD_OPT_GO data, meta context data), the rest is its
// input. Whatever decodes must lie inside the input and add up to exactly its length.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "core/bytes.hpp"
#include "nbd/protocol.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

bool inside(std::span<const uint8_t> whole, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return n == 0 || (b >= whole.data() && b + n <= whole.data() + whole.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zc::nbd;
  if (size == 0) return 0;
  const std::vector<uint8_t> bytes(data + 1, data + size);  // exact length: ASan sees overreads
  const std::span<const uint8_t> in(bytes);
  switch (data[0] % 4) {
    case 0:
      if (in.size() >= option_header_size) {
        auto h = decode_option_header(in.first<option_header_size>());
        check(h.has_value() == (zc::load_be64(in.data()) == ihaveopt));
        if (h) check(h->length == zc::load_be32(in.data() + 12));
      }
      break;
    case 1:
      if (in.size() >= request_header_size) {
        auto h = decode_request(in.first<request_header_size>());
        check(h.has_value() == (zc::load_be32(in.data()) == request_magic));
        if (h) {
          check(h->offset == zc::load_be64(in.data() + 16));
          check(h->length == zc::load_be32(in.data() + 24));
        }
      }
      break;
    case 2:
      if (auto g = decode_go(in)) {
        check(g->name.size() <= max_string_length);
        check(inside(in, g->name.data(), g->name.size()));
        check(4 + g->name.size() + 2 + 2 * g->info_count() == in.size());
        for (size_t i = 0; i < g->info_count(); ++i) (void)g->info(i);
      }
      break;
    case 3:
      if (auto m = decode_meta_context(in)) {
        check(inside(in, m->name.data(), m->name.size()));
        size_t total = 4 + m->name.size() + 4;
        for (uint32_t i = 0; i < m->query_count; ++i) {
          const auto q = m->query(i);
          check(q.size() <= max_string_length);
          check(inside(in, q.data(), q.size()));
          total += 4 + q.size();
        }
        check(total == in.size());
      }
      break;
  }
  return 0;
}
