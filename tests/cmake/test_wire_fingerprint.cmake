# cmake -DSOURCE_DIR=<repo> -DWORK_DIR=<scratch> [-DDEEPINFER=<binary>] -P test_wire_fingerprint.cmake
# The wire fingerprint (cmake/WireFingerprint.cmake) of copies of actors/messages.hpp and of a
# fixture with tricky literals: a change to comments or whitespace keeps it, a change to the
# code (a field, the order of inspected fields, a literal's text, even after a // or /* inside
# it) gives another; an unterminated comment is an error. With DEEPINFER, `deepinfer --version`
# prints the fingerprint of the current sources (else the build is stale).
cmake_minimum_required(VERSION 3.24)
include(${SOURCE_DIR}/cmake/WireFingerprint.cmake)
file(READ ${SOURCE_DIR}/actors/messages.hpp messages)
file(READ ${CMAKE_CURRENT_LIST_DIR}/wire_fingerprint_fixture.hpp.txt fixture)
file(REMOVE_RECURSE ${WORK_DIR})
set(failures 0)

function(fingerprint_of out name messages_text fixture_text)
  set(root ${WORK_DIR}/${name})
  file(WRITE ${root}/actors/messages.hpp "${messages_text}")
  file(WRITE ${root}/tests/fixture.hpp "${fixture_text}")
  deepinfer_wire_fingerprint(fp ${root} ${root}/actors/messages.hpp ${root}/tests/fixture.hpp)
  set(${out} ${fp} PARENT_SCOPE)
endfunction()

fingerprint_of(base base "${messages}" "${fixture}")
if(NOT base MATCHES "^[0-9a-f]+$")
  message(FATAL_ERROR "not a fingerprint: '${base}'")
endif()

# <same|other> <case> <what> <from> <to> [REGEX]: replaces <from> by <to> in <what> (messages or
# fixture); <from> must occur.
function(expect verdict name what from to)
  set(text "${${what}}")
  if(ARGV5 STREQUAL "REGEX")
    string(REGEX REPLACE "${from}" "${to}" changed "${text}")
  else()
    string(REPLACE "${from}" "${to}" changed "${text}")
  endif()
  if(changed STREQUAL text)
    message(SEND_ERROR "${name}: the edit changed nothing in ${what}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
    return()
  endif()
  if(what STREQUAL "messages")
    fingerprint_of(fp ${name} "${changed}" "${fixture}")
  else()
    fingerprint_of(fp ${name} "${messages}" "${changed}")
  endif()
  if((verdict STREQUAL "same" AND NOT fp STREQUAL base) OR
     (verdict STREQUAL "other" AND fp STREQUAL base))
    message(SEND_ERROR "${name}: expected the ${verdict} fingerprint, got ${fp} (base ${base})")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  else()
    message(STATUS "ok: ${name} (${verdict}: ${fp})")
  endif()
endfunction()

# Comments and whitespace only: the same fingerprint.
expect(same doc_comments_removed messages "\n *///[^\n]*" "" REGEX)
expect(same doc_comments_edited messages "///[^\n]*" "/// edited" REGEX)
expect(same trailing_comment_edited messages "(same-host latency)" "(edited)")
expect(same comment_added messages "struct run_step {" "// new comment\nstruct run_step {")
expect(same block_comment_added messages "struct run_step {" "struct /* wire */ run_step {")
expect(same block_comment_multiline messages "struct run_step {"
       "/*\n * many\n * lines ** */struct run_step {")
expect(same reindented messages "\n  " "\n    " REGEX)
expect(same blank_lines messages "\n" "\n\n")
expect(same tabs_and_crlf messages "\n" "\t\r\n")
expect(same declaration_split messages "std::int64_t sent_ns = 0;"
       "std::int64_t\n      sent_ns\t=  0 ;")
expect(same call_rewrapped messages "x.plan, x.sent_ns" "\n      x.plan ,\n      x.sent_ns ")
expect(same fixture_comments_edited fixture "// don't" "// do not, \"really\" /*")
expect(same fixture_block_edited fixture "and stars ** */" "and no stars */")
expect(same fixture_directive_comment fixture "// it's a \"comment\" after a directive" "")
expect(same fixture_spaces fixture "int big = 1'000'000;" "int   big=1'000'000 ;")
expect(same fixture_raw_string_spacing fixture "= R\"x(" "=R\"x(")

# Code: another fingerprint.
expect(other field_added messages "std::int64_t sent_ns = 0;" "std::int64_t sent_ns = 0;\n  int extra = 0;")
expect(other field_type messages "std::int64_t sent_ns = 0;" "std::int32_t sent_ns = 0;")
expect(other inspect_order messages "x.plan, x.sent_ns" "x.sent_ns, x.plan")
expect(other default_value messages "std::int64_t sent_ns = 0;" "std::int64_t sent_ns = 1;")
expect(other tokens_joined messages "struct run_step" "structrun_step")
expect(other string_after_slashes fixture "example.com/a" "example.com/b")
expect(other code_between_comment_markers_in_strings fixture "between_markers = 1" "between_markers = 2")
expect(other string_escape fixture "a \\\" // b" "a \\\" // c")
expect(other code_after_quote_char fixture "after_quote = 3" "after_quote = 4")
expect(other slash_char fixture "'/'" "'*'")
expect(other string_spacing fixture "\"a  b\"" "\"a b\"")
expect(other raw_string_text fixture "// not a comment" "// not a remark")
expect(other raw_string_comment_marker fixture "/* nor this */" "/* nor that */")
expect(other digit_separator fixture "1'000'000" "1'000'001")
expect(other operators_fused fixture "- -big" "--big")
expect(other directive_line_joined fixture "1  // it's a \"comment\" after a directive\n" "1 ")

# The script mode gives the function's fingerprint.
execute_process(COMMAND ${CMAKE_COMMAND} -DWIRE_ROOT=${WORK_DIR}/base
                        "-DWIRE_HEADERS=${WORK_DIR}/base/actors/messages.hpp;${WORK_DIR}/base/tests/fixture.hpp"
                        -DWIRE_OUT=${WORK_DIR}/script_mode.txt
                        -P ${SOURCE_DIR}/cmake/WireFingerprint.cmake
                RESULT_VARIABLE rc)
file(READ ${WORK_DIR}/script_mode.txt script_fp)
string(STRIP "${script_fp}" script_fp)
if(NOT rc EQUAL 0 OR NOT script_fp STREQUAL base)
  message(SEND_ERROR "script mode: exit ${rc}, fingerprint '${script_fp}', expected ${base}")
  math(EXPR failures "${failures} + 1")
endif()

# Text that is not C++ as expected: an error naming the file, never a guess.
foreach(bad "int a; /* open" "const char* s = \"open;\nint b;" "char c = 'x;\n")
  string(MD5 id "${bad}")
  file(WRITE ${WORK_DIR}/bad/${id}.hpp "${bad}")
  execute_process(COMMAND ${CMAKE_COMMAND} -DWIRE_ROOT=${WORK_DIR}/bad
                          -DWIRE_HEADERS=${WORK_DIR}/bad/${id}.hpp
                          -P ${SOURCE_DIR}/cmake/WireFingerprint.cmake
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  # (CMake wraps the message's lines)
  if(rc EQUAL 0 OR NOT err MATCHES "wire fingerprint:[ \n]*[^ \n]*${id}\\.hpp:[ \n]*unterminated")
    message(SEND_ERROR "'${bad}': expected an error naming the file, got exit ${rc}: ${err}")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

# The built binary's fingerprint is the current sources' (the headers actors/CMakeLists.txt
# hashes, from the same function).
if(DEEPINFER)
  deepinfer_wire_headers(headers ${SOURCE_DIR})
  if(NOT "${SOURCE_DIR}/actors/messages.hpp" IN_LIST headers)
    message(SEND_ERROR "deepinfer_wire_headers: actors/messages.hpp is not among '${headers}'")
    math(EXPR failures "${failures} + 1")
  endif()
  deepinfer_wire_fingerprint(sources ${SOURCE_DIR} ${headers})
  execute_process(COMMAND ${DEEPINFER} --version OUTPUT_VARIABLE version RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT version MATCHES "\\(wire fingerprint ${sources}\\)")
    message(SEND_ERROR "deepinfer --version (exit ${rc}): '${version}', expected the sources' "
                       "wire fingerprint ${sources} (a stale build?)")
    math(EXPR failures "${failures} + 1")
  else()
    message(STATUS "ok: deepinfer --version prints the sources' fingerprint ${sources}")
  endif()
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} wire fingerprint check(s) failed")
endif()
