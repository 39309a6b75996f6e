// The executor's response_format preparation: a spec the runner has compiled already is
// answered at once, not queued on the grammar thread behind a compile still running.
#include "actors/executor_actor.hpp"
#include "tests/actors/actor_test_util.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

using namespace di;

namespace {

/// What the fake runner's grammar functions share with the test.
struct grammar_state {
  std::mutex mutex;
  std::condition_variable released_cv;
  bool released = false;
  std::set<std::string> compiled;
  int num_prepared = 0;  ///< calls of the preparer
};

/// A runner with no model: a preparer that blocks on "slow" until released, and a lookup of
/// the specs it has compiled.
class grammar_runner : public runtime::step_runner {
 public:
  explicit grammar_runner(std::shared_ptr<grammar_state> s) : s_(std::move(s)) {}
  runtime::runner_info info() const override { return {"fake", {}, 0, 64}; }
  runtime::step_result run(const runtime::step_plan&) override {
    DI_FAIL("the grammar test runs no steps");
  }
  std::function<void(const std::string&)> grammar_preparer() const override {
    return [s = s_](const std::string& spec) {
      std::unique_lock lock(s->mutex);
      ++s->num_prepared;
      if (spec == "slow") s->released_cv.wait(lock, [&] { return s->released; });
      s->compiled.insert(spec);
    };
  }
  std::function<bool(const std::string&)> grammar_lookup() const override {
    return [s = s_](const std::string& spec) {
      std::lock_guard lock(s->mutex);
      return s->compiled.count(spec) > 0;
    };
  }

 private:
  std::shared_ptr<grammar_state> s_;
};

}  // namespace

TEST_CASE("executor: a compiled response_format is answered at once, not behind a compile") {
  test::test_system ts;
  auto state = std::make_shared<grammar_state>();
  actors::executor_params p;
  p.make_runner = [state] {
    return actors::runner_bundle{std::make_unique<grammar_runner>(state), {}};
  };
  p.label = "grammar test executor";
  auto exec = actors::spawn_executor_actor(ts.sys, std::move(p));
  caf::scoped_actor self{ts.sys};
  const auto wait = std::chrono::seconds(30);
  // The runner loads on the first job; its grammar functions exist from then on.
  self->request(exec, wait, actors::info_atom::value)
      .receive([](actors::executor_info&) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
  auto prepare = [&](const std::string& spec) {
    std::string answer = "(none)";
    self->request(exec, wait, actors::prepare_grammar_atom::value, spec)
        .receive([&](std::string& error) { answer = error; },
                 [&](caf::error& e) { answer = caf::to_string(e); });
    return answer;
  };
  CHECK(prepare("cached") == "");  // compiled on the grammar thread
  // A slow compile now holds the grammar thread ...
  self->send(exec, actors::prepare_grammar_atom::value, std::string("slow"));
  for (int i = 0; i < 3000; ++i) {  // until the thread has taken it
    {
      std::lock_guard lock(state->mutex);
      if (state->num_prepared == 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::lock_guard lock(state->mutex);
    REQUIRE(state->num_prepared == 2);
  }
  // ... and the compiled spec is answered without it (it queued behind "slow" before).
  CHECK(prepare("cached") == "");
  {
    std::lock_guard lock(state->mutex);
    CHECK(state->num_prepared == 2);  // not prepared again
    state->released = true;
  }
  state->released_cv.notify_all();
  CHECK(prepare("other") == "");  // a new spec still goes to the thread, after "slow"
  std::lock_guard lock(state->mutex);
  CHECK(state->num_prepared == 3);
  CHECK(state->compiled.count("slow") == 1);
}
