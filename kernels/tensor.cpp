// The tensor type: shapes, owned CPU storage, views and slices. Device storage for CUDA comes
// from the CUDA backend (kernels/cuda/device_memory.hpp) when it is built; otherwise a CUDA
// tensor is a clear error.
#include "kernels/tensor.hpp"

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/device_memory.hpp"
#endif

#include <fmt/format.h>

#include <charconv>
#include <cstring>

namespace di {

std::string to_string(device d) {
  return d.kind == device_kind::cpu ? std::string("cpu") : fmt::format("cuda:{}", d.index);
}

device parse_device(std::string_view name) {
  if (name == "cpu") return cpu_device;
  if (name == "cuda") return {device_kind::cuda, 0};
  int index = -1;
  if (name.starts_with("cuda:")) {
    const std::string_view digits = name.substr(5);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty() ||
        digits.size() > 4)
      index = -1;
  }
  DI_CHECK(index >= 0, "device '{}': expected cpu, cuda or cuda:N", name);
  return {device_kind::cuda, index};
}

void require_device(device d) {
  if (d.kind == device_kind::cpu) return;
#if defined(DEEPINFER_HAVE_CUDA)
  std::string why;
  const std::vector<cuda::device_info> devices = cuda::list_devices(&why);
  DI_CHECK(!devices.empty(),
           "device '{}': no usable CUDA device ({}); `deepinfer env` shows what the CUDA runtime "
           "sees; --device cpu (a cluster file: devices = [\"cpu\"]) runs on the CPU",
           to_string(d), why);
  DI_CHECK(d.index < int(devices.size()),
           "device '{}': {} CUDA device(s) visible (cuda:0..cuda:{})", to_string(d), devices.size(),
           devices.size() - 1);
  const cuda::device_info& g = devices[std::size_t(d.index)];
  DI_CHECK(g.sm_major >= 9,
           "device '{}' ({}) has compute capability {}.{}; the CUDA kernels are built for 9.0 "
           "(Hopper: H100, H200)",
           to_string(d), g.name, g.sm_major, g.sm_minor);
#else
  DI_FAIL(
      "device '{}': this build has no CUDA backend (configure with nvcc present); --device "
      "cpu (a cluster file: devices = [\"cpu\"]) runs on the CPU",
      to_string(d));
#endif
}

tensor_shape::tensor_shape(std::initializer_list<std::int64_t> dims)
    : tensor_shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

tensor_shape::tensor_shape(std::span<const std::int64_t> dims) {
  DI_CHECK(dims.size() <= std::size_t(max_tensor_rank), "tensor rank {} exceeds {}", dims.size(),
           max_tensor_rank);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    DI_CHECK(dims[i] >= 0, "negative tensor extent {}", dims[i]);
    dims_[i] = dims[i];
  }
  rank_ = int(dims.size());
}

std::int64_t tensor_shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[std::size_t(i)];
  return n;
}

bool tensor_shape::operator==(const tensor_shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[std::size_t(i)] != o.dims_[std::size_t(i)]) return false;
  return true;
}

std::string tensor_shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[std::size_t(i)]);
  return s + "]";
}

namespace {

std::array<std::int64_t, max_tensor_rank> contiguous_strides(const tensor_shape& shape) {
  std::array<std::int64_t, max_tensor_rank> strides{};
  std::int64_t s = 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    strides[std::size_t(d)] = s;
    s *= shape[d];
  }
  return strides;
}

}  // namespace

namespace {

#if !defined(DEEPINFER_HAVE_CUDA)
[[noreturn]] void no_cuda(const char* what) {
  DI_FAIL("{} on a CUDA device: this build has no CUDA backend (configure with nvcc present)",
          what);
}
#endif

/// Copies `bytes` between two tensors' storage on any devices.
void copy_storage(void* dst, device dst_dev, const void* src, device src_dev, std::size_t bytes) {
  if (dst_dev.kind == device_kind::cpu && src_dev.kind == device_kind::cpu) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
#if defined(DEEPINFER_HAVE_CUDA)
  auto index = [](device d) { return d.kind == device_kind::cuda ? d.index : -1; };
  cuda::copy_bytes(dst, index(dst_dev), src, index(src_dev), bytes);
#else
  no_cuda("copy");
#endif
}

}  // namespace

tensor tensor::over(std::shared_ptr<std::byte[]> storage, const tensor_shape& shape, dtype type,
                    device dev) {
  tensor t;
  t.storage_ = std::move(storage);
  t.data_ = t.storage_.get();
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.type_ = type;
  t.device_ = dev;
  t.defined_ = true;
  return t;
}

tensor tensor::empty(const tensor_shape& shape, dtype type, device dev) {
  std::size_t bytes = std::size_t(shape.numel()) * dtype_size(type);
  if (dev.kind == device_kind::cuda) {
#if defined(DEEPINFER_HAVE_CUDA)
    return over(cuda::allocate(bytes, dev.index), shape, type, dev);
#else
    no_cuda("tensor::empty");
#endif
  }
  return over(std::shared_ptr<std::byte[]>(new std::byte[bytes > 0 ? bytes : 1]), shape, type, dev);
}

tensor tensor::zeros(const tensor_shape& shape, dtype type, device dev) {
  tensor t = empty(shape, type, dev);
  if (dev.kind == device_kind::cpu) {
    std::memset(t.data_, 0, t.nbytes());
    return t;
  }
#if defined(DEEPINFER_HAVE_CUDA)
  cuda::fill_zero_allocated(t.data_, t.nbytes(), dev.index);
#endif
  return t;
}

tensor tensor::full(const tensor_shape& shape, float value) {
  tensor t = empty(shape, dtype::f32);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = value;
  return t;
}

tensor tensor::view_of(void* data, const tensor_shape& shape, dtype type, device dev) {
  tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.type_ = type;
  t.device_ = dev;
  t.defined_ = true;
  return t;
}

tensor tensor::view_of(const void* data, const tensor_shape& shape, dtype type, device dev) {
  return view_of(const_cast<void*>(data), shape, type, dev);
}

bool tensor::is_contiguous() const {
  return strides_ == contiguous_strides(shape_) || numel() <= 1;
}

tensor tensor::view(const tensor_shape& shape) const {
  DI_CHECK(is_contiguous(), "view of a non-contiguous tensor {}", shape_.str());
  DI_CHECK(shape.numel() == numel(), "view {} of a tensor {}: element counts differ", shape.str(),
           shape_.str());
  tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

tensor tensor::slice(int dim, std::int64_t begin, std::int64_t end) const {
  if (dim < 0) dim += rank();
  DI_CHECK(dim >= 0 && dim < rank(), "slice dim {} of a rank-{} tensor", dim, rank());
  DI_CHECK(0 <= begin && begin <= end && end <= shape_[dim], "slice [{}, {}) of extent {}", begin,
           end, shape_[dim]);
  tensor t = *this;
  t.data_ = static_cast<std::byte*>(data_) +
            begin * strides_[std::size_t(dim)] * std::int64_t(dtype_size(type_));
  t.shape_[dim] = end - begin;
  return t;
}

tensor tensor::operator[](std::int64_t i) const {
  DI_CHECK(rank() >= 1 && i >= 0 && i < shape_[0], "row {} of a tensor {}", i, shape_.str());
  tensor t = slice(0, i, i + 1);
  std::array<std::int64_t, max_tensor_rank> dims{};
  for (int d = 1; d < rank(); ++d) dims[std::size_t(d - 1)] = shape_[d];
  t.shape_ = tensor_shape(std::span<const std::int64_t>(dims.data(), std::size_t(rank() - 1)));
  for (int d = 1; d < rank(); ++d) t.strides_[std::size_t(d - 1)] = strides_[std::size_t(d)];
  return t;
}

tensor tensor::clone() const {
  if (is_contiguous()) return to(device_);
  DI_CHECK(device_.kind == device_kind::cpu, "clone of a non-contiguous tensor {} on {}",
           shape_.str(), to_string(device_));
  tensor t = empty(shape_, type_, device_);
  // Non-contiguous: copy element by element through the strides.
  const std::size_t es = dtype_size(type_);
  std::array<std::int64_t, max_tensor_rank> idx{};
  for (std::int64_t n = 0; n < numel(); ++n) {
    std::int64_t off = 0;
    for (int d = 0; d < rank(); ++d) off += idx[std::size_t(d)] * strides_[std::size_t(d)];
    std::memcpy(static_cast<std::byte*>(t.data_) + std::size_t(n) * es,
                static_cast<const std::byte*>(data_) + std::size_t(off) * es, es);
    for (int d = rank() - 1; d >= 0; --d) {
      if (++idx[std::size_t(d)] < shape_[d]) break;
      idx[std::size_t(d)] = 0;
    }
  }
  return t;
}

tensor tensor::to(device dev) const {
  DI_CHECK(defined_, "copy of an undefined tensor");
  DI_CHECK(is_contiguous(), "copy of a non-contiguous tensor {} to {}", shape_.str(),
           to_string(dev));
  tensor t;
#if defined(DEEPINFER_HAVE_CUDA)
  // Device-to-host copies land in cached page-locked memory (no first-touch faults).
  if (device_.kind == device_kind::cuda && dev.kind == device_kind::cpu)
    t = over(cuda::allocate_host(nbytes()), shape_, type_, dev);
#endif
  if (!t.defined_) t = empty(shape_, type_, dev);
  copy_storage(t.data_, dev, data_, device_, nbytes());
  return t;
}

void tensor::copy_from(const tensor& src) {
  DI_CHECK(defined_ && src.defined_, "copy_from: tensor not set");
  DI_CHECK(src.type_ == type_ && src.shape_ == shape_, "copy_from: {} {} into {} {}",
           dtype_name(src.type_), src.shape_.str(), dtype_name(type_), shape_.str());
  DI_CHECK(is_contiguous() && src.is_contiguous(), "copy_from: tensors must be contiguous");
  copy_storage(data_, device_, src.data_, src.device_, nbytes());
}

void check_tensor(const tensor& t, dtype type, const tensor_shape& shape, const char* what) {
  DI_CHECK(t.defined(), "{}: tensor not set", what);
  DI_CHECK(t.type() == type, "{}: expected {}, got {}", what, dtype_name(type),
           dtype_name(t.type()));
  DI_CHECK(t.shape() == shape, "{}: expected shape {}, got {}", what, shape.str(), t.shape().str());
  DI_CHECK(t.is_contiguous(), "{}: tensor must be contiguous", what);
}

namespace {

void check_device_tensor(const tensor& t, device_kind kind, dtype type, int rank,
                         const char* what) {
  DI_CHECK(t.defined(), "{}: tensor not set", what);
  DI_CHECK(t.dev().kind == kind, "{}: tensor lives on {}, expected {}", what, to_string(t.dev()),
           kind == device_kind::cpu ? "cpu" : "a CUDA device");
  DI_CHECK(t.type() == type, "{}: expected {}, got {}", what, dtype_name(type),
           dtype_name(t.type()));
  DI_CHECK(t.rank() == rank, "{}: expected rank {}, got shape {}", what, rank, t.shape().str());
  DI_CHECK(t.is_contiguous(), "{}: tensor must be contiguous", what);
}

}  // namespace

void check_cpu_tensor(const tensor& t, dtype type, int rank, const char* what) {
  check_device_tensor(t, device_kind::cpu, type, rank, what);
}

void check_cuda_tensor(const tensor& t, dtype type, int rank, const char* what) {
  check_device_tensor(t, device_kind::cuda, type, rank, what);
}

}  // namespace di
