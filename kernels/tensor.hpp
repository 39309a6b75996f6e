// The tensor every op of the op interface takes: a device, an element type, a shape with
// strides, and either owned storage or a view into someone else's memory. Deliberately
// small: the forward pass needs contiguous row-major tensors, slices along the first
// dimension and reshapes, and a CUDA backend can hand out device tensors of the same type.
#pragma once

#include "common/error.hpp"
#include "kernels/dtype.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace di {

/// Where a tensor's bytes live.
enum class device_kind : std::uint8_t { cpu, cuda };

struct device {
  device_kind kind = device_kind::cpu;
  int index = 0;
  bool operator==(const device&) const = default;
};

inline constexpr device cpu_device{};
std::string to_string(device d);
/// "cpu", "cuda" (device 0) or "cuda:N"; anything else is a di::error naming the text.
device parse_device(std::string_view name);
/// Throws a di::error saying why `d` cannot run the model here (a build without the CUDA
/// backend, no usable CUDA device and the runtime's reason, an index past the visible devices,
/// a GPU older than the kernels' sm_90a), before anything is loaded onto it; the CPU always can.
void require_device(device d);

/// Maximum rank of a tensor (tokens, heads, streams, ... never need more).
inline constexpr int max_tensor_rank = 5;

/// A shape: up to max_tensor_rank extents.
class tensor_shape {
 public:
  tensor_shape() = default;
  tensor_shape(std::initializer_list<std::int64_t> dims);
  explicit tensor_shape(std::span<const std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int d) const { return dims_[std::size_t(d)]; }
  std::int64_t& operator[](int d) { return dims_[std::size_t(d)]; }
  std::int64_t numel() const;
  std::span<const std::int64_t> dims() const { return {dims_.data(), std::size_t(rank_)}; }
  bool operator==(const tensor_shape& o) const;
  std::string str() const;

 private:
  std::array<std::int64_t, max_tensor_rank> dims_{};
  int rank_ = 0;
};

/// A strided view of typed elements on a device, optionally owning its storage. Copying a
/// tensor copies the handle, not the bytes (storage is shared).
class tensor {
 public:
  tensor() = default;

  /// Uninitialised owned storage on `dev` (CUDA storage needs a build with the CUDA backend;
  /// it is allocated on the current stream, see kernels/cuda/stream.hpp).
  static tensor empty(const tensor_shape& shape, dtype type, device dev = cpu_device);
  /// Owned storage filled with zero bytes.
  static tensor zeros(const tensor_shape& shape, dtype type, device dev = cpu_device);
  /// Owned fp32 storage filled with `value`.
  static tensor full(const tensor_shape& shape, float value);
  /// A contiguous view of memory owned by someone else; it must outlive the tensor. On a CUDA
  /// device: memory that device's kernels reach at this address (its device memory, or pinned
  /// host memory mapped at the same address) -- copies between such tensors run as kernels.
  static tensor view_of(void* data, const tensor_shape& shape, dtype type, device dev = cpu_device);
  static tensor view_of(const void* data, const tensor_shape& shape, dtype type,
                        device dev = cpu_device);

  bool defined() const { return defined_; }
  dtype type() const { return type_; }
  device dev() const { return device_; }
  const tensor_shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  std::int64_t size(int d) const { return shape_[d < 0 ? d + rank() : d]; }
  std::int64_t stride(int d) const { return strides_[std::size_t(d < 0 ? d + rank() : d)]; }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t nbytes() const { return std::size_t(numel()) * dtype_size(type_); }
  bool is_contiguous() const;

  /// Typed pointer to the first element; throws when T does not match the dtype.
  template <typename T>
  T* data() const {
    check_element<T>();
    return static_cast<T*>(data_);
  }
  void* raw() const { return data_; }

  /// The same bytes with another shape (contiguous tensors only; numel must match).
  tensor view(const tensor_shape& shape) const;
  /// Elements [begin, end) along dimension `dim` (a view; strides unchanged).
  tensor slice(int dim, std::int64_t begin, std::int64_t end) const;
  /// Row `i` along dimension 0, dropping that dimension.
  tensor operator[](std::int64_t i) const;
  /// A contiguous owned copy (on the same device; non-contiguous only on the CPU).
  tensor clone() const;
  /// A contiguous owned copy on `dev` (host<->device copies return once complete).
  tensor to(device dev) const;
  /// Copies the bytes of `src` (same dtype and shape, both contiguous) into this tensor's
  /// storage, across devices if needed.
  void copy_from(const tensor& src);

 private:
  template <typename T>
  void check_element() const;
  /// A contiguous tensor over all of `storage`.
  static tensor over(std::shared_ptr<std::byte[]> storage, const tensor_shape& shape, dtype type,
                     device dev);

  std::shared_ptr<std::byte[]> storage_;
  void* data_ = nullptr;
  tensor_shape shape_;
  std::array<std::int64_t, max_tensor_rank> strides_{};
  dtype type_ = dtype::f32;
  device device_{};
  bool defined_ = false;
};

/// dtype of a C++ element type (float, uint16_t as bf16, int32_t, int64_t, uint8_t).
template <typename T>
constexpr dtype dtype_of();
template <>
constexpr dtype dtype_of<float>() {
  return dtype::f32;
}
template <>
constexpr dtype dtype_of<std::int32_t>() {
  return dtype::i32;
}
template <>
constexpr dtype dtype_of<std::int64_t>() {
  return dtype::i64;
}
template <>
constexpr dtype dtype_of<std::uint8_t>() {
  return dtype::u8;
}
template <>
constexpr dtype dtype_of<std::uint16_t>() {
  return dtype::bf16;
}

template <typename T>
void tensor::check_element() const {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, void>) return;
  DI_CHECK(dtype_of<U>() == type_ || (std::is_same_v<U, std::uint8_t> && dtype_size(type_) == 1),
           "tensor holds {}, accessed as {}", dtype_name(type_), dtype_name(dtype_of<U>()));
}

/// Throws di::error unless `t` is a contiguous `type` tensor of exactly `shape`; `what` names
/// the operand in the message.
void check_tensor(const tensor& t, dtype type, const tensor_shape& shape, const char* what);
/// Throws unless `t` is a contiguous tensor of `type` and `rank` on the CPU.
void check_cpu_tensor(const tensor& t, dtype type, int rank, const char* what);
/// Throws unless `t` is a contiguous tensor of `type` and `rank` on a CUDA device.
void check_cuda_tensor(const tensor& t, dtype type, int rank, const char* what);

}  // namespace di
