// nibble kvq: what a KV format does to a tensor (being written; see issue 2).
#include <CLI/CLI.hpp>
void add_kvq_command(CLI::App& app) { app.add_subcommand("kvq", "KV quantization round trip"); }
