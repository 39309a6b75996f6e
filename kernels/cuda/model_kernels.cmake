# deepinfer_cuda_model: the model-level kernels (attention, indexer, MoE routing, compressor,
# mHC, Engram, cache codecs) as launchers over raw device pointers (cuda_model_ops.hpp).
# Included from kernels/cuda/CMakeLists.txt.
add_library(deepinfer_cuda_model
  model_attention.cu
  model_cache.cu
  model_indexer.cu
  model_moe.cu
  model_compress.cu
  model_mhc.cu
  model_engram.cu
  model_sampling.cu)
target_include_directories(deepinfer_cuda_model PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(deepinfer_cuda_model PUBLIC deepinfer_common CUDA::cudart fmt::fmt)
target_compile_options(deepinfer_cuda_model PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
set_target_properties(deepinfer_cuda_model PROPERTIES POSITION_INDEPENDENT_CODE ON)

# The tensor-level twins (C++20, model_ops.cpp) join deepinfer_ops, which ops.cpp dispatches
# from; they call the kernels above.
target_sources(deepinfer_ops PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/model_ops.cpp)
target_link_libraries(deepinfer_ops PUBLIC deepinfer_cuda_model)
