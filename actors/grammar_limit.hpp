// How long a request's response_format may take to compile before the request is refused: one
// limit for the scheduler, which admits a request once its executors have compiled the grammar
// (every cluster), and for the HTTP server, which compiles it first when the runners share its
// process (serve --model, --in-process) and would otherwise wait for it without end.
#pragma once

#include <chrono>
#include <string>

namespace di::actors {

/// The limit (the router waits a little longer for an admission: router_requests.cpp).
inline constexpr std::chrono::seconds max_grammar_prepare_time{100};

/// The limit in force: max_grammar_prepare_time, or a shorter one that a test sets in the
/// environment as DEEPINFER_TEST_GRAMMAR_LIMIT_S (seconds, more than 0 and at most 100; read
/// once; any other value is ignored with a note on stderr). A test hook, not a setting: it can
/// only shorten the wait, so that a test need not compile for 100 s.
std::chrono::nanoseconds grammar_prepare_limit();

/// The refusal of a grammar still compiling after `seconds` (past `limit`): "the
/// response_format took N s to compile; the limit is L s".
std::string grammar_too_slow(double seconds,
                             std::chrono::nanoseconds limit = grammar_prepare_limit());

}  // namespace di::actors
