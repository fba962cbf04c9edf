#pragma once
// Filters, tests, methods of strings/lists/dicts, and the global functions of the Jinja subset.
#include <string>

#include "tokenizer/jinja/value.h"

namespace nibble::jinja {

// `value | name(args)`. Throws nibble::Error for an unknown filter or bad arguments.
Value apply_filter(const std::string& name, const Value& value, Arguments& args);
// `value is name(args)`.
bool apply_test(const std::string& name, const Value& value, Arguments& args);
// `object.name` for a method or attribute of a string, list or dict (undefined when there is none).
Value get_attribute(const Value& object, const std::string& name);
// Globals every template sees: namespace, range, raise_exception, strftime_now.
void add_globals(Object& globals);
// Python's object[index] for lists (negative from the end), strings and dicts; undefined if absent.
Value get_item(const Value& object, const Value& index);
// Python's object[start:stop:step] for lists and strings (null Values = omitted).
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

}  // namespace nibble::jinja
