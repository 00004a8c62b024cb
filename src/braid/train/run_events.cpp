#include "train/run_events.h"

#include "core/error.h"

namespace braid::train {

const char* stop_how_name(StopHow how) {
  switch (how) {
    case StopHow::done:
      return "done";
    case StopHow::converged:
      return "converged";
    case StopHow::signal:
      return "signal";
    case StopHow::unfinished:
      return "unfinished";
  }
  return "?";
}

void RunEvents::subscribe(std::shared_ptr<RunObserver> observer) {
  BRAID_CHECK(observer, "RunEvents::subscribe: a null observer");
  observers_.push_back(std::move(observer));
}

void RunEvents::publish(const RunStarted& e) const {
  for (const auto& o : observers_) o->on_run_started(e);
}
void RunEvents::publish(const StepDone& e) const {
  for (const auto& o : observers_) o->on_step_done(e);
}
void RunEvents::publish(const Evaluated& e) const {
  for (const auto& o : observers_) o->on_evaluated(e);
}
void RunEvents::publish(const Converged& e) const {
  for (const auto& o : observers_) o->on_converged(e);
}
void RunEvents::publish(const Checkpointed& e) const {
  for (const auto& o : observers_) o->on_checkpointed(e);
}
void RunEvents::publish(const MembershipChanged& e) const {
  for (const auto& o : observers_) o->on_membership_changed(e);
}
void RunEvents::publish(const Stopped& e) const {
  for (const auto& o : observers_) o->on_stopped(e);
}
void RunEvents::publish(const Failed& e) const {
  for (const auto& o : observers_) o->on_failed(e);
}

}  // namespace braid::train
