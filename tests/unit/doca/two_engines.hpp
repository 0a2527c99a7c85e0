// For the DOCA C-API tests that run two contexts in one process: opening a device by name, one
// side's device, progress engine and rdma context, the connection exchange DOCA programs do from
// their STARTING callback, task callbacks that count into the context's user data, whether a
// context is idle, and progressing both progress engines until a condition holds (bounded).
#pragma once

#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_pe.h>
#include <doca_rdma.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace zc::doca::testing {

// The device whose ibdev name is `name` ("sm", "tcp", "mlx5_0", ...), opened; null when none is.
inline doca_dev* open_device(const std::string& name) {
  doca_devinfo** list = nullptr;
  uint32_t n = 0;
  EXPECT_EQ(doca_devinfo_create_list(&list, &n), DOCA_SUCCESS);
  doca_dev* dev = nullptr;
  for (uint32_t i = 0; i < n; ++i) {
    char ibdev[DOCA_DEVINFO_IBDEV_NAME_SIZE] = {};
    EXPECT_EQ(doca_devinfo_get_ibdev_name(list[i], ibdev, sizeof(ibdev)), DOCA_SUCCESS);
    if (name == ibdev) {
      EXPECT_EQ(doca_dev_open(list[i], &dev), DOCA_SUCCESS);
    }
  }
  EXPECT_EQ(doca_devinfo_destroy_list(list), DOCA_SUCCESS);
  return dev;
}

inline bool ctx_idle(doca_ctx* ctx) {
  enum doca_ctx_states state = DOCA_CTX_STATE_RUNNING;
  return doca_ctx_get_state(ctx, &state) == DOCA_SUCCESS && state == DOCA_CTX_STATE_IDLE;
}

// One side of a pair: its device, progress engine and rdma context (not yet connected to the
// engine), and the connection blob it exported. A test's peer type derives from it.
struct rdma_side {
  doca_dev* dev = nullptr;
  doca_pe* pe = nullptr;
  doca_rdma* rdma = nullptr;
  doca_ctx* ctx = nullptr;
  std::vector<uint8_t> blob;  // what this side exported

  // Call through ASSERT_NO_FATAL_FAILURE.
  void open(const std::string& device) {
    dev = open_device(device);
    ASSERT_NE(dev, nullptr);
    ASSERT_EQ(doca_pe_create(&pe), DOCA_SUCCESS);
    ASSERT_EQ(doca_rdma_create(dev, &rdma), DOCA_SUCCESS);
    ctx = doca_rdma_as_ctx(rdma);
  }
  // Asks a context that is not idle to stop (its engine then has to be progressed to idle).
  void stop() {
    enum doca_ctx_states state = DOCA_CTX_STATE_IDLE;
    if (ctx != nullptr && doca_ctx_get_state(ctx, &state) == DOCA_SUCCESS &&
        state != DOCA_CTX_STATE_IDLE)
      doca_ctx_stop(ctx);
  }
  // Once idle: destroys what open() made.
  void close() {
    if (rdma != nullptr) {
      EXPECT_EQ(doca_rdma_destroy(rdma), DOCA_SUCCESS);
    }
    if (pe != nullptr) {
      EXPECT_EQ(doca_pe_destroy(pe), DOCA_SUCCESS);
    }
    if (dev != nullptr) {
      EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
    }
  }
};

// What a DOCA program does from its STARTING callback: exports this side's connection; when the
// other side's STARTING came first (it has exported already), connects both ways. Otherwise the
// other side connects from its own.
inline void export_and_connect(rdma_side& self, rdma_side& other) {
  const void* details = nullptr;
  size_t len = 0;
  doca_rdma_connection* connection = nullptr;
  ASSERT_EQ(doca_rdma_export(self.rdma, &details, &len, &connection), DOCA_SUCCESS);
  self.blob.assign(static_cast<const uint8_t*>(details),
                   static_cast<const uint8_t*>(details) + len);
  if (!other.blob.empty()) {
    ASSERT_EQ(doca_rdma_connect(self.rdma, other.blob.data(), other.blob.size(), connection),
              DOCA_SUCCESS);
    ASSERT_EQ(doca_rdma_connect(other.rdma, self.blob.data(), self.blob.size(), nullptr),
              DOCA_SUCCESS);
  }
}

// Task callbacks for any task type: each frees the task and counts it in the context's user data,
// a Counts with `completed`, `failed` and `last_error`. A completion must have succeeded.
template <typename Counts, typename Task, doca_task* (*as_task)(Task*)>
void count_completed(Task* task, doca_data, doca_data ctx_data) {
  EXPECT_EQ(doca_task_get_status(as_task(task)), DOCA_SUCCESS);
  static_cast<Counts*>(ctx_data.ptr)->completed++;
  doca_task_free(as_task(task));
}
template <typename Counts, typename Task, doca_task* (*as_task)(Task*)>
void count_failed(Task* task, doca_data, doca_data ctx_data) {
  auto* counts = static_cast<Counts*>(ctx_data.ptr);
  counts->failed++;
  counts->last_error = doca_task_get_status(as_task(task));
  doca_task_free(as_task(task));
}

// Progresses both engines until done() holds; false when `limit` passed first.
template <typename Done>
bool progress_both_until(doca_pe* a, doca_pe* b, Done done,
                         std::chrono::seconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    doca_pe_progress(a);
    doca_pe_progress(b);
  }
  return true;
}

}  // namespace zc::doca::testing
