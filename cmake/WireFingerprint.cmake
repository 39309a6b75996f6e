# The wire fingerprint (actors/peer_handshake.hpp, wire_fingerprint): a hash of the code of the
# headers that define what the processes of a cluster send each other. Comments and whitespace
# do not count, so builds whose headers differ only in them still talk to each other; any other
# change (a field, a type, a name, a string literal) gives another fingerprint.
#
#   deepinfer_wire_code(<out> <text> <what>)
#     <text> as a sequence of C++ tokens: // and /* */ comments removed (each is whitespace),
#     whitespace runs dropped, except one space between two identifier/number characters or
#     between two operator characters (`a b`, `- -`, `> >`: there it can change the tokens), a
#     marker where a preprocessor directive line ends (there a newline is code), string and
#     character literals (raw strings too) verbatim. An unterminated comment or literal is an
#     error naming <what> (the file), not a silent guess. Not followed: a // comment continued
#     by a backslash at its line's end (-Wcomment warns of one). Whitespace between operator
#     characters counts (`x = -1` and `x =-1` differ; clang-format settles those).
#   deepinfer_wire_fingerprint(<out> <root> <header>...)
#     the first 12 hex digits of the SHA-256 of each header's path relative to <root> and its
#     code, in the order given (sort them).
#   deepinfer_wire_headers(<out> <root> [CONFIGURE_DEPENDS])
#     the headers that define the wire, sorted: the one list of them (the build's fingerprint
#     and tests/cmake's check of `deepinfer --version` both take it from here).
#
# Script mode (used by tests/cmake): cmake -DWIRE_ROOT=<dir> -DWIRE_HEADERS=<a;b> [-DWIRE_OUT=<f>]
#   -P WireFingerprint.cmake writes the fingerprint of those headers to <f> (or prints it).

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  cmake_minimum_required(VERSION 3.24)
endif()

# A run of code without comments or literals, whitespace normalised (see above).
function(_di_wire_normalise out code)
  string(ASCII 2 _di_wire_kept_space)
  string(ASCII 11 _di_wire_vt)
  string(ASCII 12 _di_wire_ff)
  string(REGEX REPLACE "[ \t\r\n${_di_wire_vt}${_di_wire_ff}]+" " " code "${code}")
  set(word "[A-Za-z0-9_]")
  set(op "[-+*/%&|^<>=!:.#]")
  # Twice: a space whose left character the previous pair took is left for the second pass.
  foreach(pass 1 2)
    string(REGEX REPLACE "(${word}) (${word})" "\\1${_di_wire_kept_space}\\2" code "${code}")
    string(REGEX REPLACE "(${op}) (${op})" "\\1${_di_wire_kept_space}\\2" code "${code}")
  endforeach()
  string(REPLACE " " "" code "${code}")
  string(REPLACE "${_di_wire_kept_space}" " " code "${code}")
  set(${out} "${code}" PARENT_SCOPE)
endfunction()

function(deepinfer_wire_code out text what)
  string(ASCII 1 _di_wire_directive_end)
  # A directive ends at its line's end: mark it (a line comment stops at the marker).
  string(REGEX REPLACE "\n([ \t]*#[^\n]*)" "\n\\1${_di_wire_directive_end}" text "\n${text}")
  set(result "")
  set(code "")
  while(NOT text STREQUAL "")
    # Code up to the next quote, or slash that starts a comment.
    string(REGEX MATCH "^[^\"'/]*(/[^\"'/*][^\"'/]*)*" chunk "${text}")
    string(LENGTH "${chunk}" n)
    string(APPEND code "${chunk}")
    string(SUBSTRING "${text}" ${n} -1 text)
    if(text STREQUAL "")
      break()
    endif()
    set(literal "")
    if(text MATCHES "^//")
      string(REGEX MATCH "^//[^\n${_di_wire_directive_end}]*" skip "${text}")
      string(APPEND code " ")
    elseif(text MATCHES "^/\\*")
      string(REGEX MATCH "^/\\*[^*]*\\*+([^*/][^*]*\\*+)*/" skip "${text}")
      if(skip STREQUAL "")
        message(FATAL_ERROR "wire fingerprint: ${what}: unterminated /* comment")
      endif()
      string(APPEND code " ")
    elseif(text MATCHES "^/")
      # A slash before a quote, or at the end.
      set(skip "/")
      string(APPEND code "/")
    elseif(text MATCHES "^\"" AND code MATCHES "(^|[^A-Za-z0-9_])(u8|u|U|L)?R$")
      if(NOT text MATCHES "^\"([^ ()\\\t\n]*)\\(")
        message(FATAL_ERROR "wire fingerprint: ${what}: bad raw string literal")
      endif()
      set(close ")${CMAKE_MATCH_1}\"")
      string(FIND "${text}" "${close}" end)
      if(end EQUAL -1)
        message(FATAL_ERROR "wire fingerprint: ${what}: unterminated raw string literal")
      endif()
      string(LENGTH "${close}" close_length)
      math(EXPR end "${end} + ${close_length}")
      string(SUBSTRING "${text}" 0 ${end} skip)
      set(literal "${skip}")
    elseif(text MATCHES "^\"")
      string(REGEX MATCH "^\"[^\"\\\n]*(\\\\.[^\"\\\n]*)*\"" skip "${text}")
      if(skip STREQUAL "")
        message(FATAL_ERROR "wire fingerprint: ${what}: unterminated string literal")
      endif()
      set(literal "${skip}")
    elseif(code MATCHES "(^|[^A-Za-z0-9_.])\\.?[0-9][A-Za-z0-9_.']*$")
      # A digit separator (1'000): part of the number.
      set(skip "'")
      string(APPEND code "'")
    else()
      string(REGEX MATCH "^'[^'\\\n]*(\\\\.[^'\\\n]*)*'" skip "${text}")
      if(skip STREQUAL "")
        message(FATAL_ERROR "wire fingerprint: ${what}: unterminated character literal")
      endif()
      set(literal "${skip}")
    endif()
    if(NOT literal STREQUAL "")
      _di_wire_normalise(normal "${code}")
      string(APPEND result "${normal}${literal}")
      set(code "")
    endif()
    string(LENGTH "${skip}" n)
    string(SUBSTRING "${text}" ${n} -1 text)
  endwhile()
  _di_wire_normalise(normal "${code}")
  string(APPEND result "${normal}")
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

function(deepinfer_wire_fingerprint out root)
  set(all "")
  foreach(header IN LISTS ARGN)
    file(READ "${header}" text)
    file(RELATIVE_PATH name "${root}" "${header}")
    deepinfer_wire_code(code "${text}" "${header}")
    string(APPEND all "${name}\n${code}\n")
  endforeach()
  string(SHA256 hash "${all}")
  string(SUBSTRING "${hash}" 0 12 hash)
  set(${out} "${hash}" PARENT_SCOPE)
endfunction()

# Relative to the source root.
set(_di_wire_header_globs actors/*.hpp actors/detail/*.hpp runtime/*.hpp config/*.hpp)

function(deepinfer_wire_headers out root)
  list(TRANSFORM _di_wire_header_globs PREPEND "${root}/" OUTPUT_VARIABLE globs)
  if(ARGV2 STREQUAL "CONFIGURE_DEPENDS")
    file(GLOB headers CONFIGURE_DEPENDS ${globs})  # a configure-time option, not in script mode
  else()
    file(GLOB headers ${globs})
  endif()
  list(SORT headers)
  set(${out} ${headers} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  deepinfer_wire_fingerprint(fingerprint "${WIRE_ROOT}" ${WIRE_HEADERS})
  if(WIRE_OUT)
    file(WRITE "${WIRE_OUT}" "${fingerprint}\n")
  else()
    message("${fingerprint}")
  endif()
endif()
