# Resolves EXL3_CUDA (ON | OFF | AUTO) into EXL3_HAVE_CUDA, loudly: ON fails without a toolkit,
# AUTO prints what it chose.
if(NOT EXL3_CUDA MATCHES "^(ON|OFF|AUTO)$")
  message(FATAL_ERROR "EXL3_CUDA must be ON, OFF or AUTO (got '${EXL3_CUDA}')")
endif()
set(EXL3_HAVE_CUDA OFF)
if(EXL3_CUDA STREQUAL "ON" OR EXL3_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(EXL3_NVCC nvcc PATHS /usr/local/cuda/bin)
    if(EXL3_NVCC)
      set(CMAKE_CUDA_COMPILER ${EXL3_NVCC})
    endif()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Release default covers the target cards: RTX 3090 (86), 4090 (89), H100/H200 (90).
      set(CMAKE_CUDA_ARCHITECTURES 86 89 90)
    endif()
    # CMake 3.25 knows nvcc's dialect flags only up to C++17; the project is C++20 throughout.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(EXL3_HAVE_CUDA ON)
  elseif(EXL3_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EXL3_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  else()
    message(WARNING "EXL3_CUDA=AUTO found no CUDA compiler (nvcc): building the CPU backend only. "
                    "The CUDA backend, NCCL, GPU tests and exl3-launch --gpus are NOT built. Install the "
                    "CUDA toolkit (or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc) to build them.")
  endif()
endif()
message(STATUS "EXL3_CUDA=${EXL3_CUDA}: CUDA backend ${EXL3_HAVE_CUDA}"
        "${CMAKE_CUDA_ARCHITECTURES}")
# What was decided, for scripts that read the cache (scripts/test prints a banner when OFF).
set(EXL3_CUDA_BUILT ${EXL3_HAVE_CUDA} CACHE INTERNAL "Whether the CUDA backend is built")
