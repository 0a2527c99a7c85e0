// The NBD server: transmission, from a request header to its reply: checks, the ios each
// command needs (read-modify-write below the block, zeroes, discards, allocation maps), their
// completions and the replies.
#include "core/log.hpp"
#include "nbd/server_internal.hpp"

namespace zc::nbd {

using namespace server_detail;

namespace {

// FUA is accepted on every command once SEND_FUA is advertised (proto.md), ignored where it
// means nothing.
bool valid_flags(command c, uint16_t flags) noexcept {
  uint16_t allowed = command_flag::fua;
  switch (c) {
    case command::read:
      allowed |= command_flag::df;
      break;
    case command::write:
      break;
    case command::trim:
      break;
    case command::write_zeroes:
      allowed |= command_flag::no_hole | command_flag::fast_zero;
      break;
    case command::block_status:
      allowed |= command_flag::req_one;
      break;
    case command::disc:
    case command::flush:
    case command::cache:
      break;
  }
  return (flags & ~allowed) == 0;
}

}  // namespace

void server::handle_request(connection& c) {
  auto decoded =
      decode_request(std::span<const uint8_t, request_header_size>(c.data(), request_header_size));
  c.consume(request_header_size);
  if (!decoded) {
    ZC_LOG_WARN("nbd: a request with a bad magic: closing the connection");
    close_connection(c);
    return;
  }
  const request_header h = *decoded;
  ++counters_.requests;
  const auto type = static_cast<command>(h.type);
  if (type == command::disc) {
    c.disc = true;  // what is in flight finishes, then the connection closes
    return;
  }
  // reading_allowed() guarantees a free request.
  const uint32_t index = c.free.back();
  c.free.pop_back();
  request& r = c.requests[index];
  // Fresh, but for the reply body's buffer, which keeps its capacity for the next reply.
  std::string body = std::move(r.status_body);
  r = request{};
  r.status_body = std::move(body);
  r.used = true;
  r.h = h;
  ++c.in_flight;
  const bool is_write = type == command::write;
  const uint64_t size = storage_.size();
  const uint32_t block = storage_.block_size();
  const bool in_range = h.length != 0 && h.offset <= size && h.length <= size - h.offset;
  const bool aligned = h.offset % block == 0 && h.length % block == 0;
  const bool known = h.type <= static_cast<uint16_t>(command::block_status);
  const bool moves_data = is_write || type == command::read;
  // Unaligned READ and WRITE go through the whole blocks around them, which must fit one io; an
  // unaligned WRITE_ZEROES zeroes its partial edge blocks by read-modify-write, one at a time, and
  // the whole blocks between as usual; TRIM (advisory), CACHE and BLOCK_STATUS need no alignment.
  const bool rmw = !aligned && in_range && moves_data;
  if (rmw) {
    r.rmw = true;
    r.cover_offset = h.offset - h.offset % block;
    const uint64_t end = h.offset + h.length;
    const uint64_t cover_end = end + (end % block == 0 ? 0 : block - end % block);
    r.cover_length =
        static_cast<uint32_t>(std::min<uint64_t>(cover_end - r.cover_offset, uint64_t(UINT32_MAX)));
    r.skip = static_cast<uint32_t>(h.offset - r.cover_offset);
  }
  uint32_t error = 0;
  if (!known || !valid_flags(type, h.flags)) {
    error = static_cast<uint32_t>(error_code::einval);
  } else if (read_only_ && (is_write || type == command::trim || type == command::write_zeroes)) {
    error = static_cast<uint32_t>(error_code::eperm);
  } else if ((is_write || type == command::write_zeroes) && h.length != 0 && !in_range) {
    error = static_cast<uint32_t>(error_code::enospc);  // past the end (proto.md: SHOULD)
  } else if (type != command::flush && !in_range) {
    error = static_cast<uint32_t>(error_code::einval);
  } else if (moves_data && h.length > options_.max_block_size) {
    error = static_cast<uint32_t>(error_code::einval);
  } else if (rmw && r.cover_length > storage_.max_io()) {
    error = static_cast<uint32_t>(error_code::einval);  // beyond the announced maximum
  } else if (type == command::block_status && !(c.structured && c.meta_context)) {
    error = static_cast<uint32_t>(error_code::einval);
  }
  if (error != 0) {
    if (is_write) {
      read_past_payload(c, index, error);  // on its way whatever the answer
      return;
    }
    finish(c, index, error);
    return;
  }
  r.fua_pending = (h.flags & command_flag::fua) != 0;
  switch (type) {
    case command::read:
    case command::write:
      r.next_kind = is_write ? io_kind::write : io_kind::read;
      r.bytes = h.length;
      c.in_flight_bytes += r.bytes;
      if (is_write) {
        c.receiving = index;
        c.payload_done = 0;
        c.at = connection::phase::payload;
        // Its payload waits in the socket until the blocks around it have been read.
        if (r.rmw) c.blocked = true;
      }
      start_io(c, index);
      return;
    case command::write_zeroes:
      // FAST_ZERO: only where the storage zeroes without writing data (proto.md: fail at once).
      if ((h.flags & command_flag::fast_zero) != 0 && !zero_by_range(r)) {
        finish(c, index, static_cast<uint32_t>(error_code::enotsup));
        return;
      }
      r.next_kind = io_kind::write;
      r.next = h.offset;
      r.end = h.offset + h.length;
      start_io(c, index);
      return;
    case command::flush:
      r.next_kind = io_kind::flush;
      r.fua_pending = false;
      start_io(c, index);
      return;
    case command::trim: {
      // The whole blocks inside the range are dropped where the storage can; the rest is advice
      // not taken (proto.md allows it).
      const uint64_t first = (h.offset + block - 1) / block * block;
      const uint64_t last = (h.offset + h.length) / block * block;
      if (!no_discard_ && first < last) {
        r.next_kind = io_kind::discard;
        r.next = first;
        r.end = last;
        start_io(c, index);
        return;
      }
      finish_after_fua(c, index);
      return;
    }
    case command::cache:
      finish(c, index, 0);
      return;
    case command::block_status:
      if (no_map_) {
        reply_allocated(c, index);
        return;
      }
      r.next_kind = io_kind::allocation_map;
      start_io(c, index);
      return;
    case command::disc:
      return;
  }
}

void server::read_past_payload(connection& c, uint32_t index, uint32_t error) {
  c.discard_left = c.requests[index].h.length;
  c.discarding_option = false;
  c.discard_request = index;
  c.discard_error = error;
  c.at = connection::phase::discard;
  c.payload_began = now_;
}

bool server::partial_zeroes(const request& r) const noexcept {
  const uint32_t block = storage_.block_size();
  return r.next % block != 0 || r.end - r.next < block;
}

bool server::zero_by_range(const request& r) const noexcept {
  return !no_zero_range_ && (r.h.flags & command_flag::no_hole) == 0;
}

// The memory of the io that r needs next: none for a flush, a discard or a zeroing the storage
// does itself; a chunk of a WRITE_ZEROES written as data; an allocation map's bitmap.
uint32_t server::io_length(const request& r) const noexcept {
  if (r.next_kind == io_kind::flush || r.next_kind == io_kind::discard) return 0;
  const uint32_t block = storage_.block_size();
  if (r.next_kind == io_kind::allocation_map) {
    const uint64_t first = r.h.offset / block;
    const uint64_t blocks = (r.h.offset + r.h.length + block - 1) / block - first;
    return static_cast<uint32_t>(std::min<uint64_t>((blocks + 7) / 8, max_map_bytes));
  }
  if (r.rmw) return r.cover_length;
  if (static_cast<command>(r.h.type) == command::write_zeroes) {
    const uint64_t left = r.end - r.next;
    if (partial_zeroes(r)) return block;  // a partial edge block, read-modified-written
    if (zero_by_range(r)) return 0;
    return static_cast<uint32_t>(std::min<uint64_t>(left - left % block, storage_.max_io()));
  }
  return r.h.length;
}

// Bytes of storage an io covers.
uint64_t server::io_bytes(const io& x) noexcept {
  return x.kind == io_kind::discard || x.kind == io_kind::zero_range ? x.extent : x.length;
}

void server::use_io(connection& c, uint32_t index, io& x) {
  request& r = c.requests[index];
  r.x = &x;
  r.exclusive = false;
  x.tag = index;
  x.kind = r.next_kind;
  if (r.rmw && r.next_kind != io_kind::flush) {
    // The whole blocks around it are read first; a write's bytes go in once they are there.
    x.kind = io_kind::read;
    x.offset = r.cover_offset;
    r.rmw_reading = r.next_kind == io_kind::write;
    if (r.rmw_reading)
      take_blocks(c, index);
    else
      submit_io(c, index);  // a READ needs no block of its own
  } else if (static_cast<command>(r.h.type) == command::write_zeroes &&
             r.next_kind == io_kind::write && partial_zeroes(r)) {
    // A partial edge block: read, zeroed in part (on_io_done), written back.
    x.kind = io_kind::read;
    x.offset = r.next - r.next % storage_.block_size();
    r.rmw_reading = true;
    take_blocks(c, index);
  } else if (static_cast<command>(r.h.type) == command::write_zeroes &&
             r.next_kind == io_kind::write) {
    x.offset = r.next;
    if (x.length == 0) {  // the storage zeroes the range itself
      const uint64_t left = r.end - r.next;
      x.kind = io_kind::zero_range;
      x.extent = static_cast<uint32_t>(
          std::min<uint64_t>(left - left % storage_.block_size(), max_range_io));
      r.exclusive = true;
      take_blocks(c, index);
    } else {
      x.kind = io_kind::write_zeroes;  // zeroed by the backend, not on this thread
      submit_write(c, index);
    }
  } else if (r.next_kind == io_kind::discard) {
    x.offset = r.next;
    x.extent = static_cast<uint32_t>(std::min<uint64_t>(r.end - r.next, max_range_io));
    r.exclusive = true;
    take_blocks(c, index);
  } else if (r.next_kind == io_kind::allocation_map) {
    x.offset = r.h.offset - r.h.offset % storage_.block_size();
    submit_io(c, index);
  } else if (r.next_kind == io_kind::write) {
    x.offset = r.h.offset;
    r.at = request::stage::receiving;  // on_readable/process_input fill it, then submit
    c.payload_began = now_;
  } else {
    x.offset = r.next_kind == io_kind::read ? r.h.offset : 0;
    submit_io(c, index);
  }
}

void server::submit_io(connection& c, uint32_t index) {
  request& r = c.requests[index];
  r.at = request::stage::submitted;
  ++ios_outstanding_;
  storage_.submit(*r.x);
}

void server::on_io_done(connection& c, uint32_t index, io& x) {
  request& r = c.requests[index];
  // A sparse kind the storage does not know (a reference target, the gga service): the server
  // falls back, for good.
  const bool unknown = (x.kind == io_kind::discard || x.kind == io_kind::zero_range ||
                        x.kind == io_kind::allocation_map) &&
                       x.result == status::invalid_value;
  const bool failed = !ok(x.result) && !unknown;
  // A write that landed may be what an unaligned write waits for before it takes a block.
  if (writes(x.kind) && !lock_waiting_.empty()) lock_released_ = true;
  if (failed) {
    ++counters_.io_errors;
    ZC_LOG_ERROR("nbd: {}{} of {} bytes at offset {:#x} failed: {}",
                 r.rmw_reading ? "reading the blocks around an unaligned " : "",
                 command_name(r.h.type), io_bytes(x), x.offset, status_name(x.result));
  }
  if (unknown) note_unknown(x.kind);
  if (c.dead) {
    release_io(x);
    r.x = nullptr;
    r.used = false;
    if (r.locked) unlock(r);
    c.free.push_back(index);
    --c.in_flight;
    c.in_flight_bytes -= r.bytes;
    return;
  }
  const auto type = static_cast<command>(r.h.type);
  if (r.rmw_reading) {
    r.rmw_reading = false;
    if (failed) {
      release_io(x);
      r.x = nullptr;
      r.at = request::stage::idle;  // nothing of it is with the backend any more
      if (type == command::write) {
        unlock(r);
        c.blocked = false;
        read_past_payload(c, index, static_cast<uint32_t>(error_code::eio));  // still in the socket
        return;
      }
      finish(c, index, static_cast<uint32_t>(error_code::eio));
      return;
    }
    x.kind = io_kind::write;
    if (type == command::write) {
      r.at = request::stage::receiving;  // the payload lands over the blocks just read
      c.blocked = false;
      c.payload_began = now_;
      return;
    }
    // WRITE_ZEROES: its part of the edge block just read zeroed, and the block written back.
    const uint64_t piece_end = std::min<uint64_t>(r.end, x.offset + storage_.block_size());
    for_each_piece(x.segments, r.next - x.offset, piece_end - r.next, [](uint8_t* at, size_t n) {
      std::memset(at, 0, n);
      return true;
    });
    submit_io(c, index);
    return;
  }
  if (r.locked && writes(x.kind)) unlock(r);  // its write-back landed
  if (x.kind == io_kind::allocation_map) {
    if (!failed && !unknown) reply_map(c, index, x);  // before its memory goes back
    release_io(x);
    r.x = nullptr;
    if (failed)
      finish(c, index, static_cast<uint32_t>(error_code::eio));
    else if (unknown)
      reply_allocated(c, index);
    return;
  }
  if (type == command::read && !failed) {
    reply rep;
    if (c.structured) {
      encode_offset_data_header(
          std::span<uint8_t, offset_data_header_size>(rep.header.data(), offset_data_header_size),
          r.h.cookie, r.h.offset, r.h.length);
      rep.header_size = offset_data_header_size;
    } else {
      encode_simple_reply(
          std::span<uint8_t, simple_reply_size>(rep.header.data(), simple_reply_size), r.h.cookie,
          error_code::ok);
      rep.header_size = simple_reply_size;
    }
    rep.data = &x;  // sent straight from the IO memory, released once out
    rep.data_offset = r.skip;
    rep.data_length = r.h.length;
    rep.request = index;
    r.at = request::stage::replying;
    queue_reply(c, std::move(rep));
    return;
  }
  release_io(x);
  r.x = nullptr;
  if (failed) {
    finish(c, index, static_cast<uint32_t>(error_code::eio));
    return;
  }
  if (unknown && x.kind == io_kind::zero_range) {
    if ((r.h.flags & command_flag::fast_zero) != 0) {
      // The client zeroes the range its own way (an edge block zeroed already does no harm).
      finish(c, index, static_cast<uint32_t>(error_code::enotsup));
      return;
    }
    start_io(c, index);  // the same range again, written as data
    return;
  }
  if (type == command::write_zeroes && writes(x.kind)) {
    r.next = partial_zeroes(r) ? std::min<uint64_t>(r.end, x.offset + storage_.block_size())
                               : r.next + io_bytes(x);
    if (r.next < r.end) {
      start_io(c, index);
      return;
    }
  }
  if (x.kind == io_kind::discard) {
    r.next = unknown ? r.end : r.next + x.extent;  // not known: advice not taken, as before
    if (r.next < r.end) {
      start_io(c, index);
      return;
    }
  }
  finish_after_fua(c, index);
}

// Answers success, after the flush FUA asked for (if it did).
void server::finish_after_fua(connection& c, uint32_t index) {
  request& r = c.requests[index];
  if (r.fua_pending) {
    r.fua_pending = false;
    r.next_kind = io_kind::flush;
    start_io(c, index);
    return;
  }
  finish(c, index, 0);
}

void server::note_unknown(io_kind k) noexcept {
  bool& known_not = k == io_kind::discard      ? no_discard_
                    : k == io_kind::zero_range ? no_zero_range_
                                               : no_map_;
  if (known_not) return;
  known_not = true;
  ZC_LOG_INFO("nbd: the storage does not know {}: {}",
              k == io_kind::discard      ? "discard"
              : k == io_kind::zero_range ? "write zeroes"
                                         : "allocation maps",
              k == io_kind::discard      ? "TRIM is taken as advice and not done"
              : k == io_kind::zero_range ? "zeroes are written as data"
                                         : "BLOCK_STATUS answers every block allocated");
}

// BLOCK_STATUS without a map: one extent, allocated data, over the whole request.
void server::reply_allocated(connection& c, uint32_t index) {
  request& r = c.requests[index];
  reply rep;
  const auto extent =
      static_cast<uint32_t>(std::min<uint64_t>(r.h.length, storage_.size() - r.h.offset));
  encode_block_status_chunk(
      std::span<uint8_t, block_status_chunk_size>(rep.header.data(), block_status_chunk_size),
      r.h.cookie, base_allocation_id, extent, 0);
  rep.header_size = block_status_chunk_size;
  rep.request = index;
  r.at = request::stage::replying;
  queue_reply(c, std::move(rep));
}

// BLOCK_STATUS from the storage's bitmap (x's memory, from block x.offset): extents from the
// request's offset, one per run of blocks alike, up to the request's end or the bitmap's (fewer
// bytes than asked, which proto.md allows); one only with REQ_ONE.
void server::reply_map(connection& c, uint32_t index, const io& x) {
  request& r = c.requests[index];
  const uint32_t block = storage_.block_size();
  const uint64_t covered =
      std::min<uint64_t>(x.offset + uint64_t(x.length) * 8 * block, storage_.size());
  const uint64_t end = std::min<uint64_t>(r.h.offset + r.h.length, covered);
  auto allocated = [&](uint64_t at) {
    const uint64_t bit = (at - x.offset) / block;
    bool set = false;
    for_each_piece(x.segments, bit / 8, 1, [&](uint8_t* p, size_t) {
      set = (*p >> (bit % 8)) & 1;
      return false;
    });
    return set;
  };
  std::vector<block_extent>& extents = extents_;  // reused: its capacity stays
  extents.clear();
  for (uint64_t at = r.h.offset; at < end;) {
    const bool state = allocated(at);
    uint64_t next = (at / block + 1) * block;
    while (next < end && allocated(next) == state) next += block;
    next = std::min(next, end);
    extents.push_back(
        {static_cast<uint32_t>(next - at), state ? 0 : block_state::hole | block_state::zero});
    at = next;
    if ((r.h.flags & command_flag::req_one) != 0) break;
  }
  reply rep;
  r.status_body.clear();
  encode_block_status(std::span<uint8_t, structured_reply_header_size>(
                          rep.header.data(), structured_reply_header_size),
                      r.status_body, r.h.cookie, base_allocation_id, extents);
  rep.borrowed = &r.status_body;
  rep.header_size = structured_reply_header_size;
  rep.request = index;
  r.at = request::stage::replying;
  queue_reply(c, std::move(rep));
}

// Queues the reply that ends request `index` (no data).
void server::finish(connection& c, uint32_t index, uint32_t error) {
  request& r = c.requests[index];
  r.at = request::stage::replying;
  if (r.locked) unlock(r);  // an unaligned write holds its blocks until answered
  if (c.dead) {
    r.used = false;
    c.free.push_back(index);
    --c.in_flight;
    c.in_flight_bytes -= r.bytes;
    return;
  }
  reply rep;
  rep.request = index;
  if (!c.structured) {
    encode_simple_reply(std::span<uint8_t, simple_reply_size>(rep.header.data(), simple_reply_size),
                        r.h.cookie, static_cast<error_code>(error));
    rep.header_size = simple_reply_size;
  } else if (error == 0) {
    encode_none_chunk(std::span<uint8_t, structured_reply_header_size>(
                          rep.header.data(), structured_reply_header_size),
                      r.h.cookie);
    rep.header_size = structured_reply_header_size;
  } else {
    encode_error_chunk(std::span<uint8_t, error_chunk_size>(rep.header.data(), error_chunk_size),
                       r.h.cookie, static_cast<error_code>(error));
    rep.header_size = error_chunk_size;
  }
  queue_reply(c, std::move(rep));
}

void server::queue_reply(connection& c, reply r) {
  if (c.out.empty()) c.output_waits = now_;
  c.out.push_back(std::move(r));
}

}  // namespace zc::nbd
