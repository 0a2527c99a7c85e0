// The fast path inside one process: consumers and producers on an established connection,
// consumer events, posted buffers, one-copy sends, FIFO order, limits, doorbells for sleeping
// threads, and what stopping or losing the connection does to tasks in flight.
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "comch_test_support.hpp"

namespace zc::comch::test {
namespace {

// A connected server/client pair on one event-mode engine (the "control thread"), recording the
// consumer events each side sees from its peer.
struct comch_fast_path : ::testing::Test {
  void SetUp() override {
    srv.emplace(
        control,
        server_config{
            .name = name,
            .events = {.on_consumer_new = [this](connection&,
                                                 uint32_t id) { server_sees_new.push_back(id); },
                       .on_consumer_expired =
                           [this](connection&, uint32_t id) { server_sees_expired.push_back(id); }},
            .on_connect = [this](connection& c) { srv_conn = &c; },
            .on_disconnect = [this](connection&) { srv_conn = nullptr; }});
    cli.emplace(control, client_config{.name = name,
                                       .events = {.on_consumer_new =
                                                      [this](connection&, uint32_t id) {
                                                        client_sees_new.push_back(id);
                                                      },
                                                  .on_consumer_expired =
                                                      [this](connection&, uint32_t id) {
                                                        client_sees_expired.push_back(id);
                                                      }}});
    ASSERT_EQ(srv->start(), status::success);
    ASSERT_EQ(cli->start(), status::success);
    ASSERT_TRUE(run([&] { return cli->state() == context_state::running && srv_conn != nullptr; }));
    cli_conn = cli->get_connection();
  }
  void TearDown() override {
    if (cli->state() != context_state::idle) cli->stop();
    if (srv->state() != context_state::idle) srv->stop();
    EXPECT_TRUE(run([&] {
      return cli->state() == context_state::idle && srv->state() == context_state::idle;
    }));
  }
  template <typename Done>
  bool run(Done&& done) {
    return control.run_until(done, wait_limit);
  }
  void stop_and_drain(core::context& ctx) {
    ctx.stop();
    EXPECT_TRUE(run([&] { return ctx.state() == context_state::idle; }));
  }

  core::progress_engine control{core::poll_mode::event};
  std::string name = channel_name();
  std::optional<server> srv;
  std::optional<client> cli;
  connection* srv_conn = nullptr;
  connection* cli_conn = nullptr;
  std::vector<uint32_t> server_sees_new, server_sees_expired, client_sees_new, client_sees_expired;
};

// What a consumer's callbacks saw.
struct receipts {
  std::vector<std::string> texts;
  std::vector<status> errors;
  consumer_config config(core::memory_map& map, uint32_t tasks = 16) {
    return {.buffers = &map,
            .post_recv_tasks = tasks,
            .on_recv = [this](consumer_post_recv_task& t) { texts.push_back(text_of(t.buf())); },
            .on_recv_error = [this](consumer_post_recv_task& t) { errors.push_back(t.result()); }};
  }
};

struct send_results {
  int done = 0;
  std::vector<status> errors;
  producer_config config(uint32_t tasks = 16) {
    return {.send_tasks = tasks,
            .on_send_done = [this](producer_send_task& t) { ++done, t.free(); },
            .on_send_error =
                [this](producer_send_task& t) {
                  errors.push_back(t.result());
                  t.free();
                }};
  }
};

void post_all(consumer& rx, buffer_set& set) {
  for (core::buffer* b : set.buffers) {
    b->set_data(b->head(), 0);
    auto* t = rx.allocate_post_recv(*b);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(rx.submit(*t), status::success);
  }
}

TEST_F(comch_fast_path, consumer_events_carry_the_id_to_the_peer) {
  buffer_set rx_mem(4, 64);
  receipts got;
  consumer rx(control, *cli_conn, got.config(*rx_mem.map));
  ASSERT_EQ(rx.start(), status::success);
  EXPECT_EQ(rx.state(), context_state::running);
  EXPECT_NE(rx.id(), 0u);
  ASSERT_TRUE(run([&] { return server_sees_new.size() == 1; }));
  EXPECT_EQ(server_sees_new[0], rx.id());

  consumer second(control, *cli_conn, got.config(*rx_mem.map));
  ASSERT_EQ(second.start(), status::success);
  EXPECT_NE(second.id(), rx.id());
  ASSERT_TRUE(run([&] { return server_sees_new.size() == 2; }));
  EXPECT_EQ(server_sees_new[1], second.id());

  stop_and_drain(rx);
  ASSERT_TRUE(run([&] { return server_sees_expired.size() == 1; }));
  EXPECT_EQ(server_sees_expired[0], rx.id());
  stop_and_drain(second);
  ASSERT_TRUE(run([&] { return server_sees_expired.size() == 2; }));
  EXPECT_TRUE(client_sees_new.empty());
}

TEST_F(comch_fast_path, producer_send_fills_the_next_posted_buffer_in_order) {
  buffer_set rx_mem(4, 64), tx_mem(1, 64, core::access::local_read_write);
  receipts got;
  consumer rx(control, *srv_conn, got.config(*rx_mem.map));
  ASSERT_EQ(rx.start(), status::success);
  ASSERT_TRUE(run([&] { return client_sees_new.size() == 1; }));
  post_all(rx, rx_mem);

  send_results sent;
  producer tx(control, *cli_conn, sent.config());
  ASSERT_EQ(tx.start(), status::success);
  std::vector<std::string> messages;
  for (int i = 0; i < 4; ++i) messages.push_back("message " + std::to_string(i));
  for (auto& m : messages) {
    fill(*tx_mem.buffers[0], m);  // the data is copied at submit: the buffer may be reused
    auto* t = tx.allocate_send(*tx_mem.buffers[0], client_sees_new[0]);
    ASSERT_EQ(tx.submit(*t), status::success);
  }
  ASSERT_TRUE(run([&] { return got.texts.size() == 4 && sent.done == 4; }));
  EXPECT_EQ(got.texts, messages);
  // Each message went to the next posted buffer, inside the consumer's own memory.
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rx_mem.buffers[i]->data(), rx_mem.map->data() + i * 64);
    EXPECT_EQ(text_of(*rx_mem.buffers[i]), messages[i]);
  }
  stop_and_drain(tx);
  stop_and_drain(rx);
}

TEST_F(comch_fast_path, data_is_appended_after_the_buffer_data_section) {
  buffer_set rx_mem(1, 64), tx_mem(1, 64, core::access::local_read_write);
  receipts got;
  consumer rx(control, *srv_conn, got.config(*rx_mem.map));
  ASSERT_EQ(rx.start(), status::success);
  ASSERT_TRUE(run([&] { return client_sees_new.size() == 1; }));
  core::buffer& b = *rx_mem.buffers[0];
  fill(b, "head:");
  auto* r = rx.allocate_post_recv(b);
  ASSERT_EQ(rx.submit(*r), status::success);

  send_results sent;
  producer tx(control, *cli_conn, sent.config());
  ASSERT_EQ(tx.start(), status::success);
  fill(*tx_mem.buffers[0], "tail");
  ASSERT_EQ(tx.submit(*tx.allocate_send(*tx_mem.buffers[0], client_sees_new[0])), status::success);
  ASSERT_TRUE(run([&] { return got.texts.size() == 1; }));
  EXPECT_EQ(got.texts[0], "head:tail");
  EXPECT_EQ(r->received_length(), 4u);
  stop_and_drain(tx);
  stop_and_drain(rx);
}

TEST_F(comch_fast_path, post_receive_refuses_buffers_outside_pci_memory) {
  buffer_set rx_mem(2, 64);
  buffer_set local_only(1, 64, core::access::local_read_write);
  buffer_set other_pci(1, 64);
  receipts got;
  consumer rx(control, *srv_conn, got.config(*rx_mem.map));
  ASSERT_EQ(rx.start(), status::success);
  auto* t = rx.allocate_post_recv(*local_only.buffers[0]);
  EXPECT_EQ(rx.submit(*t), status::not_permitted);
  t->set_buffer(*other_pci.buffers[0]);
  EXPECT_EQ(rx.submit(*t), status::invalid_value);
  t->set_buffer(*rx_mem.buffers[0]);
  EXPECT_EQ(rx.submit(*t), status::success);
  stop_and_drain(rx);
}

TEST_F(comch_fast_path, consumer_memory_must_be_pci_exportable) {
  auto code_of = [](auto&& make) {
    try {
      make();
    } catch (const status_error& e) {
      return e.code();
    }
    return status::success;
  };
  buffer_set local_only(1, 64, core::access::local_read_write);
  std::vector<uint8_t> plain(4096);
  auto wrapped = core::memory_map::wrap(plain.data(), plain.size(), core::access::pci_read_write);
  receipts got;
  EXPECT_EQ(code_of([&] { consumer c(control, *srv_conn, got.config(*local_only.map)); }),
            status::not_permitted);
  EXPECT_EQ(code_of([&] { consumer c(control, *srv_conn, got.config(*wrapped)); }),
            status::not_supported);
  EXPECT_EQ(code_of([&] { consumer c(control, *srv_conn, {}); }), status::bad_config);
}

TEST_F(comch_fast_path, message_longer_than_the_posted_buffer_fails_and_writes_nothing) {
  buffer_set rx_mem(1, 16), tx_mem(1, 64, core::access::local_read_write);
  std::memset(rx_mem.map->data(), 0xEE, 16);
  receipts got;
  consumer rx(control, *srv_conn, got.config(*rx_mem.map));
  ASSERT_EQ(rx.start(), status::success);
  ASSERT_TRUE(run([&] { return client_sees_new.size() == 1; }));
  post_all(rx, rx_mem);

  send_results sent;
  producer tx(control, *cli_conn, sent.config());
  ASSERT_EQ(tx.start(), status::success);
  fill(*tx_mem.buffers[0], std::string(32, 'x'));
  ASSERT_EQ(tx.submit(*tx.allocate_send(*tx_mem.buffers[0], client_sees_new[0])), status::success);
  ASSERT_TRUE(run([&] { return sent.errors.size() == 1; }));
  EXPECT_EQ(sent.errors[0], status::too_big);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(rx_mem.map->data()[i], 0xEE) << "byte " << i;
  EXPECT_TRUE(got.texts.empty());

  // The buffer is still posted: the next message that fits lands in it.
  fill(*tx_mem.buffers[0], "fits");
  ASSERT_EQ(tx.submit(*tx.allocate_send(*tx_mem.buffers[0], client_sees_new[0])), status::success);
  ASSERT_TRUE(run([&] { return got.texts.size() == 1; }));
  EXPECT_EQ(got.texts[0], "fits");
  stop_and_drain(tx);
  stop_and_drain(rx);
}

TEST_F(comch_fast_path, send_without_a_posted_buffer_is_again) {
  buffer_set rx_mem(1, 64), tx_mem(1, 64, core::access::local_read_write);
  receipts got;
  consumer rx(control, *srv_conn, got.config(*rx_mem.map));
  ASSERT_EQ(rx.start(), status::success);
  ASSERT_TRUE(run([&] { return client_sees_new.size() == 1; }));
  send_results sent;
  producer tx(control, *cli_conn, sent.config());
  ASSERT_EQ(tx.start(), status::success);
  fill(*tx_mem.buffers[0], "early");
  auto* t = tx.allocate_send(*tx_mem.buffers[0], client_sees_new[0]);
  EXPECT_EQ(tx.submit(*t), status::again);
  post_all(rx, rx_mem);
  EXPECT_EQ(tx.submit(*t), status::success);
  ASSERT_TRUE(run([&] { return got.texts.size() == 1; }));
  EXPECT_EQ(tx.submit(*tx.allocate_send(*tx_mem.buffers[0], client_sees_new[0])), status::again);
  stop_and_drain(tx);
  stop_and_drain(rx);
}

TEST_F(comch_fast_path, send_to_an_unknown_or_expired_consumer_is_not_found) {
  buffer_set rx_mem(2, 64), tx_mem(1, 64, core::access::local_read_write);
  send_results sent;
  producer tx(control, *cli_conn, sent.config());
  ASSERT_EQ(tx.start(), status::success);
  fill(*tx_mem.buffers[0], "to nobody");
  auto* t = tx.allocate_send(*tx_mem.buffers[0], 12345);
  EXPECT_EQ(tx.submit(*t), status::not_found);

  receipts got;
  consumer rx(control, *srv_conn, got.config(*rx_mem.map));
  ASSERT_EQ(rx.start(), status::success);
  ASSERT_TRUE(run([&] { return client_sees_new.size() == 1; }));
  post_all(rx, rx_mem);
  t->set(*tx_mem.buffers[0], rx.id());
  ASSERT_EQ(tx.submit(*t), status::success);
  ASSERT_TRUE(run([&] { return got.texts.size() == 1; }));

  // Stopping the consumer fails its remaining posted receive and revokes it at once: a producer
  // cannot write into it even before the expiry event reaches the peer.
  rx.stop();
  auto* late = tx.allocate_send(*tx_mem.buffers[0], rx.id());
  EXPECT_EQ(tx.submit(*late), status::not_found);
  ASSERT_TRUE(run([&] { return rx.state() == context_state::idle; }));
  EXPECT_EQ(got.errors, std::vector<status>{status::shutdown});
  ASSERT_TRUE(run([&] { return client_sees_expired.size() == 1; }));
  EXPECT_EQ(client_sees_expired[0], rx.id());
  EXPECT_EQ(tx.submit(*late), status::not_found);
  late->free();
  stop_and_drain(tx);
}

TEST_F(comch_fast_path, a_restarted_consumer_comes_back_under_a_new_id) {
  buffer_set rx_mem(2, 64), tx_mem(1, 64, core::access::local_read_write);
  receipts got;
  consumer rx(control, *srv_conn, got.config(*rx_mem.map));
  ASSERT_EQ(rx.start(), status::success);
  const uint32_t first = rx.id();
  stop_and_drain(rx);
  ASSERT_EQ(rx.start(), status::success);
  EXPECT_NE(rx.id(), first);
  ASSERT_TRUE(run([&] { return client_sees_new.size() == 2 && client_sees_expired.size() == 1; }));
  EXPECT_EQ(client_sees_new, (std::vector<uint32_t>{first, rx.id()}));
  EXPECT_EQ(client_sees_expired, std::vector<uint32_t>{first});

  post_all(rx, rx_mem);
  send_results sent;
  producer tx(control, *cli_conn, sent.config());
  ASSERT_EQ(tx.start(), status::success);
  fill(*tx_mem.buffers[0], "again");
  EXPECT_EQ(tx.submit(*tx.allocate_send(*tx_mem.buffers[0], first)), status::not_found);
  ASSERT_EQ(tx.submit(*tx.allocate_send(*tx_mem.buffers[0], rx.id())), status::success);
  ASSERT_TRUE(run([&] { return got.texts.size() == 1; }));
  EXPECT_EQ(got.texts[0], "again");
  stop_and_drain(tx);
  stop_and_drain(rx);
}

TEST_F(comch_fast_path, fast_path_works_both_ways_on_one_connection) {
  buffer_set srv_rx(4, 64), cli_rx(4, 64), tx_mem(2, 64, core::access::local_read_write);
  receipts at_server, at_client;
  consumer srv_consumer(control, *srv_conn, at_server.config(*srv_rx.map));
  consumer cli_consumer(control, *cli_conn, at_client.config(*cli_rx.map));
  ASSERT_EQ(srv_consumer.start(), status::success);
  ASSERT_EQ(cli_consumer.start(), status::success);
  ASSERT_TRUE(run([&] { return client_sees_new.size() == 1 && server_sees_new.size() == 1; }));
  post_all(srv_consumer, srv_rx);
  post_all(cli_consumer, cli_rx);
  send_results s1, s2;
  producer srv_producer(control, *srv_conn, s1.config());
  producer cli_producer(control, *cli_conn, s2.config());
  ASSERT_EQ(srv_producer.start(), status::success);
  ASSERT_EQ(cli_producer.start(), status::success);
  fill(*tx_mem.buffers[0], "request");
  fill(*tx_mem.buffers[1], "response");
  ASSERT_EQ(
      cli_producer.submit(*cli_producer.allocate_send(*tx_mem.buffers[0], client_sees_new[0])),
      status::success);
  ASSERT_EQ(
      srv_producer.submit(*srv_producer.allocate_send(*tx_mem.buffers[1], server_sees_new[0])),
      status::success);
  ASSERT_TRUE(run([&] { return at_server.texts.size() == 1 && at_client.texts.size() == 1; }));
  EXPECT_EQ(at_server.texts[0], "request");
  EXPECT_EQ(at_client.texts[0], "response");
  for (core::context* c : std::initializer_list<core::context*>{&srv_producer, &cli_producer,
                                                                &srv_consumer, &cli_consumer})
    stop_and_drain(*c);
}

TEST_F(comch_fast_path, losing_the_connection_fails_tasks_in_flight_and_expires_consumers) {
  buffer_set srv_rx(4, 64), cli_rx(2, 64);
  receipts at_server, at_client;
  consumer srv_consumer(control, *srv_conn, at_server.config(*srv_rx.map));
  consumer cli_consumer(control, *cli_conn, at_client.config(*cli_rx.map));
  ASSERT_EQ(srv_consumer.start(), status::success);
  ASSERT_EQ(cli_consumer.start(), status::success);
  ASSERT_TRUE(run([&] { return client_sees_new.size() == 1 && server_sees_new.size() == 1; }));
  post_all(srv_consumer, srv_rx);
  send_results sent;
  producer srv_producer(control, *srv_conn, sent.config());
  ASSERT_EQ(srv_producer.start(), status::success);
  std::vector<context_state> producer_states;
  srv_producer.set_state_changed_callback(
      [&](core::context&, context_state, context_state next) { producer_states.push_back(next); });

  cli->stop();  // the client goes away: the server's side of the fast path must notice
  ASSERT_TRUE(run([&] {
    return srv_conn == nullptr && srv_consumer.state() == context_state::idle &&
           srv_producer.state() == context_state::idle;
  }));
  EXPECT_EQ(server_sees_expired, std::vector<uint32_t>{cli_consumer.id()});
  EXPECT_EQ(at_server.errors, std::vector<status>(4, status::connection_reset));
  EXPECT_EQ(producer_states,
            (std::vector<context_state>{context_state::stopping, context_state::idle}));
  // The client side's own consumer leaves running too.
  ASSERT_TRUE(run([&] { return cli_consumer.state() == context_state::idle; }));
  // Nothing can start on a dead connection... (its object is gone on the server side; the
  // client kept its fast-path objects, which refuse to restart).
  try {
    cli_consumer.start();
    FAIL() << "a consumer started on a closed connection";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::not_connected);
  }
}

// Each producer and consumer on its own thread with its own event-mode engine; the control
// thread only runs the server and client.
TEST_F(comch_fast_path, many_producers_and_consumers_on_their_own_threads) {
  constexpr int consumers = 2, producers = 3, per_pair = 300, slots = 8;
  struct worker_consumer {
    std::unique_ptr<buffer_set> mem;
    std::map<int, int> next_seq;  // per producer: FIFO check
    int received = 0, out_of_order = 0;
  };
  std::vector<std::unique_ptr<worker_consumer>> wc;
  for (int i = 0; i < consumers; ++i) {
    wc.push_back(std::make_unique<worker_consumer>());
    wc.back()->mem = std::make_unique<buffer_set>(slots, 64);
  }
  std::atomic<int> consumers_done{0}, producers_done{0};
  std::atomic<bool> all_announced{false};
  std::vector<uint32_t> targets;  // consumer ids as the producers' side learnt them
  std::vector<std::thread> threads;
  connection* rx_conn = srv_conn;
  connection* tx_conn = cli_conn;

  for (int i = 0; i < consumers; ++i) {
    threads.emplace_back([&, i] {
      worker_consumer& me = *wc[size_t(i)];
      core::progress_engine pe(core::poll_mode::event);
      consumer rx(pe, *rx_conn,
                  {.buffers = me.mem->map.get(),
                   .post_recv_tasks = slots,
                   .on_recv = [&](consumer_post_recv_task& t) {
                     int producer_index = 0, seq = 0;
                     std::sscanf(text_of(t.buf()).c_str(), "%d:%d", &producer_index, &seq);
                     if (me.next_seq[producer_index] != seq) ++me.out_of_order;
                     me.next_seq[producer_index] = seq + 1;
                     ++me.received;
                     t.buf().set_data(t.buf().head(), 0);
                     auto& owner = static_cast<consumer&>(t.owner());
                     if (owner.state() == context_state::running) {
                       EXPECT_EQ(owner.submit(t), status::success);
                     }
                   }});
      rx.start();
      for (core::buffer* b : me.mem->buffers) rx.submit(*rx.allocate_post_recv(*b));
      EXPECT_TRUE(pe.run_until([&] { return me.received == producers * per_pair; }, wait_limit));
      ++consumers_done;
      rx.stop();
      EXPECT_TRUE(pe.run_until([&] { return rx.state() == context_state::idle; }, wait_limit));
    });
  }
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      // A flag set by another thread wakes no engine: wait for it on the side, bounded.
      const auto give_up = std::chrono::steady_clock::now() + wait_limit;
      while (!all_announced && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_TRUE(all_announced);
      core::progress_engine pe(core::poll_mode::event);
      buffer_set tx_mem(1, 64, core::access::local_read_write);
      int completed = 0;
      producer tx(pe, *tx_conn, {.send_tasks = 4, .on_send_done = [&](producer_send_task& t) {
                                   ++completed;
                                   t.free();
                                 }});
      tx.start();
      for (int seq = 0; seq < per_pair; ++seq) {
        for (int c = 0; c < consumers; ++c) {
          fill(*tx_mem.buffers[0], std::to_string(p) + ":" + std::to_string(seq));
          producer_send_task* t = nullptr;
          ASSERT_TRUE(pe.run_until(
              [&] {
                return (t = tx.allocate_send(*tx_mem.buffers[0], targets[size_t(c)])) != nullptr;
              },
              wait_limit));
          status s = status::again;
          ASSERT_TRUE(
              pe.run_until([&] { return (s = tx.submit(*t)) != status::again; }, wait_limit));
          ASSERT_EQ(s, status::success);
        }
      }
      EXPECT_TRUE(pe.run_until([&] { return completed == per_pair * consumers; }, wait_limit));
      ++producers_done;
      tx.stop();
      EXPECT_TRUE(pe.run_until([&] { return tx.state() == context_state::idle; }, wait_limit));
    });
  }
  // Control thread: carries the consumer announcements (the only thing it waits for here, so
  // that its engine wakes for it), then waits for everyone.
  ASSERT_TRUE(run([&] { return client_sees_new.size() == consumers; }));
  targets = client_sees_new;
  all_announced = true;  // release: the producers read targets after seeing it
  EXPECT_TRUE(run([&] { return consumers_done == consumers && producers_done == producers; }));
  for (auto& t : threads) t.join();
  for (auto& c : wc) {
    EXPECT_EQ(c->received, producers * per_pair);
    EXPECT_EQ(c->out_of_order, 0);
  }
  EXPECT_TRUE(run([&] { return client_sees_expired.size() == consumers; }));
}

}  // namespace
}  // namespace zc::comch::test
