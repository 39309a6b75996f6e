// Moving a model's weights onto a CUDA device for the CUDA executor. Two layouts: `stored`
// keeps FP8/FP4 matrices in the checkpoint's format (decode reads the bytes the checkpoint
// stores; routed experts stacked per layer for the grouped expert GEMM), BF16 ones as BF16
// on cuBLAS except the small, precision-sensitive ones (router gate, compressors, indexer,
// grouped output projection), which become fp32; `f32` decodes every matrix exactly to fp32
// (the CPU's numerics on SGEMM: the accuracy reference of the GPU path, not for speed).
#pragma once

#include "config/model_config.hpp"
#include "model/forward/weights.hpp"

#include <string>

namespace di {

enum class device_weight_format : std::uint8_t { stored, f32 };

/// Parses "stored" / "f32"; throws di::error otherwise.
device_weight_format parse_device_weight_format(const std::string& name);

/// A copy of `w` with every tensor on `dev` (a CUDA device; needs a CUDA build).
model_weights weights_to_device(const model_weights& w, const model_config& c, device dev,
                                device_weight_format format);

}  // namespace di
