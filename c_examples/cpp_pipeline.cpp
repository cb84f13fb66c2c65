// cpp_pipeline: graphsched from C++17 through graphsched.hpp.
//
//   x[batch x 2] -> affine (3x - 2, state in a C++ object) -> relu (lambda) -> total (lambda)
//                                                           -> branch (an If: runs `inner` nested)
//
// Shows: RAII handles, lambdas as kernels, spans over tensors, an input whose size each run
// binds (batch 1, 3 and 8, with size functions), per-run data, a nested run on the run's own
// executor, an exception thrown in a kernel becoming gs::Error with the status, the node and
// the exception's text, and the pool getting everything back.
#include <graphsched.hpp>

#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void expect(bool ok, const std::string &what) {
    if (!ok) throw std::runtime_error("check failed: " + what);
}

// Kernel state in an ordinary C++ object; the lambda captures it.
class Affine {
public:
    Affine(float a, float b) : a_(a), b_(b) {}
    void apply(gs::Context &c) {
        if (fail_next_.exchange(false)) throw std::runtime_error("Affine: simulated failure");
        auto in = c.input<float>(0);
        auto out = c.output<float>(0);
        for (size_t i = 0; i < in.size(); i++) out[i] = a_ * in[i] + b_;
        ++calls_;
    }
    void fail_next() { fail_next_ = true; }
    int calls() const { return calls_; }

private:
    float a_, b_;
    std::atomic<bool> fail_next_{false};  // kernels may run on any thread
    std::atomic<int> calls_{0};
};

// Output sizes follow the input: the same bytes.
void same_size(gs::Span<const size_t> in, gs::Span<size_t> out) { out[0] = in[0]; }

int run_example() {
    constexpr size_t WIDTH = 2 * sizeof(float);  // one row

    // The If operator's branch: doubles its input.
    gs::Graph inner;
    gs_value in_x = inner.add_input("x", sizeof(float));
    gs_value doubled = inner.add_node("double", "Scale", {in_x}, {sizeof(float)}, [](gs::Context &c) {
        c.output<float>(0)[0] = 2 * c.input<float>(0)[0];
    });
    inner.mark_output(doubled);
    inner.finalize();

    Affine affine(3.0f, -2.0f);
    gs::Graph g;
    gs_value x = g.add_input("x", GS_SIZE_DYNAMIC);
    gs::NodeOptions follows;
    follows.sizes = same_size;
    gs_value a = g.add_node("affine", "Affine", {x}, {WIDTH}, [&](gs::Context &c) { affine.apply(c); }, follows);
    gs_value r = g.add_node("relu", "Relu", {a}, {WIDTH}, [](gs::Context &c) {
        auto in = c.input<float>(0);
        auto out = c.output<float>(0);
        for (size_t i = 0; i < in.size(); i++) out[i] = in[i] > 0 ? in[i] : 0;
    }, follows);
    gs_value t = g.add_node("total", "ReduceSum", {r}, {sizeof(float)}, [](gs::Context &c) {
        float sum = 0;
        for (float v : c.input<float>(0)) sum += v;
        c.output<float>(0)[0] = sum * *c.run_data<float>();  // the run's data: a scale
    });
    gs_value b = g.add_node("branch", "If", {t}, {sizeof(float)}, [&](gs::Context &c) {
        alignas(16) float v = c.input<float>(0)[0];
        gs::RunOptions o;
        o.bind(in_x, &v, sizeof v);
        gs::Result nested = gs::run_nested(inner, c, o);
        c.output<float>(0)[0] = nested.output<float>(doubled)[0];
    });
    g.mark_output(r);
    g.mark_output(t);
    g.mark_output(b);
    g.finalize();

    gs::Pool pool;
    gs::Executor executor(2);
    float scale = 0.5f;
    int good_runs = 0;
    for (size_t batch : {1u, 3u, 8u, 3u}) {
        std::vector<float> xs(2 * batch);  // operator new aligns to 16 bytes, as bindings need
        for (size_t i = 0; i < xs.size(); i++) xs[i] = static_cast<float>(i % 7) - 2.0f;
        gs::RunOptions options;
        options.bind(x, xs.data(), xs.size() * sizeof(float)).executor(executor).user_data(&scale);
        gs::Result result = gs::run(g, pool, options);
        good_runs++;
        float want_total = 0;
        auto relu = result.output<float>(r);
        expect(relu.size() == xs.size(), "relu follows the batch: " + std::to_string(relu.size()));
        for (size_t i = 0; i < xs.size(); i++) {
            float want = 3 * xs[i] - 2 > 0 ? 3 * xs[i] - 2 : 0;
            expect(relu[i] == want, "relu(3x - 2) at " + std::to_string(i));
            want_total += want;
        }
        expect(result.output<float>(t)[0] == want_total * scale, "total at batch " + std::to_string(batch));
        expect(result.output<float>(b)[0] == 2 * want_total * scale, "the nested branch");
        std::printf("batch %zu: total %g\n", batch, static_cast<double>(result.output<float>(t)[0]));
    }  // each result goes back to the pool here

    // An exception inside a kernel becomes gs::Error: the status, the node, what() quoted.
    affine.fail_next();
    alignas(16) float two[2] = {1, 2};
    try {
        gs::run(g, pool, gs::RunOptions().bind(x, two, sizeof two).user_data(&scale));
        throw std::runtime_error("the run with a throwing kernel succeeded");
    } catch (const gs::Error &e) {
        const std::string msg = e.what();
        expect(e.status() == GS_ERR_KERNEL_FAILED, "status of the failed run: " + msg);
        expect(msg.find("'affine'") != std::string::npos, "the message names the node: " + msg);
        expect(msg.find("Affine: simulated failure") != std::string::npos, "the message quotes what(): " + msg);
        std::printf("failed as intended: %s\n", e.message().c_str());
    }
    expect(pool.stats().live_bytes == 0, "no bytes live after the failed run");

    // Without exceptions: try_run gives the status.
    gs::Result out;
    gs::RunOptions options;
    options.bind(x, two, sizeof two).user_data(&scale);
    gs::Status s = gs::try_run(g, pool, options, out);
    expect(s.ok() && out.output<float>(t)[0] == (1 + 4) * scale, "try_run: " + s.message);
    expect(affine.calls() == good_runs + 1, "affine ran once per successful run");
    std::printf("cpp_pipeline: OK\n");
    return 0;
}

}  // namespace

int main() {
    try {
        return run_example();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "cpp_pipeline: %s\n", e.what());
        return 1;
    }
}
