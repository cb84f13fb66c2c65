// cpp_pipeline: graphsched from C++17.
//
//   x[N] -> affine (3x - 2, a C++ object as user_data) -> relu (lambda) -> total (extern "C")
//
// Shows: handles owned by std::unique_ptr with custom deleters, status codes turned into
// exceptions on the caller's side, and kernels that never let an exception escape into the
// library (catch, gs_ctx_set_error, return non-zero). One run is made to fail on purpose.
#include <graphsched.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct GraphDeleter {
    void operator()(gs_graph *g) const noexcept { gs_graph_free(g); }
};
struct PoolDeleter {
    void operator()(gs_pool *p) const noexcept { gs_pool_free(p); }
};
struct ResultDeleter {
    void operator()(gs_run_result *r) const noexcept { gs_result_free(r); }
};
using Graph = std::unique_ptr<gs_graph, GraphDeleter>;
using Pool = std::unique_ptr<gs_pool, PoolDeleter>;
using Result = std::unique_ptr<gs_run_result, ResultDeleter>;

// A failed gs_* call, with the library's sentence.
struct Error : std::runtime_error {
    gs_status status;
    Error(gs_status s, const std::string &call)
        : std::runtime_error(call + " returned " + gs_status_name(s) + ": " + gs_last_error_message()), status(s) {}
};

void check(gs_status s, const char *call) {
    if (s != GS_OK) throw Error(s, call);
}
#define GS_TRY(call) check((call), #call)

void expect(bool ok, const std::string &what) {
    if (!ok) throw std::runtime_error("check failed: " + what);
}

// The kernel state lives in an ordinary C++ object; graphsched only passes the pointer back.
class Affine {
public:
    Affine(float a, float b) : a_(a), b_(b) {}

    void apply(gs_kernel_ctx *ctx) {
        const gs_tensor *in = gs_ctx_input(ctx, 0);
        gs_tensor *out = gs_ctx_output(ctx, 0);
        if (!in || !out) throw std::logic_error("missing input or output");
        if (in->nbytes != out->nbytes) throw std::invalid_argument("input and output sizes differ");
        if (fail_next_.exchange(false)) throw std::runtime_error("Affine: simulated failure");
        auto x = static_cast<const float *>(in->data);
        auto y = static_cast<float *>(out->data);
        for (size_t i = 0; i < in->nbytes / sizeof(float); i++) y[i] = a_ * x[i] + b_;
        ++calls_;
    }

    void fail_next() { fail_next_ = true; }
    int calls() const { return calls_; }

private:
    float a_, b_;
    std::atomic<bool> fail_next_{false};  // kernels may run on any thread
    std::atomic<int> calls_{0};
};

}  // namespace

// The pattern for every C++ kernel: nothing may propagate out of it.
extern "C" int32_t affine_kernel(gs_kernel_ctx *ctx, void *user) {
    try {
        static_cast<Affine *>(user)->apply(ctx);
        return 0;
    } catch (const std::exception &e) {
        gs_ctx_set_error(ctx, e.what());
        return 1;
    } catch (...) {
        gs_ctx_set_error(ctx, "unknown C++ exception");
        return 1;
    }
}

extern "C" int32_t total_kernel(gs_kernel_ctx *ctx, void *) {
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    float sum = 0.0f;
    for (size_t i = 0; i < in->nbytes / sizeof(float); i++) sum += static_cast<const float *>(in->data)[i];
    *static_cast<float *>(out->data) = sum;
    return 0;
}

namespace {

// A captureless lambda converts to a plain function pointer.
const gs_kernel_fn relu_kernel = [](gs_kernel_ctx *ctx, void *) -> int32_t {
    try {
        const gs_tensor *in = gs_ctx_input(ctx, 0);
        gs_tensor *out = gs_ctx_output(ctx, 0);
        if (!in || !out) throw std::logic_error("missing input or output");
        auto x = static_cast<const float *>(in->data);
        auto y = static_cast<float *>(out->data);
        for (size_t i = 0; i < in->nbytes / sizeof(float); i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return 0;
    } catch (...) {
        gs_ctx_set_error(ctx, "relu failed");
        return 1;
    }
};

// graphsched copies the description during the call, so temporaries are fine.
gs_value add_node(gs_graph *g, const char *name, const char *op, gs_kernel_fn k, void *user,
                  std::initializer_list<gs_value> inputs, size_t out_bytes) {
    gs_node_desc d{};
    d.name = name;
    d.op_type = op;
    d.kernel = k;
    d.user_data = user;
    d.inputs = inputs.begin();
    d.num_inputs = static_cast<uint32_t>(inputs.size());
    d.num_outputs = 1;
    d.output_sizes = &out_bytes;
    uint32_t id = 0;
    GS_TRY(gs_graph_add_node(g, &d, &id));
    return gs_value{id, 0};
}

std::vector<float> floats(const Result &r, gs_value v) {
    gs_tensor t{};
    GS_TRY(gs_result_output(r.get(), v, &t));
    auto p = static_cast<const float *>(t.data);
    return std::vector<float>(p, p + t.nbytes / sizeof(float));
}

constexpr size_t N = 6;

int run_example() {
    Affine affine(3.0f, -2.0f);
    Graph g;
    {
        gs_graph *raw = nullptr;
        GS_TRY(gs_graph_new(&raw));
        g.reset(raw);
    }
    gs_value x{};
    GS_TRY(gs_graph_add_input(g.get(), "x", N * sizeof(float), &x));
    gs_value a = add_node(g.get(), "affine", "Affine", affine_kernel, &affine, {x}, N * sizeof(float));
    gs_value r = add_node(g.get(), "relu", "Relu", relu_kernel, nullptr, {a}, N * sizeof(float));
    gs_value t = add_node(g.get(), "total", "ReduceSum", total_kernel, nullptr, {r}, sizeof(float));
    GS_TRY(gs_graph_mark_output(g.get(), r));
    GS_TRY(gs_graph_mark_output(g.get(), t));
    GS_TRY(gs_graph_finalize(g.get()));

    Pool pool;
    {
        gs_pool *raw = nullptr;
        GS_TRY(gs_pool_new(nullptr, &raw));
        pool.reset(raw);
    }

    alignas(16) std::array<float, N> xs{-2, -1, 0, 1, 2, 3};
    gs_input_binding binding{};
    binding.value = x;
    binding.tensor.data = xs.data();
    binding.tensor.nbytes = sizeof xs;
    gs_run_options options{};  // zero-initialized: every field not set here takes its default
    options.inputs = &binding;
    options.num_inputs = 1;
    auto run = [&] {
        gs_run_result *raw = nullptr;
        GS_TRY(gs_run(g.get(), pool.get(), &options, &raw));
        return Result(raw);
    };

    std::vector<float> want;
    float want_total = 0.0f;
    for (float v : xs) {
        want.push_back(3.0f * v - 2.0f > 0.0f ? 3.0f * v - 2.0f : 0.0f);
        want_total += want.back();
    }
    {
        Result result = run();
        expect(floats(result, r) == want, "relu(3x - 2) is wrong");
        expect(floats(result, t) == std::vector<float>{want_total}, "total is wrong");
        std::printf("relu(3x - 2) for x = -2..3 sums to %g\n", static_cast<double>(want_total));
    }  // the result goes back to the pool here

    // An exception inside the kernel becomes GS_ERR_KERNEL_FAILED, quoted with the node name.
    affine.fail_next();
    try {
        run();
        throw std::runtime_error("the run with a throwing kernel succeeded");
    } catch (const Error &e) {
        const std::string msg = e.what();
        expect(e.status == GS_ERR_KERNEL_FAILED, "status of the failed run: " + msg);
        expect(msg.find("'affine'") != std::string::npos, "the message names the node: " + msg);
        expect(msg.find("Affine: simulated failure") != std::string::npos, "the message quotes what(): " + msg);
        std::printf("failed as intended: %s\n", gs_last_error_message());
    }
    gs_pool_stats ps{};
    GS_TRY(gs_pool_get_stats(pool.get(), &ps));
    expect(ps.live_bytes == 0, "no bytes live after the failed run");

    Result again = run();
    expect(floats(again, t) == std::vector<float>{want_total}, "total after the failure");
    expect(affine.calls() == 2, "affine ran twice successfully");
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
