// Fills and copies of tensors inside a stream capture: the tensor type tells the CUDA backend
// which memory is its own, so a zero fill or a device-to-device copy of memory the capture
// itself allocated is a kernel node -- not a memset or copy-engine node, which would stop the
// programmatic launch of the kernel after it (the driver, asked about a pointer during a
// capture, does not know the capture's allocations yet). And the captured graph gives the
// values an eager run gives.
#include "gpu_test_support.hpp"
#include "kernels/cuda/basic_kernels.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/stream.hpp"
#include "kernels/ops.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace di {
namespace {

using test::check_bitwise;
using test::gpu;

/// Nodes of `graph` by type: kernels, memsets, copies.
struct node_counts {
  int kernels = 0, memsets = 0, copies = 0, other = 0;
};

node_counts count_nodes(cudaGraph_t graph) {
  std::size_t n = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(n);
  REQUIRE(cudaGraphGetNodes(graph, nodes.data(), &n) == cudaSuccess);
  node_counts c;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    REQUIRE(cudaGraphNodeGetType(node, &type) == cudaSuccess);
    if (type == cudaGraphNodeTypeKernel)
      ++c.kernels;
    else if (type == cudaGraphNodeTypeMemset)
      ++c.memsets;
    else if (type == cudaGraphNodeTypeMemcpy)
      ++c.copies;
    else
      ++c.other;  // the capture's allocations and frees
  }
  return c;
}

TEST_CASE("fills and copies of a capture's own tensors are kernel nodes with the eager values") {
  cuda::owned_stream owned;
  cuda::stream_scope scope(owned.get());
  // odd sizes: the copy kernel's tail as well as its wide steps
  const tensor xh = test::random_f32({37, 129});
  const tensor x = xh.to(gpu);
  tensor out = tensor::empty({3, 37, 129}, dtype::f32, gpu);  // persistent: read after launch
  cuda::synchronize();
  REQUIRE(cudaStreamBeginCapture(owned.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  {
    const tensor z = tensor::zeros({37, 129}, dtype::f32, gpu);  // allocated by the capture
    tensor y = x.clone();                                        // copy into the capture's memory
    ops::add_inplace(y, x);                                      // y = 2x
    tensor w = tensor::empty({37, 129}, dtype::f32, gpu);
    w.copy_from(y);  // between two of the capture's allocations
    const std::int64_t plane = 37 * 129;
    tensor o0 = tensor::view_of(out.data<float>(), {37, 129}, dtype::f32, gpu);
    tensor o1 = tensor::view_of(out.data<float>() + plane, {37, 129}, dtype::f32, gpu);
    tensor o2 = tensor::view_of(out.data<float>() + 2 * plane, {37, 129}, dtype::f32, gpu);
    o0.copy_from(z);  // from the capture's memory into a view of older memory
    o1.copy_from(w);
    o2.copy_from(x);
  }
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(owned.get(), &graph) == cudaSuccess);
  const node_counts c = count_nodes(graph);
  INFO("kernels " << c.kernels << ", memsets " << c.memsets << ", copies " << c.copies);
  if (cuda::zero_kernels()) {  // (DEEPINFER_ZERO_KERNELS=0 asks the driver, as before)
    CHECK(c.memsets == 0);
    CHECK(c.copies == 0);
    CHECK(c.kernels >= 6);  // a fill, four copies and the add
  }
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  // Poison the output, then replay twice: the graph writes every value.
  for (int round = 0; round < 2; ++round) {
    std::vector<float> nan(std::size_t(out.numel()), std::numeric_limits<float>::quiet_NaN());
    out.copy_from(tensor::view_of(nan.data(), out.shape(), dtype::f32));
    REQUIRE(cudaGraphLaunch(exec, owned.get()) == cudaSuccess);
    cuda::synchronize();
    tensor want = tensor::zeros({3, 37, 129}, dtype::f32);
    float* wp = want.data<float>();
    const float* xp = xh.data<float>();
    const std::int64_t plane = 37 * 129;
    for (std::int64_t i = 0; i < plane; ++i) {
      wp[plane + i] = xp[i] + xp[i];
      wp[2 * plane + i] = xp[i];
    }
    check_bitwise(out, want);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("a copy between host and device memory still completes before it returns") {
  const tensor xh = test::random_f32({5, 7});
  const tensor x = xh.to(gpu);
  const tensor back = x.to(cpu_device);  // device -> host: synchronous
  check_bitwise(back, xh);
  tensor y = tensor::empty({5, 7}, dtype::f32, gpu);
  y.copy_from(xh);  // host -> device through the copy engine
  check_bitwise(y.to(cpu_device), xh);
}

TEST_CASE("prefetch_l2: unaligned ranges, every range count, eager and captured, change nothing") {
  cuda::owned_stream owned;
  cuda::stream_scope scope(owned.get());
  const tensor xh = test::random_f32({3 * 1024 * 1024 + 7});  // ~12 MB: many 32 KB requests
  const tensor x = xh.to(gpu);
  const auto* base = static_cast<const std::uint8_t*>(x.raw());
  cuda::prefetch_l2_params p;
  for (int r = 0; r < cuda::prefetch_l2_max_ranges; ++r) {  // odd offsets and lengths, overlapping
    p.base[r] = base + 3 + 1000003 * r;
    p.bytes[r] = std::size_t(r == 0 ? 1 : 777777 * r + 5);
  }
  for (int ranges = 0; ranges <= cuda::prefetch_l2_max_ranges; ++ranges) {
    p.ranges = ranges;
    cuda::launch_prefetch_l2(p, owned.get());
  }
  p.ranges = 0;
  cuda::launch_prefetch_l2(p, owned.get());  // nothing to ask for: no launch
  cuda::synchronize();
  CHECK(cudaGetLastError() == cudaSuccess);
  check_bitwise(x, xh);
  // Inside a capture: one kernel node, and a replay changes nothing either.
  p.ranges = cuda::prefetch_l2_max_ranges;
  REQUIRE(cudaStreamBeginCapture(owned.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  cuda::launch_prefetch_l2(p, owned.get());
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(owned.get(), &graph) == cudaSuccess);
  const node_counts c = count_nodes(graph);
  CHECK(c.kernels == 1);
  CHECK(c.memsets + c.copies + c.other == 0);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, owned.get()) == cudaSuccess);
  cuda::synchronize();
  check_bitwise(x, xh);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  // A range without an address is refused before any launch.
  cuda::prefetch_l2_params bad;
  bad.ranges = 1;
  bad.bytes[0] = 16;
  CHECK_THROWS_AS(cuda::launch_prefetch_l2(bad, owned.get()), di::error);
}

}  // namespace
}  // namespace di
