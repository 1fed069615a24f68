#include "hspmd/core/block_pool.h"

#include <algorithm>
#include <cstdint>

#include "hspmd/core/error.h"
#include "hspmd/core/size_class.h"

namespace hspmd {

BlockPool::BlockPool(std::unique_ptr<RawMemory> memory, Options options)
    : memory_(std::move(memory)), capacity_(options.capacity_bytes) {
  HSPMD_ASSERT(memory_ != nullptr) << "BlockPool without RawMemory";
  name_ = options.name.empty() ? memory_->name() : std::move(options.name);
}

BlockPool::~BlockPool() { evict_until(0); }

void* BlockPool::allocate(size_t bytes, StreamKey stream) {
  std::lock_guard lock(mu_);
  // Past SIZE_MAX / 2 the size class would overflow; no device has that much memory anyway.
  if (bytes > SIZE_MAX / 2) throw_out_of_memory(bytes, capacity_ != 0 ? capacity_ : memory_->total_bytes());
  if (capacity_ != 0 && stats_.current_bytes + bytes > capacity_) throw_out_of_memory(bytes, capacity_);
  const size_t block = size_class_bytes(bytes);
  void* ptr = take_cached({stream, block});
  if (ptr == nullptr) {
    if (capacity_ != 0) {
      // The cache lives in the emulated card's memory: it makes room first.
      const size_t live_blocks = stats_.reserved_bytes - stats_.cached_bytes;
      evict_until(capacity_ > live_blocks + block ? capacity_ - live_blocks - block : 0);
      if (stats_.reserved_bytes + block > capacity_) throw_out_of_memory(bytes, capacity_);
    }
    ptr = memory_->allocate(block);
    if (ptr == nullptr) {
      evict_until(0);  // the device may be short only because of the blocks this pool keeps
      ptr = memory_->allocate(block);
    }
    if (ptr == nullptr) throw_out_of_memory(bytes, capacity_ != 0 ? capacity_ : memory_->total_bytes());
    ++stats_.device_allocations;
    stats_.reserved_bytes += block;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  live_.emplace(ptr, Live{bytes, block, stream});
  stats_.current_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  return ptr;
}

void BlockPool::deallocate(void* ptr) {
  std::lock_guard lock(mu_);
  auto it = live_.find(ptr);
  HSPMD_ASSERT(it != live_.end()) << "BlockPool " << name_ << ": " << ptr << " was not allocated here or is freed";
  const Live live = it->second;
  live_.erase(it);
  stats_.current_bytes -= live.bytes;
  by_age_.push_back({ptr, live.block, live.stream});
  by_key_[{live.stream, live.block}].push_back(std::prev(by_age_.end()));
  stats_.cached_bytes += live.block;
}

void* BlockPool::take_cached(const CacheKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  // The block freed last: on the same stream it is the one most likely still in the GPU's L2.
  const Age age = it->second.back();
  it->second.pop_back();
  if (it->second.empty()) by_key_.erase(it);
  void* ptr = age->ptr;
  stats_.cached_bytes -= age->block;
  by_age_.erase(age);
  return ptr;
}

void BlockPool::evict_until(size_t max_cached) noexcept {
  while (stats_.cached_bytes > max_cached) {
    const Cached oldest = by_age_.front();
    // Each key's blocks are queued in the order they were freed, so the oldest overall is the
    // oldest of its key.
    auto key = by_key_.find({oldest.stream, oldest.block});
    key->second.pop_front();
    if (key->second.empty()) by_key_.erase(key);
    by_age_.pop_front();
    stats_.cached_bytes -= oldest.block;
    stats_.reserved_bytes -= oldest.block;
    ++stats_.device_frees;
    memory_->free(oldest.ptr);
  }
}

void BlockPool::throw_out_of_memory(size_t bytes, size_t capacity) const {
  throw OutOfMemoryError("out of memory on " + name_ + ": requested " + std::to_string(bytes) + " bytes with " +
                         std::to_string(stats_.current_bytes) + " bytes in use and a capacity of " +
                         std::to_string(capacity) + " bytes (" + std::to_string(stats_.reserved_bytes) +
                         " bytes reserved, " + std::to_string(stats_.cached_bytes) + " of them cached)");
}

BlockPoolStats BlockPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void BlockPool::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

size_t BlockPool::capacity_bytes() const {
  std::lock_guard lock(mu_);
  return capacity_;
}

void BlockPool::set_capacity_bytes(size_t bytes) {
  std::lock_guard lock(mu_);
  capacity_ = bytes;
  if (capacity_ != 0) {
    const size_t live_blocks = stats_.reserved_bytes - stats_.cached_bytes;
    evict_until(capacity_ > live_blocks ? capacity_ - live_blocks : 0);
  }
}

void BlockPool::release_cached() {
  std::lock_guard lock(mu_);
  evict_until(0);
}

}  // namespace hspmd
