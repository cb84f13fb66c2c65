// graphsched.hpp through a plain -I, compiled (not linked) by ctest with -Wall -Wextra
// -Wpedantic -Werror in C++17 and C++20, with and without exceptions (the `header_check_*`
// tests in CMakeLists.txt). A template warns only once instantiated: each of the header's is
// instantiated here.
#include <graphsched.hpp>

#include <cstddef>

static float kernel(gs::Context &c) {
    gs::Span<const float> in = c.input<float>(0);
    gs::Span<float> out = c.output<float>(0);
    gs::Span<float> more = c.alloc_output<float>(1, in.size());
    gs::Status s = c.try_alloc_output<float>(2, in.size(), more);
    int *data = c.run_data<int>();
    c.parallel_for(0, in.size(), 16, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; i++) out[i] = 2 * in[i];
    });
    c.parallel_for_nested(0, in.size(), 16, [&](const gs::Parallel &p, size_t b, size_t e) {
        p.parallel_for(b, e, 4, [&](const gs::Parallel &, size_t i0, size_t i1) {
            for (size_t i = i0; i < i1; i++) out[i] += in[i];
        });
    });
    return s.ok() && data ? more[0] : 0.0f;
}

static size_t output_size(const gs::Result &r, gs_value v) { return r.output<float>(v).size(); }

int main() {
    float (*k)(gs::Context &) = kernel;
    size_t (*f)(const gs::Result &, gs_value) = output_size;
    return k && f ? 0 : 1;
}
