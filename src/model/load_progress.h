#pragma once
// A one-line progress bar on stderr while weights load — drawn only when stderr is a terminal, so
// logs, pipes and tests see nothing.
#include <cstdint>
#include <string>

namespace nibble::model {

bool stderr_is_terminal();

class LoadProgress {
 public:
  // `enabled` false draws nothing (callers pass stderr_is_terminal() unless told otherwise).
  LoadProgress(std::string label, uint64_t total_bytes, bool enabled);
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;
  ~LoadProgress();  // ends the line

  void advance(uint64_t bytes);

 private:
  void draw();

  std::string label_;
  uint64_t total_bytes_ = 0;
  uint64_t done_bytes_ = 0;
  int drawn_permille_ = -1;  // redraw only when the shown value changes
  bool enabled_ = false;
};

}  // namespace nibble::model
