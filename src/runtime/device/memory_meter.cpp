#include "runtime/device/memory_meter.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>

#ifdef MADPIPE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {
std::atomic<std::int64_t> g_cpu_current{0};
std::atomic<std::int64_t> g_cpu_peak{0};
std::atomic<bool> g_cpu_installed{false};
thread_local bool t_uncounted = false;

void raise_peak(std::int64_t level) {
  std::int64_t peak = g_cpu_peak.load(std::memory_order_relaxed);
  while (level > peak &&
         !g_cpu_peak.compare_exchange_weak(peak, level, std::memory_order_relaxed)) {
  }
}

// Every block carries a header with what its deleter needs; 64 bytes keep the data as aligned as
// the wrapped allocator made the block.
struct alignas(64) BlockHeader {
  std::int64_t bytes;
  void* context;
  c10::DeleterFnPtr deleter;
};
static_assert(sizeof(BlockHeader) == 64, "the header must keep 64-byte alignment");

void counting_delete(void* data) {
  if (data == nullptr) return;
  auto* header = reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - sizeof(BlockHeader));
  g_cpu_current.fetch_sub(header->bytes, std::memory_order_relaxed);
  const c10::DeleterFnPtr deleter = header->deleter;
  void* context = header->context;
  if (deleter != nullptr) deleter(context);
}

// Counts the bytes of live CPU blocks. LibTorch 1.x declares allocate() const and 2.x non-const
// (with copy_data); both forms are defined so that either overrides.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* wrapped) : wrapped_(wrapped) {}

  c10::DataPtr allocate(std::size_t n) const { return counted(n); }
  c10::DataPtr allocate(std::size_t n) { return counted(n); }
  c10::DeleterFnPtr raw_deleter() const override { return &counting_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count > 0) std::memcpy(dest, src, count);
  }

 private:
  c10::DataPtr counted(std::size_t n) const {
    c10::DataPtr block = wrapped_->allocate(n + sizeof(BlockHeader));
    char* base = static_cast<char*>(block.get());
    const c10::DeleterFnPtr deleter = block.get_deleter();
    void* context = block.release_context();
    const std::int64_t counted = t_uncounted ? 0 : static_cast<std::int64_t>(n);
    new (base) BlockHeader{counted, context, deleter};
    raise_peak(g_cpu_current.fetch_add(counted, std::memory_order_relaxed) + counted);
    void* data = base + sizeof(BlockHeader);
    return {data, data, &counting_delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::Allocator* wrapped_;
};
}  // namespace

void madpipe::runtime::install_cpu_memory_counter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingAllocator counting(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&counting, /*priority=*/100);
    g_cpu_installed = true;
  });
}

madpipe::runtime::UncountedHostAllocations::UncountedHostAllocations() : previous_(t_uncounted) {
  t_uncounted = true;
}

madpipe::runtime::UncountedHostAllocations::~UncountedHostAllocations() { t_uncounted = previous_; }

std::int64_t madpipe::runtime::peak_resident_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

madpipe::runtime::MemoryMeter::MemoryMeter(c10::Device device) : device_(device) {}

bool madpipe::runtime::MemoryMeter::counting() const {
  if (device_.is_cpu()) return g_cpu_installed.load();
#ifdef MADPIPE_WITH_CUDA
  return device_.is_cuda();
#else
  return false;
#endif
}

#ifdef MADPIPE_WITH_CUDA
namespace {
// Bytes allocated on the device now, or at most since the last reset. Index 0 of the per-pool
// statistics is the aggregate over all pools.
std::int64_t cuda_allocated(const c10::Device& device, bool peak) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
  const auto& allocated = stats.allocated_bytes[0];
  return peak ? allocated.peak : allocated.current;
}
}  // namespace
#endif

std::int64_t madpipe::runtime::MemoryMeter::current_bytes() const {
  if (device_.is_cpu()) return g_cpu_current.load();
#ifdef MADPIPE_WITH_CUDA
  if (device_.is_cuda()) return cuda_allocated(device_, false);
#endif
  return 0;
}

namespace {
// The part of a device's peak that interval_peak() took out of the raw statistics, so that
// peak_bytes() still covers it (index 0: the CPU, 1 + n: CUDA device n).
std::int64_t g_carried_peak[1 + 64] = {};

std::int64_t& carried_peak(const c10::Device& device) {
  const int index = device.is_cpu() ? 0 : 1 + (device.has_index() ? device.index() : 0);
  return g_carried_peak[std::min(index, 64)];
}
}  // namespace

std::int64_t madpipe::runtime::MemoryMeter::raw_peak_bytes() const {
  if (device_.is_cpu()) return g_cpu_peak.load();
#ifdef MADPIPE_WITH_CUDA
  if (device_.is_cuda()) return cuda_allocated(device_, true);
#endif
  return 0;
}

void madpipe::runtime::MemoryMeter::reset_raw_peak() {
  if (device_.is_cpu()) {
    g_cpu_peak.store(g_cpu_current.load());
    return;
  }
#ifdef MADPIPE_WITH_CUDA
  if (device_.is_cuda())
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.has_index() ? device_.index() : 0);
#endif
}

std::int64_t madpipe::runtime::MemoryMeter::peak_bytes() const {
  return std::max(carried_peak(device_), raw_peak_bytes());
}

void madpipe::runtime::MemoryMeter::reset_peak() {
  carried_peak(device_) = 0;
  reset_raw_peak();
}

std::int64_t madpipe::runtime::MemoryMeter::interval_peak() {
  const std::int64_t peak = raw_peak_bytes();
  std::int64_t& carried = carried_peak(device_);
  carried = std::max(carried, peak);
  reset_raw_peak();
  return peak;
}
