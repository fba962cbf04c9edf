#pragma once
// Human byte sizes: "141GB", "80GiB", "512MB", "1e9" <-> bytes.
#include <cstdint>
#include <string>
#include <string_view>

namespace nibble {

// Parses a byte count with an optional unit: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB
// (powers of 1024). Case-insensitive; a fractional number is allowed ("1.5GB").
// Throws nibble::Error naming the text on anything else.
uint64_t parse_bytes(std::string_view text);

// "18.00 KiB", "131.07 GB": binary units below 1 MiB, decimal GB above, for reports.
std::string format_bytes(double bytes);

}  // namespace nibble
