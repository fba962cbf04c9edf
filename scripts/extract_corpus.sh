#!/usr/bin/env bash
# Extracts a public-domain English corpus from Debian packages into one plain UTF-8 text file.
#
#   scripts/extract_corpus.sh OUT.txt        # writes OUT.txt and OUT.txt.json (packages, versions, sha256)
#
# Source: r-cran-janeaustenr — Jane Austen's six novels (Project Gutenberg texts, public domain),
# stored as R character vectors (one element per line) in the package's lazy-load database
# data/Rdata.rdb. R is not needed: the database is a run of [uint32 big-endian length][zlib stream]
# records, each an R XDR serialization whose top object is a character vector; a few lines of
# Python read it. Output: the novels in the package's order (Emma, Mansfield Park, Northanger
# Abbey, Persuasion, Pride and Prejudice, Sense and Sensibility), each line as stored, novels
# separated by one blank line, paragraphs by blank lines as in the source (what nibble eval's
# corpus splitter expects), LF line endings, trailing spaces removed. Deterministic: the same
# package version gives the same bytes (the sidecar records the sha256).
#
# The package is installed with apt-get only when missing (needs root then). Not run in CI.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT.txt" >&2
  exit 2
fi
out="$1"
packages=(r-cran-janeaustenr)
rdb=/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "error: missing Debian packages ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi
[[ -r "$rdb" ]] || { echo "error: $rdb not found (r-cran-janeaustenr layout changed?)" >&2; exit 1; }

python3 - "$rdb" "$out" <<'PY'
import struct, sys, zlib

rdb_path, out_path = sys.argv[1], sys.argv[2]
data = open(rdb_path, "rb").read()
novels = []
pos = 0
while pos < len(data):
    (size,) = struct.unpack(">I", data[pos:pos + 4])
    dec = zlib.decompressobj()
    blob = dec.decompress(data[pos + 4:])
    pos = len(data) - len(dec.unused_data)
    if len(blob) != size or blob[:2] != b"X\n":
        sys.exit(f"error: {rdb_path}: record at byte {pos} is not an R XDR serialization")
    p = 2
    (version,) = struct.unpack(">i", blob[p:p + 4])
    p += 12  # format version, writer R version, minimal reader version
    if version == 3:
        (n,) = struct.unpack(">i", blob[p:p + 4])
        p += 4 + n  # native encoding name
    (flags,) = struct.unpack(">i", blob[p:p + 4])
    p += 4
    if flags & 0xFF != 16:  # STRSXP: a character vector
        sys.exit(f"error: {rdb_path}: a record is of R type {flags & 0xFF}, expected a character vector (16)")
    (count,) = struct.unpack(">i", blob[p:p + 4])
    p += 4
    lines = []
    for _ in range(count):
        flags, length = struct.unpack(">ii", blob[p:p + 8])
        p += 8
        if flags & 0xFF != 9:  # CHARSXP
            sys.exit(f"error: {rdb_path}: string of R type {flags & 0xFF}")
        if length < 0:  # NA_character_
            lines.append("")
            continue
        encoding = "latin-1" if flags & (1 << 14) else "utf-8"  # R LATIN1_MASK
        lines.append(blob[p:p + length].decode(encoding).rstrip())
        p += length
    while lines and not lines[-1]:
        lines.pop()
    novels.append("\n".join(lines))
if len(novels) != 6:
    sys.exit(f"error: {rdb_path}: expected 6 novels, found {len(novels)}")
with open(out_path, "w", encoding="utf-8", newline="\n") as f:
    f.write("\n\n".join(novels) + "\n")
PY

sha=$(sha256sum "$out" | cut -d' ' -f1)
bytes=$(stat -c %s "$out")
{
  echo "{"
  echo "  \"file\": \"$(basename "$out")\","
  echo "  \"bytes\": $bytes,"
  echo "  \"sha256\": \"$sha\","
  echo "  \"packages\": ["
  for i in "${!packages[@]}"; do
    p=${packages[$i]}
    v=$(dpkg-query -W -f='${Version}' "$p")
    sep=","; [[ $i -eq $((${#packages[@]} - 1)) ]] && sep=""
    echo "    {\"name\": \"$p\", \"version\": \"$v\", \"content\": \"Jane Austen's six novels (public domain)\"}$sep"
  done
  echo "  ]"
  echo "}"
} > "$out.json"
echo "wrote $out ($bytes bytes, sha256 $sha) and $out.json" >&2
