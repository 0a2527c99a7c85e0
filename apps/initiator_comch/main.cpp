// zcstore_initiator_comch: drives IO through a storage service over comch and checks it
// (REFERENCE_SPEC §1.1, §2.7, §4): connect, query, init, one worker per --cpu, start, run the
// execution strategy, stop, print the stats (or "Test failed!!"), shutdown.
// Exit status: 0 success, 1 failure (IO error, data mismatch, lost service, setup error), 2 bad
// usage, 130 after Ctrl-C or SIGTERM (the run drained, stats of what completed printed).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/cli.hpp"
#include "core/engine_owned.hpp"
#include "core/log.hpp"
#include "core/thread.hpp"
#include "host/session.hpp"
#include "initiator_config.hpp"
#include "runner.hpp"
#include "stats.hpp"
#include "strategy.hpp"

namespace {

using namespace zc;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr int exit_interrupted = 130;

struct outcome {
  std::string failure;  // empty: every worker finished without error
  bool interrupted = false;
  std::vector<initiator::worker_stats> stats;
};

// Runs the workers until each is done: the run limit reached, an error, or a stop. Watches the
// service on the control channel meanwhile and prints progress once a second when asked to.
outcome run_workers(host::session& session, const initiator::execution_plan& plan,
                    std::vector<core::engine_owned<initiator::worker_run>>& runs,
                    const initiator::initiator_config& config) {
  outcome out;
  auto& workers = session.workers();
  auto all_done = [&] {
    for (auto& r : runs)
      if (!r->done()) return false;
    return true;
  };
  auto stop_all = [&] {
    for (size_t i = 0; i < runs.size(); ++i)
      workers[i]->thread().post([r = runs[i].get()] { r->request_stop(); });
  };
  auto completed = [&] {
    uint64_t n = 0;
    for (auto& r : runs) n += r->completed();
    return n;
  };

  const auto start = clock_type::now();
  for (size_t i = 0; i < runs.size(); ++i)
    workers[i]->thread().call([r = runs[i].get()] { r->start(); });

  initiator::progress_sample last{0, 0};
  auto next_progress = start + 1s;
  bool stopping = false;
  // After a stop every IO in flight ends within the IO timeout: by its response, its failure or
  // its deadline.
  clock_type::time_point drain_deadline = clock_type::time_point::max();
  while (!all_done()) {
    // The first worker that fails ends the whole run, not only its own part of it.
    if (!stopping)
      for (auto& r : runs)
        if (r->done() && !r->failure().empty()) stopping = true;
    if (!stopping && core::stop_requested()) {
      ZC_LOG_WARN("stop requested: letting the IOs in flight finish");
      out.interrupted = stopping = true;
    }
    const status s = session.watch(100ms);
    if (!ok(s) && !stopping) {
      out.failure = fmt::format("lost the service: {}", status_name(s));
      stopping = true;
    }
    // A worker that gave up on a silent service holds the IOs the service has (their memory may
    // still be written): the run ends, and with it the process, rather than wait on them.
    if (!stopping) {
      if (auto [why, w] = session.queue_failure(); w != nullptr) {
        out.failure =
            fmt::format("worker on cpu {} gave up on the service: {}", w->cpu(), status_name(why));
        stopping = true;
      }
    }
    if (stopping && drain_deadline == clock_type::time_point::max()) {
      stop_all();
      drain_deadline = clock_type::now() + 2 * config.control_timeout();
    }
    if (clock_type::now() >= drain_deadline) {
      if (out.failure.empty()) out.failure = "IOs still in flight after the drain deadline";
      break;
    }
    if (config.progress && clock_type::now() >= next_progress) {
      const initiator::progress_sample now{
          std::chrono::duration<double>(clock_type::now() - start).count(), completed()};
      std::fprintf(stderr, "%s\n", initiator::format_progress(last, now, plan.io_size()).c_str());
      last = now;
      next_progress += 1s;
    }
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    auto* r = runs[i].get();
    if (!r->done()) continue;  // still draining: its counters are not final
    if (out.failure.empty() && !r->failure().empty()) out.failure = r->failure();
    out.stats.push_back(workers[i]->thread().call([r] { return r->stats(); }));
  }
  return out;
}

void write_stats_json(const std::string& path, const initiator::run_summary& summary) {
  std::ofstream f(path);
  f << initiator::to_json(summary).dump(2) << "\n";
  if (!f) ZC_LOG_ERROR("cannot write the stats to {}", path);
}

int run(const initiator::initiator_config& config) {
  // Declared before the session: the session's destructor joins the worker threads, whose late
  // jobs (a completion draining, a run's destruction) may still read the plan.
  std::unique_ptr<initiator::execution_plan> plan_holder;
  host::session session({.device = config.device,
                         .channel_name = config.command_channel_name,
                         .control_timeout = config.control_timeout(),
                         .keep_alive_timeout = config.keep_alive_timeout(),
                         .poll_mode = config.poll_mode});
  const auto workers = static_cast<uint32_t>(config.cpus.size());
  std::vector<core::engine_owned<initiator::worker_run>> runs;
  try {
    const auto storage = session.query();
    plan_holder = std::make_unique<initiator::execution_plan>(
        initiator::plan_request{.strategy = config.strategy(),
                                .storage_capacity = storage.capacity,
                                .block_size = storage.block_size,
                                .blocks_per_io = config.blocks_per_io,
                                .local_io_region_size = config.local_io_region_size,
                                .worker_count = workers,
                                .transaction_count = config.transaction_count,
                                .run_limit = config.run_limit_operation_count},
        config.storage_plain_content);
    session.init(plan_holder->local_region_size(), plan_holder->transaction_count(), workers);

    // Workers one after another (the pairing rule), each with its run on its own thread.
    for (uint32_t i = 0; i < workers; ++i) {
      auto& w = session.add_worker(config.cpus[i],
                                   {.slots = plan_holder->workers()[i].transaction_count,
                                    .io_timeout = host::io_timeout_for(config.control_timeout())});
      runs.push_back(core::engine_owned<initiator::worker_run>::build(
          w.thread(),
          [plan = plan_holder.get(), i, q = w.queue(), region = &session.region(),
           e = &w.thread().engine()] {
            return std::make_unique<initiator::worker_run>(*plan, i, *q, *region, *e);
          },
          config.control_timeout()));
    }
    session.wait_ready();
    session.start();
  } catch (const status_error& e) {
    // Ctrl-C before the run: the service still gets its shutdown, so it ends the session in
    // order rather than as a client that vanished.
    if (e.code() == status::shutdown) {
      runs.clear();
      try {
        session.shutdown();
      } catch (const status_error& f) {
        ZC_LOG_WARN("shutdown: {}", f.what());
      }
    }
    throw;
  }
  const initiator::execution_plan& plan = *plan_holder;
  ZC_LOG_INFO("running {} on {} workers", initiator::to_string(plan.strategy()), workers);

  outcome result = run_workers(session, plan, runs, config);
  int code = 0;
  if (result.failure.empty()) {
    session.stop();
    const auto summary = initiator::summarize(result.stats, plan.io_size());
    std::fputs(initiator::format_run_stats(summary).c_str(), stdout);
    std::fflush(stdout);
    if (!config.stats_json.empty()) write_stats_json(config.stats_json, summary);
    if (result.interrupted) code = exit_interrupted;
  } else {
    std::fprintf(stderr, "%s: %s\n", initiator::program_name, result.failure.c_str());
    std::fputs(initiator::format_run_failed().c_str(), stderr);
    std::fflush(stderr);
    code = 1;
    try {  // the service may be gone: what reaches it is a courtesy
      session.stop();
    } catch (const status_error& e) {
      ZC_LOG_WARN("stop: {}", e.what());
      runs.clear();
      return code;
    }
  }
  runs.clear();  // each run goes before its worker (both on the worker's thread, in this order)
  session.shutdown();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zc;
  core::print_banner(initiator::program_name, ZC_VERSION_STRING);
  initiator::initiator_config config;
  if (auto code = initiator::parse_config(argc, argv, config)) return *code;
  initiator::print_config(config);
  core::install_stop_signal_handlers();
  return core::run_guarded(
      initiator::program_name, [&] { return run(config); },
      [](status code) {
        std::fputs(initiator::format_run_failed().c_str(), stderr);
        return code == status::shutdown ? exit_interrupted : 1;
      });
}
