# Third-party dependencies. Required ones fail the configure step with the Debian package
# to install; AUTO features are switched on only when all their pieces are present.

find_package(nlohmann_json 3.10 REQUIRED)  # apt-get install nlohmann-json3-dev
find_package(yaml-cpp REQUIRED)            # apt-get install libyaml-cpp-dev
find_package(Threads REQUIRED)

# yaml-cpp 0.7 on Debian exports the plain `yaml-cpp` target; later versions add a namespace.
if(TARGET yaml-cpp::yaml-cpp)
  set(DLBENCH_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(DLBENCH_YAML_TARGET yaml-cpp)
endif()

# --- MPI -------------------------------------------------------------------------------
set(DLBENCH_MPI_ENABLED OFF)
if(NOT DLBENCH_WITH_MPI STREQUAL "OFF")
  if(DLBENCH_WITH_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS CXX)
  else()
    find_package(MPI QUIET COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    set(DLBENCH_MPI_ENABLED ON)
  endif()
endif()

# --- CUDA, cuDNN, cuBLAS, NCCL ---------------------------------------------------------
set(DLBENCH_CUDA_ENABLED OFF)
if(NOT DLBENCH_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  set(_cuda_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_TARGET_DIR}/lib64 /usr/local/cuda/lib64)
  set(_cuda_include_hints ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(DLBENCH_CUDNN_LIBRARY cudnn HINTS ${_cuda_hints})
  find_path(DLBENCH_CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cuda_include_hints})
  find_library(DLBENCH_NCCL_LIBRARY nccl HINTS ${_cuda_hints})
  find_path(DLBENCH_NCCL_INCLUDE_DIR nccl.h HINTS ${_cuda_include_hints})

  set(_cuda_missing "")
  if(NOT CMAKE_CUDA_COMPILER)
    list(APPEND _cuda_missing "nvcc")
  endif()
  if(NOT CUDAToolkit_FOUND)
    list(APPEND _cuda_missing "CUDA toolkit")
  endif()
  if(NOT DLBENCH_CUDNN_LIBRARY OR NOT DLBENCH_CUDNN_INCLUDE_DIR)
    list(APPEND _cuda_missing "cuDNN")
  endif()
  if(NOT DLBENCH_NCCL_LIBRARY OR NOT DLBENCH_NCCL_INCLUDE_DIR)
    list(APPEND _cuda_missing "NCCL")
  endif()

  if(_cuda_missing)
    if(DLBENCH_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "DLBENCH_WITH_CUDA=ON but not found: ${_cuda_missing}")
    endif()
    message(STATUS "CUDA backend off (not found: ${_cuda_missing})")
  else()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)  # A100 and H100/H200
    endif()
    enable_language(CUDA)
    set(DLBENCH_CUDA_ENABLED ON)

    add_library(dlbench_cudnn INTERFACE)
    add_library(dlbench::cudnn ALIAS dlbench_cudnn)
    target_include_directories(dlbench_cudnn SYSTEM INTERFACE ${DLBENCH_CUDNN_INCLUDE_DIR})
    target_link_libraries(dlbench_cudnn INTERFACE ${DLBENCH_CUDNN_LIBRARY})

    add_library(dlbench_nccl INTERFACE)
    add_library(dlbench::nccl ALIAS dlbench_nccl)
    target_include_directories(dlbench_nccl SYSTEM INTERFACE ${DLBENCH_NCCL_INCLUDE_DIR})
    target_link_libraries(dlbench_nccl INTERFACE ${DLBENCH_NCCL_LIBRARY})
  endif()
endif()
