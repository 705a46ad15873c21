// Heap allocations made by this thread so far (every non-aligned form of operator new, counted
// by the replacements in allocations.cpp, which are the whole test binary's): for tests that a
// steady state allocates nothing.
#pragma once

#include <cstdint>

namespace grl::test {

std::uint64_t allocations();

}  // namespace grl::test
