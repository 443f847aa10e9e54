# UCX, found by pkg-config: the system's by default, or the one under
# FERRY_UCX_PREFIX (a UCX install prefix, or the libucx folder of PyPI's
# libucx-cu13 wheel as scripts/ucx-cuda.sh unpacks it), to use a UCX with
# CUDA support where the system's has none. Defines PkgConfig::UCX and
# FERRY_UCX_LIBDIR (the folder of the libucp linked).
#
# With FERRY_UCX_PREFIX, its lib/pkgconfig is searched first, with
# --define-prefix (the wheel's ucx.pc names the path it was built at), and
# every target gets <prefix>/lib first in its build and install RPATH, as
# DT_RUNPATH: the binaries load that UCX rather than the system's, while
# LD_LIBRARY_PATH can still swap in another UCX (a test that re-runs itself
# against a UCX without CUDA does so). So LD_LIBRARY_PATH must not name
# another UCX's folder when this one is meant (scripts/gpu-test.sh keeps
# Debian's UCX out of it). UCX finds its modules (lib/ucx) next to the
# libucs loaded, unless UCX_MODULE_DIR names another folder.

if(FERRY_UCX_PREFIX)
  if(CMAKE_VERSION VERSION_LESS 3.22)
    message(FATAL_ERROR "FERRY_UCX_PREFIX needs CMake 3.22 or newer (PKG_CONFIG_ARGN); this is ${CMAKE_VERSION}")
  endif()
  get_filename_component(ferry_ucx_prefix "${FERRY_UCX_PREFIX}" ABSOLUTE)
  if(NOT EXISTS "${ferry_ucx_prefix}/lib/pkgconfig/ucx.pc")
    message(FATAL_ERROR "FERRY_UCX_PREFIX=${FERRY_UCX_PREFIX}: no lib/pkgconfig/ucx.pc there "
      "(want a UCX install prefix, or the libucx folder of the libucx-cu13 wheel: scripts/ucx-cuda.sh)")
  endif()
endif()
# pkg-config's results are cached: find them again when the prefix changes
if(NOT "${FERRY_UCX_PREFIX}" STREQUAL "${FERRY_UCX_PREFIX_FOUND}")
  unset(__pkg_config_checked_UCX CACHE)
  get_cmake_property(ferry_cache_vars CACHE_VARIABLES)
  foreach(v ${ferry_cache_vars})
    if(v MATCHES "^pkgcfg_lib_UCX_")
      unset(${v} CACHE)
    endif()
  endforeach()
  set(FERRY_UCX_PREFIX_FOUND "${FERRY_UCX_PREFIX}" CACHE INTERNAL "FERRY_UCX_PREFIX of the cached UCX")
endif()

if(FERRY_UCX_PREFIX)
  set(ferry_saved_pc_path "$ENV{PKG_CONFIG_PATH}")
  set(ferry_saved_pc_sysroot "$ENV{PKG_CONFIG_SYSROOT_DIR}")
  set(ENV{PKG_CONFIG_PATH} "${ferry_ucx_prefix}/lib/pkgconfig:$ENV{PKG_CONFIG_PATH}")
  unset(ENV{PKG_CONFIG_SYSROOT_DIR}) # the prefix is a real path, not under a sysroot
  set(PKG_CONFIG_ARGN ${PKG_CONFIG_ARGN} --define-prefix) # shadows the cache entry for this call
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
  unset(PKG_CONFIG_ARGN)
  set(ENV{PKG_CONFIG_PATH} "${ferry_saved_pc_path}")
  set(ENV{PKG_CONFIG_SYSROOT_DIR} "${ferry_saved_pc_sysroot}")
else()
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
endif()

if(pkgcfg_lib_UCX_ucp)
  get_filename_component(FERRY_UCX_LIBDIR "${pkgcfg_lib_UCX_ucp}" DIRECTORY)
else()
  pkg_get_variable(FERRY_UCX_LIBDIR ucx libdir)
endif()
if(FERRY_UCX_PREFIX)
  file(REAL_PATH "${ferry_ucx_prefix}/lib" ferry_want)
  file(REAL_PATH "${FERRY_UCX_LIBDIR}" ferry_got)
  if(NOT ferry_got STREQUAL ferry_want)
    message(FATAL_ERROR "FERRY_UCX_PREFIX=${FERRY_UCX_PREFIX}: pkg-config gave libucp in ${FERRY_UCX_LIBDIR}, "
      "not in ${ferry_ucx_prefix}/lib")
  endif()
  list(PREPEND CMAKE_BUILD_RPATH "${FERRY_UCX_LIBDIR}")
  list(PREPEND CMAKE_INSTALL_RPATH "${FERRY_UCX_LIBDIR}")
  add_link_options("LINKER:--enable-new-dtags") # DT_RUNPATH (above), whatever the linker's default
endif()
if(EXISTS "${FERRY_UCX_LIBDIR}/ucx/libuct_cuda.so")
  set(ferry_ucx_cuda "yes (${FERRY_UCX_LIBDIR}/ucx/libuct_cuda.so)")
else()
  set(ferry_ucx_cuda "no (no ${FERRY_UCX_LIBDIR}/ucx/libuct_cuda.so)")
endif()
if(FERRY_UCX_PREFIX)
  set(ferry_ucx_from "FERRY_UCX_PREFIX=${ferry_ucx_prefix}")
else()
  set(ferry_ucx_from "pkg-config's default")
endif()
message(STATUS "ferry: UCX ${UCX_VERSION} in ${FERRY_UCX_LIBDIR} (${ferry_ucx_from}); CUDA support: ${ferry_ucx_cuda}")
