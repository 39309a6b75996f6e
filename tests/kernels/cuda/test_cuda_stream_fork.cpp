// cuda::stream_fork: a branch on the side stream beside its parent, read after the join --
// eagerly (with the allocator's release rules under a loop that checks every round's values:
// memory reused too early would show) and inside a graph capture (the branch becomes a
// parallel path); forks that stay inactive (nested, switched off).
#include "gpu_test_support.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/stream.hpp"
#include "kernels/ops.hpp"

#include <cuda_runtime_api.h>

namespace di {
namespace {

using test::check_bitwise;
using test::gpu;

/// Restores the side-stream switch at scope exit.
struct side_streams_guard {
  bool before = cuda::side_streams();
  explicit side_streams_guard(bool on) { cuda::set_side_streams(on); }
  ~side_streams_guard() { cuda::set_side_streams(before); }
};

/// The host twin of one round: side = (x + x) + x, main = (y + x) + side.
tensor expected(const tensor& x, const tensor& y) {
  tensor side = x.clone();
  ops::add_inplace(side, x);
  ops::add_inplace(side, x);
  tensor main = y.clone();
  ops::add_inplace(main, x);
  ops::add_inplace(main, side);
  return main;
}

TEST_CASE("stream_fork: a branch beside the parent, its results read after the join") {
  cuda::owned_stream owned;
  cuda::stream_scope scope(owned.get());
  side_streams_guard on(true);
  const tensor xh = test::random_f32({1000, 257}), yh = test::random_f32({1000, 257});
  const tensor want = expected(xh, yh);
  const tensor x = xh.to(gpu), y = yh.to(gpu);
  for (int round = 0; round < 40; ++round) {
    CAPTURE(round);
    tensor on_side;
    tensor on_main = y.clone();
    {
      cuda::stream_fork fork;
      REQUIRE(fork.active());
      CHECK(fork.side() != owned.get());
      CHECK(cuda::current_fork().parent == owned.get());
      CHECK(cuda::current_fork().side == fork.side());
      {
        cuda::stream_scope side(fork.side());
        tensor t = x.clone();  // the branch's temporary, dropped inside it
        ops::add_inplace(t, x);
        on_side = t.clone();  // the branch's output, dropped after the join
        ops::add_inplace(on_side, x);
        cuda::stream_fork nested;  // a fork inside a branch stays inactive
        CHECK_FALSE(nested.active());
        CHECK(nested.side() == fork.side());
      }
      ops::add_inplace(on_main, x);  // the parent's own work meanwhile
      fork.join();
      CHECK(cuda::current_fork().side == nullptr);
      fork.join();  // once only: a second join is a no-op
    }
    ops::add_inplace(on_main, on_side);
    check_bitwise(on_main, want);
  }
  cuda::synchronize();
}

TEST_CASE("stream_fork inside a graph capture: the branch is a parallel path of the graph") {
  cuda::owned_stream owned;
  cuda::stream_scope scope(owned.get());
  side_streams_guard on(true);
  const tensor xh = test::random_f32({333, 65}), yh = test::random_f32({333, 65});
  const tensor x = xh.to(gpu);
  tensor a = x.clone(), b = yh.to(gpu);  // persistent buffers the graph updates
  cuda::synchronize();
  REQUIRE(cudaStreamBeginCapture(owned.get(), cudaStreamCaptureModeRelaxed) == cudaSuccess);
  {
    cuda::stream_fork fork;
    CHECK(fork.active());
    {
      cuda::stream_scope side(fork.side());
      ops::add_inplace(a, x);  // a = x + x
      ops::add_inplace(a, x);  // a = (x + x) + x
    }
    ops::add_inplace(b, x);  // b = y + x, beside
    // the fork's destructor joins
  }
  ops::add_inplace(b, a);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(owned.get(), &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  std::size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes >= 4);
  REQUIRE(cudaGraphLaunch(exec, owned.get()) == cudaSuccess);
  cuda::synchronize();
  check_bitwise(b, expected(xh, yh));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("stream_fork switched off: inactive, the branch runs on the parent") {
  cuda::owned_stream owned;
  cuda::stream_scope scope(owned.get());
  side_streams_guard off(false);
  cuda::stream_fork fork;
  CHECK_FALSE(fork.active());
  CHECK(fork.side() == owned.get());
  CHECK(cuda::current_fork().side == nullptr);
  fork.join();  // a no-op
}

}  // namespace
}  // namespace di
