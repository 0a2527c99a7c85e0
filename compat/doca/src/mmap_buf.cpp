// doca_mmap.h, doca_buf.h and doca_buf_inventory.h over zc::core::memory_map and buffer.
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_mmap.h>

#include <limits>
#include <span>

#include "core/blob.hpp"
#include "objects.hpp"

namespace zc::doca {
namespace {

constexpr uint32_t known_access_flags =
    DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE |
    DOCA_ACCESS_FLAG_RDMA_ATOMIC | DOCA_ACCESS_FLAG_PCI_READ_ONLY |
    DOCA_ACCESS_FLAG_PCI_READ_WRITE | DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING;

// Relaxed ordering is a PCIe hint with no meaning here; the rest are zcstore's access bits.
core::access to_zc_access(uint32_t mask) {
  return static_cast<core::access>(mask &
                                   ~static_cast<uint32_t>(DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING));
}

// Started with either PCI flag, a map is adopted into a memfd so doca_mmap_export_pci can share it.
bool pci_shareable(uint32_t mask) {
  return (mask & (DOCA_ACCESS_FLAG_PCI_READ_ONLY | DOCA_ACCESS_FLAG_PCI_READ_WRITE)) != 0;
}

// Pairs a zcstore buffer with its doca_buf (refcount 1) and counts it on its map.
doca_buf* adopt(doca_buf_inventory& inv, doca_mmap& mmap, core::buffer* b) {
  auto [it, added] = inv.by_zc.try_emplace(b, nullptr);
  if (added) {
    // There are exactly num_elements zcstore buffers, and bufs has that many slots.
    it->second = &inv.bufs[inv.by_zc.size() - 1];
  }
  doca_buf* d = it->second;
  d->zc = b;
  d->inventory = &inv;
  d->mmap = &mmap;
  d->refcount = 1;
  ++inv.outstanding;
  ++mmap.buffers;
  return d;
}

doca_error_t usable(doca_buf_inventory* inv, doca_mmap* mmap, doca_buf** buf) {
  if (inv == nullptr || mmap == nullptr || buf == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (inv->zc == nullptr || mmap->map == nullptr) return DOCA_ERROR_BAD_STATE;
  return DOCA_SUCCESS;
}

}  // namespace
}  // namespace zc::doca

using zc::doca::guarded;
using zc::doca::to_doca;

extern "C" {

// ---- doca_mmap

doca_error_t doca_mmap_create(struct doca_mmap** mmap) {
  if (mmap == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    *mmap = new doca_mmap();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_mmap_destroy(struct doca_mmap* mmap) {
  if (mmap == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (mmap->buffers != 0) return DOCA_ERROR_IN_USE;
  delete mmap;
  return DOCA_SUCCESS;
}

doca_error_t doca_mmap_start(struct doca_mmap* mmap) {
  if (mmap == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (mmap->map != nullptr) return DOCA_ERROR_BAD_STATE;
  return guarded(__func__, [&] {
    if (mmap->addr == nullptr || mmap->len == 0) return DOCA_ERROR_INVALID_VALUE;
    // A map another process may reach over PCI must live in a memfd: the program's memory is
    // adopted into one now (same addresses, same contents; core::memory_map::adopt's rules).
    const auto access = zc::doca::to_zc_access(mmap->access);
    mmap->map = zc::doca::pci_shareable(mmap->access)
                    ? zc::core::memory_map::adopt(mmap->addr, mmap->len, access)
                    : zc::core::memory_map::wrap(mmap->addr, mmap->len, access);
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_mmap_stop(struct doca_mmap* mmap) {
  if (mmap == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (mmap->buffers != 0) return DOCA_ERROR_IN_USE;
  if (mmap->from_export) return DOCA_ERROR_NOT_PERMITTED;
  mmap->map.reset();  // withdraws an RDMA export, and gives adopted memory back as private
  mmap->rdma_export.clear();
  mmap->pci_export.clear();
  return DOCA_SUCCESS;
}

doca_error_t doca_mmap_add_dev(struct doca_mmap* mmap, struct doca_dev* dev) {
  if (mmap == nullptr || dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return mmap->map == nullptr ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_mmap_rm_dev(struct doca_mmap* mmap, struct doca_dev* dev) {
  if (mmap == nullptr || dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return mmap->map == nullptr ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_mmap_set_memrange(struct doca_mmap* mmap, void* addr, size_t len) {
  if (mmap == nullptr || addr == nullptr || len == 0) return DOCA_ERROR_INVALID_VALUE;
  if (mmap->map != nullptr || mmap->from_export) return DOCA_ERROR_BAD_STATE;
  if (reinterpret_cast<uintptr_t>(addr) > std::numeric_limits<uintptr_t>::max() - len)
    return DOCA_ERROR_INVALID_VALUE;
  mmap->addr = addr;
  mmap->len = len;
  return DOCA_SUCCESS;
}

doca_error_t doca_mmap_get_memrange(const struct doca_mmap* mmap, void** addr, size_t* len) {
  if (mmap == nullptr || addr == nullptr || len == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (mmap->map != nullptr) {
    *addr = mmap->map->data();
    *len = mmap->map->size();
  } else {
    *addr = mmap->addr;
    *len = mmap->len;
  }
  return DOCA_SUCCESS;
}

doca_error_t doca_mmap_set_permissions(struct doca_mmap* mmap, uint32_t access_mask) {
  if (mmap == nullptr || (access_mask & ~zc::doca::known_access_flags) != 0)
    return DOCA_ERROR_INVALID_VALUE;
  if (mmap->map != nullptr || mmap->from_export) return DOCA_ERROR_BAD_STATE;
  mmap->access = access_mask;
  return DOCA_SUCCESS;
}

doca_error_t doca_mmap_set_user_data(struct doca_mmap* mmap, union doca_data user_data) {
  if (mmap == nullptr) return DOCA_ERROR_INVALID_VALUE;
  mmap->user_data = user_data;
  return DOCA_SUCCESS;
}

doca_error_t doca_mmap_get_user_data(const struct doca_mmap* mmap, union doca_data* user_data) {
  if (mmap == nullptr || user_data == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *user_data = mmap->user_data;
  return DOCA_SUCCESS;
}

doca_error_t doca_mmap_set_max_num_devices(struct doca_mmap* mmap, uint32_t max_num_devices) {
  if (mmap == nullptr || max_num_devices == 0) return DOCA_ERROR_INVALID_VALUE;
  return mmap->map == nullptr ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_mmap_export_rdma(struct doca_mmap* mmap, const struct doca_dev* dev,
                                   const void** export_desc, size_t* export_desc_len) {
  if (mmap == nullptr || dev == nullptr || export_desc == nullptr || export_desc_len == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  if (mmap->map == nullptr) return DOCA_ERROR_BAD_STATE;
  return guarded(__func__, [&] {
    // A second call hands out the same export, as long as the map is started.
    if (mmap->rdma_export.empty()) mmap->rdma_export = mmap->map->export_rdma();
    *export_desc = mmap->rdma_export.data();
    *export_desc_len = mmap->rdma_export.size();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_mmap_export_pci(struct doca_mmap* mmap, const struct doca_dev* dev,
                                  const void** export_desc, size_t* export_desc_len) {
  if (mmap == nullptr || dev == nullptr || export_desc == nullptr || export_desc_len == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  if (mmap->map == nullptr) return DOCA_ERROR_BAD_STATE;
  return guarded(__func__, [&] {
    // NOT_PERMITTED without a PCI flag (the map was not adopted at start), NOT_SUPPORTED for a
    // map created from an export. A second call hands out the same blob.
    if (mmap->pci_export.empty()) mmap->pci_export = mmap->map->export_pci();
    *export_desc = mmap->pci_export.data();
    *export_desc_len = mmap->pci_export.size();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_mmap_create_from_export(const union doca_data* user_data, const void* export_desc,
                                          size_t export_desc_len, struct doca_dev* dev,
                                          struct doca_mmap** mmap) {
  if (export_desc == nullptr || export_desc_len == 0 || dev == nullptr || mmap == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    // Both imports check the framing (magic, version, length, checksum) before anything else. A
    // PCI export maps the exporter's pages here: the map's range is this process's mapping.
    const std::span blob(static_cast<const uint8_t*>(export_desc), export_desc_len);
    auto imported =
        zc::core::peek_blob_kind(blob) == static_cast<uint16_t>(zc::core::blob_kind::pci_memory)
            ? zc::core::memory_map::import_pci(blob)
            : zc::core::memory_map::import_rdma(blob);
    auto m = std::make_unique<doca_mmap>();
    if (user_data != nullptr) m->user_data = *user_data;
    m->from_export = true;
    m->addr = imported->data();
    m->len = imported->size();
    m->access = static_cast<uint32_t>(imported->permissions());
    m->map = std::move(imported);
    *mmap = m.release();
    return DOCA_SUCCESS;
  });
}

// ---- doca_buf_inventory

doca_error_t doca_buf_inventory_create(size_t num_elements, struct doca_buf_inventory** inventory) {
  if (inventory == nullptr || num_elements == 0 ||
      num_elements > std::numeric_limits<uint32_t>::max())
    return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    auto inv = std::make_unique<doca_buf_inventory>();
    inv->num_elements = num_elements;
    *inventory = inv.release();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_buf_inventory_destroy(struct doca_buf_inventory* inventory) {
  if (inventory == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (inventory->outstanding != 0) return DOCA_ERROR_IN_USE;
  delete inventory;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_inventory_start(struct doca_buf_inventory* inventory) {
  if (inventory == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (inventory->zc != nullptr) return DOCA_ERROR_BAD_STATE;
  return guarded(__func__, [&] {
    const auto n = static_cast<uint32_t>(inventory->num_elements);
    inventory->zc = std::make_unique<zc::core::buffer_inventory>(n);
    inventory->bufs.assign(n, doca_buf{});
    inventory->by_zc.clear();
    inventory->by_zc.reserve(n);
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_buf_inventory_stop(struct doca_buf_inventory* inventory) {
  if (inventory == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (inventory->outstanding != 0) return DOCA_ERROR_IN_USE;
  inventory->by_zc.clear();
  inventory->bufs.clear();
  inventory->zc.reset();
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_inventory_get_num_elements(const struct doca_buf_inventory* inventory,
                                                 uint32_t* num_of_elements) {
  if (inventory == nullptr || num_of_elements == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *num_of_elements = static_cast<uint32_t>(inventory->num_elements);
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_inventory_get_num_free_elements(const struct doca_buf_inventory* inventory,
                                                      uint32_t* num_of_free_elements) {
  if (inventory == nullptr || num_of_free_elements == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *num_of_free_elements = static_cast<uint32_t>(inventory->num_elements) - inventory->outstanding;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_inventory_set_user_data(struct doca_buf_inventory* inventory,
                                              union doca_data user_data) {
  if (inventory == nullptr) return DOCA_ERROR_INVALID_VALUE;
  inventory->user_data = user_data;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_inventory_get_user_data(const struct doca_buf_inventory* inventory,
                                              union doca_data* user_data) {
  if (inventory == nullptr || user_data == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *user_data = inventory->user_data;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_inventory_buf_get_by_args(struct doca_buf_inventory* inventory,
                                                struct doca_mmap* mmap, void* addr, size_t len,
                                                void* data, size_t data_len,
                                                struct doca_buf** buf) {
  if (auto r = zc::doca::usable(inventory, mmap, buf); r != DOCA_SUCCESS) return r;
  zc::core::buffer* b = nullptr;
  auto s = inventory->zc->get_by_addr(*mmap->map, addr, len, b);
  if (!zc::ok(s)) return to_doca(s);
  s = b->set_data(static_cast<uint8_t*>(data), data_len);
  if (!zc::ok(s)) {
    b->release();
    return to_doca(s);
  }
  *buf = zc::doca::adopt(*inventory, *mmap, b);
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_inventory_buf_get_by_addr(struct doca_buf_inventory* inventory,
                                                struct doca_mmap* mmap, void* addr, size_t len,
                                                struct doca_buf** buf) {
  return doca_buf_inventory_buf_get_by_args(inventory, mmap, addr, len, addr, 0, buf);
}

doca_error_t doca_buf_inventory_buf_get_by_data(struct doca_buf_inventory* inventory,
                                                struct doca_mmap* mmap, void* data, size_t data_len,
                                                struct doca_buf** buf) {
  return doca_buf_inventory_buf_get_by_args(inventory, mmap, data, data_len, data, data_len, buf);
}

doca_error_t doca_buf_inventory_buf_dup(struct doca_buf_inventory* inventory,
                                        const struct doca_buf* src, struct doca_buf** dst) {
  if (src == nullptr || src->zc == nullptr || src->refcount == 0) return DOCA_ERROR_INVALID_VALUE;
  return doca_buf_inventory_buf_get_by_args(inventory, src->mmap, src->zc->head(),
                                            src->zc->capacity(), src->zc->data(),
                                            src->zc->data_length(), dst);
}

// ---- doca_buf

doca_error_t doca_buf_inc_refcount(struct doca_buf* buf, uint16_t* refcount) {
  if (buf == nullptr || buf->refcount == 0) return DOCA_ERROR_INVALID_VALUE;
  if (buf->refcount == std::numeric_limits<uint16_t>::max()) return DOCA_ERROR_TOO_BIG;
  ++buf->refcount;
  if (refcount != nullptr) *refcount = buf->refcount;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_dec_refcount(struct doca_buf* buf, uint16_t* refcount) {
  if (buf == nullptr || buf->refcount == 0) return DOCA_ERROR_INVALID_VALUE;
  --buf->refcount;
  if (refcount != nullptr) *refcount = buf->refcount;
  if (buf->refcount == 0) {
    buf->zc->release();
    --buf->inventory->outstanding;
    --buf->mmap->buffers;
  }
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_get_refcount(const struct doca_buf* buf, uint16_t* refcount) {
  if (buf == nullptr || refcount == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *refcount = buf->refcount;
  return DOCA_SUCCESS;
}

#define ZC_DOCA_LIVE_BUF(buf, out) \
  if ((buf) == nullptr || (buf)->refcount == 0 || (out) == nullptr) return DOCA_ERROR_INVALID_VALUE

doca_error_t doca_buf_get_len(const struct doca_buf* buf, size_t* len) {
  ZC_DOCA_LIVE_BUF(buf, len);
  *len = buf->zc->capacity();
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_get_head(const struct doca_buf* buf, void** head) {
  ZC_DOCA_LIVE_BUF(buf, head);
  *head = buf->zc->head();
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_get_data_len(const struct doca_buf* buf, size_t* data_len) {
  ZC_DOCA_LIVE_BUF(buf, data_len);
  *data_len = buf->zc->data_length();
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_get_data(const struct doca_buf* buf, void** data) {
  ZC_DOCA_LIVE_BUF(buf, data);
  *data = buf->zc->data();
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_set_data(struct doca_buf* buf, void* data, size_t data_len) {
  if (buf == nullptr || buf->refcount == 0) return DOCA_ERROR_INVALID_VALUE;
  return to_doca(buf->zc->set_data(static_cast<uint8_t*>(data), data_len));
}

doca_error_t doca_buf_set_data_len(struct doca_buf* buf, size_t data_len) {
  if (buf == nullptr || buf->refcount == 0) return DOCA_ERROR_INVALID_VALUE;
  return to_doca(buf->zc->set_data(buf->zc->data(), data_len));
}

doca_error_t doca_buf_reset_data_len(struct doca_buf* buf) {
  return doca_buf_set_data_len(buf, 0);
}

doca_error_t doca_buf_get_list_len(const struct doca_buf* buf, uint32_t* num_elements) {
  ZC_DOCA_LIVE_BUF(buf, num_elements);
  *num_elements = 1;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_get_next_in_list(struct doca_buf* buf, struct doca_buf** next_buf) {
  ZC_DOCA_LIVE_BUF(buf, next_buf);
  *next_buf = nullptr;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_get_last_in_list(struct doca_buf* buf, struct doca_buf** last_buf) {
  ZC_DOCA_LIVE_BUF(buf, last_buf);
  *last_buf = buf;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_is_first_in_list(const struct doca_buf* buf, uint8_t* is_first) {
  ZC_DOCA_LIVE_BUF(buf, is_first);
  *is_first = 1;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_is_last_in_list(const struct doca_buf* buf, uint8_t* is_last) {
  ZC_DOCA_LIVE_BUF(buf, is_last);
  *is_last = 1;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_is_in_list(const struct doca_buf* buf, uint8_t* is_in_list) {
  ZC_DOCA_LIVE_BUF(buf, is_in_list);
  *is_in_list = 0;
  return DOCA_SUCCESS;
}

doca_error_t doca_buf_chain_list(struct doca_buf* list1, struct doca_buf* list2) {
  (void)list1;
  (void)list2;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_buf_chain_list_tail(struct doca_buf* list1, struct doca_buf* list1_tail,
                                      struct doca_buf* list2) {
  (void)list1;
  (void)list1_tail;
  (void)list2;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_buf_unchain_list(struct doca_buf* list1, struct doca_buf* list2) {
  (void)list1;
  (void)list2;
  return ZC_DOCA_NOT_SUPPORTED();
}

}  // extern "C"
