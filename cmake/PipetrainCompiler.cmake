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

# Each target that includes torch reuses one precompiled header instead of parsing
# ATen again (several seconds per translation unit).
function(pipetrain_use_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM pipetrain_torch_pch)
endfunction()
