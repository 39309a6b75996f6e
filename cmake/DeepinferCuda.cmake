# Decides whether the CUDA backend is built (DEEPINFER_CUDA = AUTO | ON | OFF) and enables
# the CUDA language for sm_90a (H200). Sets DEEPINFER_HAVE_CUDA.
set(DEEPINFER_HAVE_CUDA OFF)
if(NOT DEEPINFER_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 has no CUDA20 flags for nvcc 13
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(DEEPINFER_HAVE_CUDA ON)
  elseif(DEEPINFER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DEEPINFER_CUDA=ON but no CUDA compiler (nvcc) was found; "
                        "install CUDA 13 in /usr/local/cuda or configure with -DDEEPINFER_CUDA=OFF")
  endif()
endif()
message(STATUS "DeepInfer CUDA backend: ${DEEPINFER_HAVE_CUDA}")
