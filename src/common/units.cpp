#include "common/units.h"

#include <cctype>
#include <cmath>
#include <string>

#include "common/error.h"

namespace nibble {

uint64_t parse_bytes(std::string_view text) {
  std::string s(text);
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(s, &pos);
  } catch (const std::exception&) {
    NIBBLE_FAIL("'{}' is not a byte size (expected e.g. 141GB, 80GiB, 1073741824)", text);
  }
  std::string unit;
  for (size_t i = pos; i < s.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(s[i]))) unit += static_cast<char>(std::tolower(s[i]));
  }
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "kb" || unit == "k") mult = 1e3;
  else if (unit == "mb" || unit == "m") mult = 1e6;
  else if (unit == "gb" || unit == "g") mult = 1e9;
  else if (unit == "tb" || unit == "t") mult = 1e12;
  else if (unit == "kib") mult = 1024.0;
  else if (unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else NIBBLE_FAIL("'{}': unknown unit '{}' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", text, unit);
  const double bytes = value * mult;
  NIBBLE_CHECK(std::isfinite(bytes) && bytes >= 0 && bytes < 1.8e19, "'{}' is not a valid byte size", text);
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_bytes(double bytes) {
  if (bytes < 1024.0 * 1024) {
    if (bytes < 1024) return fmt::format("{:.0f} B", bytes);
    return fmt::format("{:.2f} KiB", bytes / 1024);
  }
  if (bytes < 1e9) return fmt::format("{:.2f} MB", bytes / 1e6);
  return fmt::format("{:.2f} GB", bytes / 1e9);
}

}  // namespace nibble
