// cpp_noexcept: graphsched.hpp without exceptions (built with -fno-exceptions).
//
// Failed calls go to the error handler (which would abort); runs that may fail for reasons
// other than programming errors use gs::try_run and get a gs::Status. A kernel reports a
// failure through its context, as C kernels do, and the run's status names the node.
#include <graphsched.hpp>

#include <cstdio>
#include <cstring>

static_assert(!GRAPHSCHED_HPP_EXCEPTIONS, "this example must be built without exceptions");

namespace {

int handled = 0;
void on_error(const gs::Status &s) {
    handled++;
    std::fprintf(stderr, "cpp_noexcept: unexpected failure: %s: %s\n", s.name(), s.message.c_str());
}

}  // namespace

int main() {
    gs::set_error_handler(on_error);
    gs::Graph g;
    gs_value x = g.add_input("x", 4 * sizeof(int));
    gs_value y = g.add_node("checked_negate", "Neg", {x}, {4 * sizeof(int)}, [](gs::Context &c) {
        auto in = c.input<int>(0);
        auto out = c.output<int>(0);
        for (size_t i = 0; i < in.size(); i++) {
            if (in[i] < 0) {
                c.fail("negative input");  // no exceptions: the kernel fails through its context
                return;
            }
        }
        // A parallel loop without exceptions: its chunks must not fail.
        c.parallel_for(0, in.size(), 2, [&](size_t begin, size_t end) {
            for (size_t i = begin; i < end; i++) out[i] = -in[i];
        });
    });
    g.mark_output(y);
    // A node that defers its end and completes it at once (a device that was quick).
    gs_value z = g.add_node("copy_later", "Copy", {y}, {4 * sizeof(int)}, [](gs::Context &c) {
        gs::Completion done = c.defer();
        auto in = c.input<int>(0);
        auto out = c.output<int>(0);
        for (size_t i = 0; i < in.size(); i++) out[i] = in[i];
        done.complete();
    });
    g.mark_output(z);
    g.finalize();
    gs::Pool pool;

    alignas(16) int good[4] = {1, 2, 3, 4};
    gs::Result r;
    gs::RunOptions options;
    options.bind(x, good, sizeof good);
    gs::Status s = gs::try_run(g, pool, options, r);
    if (!s || r.output<int>(y)[3] != -4 || r.output<int>(z)[3] != -4) {
        std::fprintf(stderr, "cpp_noexcept: the run failed: %s\n", s.message.c_str());
        return 1;
    }
    // A binding of the wrong size: a status, not an abort.
    gs::RunOptions wrong;
    wrong.bind(x, good, 3 * sizeof(int));
    gs::Result none;
    s = gs::try_run(g, pool, wrong, none);
    if (s.code != GS_ERR_INPUT_BINDING || std::strstr(s.message.c_str(), "'x'") == nullptr || none.get()) {
        std::fprintf(stderr, "cpp_noexcept: expected GS_ERR_INPUT_BINDING naming 'x', got %s: %s\n", s.name(),
                     s.message.c_str());
        return 1;
    }
    // A kernel that fails: the run's status names the node and quotes the kernel.
    alignas(16) int bad[4] = {1, -2, 3, 4};
    gs::RunOptions failing;
    failing.bind(x, bad, sizeof bad);
    s = gs::try_run(g, pool, failing, none);
    if (s.code != GS_ERR_KERNEL_FAILED || std::strstr(s.message.c_str(), "negative input") == nullptr ||
        std::strstr(s.message.c_str(), "'checked_negate'") == nullptr) {
        std::fprintf(stderr, "cpp_noexcept: expected the kernel's failure, got %s: %s\n", s.name(), s.message.c_str());
        return 1;
    }
    std::printf("cpp_noexcept: OK (%s: %s)\n", s.name(), s.message.c_str());
    return handled == 0 ? 0 : 1;
}
