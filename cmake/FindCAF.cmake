# Finds the C++ Actor Framework. Debian's libcaf-dev (0.17.6) ships no CMake package and no
# pkg-config file, so look for headers and libraries directly and read the version from
# caf/config.hpp. Creates CAF::core, CAF::io and CAF::openssl (the names CAF >= 0.18 exports).
find_path(CAF_INCLUDE_DIR caf/config.hpp HINTS ${CAF_ROOT}/include ENV CAF_ROOT)
if(CAF_INCLUDE_DIR)
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_v "${_caf_version_line}")
  if(_caf_v)
    math(EXPR _caf_major "${_caf_v} / 10000")
    math(EXPR _caf_minor "(${_caf_v} / 100) % 100")
    math(EXPR _caf_patch "${_caf_v} % 100")
    set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
  endif()
endif()

set(_caf_required_vars CAF_INCLUDE_DIR)
foreach(comp IN LISTS CAF_FIND_COMPONENTS)
  find_library(CAF_${comp}_LIBRARY NAMES caf_${comp} HINTS ${CAF_ROOT}/lib ENV CAF_ROOT)
  if(CAF_${comp}_LIBRARY)
    set(CAF_${comp}_FOUND TRUE)
  endif()
  if(CAF_FIND_REQUIRED_${comp})
    list(APPEND _caf_required_vars CAF_${comp}_LIBRARY)
  endif()
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF REQUIRED_VARS ${_caf_required_vars}
                                      VERSION_VAR CAF_VERSION HANDLE_COMPONENTS)

if(CAF_FOUND)
  foreach(comp IN LISTS CAF_FIND_COMPONENTS)
    if(CAF_${comp}_FOUND AND NOT TARGET CAF::${comp})
      add_library(CAF::${comp} UNKNOWN IMPORTED)
      set_target_properties(CAF::${comp} PROPERTIES
        IMPORTED_LOCATION "${CAF_${comp}_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
      if(NOT comp STREQUAL "core")
        set_property(TARGET CAF::${comp} APPEND PROPERTY INTERFACE_LINK_LIBRARIES CAF::core)
      endif()
    endif()
  endforeach()
  if(TARGET CAF::core)
    set_property(TARGET CAF::core APPEND PROPERTY INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR)
