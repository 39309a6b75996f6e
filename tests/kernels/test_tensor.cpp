// Tests of the tensor type: shapes, owned storage, views, slices, rows, clones and the checks
// the ops rely on.
#include "kernels/tensor.hpp"

#include <doctest/doctest.h>

namespace di {
namespace {

TEST_CASE("tensor: empty, zeros, full and shapes") {
  tensor t = tensor::zeros({2, 3}, dtype::f32);  // [2, 3]
  CHECK(t.rank() == 2);
  CHECK(t.numel() == 6);
  CHECK(t.nbytes() == 24);
  CHECK(t.stride(0) == 3);
  CHECK(t.stride(-1) == 1);
  CHECK(t.is_contiguous());
  for (int i = 0; i < 6; ++i) CHECK(t.data<float>()[i] == 0.0f);
  tensor f = tensor::full({4}, 2.5f);
  CHECK(f.data<float>()[3] == 2.5f);
  CHECK(tensor_shape{2, 3}.str() == "[2, 3]");
  CHECK_FALSE(tensor().defined());
  CHECK(tensor::empty({0, 4}, dtype::f32).defined());
}

TEST_CASE("tensor: typed access is checked") {
  tensor t = tensor::zeros({2}, dtype::i64);
  CHECK_NOTHROW(t.data<std::int64_t>());
  CHECK_THROWS_AS(t.data<float>(), error);
}

TEST_CASE("tensor: view, slice, row and clone share or copy bytes as documented") {
  tensor t = tensor::empty({2, 3}, dtype::f32);  // [2, 3]
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = float(i);
  tensor v = t.view({3, 2});
  CHECK(v.data<float>() == t.data<float>());
  CHECK_THROWS_AS(t.view({4, 2}), error);

  tensor rows = t.slice(0, 1, 2);  // [1, 3]
  CHECK(rows.data<float>()[0] == 3.0f);
  tensor cols = t.slice(1, 1, 3);  // [2, 2], strided
  CHECK_FALSE(cols.is_contiguous());
  tensor copy = cols.clone();
  CHECK(copy.is_contiguous());
  const float want[] = {1, 2, 4, 5};
  for (int i = 0; i < 4; ++i) CHECK(copy.data<float>()[i] == want[i]);

  tensor r1 = t[1];  // [3]
  CHECK(r1.rank() == 1);
  CHECK(r1.data<float>()[2] == 5.0f);
  CHECK_THROWS_AS(t[2], error);
  CHECK_THROWS_AS(t.slice(0, 1, 3), error);
}

TEST_CASE("tensor: views of external memory and checks") {
  float buf[4] = {1, 2, 3, 4};
  tensor v = tensor::view_of(buf, {2, 2}, dtype::f32);
  v.data<float>()[3] = 9.0f;
  CHECK(buf[3] == 9.0f);
  CHECK_NOTHROW(check_tensor(v, dtype::f32, {2, 2}, "v"));
  CHECK_THROWS_AS(check_tensor(v, dtype::f32, {4}, "v"), error);
  CHECK_THROWS_AS(check_cpu_tensor(v, dtype::i32, 2, "v"), error);
  tensor gpu = tensor::view_of(buf, {4}, dtype::f32, device{device_kind::cuda, 0});
  CHECK_THROWS_AS(check_cpu_tensor(gpu, dtype::f32, 1, "gpu"), error);
  CHECK_THROWS_AS(tensor::empty({1}, dtype::f32, device{device_kind::cuda, 0}), error);
}

TEST_CASE("device names: cpu, cuda, cuda:N; anything else is an error naming it") {
  CHECK(parse_device("cpu") == cpu_device);
  CHECK(parse_device("cuda") == device{device_kind::cuda, 0});
  CHECK(parse_device("cuda:3") == device{device_kind::cuda, 3});
  CHECK(to_string(parse_device("cuda:12")) == "cuda:12");
  for (const char* bad : {"cuda:abc", "cuda:", "cuda:99999999999", "cuda:-1", "cuda:1x", "gpu", ""})
    CHECK_THROWS_WITH_AS(parse_device(bad), doctest::Contains("expected cpu, cuda or cuda:N"),
                         error);
}

}  // namespace
}  // namespace di
