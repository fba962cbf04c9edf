#include "model/load_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/units.h"

namespace nibble::model {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

LoadProgress::LoadProgress(std::string label, uint64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_bytes_(total_bytes), enabled_(enabled) {
  if (enabled_) draw();
}

LoadProgress::~LoadProgress() {
  if (!enabled_) return;
  done_bytes_ = total_bytes_;
  draw();
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

void LoadProgress::advance(uint64_t bytes) {
  done_bytes_ = std::min(total_bytes_, done_bytes_ + bytes);
  if (enabled_) draw();
}

void LoadProgress::draw() {
  const int permille =
      total_bytes_ == 0 ? 1000 : static_cast<int>(done_bytes_ * 1000 / total_bytes_);
  if (permille == drawn_permille_) return;
  drawn_permille_ = permille;
  constexpr int kWidth = 30;
  const int filled = permille * kWidth / 1000;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, ' ');
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %s / %s\x1b[K", label_.c_str(), bar.c_str(), permille / 10.0,
               format_bytes(static_cast<double>(done_bytes_)).c_str(),
               format_bytes(static_cast<double>(total_bytes_)).c_str());
  std::fflush(stderr);
}

}  // namespace nibble::model
