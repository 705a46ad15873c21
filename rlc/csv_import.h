// History brought in from CSV (docs/rlc-history.md, "grl-rlc import"): one row per instance
// and interval, a header naming the columns. The whole text is checked before anything is
// returned; the first error names the file, the line and the field.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "grl/common/parse.h"
#include "history.h"

namespace grl::rlc {

// Every column a history CSV may have, in the documented order (bucket, start and
// offered_mean are required; the others have defaults).
const std::vector<std::string>& history_csv_columns();

// Parses `text` (the content of `file`, which is only used in errors) into series, one
// per instance, samples in ascending start. Errors look like
//   data.csv:17: field "offered_peak": "abc" is not a number
Parsed<std::vector<Series>> parse_history_csv(std::string_view text, const std::string& file);

}  // namespace grl::rlc
