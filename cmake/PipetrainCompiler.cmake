# Warnings, ccache and the shared precompiled torch header.

add_compile_options(-Wall -Wextra)

find_program(PIPETRAIN_CCACHE ccache)
if(PIPETRAIN_CCACHE)
  # Precompiled headers are only cacheable with these sloppiness settings; the ccache
  # shipped by Debian 12 cannot take them on its command line, hence the env wrapper.
  set(CMAKE_CXX_COMPILER_LAUNCHER
      "${CMAKE_COMMAND}" -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "${PIPETRAIN_CCACHE}")
endif()

# Unity builds: each target's sources compiled eight to a file, so the precompiled torch
# header (about 4 s to load per file here) and the templates they share are paid once per
# batch; see docs/bench/2026-12-01-build-times.md. Editing one file then recompiles its batch, so a
# developer who rebuilds often may turn it off: -DPIPETRAIN_UNITY=OFF.
option(PIPETRAIN_UNITY "Compile each target's sources in batches (faster clean builds)" ON)
if(PIPETRAIN_UNITY)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE 8)
endif()

# Each target that includes torch reuses one precompiled header instead of parsing
# ATen again (several seconds per translation unit).
# The header is compiled position-independent (-fPIC: the layers' libraries link into the
# Python extension); an executable's sources take -fPIC too, as GCC ignores a precompiled header
# built with other code-model flags (-fPIE: "created and used with different settings").
function(pipetrain_use_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM pipetrain_torch_pch)
  get_target_property(_type ${target} TYPE)
  if(_type STREQUAL "EXECUTABLE")
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
endfunction()
