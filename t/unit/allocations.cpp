// Replaces every non-aligned form of the global operator new and delete (so that allocation and
// release always pair up, as the sanitizers check) with malloc and free and a per-thread count.
#include "allocations.h"

#include <cstdlib>
#include <new>

namespace {

thread_local std::uint64_t count = 0;

void* allocate(std::size_t n) noexcept {
    ++count;
    return std::malloc(n > 0 ? n : 1);
}

void* allocate_or_throw(std::size_t n) {
    if (void* p = allocate(n)) return p;
    throw std::bad_alloc();
}

}  // namespace

namespace grl::test {

std::uint64_t allocations() {
    return count;
}

}  // namespace grl::test

void* operator new(std::size_t n) {
    return allocate_or_throw(n);
}
void* operator new[](std::size_t n) {
    return allocate_or_throw(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    return allocate(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    return allocate(n);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
