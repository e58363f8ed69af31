# Defines the target pipetrain::torch and the variable PIPETRAIN_WITH_CUDA.
#
# The PyPI wheel is CUDA-enabled, and its TorchConfig.cmake refuses to load without a CUDA
# toolkit. A CPU build must work anywhere, so it links the wheel's CPU libraries directly
# (libtorch_cpu, libc10): that also keeps the 500 MiB libtorch_cuda out of every process.
# A CUDA build goes through the official config and adds NCCL.

set(PIPETRAIN_CUDA AUTO CACHE STRING "Build the CUDA/NCCL code: AUTO, ON or OFF")
set_property(CACHE PIPETRAIN_CUDA PROPERTY STRINGS AUTO ON OFF)

# Under pip (scikit-build-core names the interpreter): the torch of that Python.
if(NOT PIPETRAIN_TORCH_CONFIG_DIR AND Python_EXECUTABLE)
  execute_process(COMMAND "${Python_EXECUTABLE}" -c
                          "import torch; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _torch_found)
  if(_torch_found EQUAL 0)
    list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
  endif()
endif()
find_path(PIPETRAIN_TORCH_CONFIG_DIR TorchConfig.cmake PATH_SUFFIXES Torch
          DOC "Folder of the wheel's TorchConfig.cmake")
if(NOT PIPETRAIN_TORCH_CONFIG_DIR)
  message(FATAL_ERROR "LibTorch not found: run scripts/setup and pass its last line as "
                      "-DCMAKE_PREFIX_PATH=... (or use scripts/test, which does both)")
endif()
get_filename_component(PIPETRAIN_TORCH_ROOT "${PIPETRAIN_TORCH_CONFIG_DIR}/../../.." ABSOLUTE)
# The virtual environment's interpreter (torch lives in <venv>/lib/pythonX/site-packages).
get_filename_component(PIPETRAIN_VENV_PYTHON "${PIPETRAIN_TORCH_ROOT}/../../../../bin/python" ABSOLUTE)

set(_torch_has_cuda OFF)
if(EXISTS "${PIPETRAIN_TORCH_ROOT}/lib/libtorch_cuda.so")
  set(_torch_has_cuda ON)
endif()
set(PIPETRAIN_WITH_CUDA OFF)
if(PIPETRAIN_CUDA STREQUAL "ON")
  if(NOT _torch_has_cuda)
    message(FATAL_ERROR "PIPETRAIN_CUDA=ON but the LibTorch in ${PIPETRAIN_TORCH_ROOT} has no CUDA")
  endif()
  set(PIPETRAIN_WITH_CUDA ON)
elseif(PIPETRAIN_CUDA STREQUAL "AUTO" AND _torch_has_cuda)
  find_package(CUDAToolkit QUIET)
  set(PIPETRAIN_WITH_CUDA ${CUDAToolkit_FOUND})
endif()

add_library(pipetrain_torch INTERFACE)
add_library(pipetrain::torch ALIAS pipetrain_torch)

if(PIPETRAIN_WITH_CUDA)
  # A preset arch list keeps Torch's config from probing for a GPU (a try_run that fails
  # without one). pipetrain ships no kernels of its own; 9.0 is Hopper.
  set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA architectures for Torch's config")
  # Torch's config warns on every reconfigure once CMake has cached its own arch default.
  unset(CMAKE_CUDA_ARCHITECTURES CACHE)
  find_package(Torch REQUIRED CONFIG)
  # NCCL as shipped beside torch in the same environment, so both agree on its version.
  get_filename_component(_site "${PIPETRAIN_TORCH_ROOT}/.." ABSOLUTE)
  find_path(PIPETRAIN_NCCL_INCLUDE nccl.h HINTS "${_site}/nvidia/nccl/include" "${_site}/nvidia/cu13/include")
  find_library(PIPETRAIN_NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS "${_site}/nvidia/nccl/lib" "${_site}/nvidia/cu13/lib")
  if(NOT PIPETRAIN_NCCL_INCLUDE OR NOT PIPETRAIN_NCCL_LIBRARY)
    message(FATAL_ERROR "CUDA build: NCCL not found beside torch in ${_site}/nvidia")
  endif()
  target_link_libraries(pipetrain_torch INTERFACE ${TORCH_LIBRARIES} ${PIPETRAIN_NCCL_LIBRARY})
  target_include_directories(pipetrain_torch SYSTEM INTERFACE ${PIPETRAIN_NCCL_INCLUDE})
  target_compile_definitions(pipetrain_torch INTERFACE PIPETRAIN_WITH_CUDA=1)
else()
  foreach(_lib torch_cpu c10)
    find_library(PIPETRAIN_${_lib}_LIBRARY ${_lib} PATHS "${PIPETRAIN_TORCH_ROOT}/lib" NO_DEFAULT_PATH REQUIRED)
    target_link_libraries(pipetrain_torch INTERFACE ${PIPETRAIN_${_lib}_LIBRARY})
  endforeach()
  target_include_directories(pipetrain_torch SYSTEM INTERFACE
    "${PIPETRAIN_TORCH_ROOT}/include" "${PIPETRAIN_TORCH_ROOT}/include/torch/csrc/api/include")
  # The wheel is built with the C++11 ABI; mixing ABIs fails at link time.
  target_compile_definitions(pipetrain_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
  target_link_options(pipetrain_torch INTERFACE "-Wl,-rpath,${PIPETRAIN_TORCH_ROOT}/lib")
endif()

# libtorch_cpu exports a copy of std::filesystem. With libstdc++ listed after torch (the
# linker's default order), libstdc++'s own references bind to that copy, which crashes where
# the system's libstdc++ is older than torch's (torch 2.11 on Debian 12: `pipetrain launch`
# ended with rc 139 after every job). Listed first, libstdc++ is searched first and its
# definitions win for every object (tests/launch/libstdcxx_test.sh; scripts/device-check's
# tier 0 names the clash and preloads libstdc++ for binaries built before this).
target_link_options(pipetrain_torch INTERFACE
                    "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")

message(STATUS "pipetrain: LibTorch at ${PIPETRAIN_TORCH_ROOT}, CUDA build: ${PIPETRAIN_WITH_CUDA}")
