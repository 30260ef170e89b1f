# uopc's CMake package: find_package(uopc CONFIG) with uopc_DIR (or CMAKE_PREFIX_PATH) set to the
# folder `uopc --cmake-dir` prints, then
#
#   uopc_add_library(TARGET FILE [TARGET_KIND c|llvm|cuda|amd|metal] [NAME NAME] [OPTIONS ...])
#
# runs `uopc build FILE -t KIND --name NAME --emit so,header` at build time into
# ${CMAKE_CURRENT_BINARY_DIR}/uopc/TARGET, with a dependency file, and makes TARGET an imported
# shared library: link it (target_link_libraries(app PRIVATE TARGET)) and #include "NAME.h".
# NAME defaults to FILE's stem; OPTIONS are passed to `uopc build` as they are (--arch gfx90a,
# --cpu native, -O2, ...). The library is rebuilt when FILE changes, when the uopc command
# changes, or when any file of the uopc package that holds this script changes (an upgrade).
#
# UOPC_EXECUTABLE (a cache variable) is the uopc command: by default the `uopc` installed next to
# this package (<prefix>/bin/uopc for <prefix>/lib/pythonX.Y/site-packages/uopc/cmake), else the
# first on PATH. TARGET_KIND metal makes a library on macOS only (Xcode's tools build it).
if(CMAKE_VERSION VERSION_LESS 3.20)
  set(uopc_FOUND FALSE)
  set(uopc_NOT_FOUND_MESSAGE "uopc_add_library needs CMake 3.20 or newer (DEPFILE with every generator)")
  return()
endif()
cmake_policy(VERSION 3.20)
include_guard(GLOBAL)

get_filename_component(_uopc_package_dir "${CMAKE_CURRENT_LIST_DIR}" DIRECTORY)
get_filename_component(_uopc_prefix "${_uopc_package_dir}/../../../.." ABSOLUTE)
find_program(UOPC_EXECUTABLE NAMES uopc HINTS "${_uopc_prefix}/bin" "${_uopc_prefix}/Scripts"
             DOC "the uopc command that uopc_add_library runs")
if(NOT UOPC_EXECUTABLE)
  set(uopc_FOUND FALSE)
  set(uopc_NOT_FOUND_MESSAGE "no `uopc` command: pip install uopc, or set UOPC_EXECUTABLE")
  return()
endif()
file(GLOB_RECURSE _uopc_package_files "${_uopc_package_dir}/*.py" "${_uopc_package_dir}/*.lark")

function(uopc_add_library target file)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "TARGET_KIND;NAME" "OPTIONS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "uopc_add_library(${target}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_TARGET_KIND)
    set(arg_TARGET_KIND c)
  endif()
  if(NOT arg_TARGET_KIND MATCHES "^(c|llvm|cuda|amd|metal)$")
    message(FATAL_ERROR "uopc_add_library(${target}): TARGET_KIND is one of c, llvm, cuda, amd, metal, not '${arg_TARGET_KIND}'")
  endif()
  get_filename_component(source "${file}" ABSOLUTE)
  if(NOT arg_NAME)
    get_filename_component(arg_NAME "${source}" NAME_WE)
  endif()
  set(out "${CMAKE_CURRENT_BINARY_DIR}/uopc/${target}")
  if(arg_TARGET_KIND STREQUAL "metal")
    if(NOT APPLE)
      message(FATAL_ERROR "uopc_add_library(${target}): TARGET_KIND metal makes a library on macOS only; elsewhere run `uopc build -t metal` for the sources")
    endif()
    set(library "${out}/lib${arg_NAME}.dylib")
    set(emit "dylib,header")
  else()
    set(library "${out}/lib${arg_NAME}.so")
    set(emit "so,header")
  endif()
  file(MAKE_DIRECTORY "${out}")  # an imported target's include directory must exist when CMake generates
  add_custom_command(
    OUTPUT "${library}" "${out}/${arg_NAME}.h"
    COMMAND "${UOPC_EXECUTABLE}" build "${source}" -t "${arg_TARGET_KIND}" -o "${out}" --name "${arg_NAME}"
            --emit "${emit}" -MF "${out}/${arg_NAME}.d" ${arg_OPTIONS}
    DEPENDS "${source}" "${UOPC_EXECUTABLE}" ${_uopc_package_files}
    DEPFILE "${out}/${arg_NAME}.d"
    COMMENT "uopc: building ${arg_NAME} from ${file} (-t ${arg_TARGET_KIND})"
    VERBATIM)
  add_custom_target(${target}_uopc DEPENDS "${library}" "${out}/${arg_NAME}.h")
  add_library(${target} SHARED IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${library}"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${out}")
  add_dependencies(${target} ${target}_uopc)
endfunction()
