// The CUDA backend of the op interface: the same functions and contracts as di::ops (see
// kernels/ops.hpp), for tensors on a CUDA device. Each entry point checks shapes and dtypes on
// the host, allocates its outputs on the operands' device and enqueues its kernels on the
// current stream (kernels/cuda/stream.hpp) without waiting for them. kernels/ops.cpp
// dispatches here when the first operand lives on a CUDA device.
//
// Index operands (ids, rows) are device tensors: a bad index is a di::error raised after a
// short sync, except while a CUDA graph is being captured (the row is then NaN / skipped).
#pragma once

#include "kernels/ops.hpp"

namespace di::cuda {

using ops::fp4_scale;
using ops::linear_params;

tensor embedding(const tensor& table, const tensor& ids);
tensor embedding_fp8(const tensor& codes, const tensor& scales, const tensor& ids);
tensor gather_rows(const tensor& x, const tensor& rows);
void scatter_add_rows(tensor& y, const tensor& rows, const tensor& src);
void add_inplace(tensor& y, const tensor& x);
tensor concat_rows(std::span<const tensor> parts);
tensor rms_norm(const tensor& x, const tensor& weight, float eps);
void fp8_fake_quant(tensor& x, int block, std::int64_t num_dims);
void fp4_fake_quant(tensor& x, int block, fp4_scale scale);
void hadamard(tensor& x);
void rotary(tensor& x, const tensor& positions, const tensor& inv_freq, bool inverse);

}  // namespace di::cuda
