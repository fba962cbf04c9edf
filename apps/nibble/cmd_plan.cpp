// nibble plan: the memory planner (being written; see issue 2).
#include <CLI/CLI.hpp>
void add_plan_command(CLI::App& app) { app.add_subcommand("plan", "KV memory planner"); }
