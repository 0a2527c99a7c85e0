// A hostile comch peer in its own process (built as zc_comch_ring_peer): it speaks the socket
// protocol by hand (raw_peer.hpp) and writes whatever the test asks into the shared-memory queues,
// true or not.
//   zc_comch_ring_peer --socket PATH
// connects to the server listening on socket file PATH, says hello, maps every consumer the server
// announces (the latest is "theirs", and a control message "mapped <id>" says it is mapped), and
// runs the commands the test sends as control messages, answering each with one control message:
//   claim                     claim theirs' next posted buffer     -> "claimed <pos>" | "none"
//   fill <pos> <text>         copy text there and publish it       -> "filled <pos>"
//   publish <pos> <length>    publish a length, write nothing      -> "published <pos>"
//   set-head <n>              store n as theirs' queue head        -> "head <n>"
//   announce <off> <cap>      announce a consumer of ours (4 KiB receive memory) whose first slot
//                             offers [off, off + cap)              -> "announced <id>"
//   untouched                 is our consumers' memory still zero  -> "untouched" | "touched <i>"
// Numbers are decimal u64. It exits when the socket closes, on "exit", or after peer_lifetime.
#include <cstdio>
#include <map>
#include <sstream>

#include "raw_peer.hpp"

namespace {

using namespace zc;
using namespace zc::comch::test;

constexpr auto peer_lifetime = std::chrono::seconds(60);
constexpr size_t our_memory = 4096;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

class ring_peer {
 public:
  explicit ring_peer(raw_peer& socket) : socket_(socket) {}

  std::string run(const std::string& command) {
    std::istringstream in(command);
    std::string verb;
    in >> verb;
    if (verb == "announce") {
      uint64_t offset = 0, capacity = 0;
      in >> offset >> capacity;
      const uint32_t id = next_id_++;
      auto c = std::make_unique<fake_consumer>(id, 2, our_memory);
      c->post(0, offset, capacity);
      if (!c->announce(socket_)) return "error: cannot send the announcement";
      ours_.push_back(std::move(c));
      return "announced " + std::to_string(id);
    }
    if (verb == "untouched") {
      for (auto& c : ours_)
        for (size_t i = 0; i < our_memory; ++i)
          if (c->buffers().data()[i] != 0) return "touched " + std::to_string(i);
      return "untouched";
    }
    if (!theirs_) return "error: no consumer announced";
    if (verb == "claim") {
      auto position = theirs_->claim();
      return position ? "claimed " + std::to_string(*position) : "none";
    }
    uint64_t position = 0;
    in >> position;
    if (verb == "fill") {
      std::string text;
      std::getline(in >> std::ws, text);
      if (!theirs_->fill(position, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}))
        return "error: does not fit";
      theirs_->publish(position, text.size());
      return "filled " + std::to_string(position);
    }
    if (verb == "publish") {
      uint64_t length = 0;
      in >> length;
      theirs_->publish(position, length);
      return "published " + std::to_string(position);
    }
    if (verb == "set-head") {
      theirs_->header().head.store(position);
      return "head " + std::to_string(position);
    }
    return "error: unknown command " + verb;
  }

  void announced(raw_frame& frame) {
    try {
      theirs_ = std::make_unique<mapped_consumer>(frame);
      socket_.message("mapped " + std::to_string(theirs_->id()));
    } catch (const std::exception& e) {
      say(std::string("MAP_FAILED ") + e.what());
    }
  }

 private:
  raw_peer& socket_;
  std::unique_ptr<mapped_consumer> theirs_;
  std::vector<std::unique_ptr<fake_consumer>> ours_;
  uint32_t next_id_ = 1000;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--socket") {
    std::fprintf(stderr, "usage: %s --socket PATH\n", argv[0]);
    return 2;
  }
  raw_peer socket(argv[2]);
  if (socket.fd < 0 || !socket.hello() || !socket.welcomed(std::chrono::seconds(20))) {
    say("NOT_CONNECTED");
    return 3;
  }
  say("READY");
  ring_peer peer(socket);
  const auto give_up = std::chrono::steady_clock::now() + peer_lifetime;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    auto frame = socket.read_frame(left);
    if (!frame) break;
    if (frame->header.type == uint16_t(comch::internal::frame_type::consumer_new)) {
      peer.announced(*frame);
    } else if (frame->header.type == uint16_t(comch::internal::frame_type::message)) {
      const std::string command(frame->payload.begin(), frame->payload.end());
      if (command == "exit") break;
      const std::string reply = peer.run(command);
      say(command + " -> " + reply);
      if (!socket.message(reply)) break;
    }
    for (int fd : frame->fds) comch::internal::close_fd(fd);
  }
  say("EXIT");
  return 0;
}
