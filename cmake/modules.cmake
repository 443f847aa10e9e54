# One target per library module, each compiled against only the headers of
# the modules it may use.
#
# ferry_module(NAME DEPS <modules> SOURCES <files> [GENERATED <dir> GENERATED_BY <target>] [LIBS <libs>])
#
# NAME's sources see, through ${CMAKE_BINARY_DIR}/modules/NAME/, links to
# src/<m>/ and to the public headers of NAME and of each module in DEPS,
# and nothing else of the tree: `#include "meta/client.h"` from a module
# that may not use meta does not compile. GENERATED adds a folder of
# generated headers, made by target GENERATED_BY before NAME compiles. A shared link of NAME's objects with those of DEPS and
# -Wl,--no-undefined (target ferry_layering_NAME, part of `all`) fails when
# NAME calls into a module it may not use. Modules must be declared after
# their DEPS.

# The public headers each module owns.
set(FERRY_PUBLIC_common status.h ctx.h)
set(FERRY_PUBLIC_layout layout.h)
set(FERRY_PUBLIC_plan plan.h)
set(FERRY_PUBLIC_codec codec.h safetensors.h fp8.h)
set(FERRY_PUBLIC_xport xport.h)
set(FERRY_PUBLIC_meta meta.h)
set(FERRY_PUBLIC_channel channel.h)
set(FERRY_PUBLIC_sync sync.h)

set(FERRY_MODULES)

function(ferry_module name)
  cmake_parse_arguments(M "" "" "DEPS;SOURCES;GENERATED;GENERATED_BY;LIBS" ${ARGN})
  set(root ${CMAKE_BINARY_DIR}/modules/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/src ${root}/include/ferry)
  foreach(m ${name} ${M_DEPS})
    if(NOT DEFINED FERRY_PUBLIC_${m})
      message(FATAL_ERROR "ferry_module(${name}): unknown module ${m}")
    endif()
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${m} ${root}/src/${m} SYMBOLIC)
    foreach(h ${FERRY_PUBLIC_${m}})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/ferry/${h} ${root}/include/ferry/${h} SYMBOLIC)
    endforeach()
  endforeach()
  # "../" would walk around the include tree
  foreach(src ${M_SOURCES})
    if(EXISTS ${PROJECT_SOURCE_DIR}/${src})
      file(STRINGS ${PROJECT_SOURCE_DIR}/${src} bad REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]*\\.\\./")
      if(bad)
        message(FATAL_ERROR "${src}: includes by a relative path up the tree (${bad}); include \"module/file.h\"")
      endif()
    endif()
  endforeach()

  add_library(ferry_${name} OBJECT ${M_SOURCES})
  target_include_directories(ferry_${name} PRIVATE ${root}/src ${root}/include ${M_GENERATED})
  target_compile_options(ferry_${name} PRIVATE $<$<COMPILE_LANGUAGE:C>:-fvisibility=hidden>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fvisibility=hidden>)
  if(M_GENERATED_BY)
    add_dependencies(ferry_${name} ${M_GENERATED_BY})
  endif()
  # external libraries: their include paths here (as system headers, as
  # linking them would: their own warnings are not ours), linked by the libraries
  foreach(lib ${M_LIBS})
    if(TARGET ${lib})
      target_include_directories(ferry_${name} SYSTEM PRIVATE $<TARGET_PROPERTY:${lib},INTERFACE_INCLUDE_DIRECTORIES>)
      target_compile_options(ferry_${name} PRIVATE
        $<$<COMPILE_LANGUAGE:C>:$<TARGET_PROPERTY:${lib},INTERFACE_COMPILE_OPTIONS>>)
    endif()
  endforeach()

  # everything this module may call, for the no-undefined link check
  set(closure ${name})
  set(libs ${M_LIBS})
  foreach(m ${M_DEPS})
    list(APPEND closure ${FERRY_CLOSURE_${m}})
    list(APPEND libs ${FERRY_LIBS_${m}})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  list(REMOVE_DUPLICATES libs)
  set(FERRY_CLOSURE_${name} ${closure} PARENT_SCOPE)
  set(FERRY_LIBS_${name} ${libs} PARENT_SCOPE)
  set(objs)
  foreach(m ${closure})
    list(APPEND objs $<TARGET_OBJECTS:ferry_${m}>)
  endforeach()
  if(NOT FERRY_FUZZ) # coverage hooks are left undefined in fuzzing builds' shared objects
    add_library(ferry_layering_${name} SHARED ${objs})
    target_link_libraries(ferry_layering_${name} PRIVATE ${libs})
    target_link_options(ferry_layering_${name} PRIVATE -Wl,--no-undefined)
    if(CMAKE_C_COMPILER_ID STREQUAL "Clang" AND (FERRY_SANITIZE OR FERRY_TSAN))
      target_link_options(ferry_layering_${name} PRIVATE -shared-libsan) # clang leaves the runtime to executables
    endif()
    set_target_properties(ferry_layering_${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/layering)
  endif()

  set(FERRY_MODULES ${FERRY_MODULES} ${name} PARENT_SCOPE)
endfunction()
