/*
 * graphsched.hpp: header-only C++17 wrappers over the C API (graphsched.h).
 *
 * The model is the C API's; this header adds ownership and types:
 *   gs::Graph     a graph under construction, then finalized; owns its kernels (lambdas)
 *   gs::Pool      a buffer pool            gs::Executor  worker threads
 *   gs::Result    one run's outputs        gs::Context   what a kernel sees
 *   gs::Completion  the end of a node whose kernel deferred it (Context::defer)
 *   gs::Span<T>   a view of a tensor's elements (std::span's subset, for C++17)
 *   gs::Error     a failed call: status() and what() carry the status and the library's sentence
 *
 * Handles are move-only RAII objects, like Ort::Session and Ort::Value in ONNX Runtime's C++
 * API. Kernels are any callables taking gs::Context&; an exception thrown from one never
 * enters the library: it fails the run with the exception's message (GS_ERR_KERNEL_FAILED).
 *
 * Errors: a failed call throws gs::Error. Without exceptions (-fno-exceptions, or
 * GRAPHSCHED_NO_EXCEPTIONS defined), a failed call goes to the handler set with
 * gs::set_error_handler (by default: print the sentence and abort), and the calls that fail at
 * run time for reasons other than programming errors have noexcept forms returning gs::Status
 * (gs::try_run, gs::try_run_nested, Context::try_alloc_output); a kernel fails with
 * Context::fail. A size function that throws fails the run without its message (the C size
 * function has no channel for one).
 *
 *   gs::Graph g;
 *   gs_value x = g.add_input("x", 4 * sizeof(float));
 *   gs_value y = g.add_node("twice", "Scale", {x}, {4 * sizeof(float)}, [](gs::Context &c) {
 *       auto in = c.input<float>(0); auto out = c.output<float>(0);
 *       for (size_t i = 0; i < in.size(); i++) out[i] = 2 * in[i];
 *   });
 *   g.mark_output(y);
 *   g.finalize();
 *   gs::Pool pool;
 *   alignas(16) float xs[4] = {1, 2, 3, 4};
 *   gs::Result r = gs::run(g, pool, gs::RunOptions().bind(x, xs, sizeof xs));
 *   gs::Span<const float> twice = r.output<float>(y);
 */
#ifndef GRAPHSCHED_HPP
#define GRAPHSCHED_HPP

#include <graphsched.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if defined(__cpp_exceptions) && !defined(GRAPHSCHED_NO_EXCEPTIONS)
#define GRAPHSCHED_HPP_EXCEPTIONS 1
#define GRAPHSCHED_HPP_MODE with_exceptions
#include <exception>
#include <mutex>
#include <stdexcept>
#else
#define GRAPHSCHED_HPP_EXCEPTIONS 0
#define GRAPHSCHED_HPP_MODE without_exceptions
#endif

namespace gs {
// The two modes compile different bodies for the same names: an inline namespace per mode keeps
// translation units built each way from sharing (ODR-violating) definitions.
inline namespace GRAPHSCHED_HPP_MODE {

/// A call's outcome: its status and, on failure, the library's sentence.
struct Status {
    gs_status code = GS_OK;
    std::string message;

    bool ok() const noexcept { return code == GS_OK; }
    explicit operator bool() const noexcept { return ok(); }
    const char *name() const noexcept { return gs_status_name(code); }
};

namespace detail {
inline Status status_of(gs_status code) {
    Status s;
    s.code = code;
    if (code != GS_OK) s.message = gs_last_error_message();
    return s;
}
}  // namespace detail

#if GRAPHSCHED_HPP_EXCEPTIONS
/// A failed call: the status and the library's sentence.
class Error : public std::runtime_error {
public:
    explicit Error(Status s) : std::runtime_error(std::string(s.name()) + ": " + s.message), status_(std::move(s)) {}
    gs_status status() const noexcept { return status_.code; }
    const std::string &message() const noexcept { return status_.message; }

private:
    Status status_;
};
#endif

/// Where failed calls go without exceptions; returns only to abort.
using ErrorHandler = void (*)(const Status &);

namespace detail {
inline ErrorHandler &handler() {
    static ErrorHandler h = nullptr;
    return h;
}

[[noreturn]] inline void fail(Status s) {
#if GRAPHSCHED_HPP_EXCEPTIONS
    throw Error(std::move(s));
#else
    if (handler()) handler()(s);
    std::fprintf(stderr, "graphsched: %s: %s\n", s.name(), s.message.c_str());
    std::abort();
#endif
}

inline void check(gs_status code) {
    if (code != GS_OK) fail(status_of(code));
}
}  // namespace detail

/// Without exceptions: called with every failed call's status before the program aborts.
inline void set_error_handler(ErrorHandler h) noexcept { detail::handler() = h; }

/// A view of `size()` elements of T: a tensor's data, borrowed.
template <class T>
class Span {
public:
    Span() = default;
    Span(T *data, size_t size) noexcept : data_(data), size_(size) {}
    T *data() const noexcept { return data_; }
    size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    T &operator[](size_t i) const noexcept { return data_[i]; }
    T *begin() const noexcept { return data_; }
    T *end() const noexcept { return data_ + size_; }

private:
    T *data_ = nullptr;
    size_t size_ = 0;
};

class Pool;
class Executor;
class Parallel;

namespace detail {
/// A parallel loop's body and, with exceptions, the first exception a chunk threw: an exception
/// must not unwind into the library, so it is kept and rethrown by the loop's caller (finish).
template <class F>
struct Loop {
    const F *body;
#if GRAPHSCHED_HPP_EXCEPTIONS
    std::mutex lock;
    std::exception_ptr error;
#endif
    template <class... A>
    void chunk(const A &...args) noexcept {
#if GRAPHSCHED_HPP_EXCEPTIONS
        try {
            (*body)(args...);
        } catch (...) {
            std::lock_guard<std::mutex> held(lock);
            if (!error) error = std::current_exception();
        }
#else
        (*body)(args...);
#endif
    }
    void finish(gs_status code) {
#if GRAPHSCHED_HPP_EXCEPTIONS
        if (error) std::rethrow_exception(error);
#endif
        check(code);
    }
};

template <class F, class Start>
void nested_loop(const F &body, const Start &start);
}  // namespace detail

/// A running loop's handle (gs_parallel), given to each chunk of a loop started with
/// Context::parallel_for_nested: parallel_for on it runs a loop inside the chunk, on whichever
/// thread runs it, sharing the run's threads. Valid only while that chunk runs.
class Parallel {
public:
    explicit Parallel(const gs_parallel *p) noexcept : p_(p) {}
    /// Runs `body(parallel, begin, end)` over chunks of `grain` items of [begin, end)
    /// (gs_parallel_for), `parallel` a handle for loops nested deeper; the same rules as
    /// Context::parallel_for.
    template <class F>
    void parallel_for(size_t begin, size_t end, size_t grain, const F &body) const {
        const gs_parallel *p = p_;
        detail::nested_loop(body, [p, begin, end, grain](gs_parallel_fn fn, void *user) {
            return gs_parallel_for(p, begin, end, grain, fn, user);
        });
    }

private:
    const gs_parallel *p_;
};

namespace detail {
/// Runs a loop whose chunks call `body(Parallel, begin, end)`; `start(fn, user)` starts it (from
/// a kernel, gs_ctx_parallel_for_nested; from a chunk, gs_parallel_for).
template <class F, class Start>
void nested_loop(const F &body, const Start &start) {
    Loop<F> loop{};  // value-initialized: a partial brace list warns (-Wmissing-field-initializers)
    loop.body = &body;
    // noexcept: nothing may unwind into the library.
    gs_parallel_fn chunk = [](const gs_parallel *p, size_t b, size_t e, void *user) noexcept {
        static_cast<Loop<F> *>(user)->chunk(Parallel(p), b, e);
    };
    loop.finish(start(chunk, static_cast<void *>(&loop)));
}
}  // namespace detail

/// The right to end a node whose kernel deferred its end (Context::defer): complete() it, from
/// any thread, once the work the kernel started is done. Move-only. Destroying one that was not
/// completed fails the node, rather than leaving its run waiting for ever.
class Completion {
public:
    Completion() = default;
    explicit Completion(gs_completion *c) noexcept : c_(c) {}
    Completion(Completion &&other) noexcept : c_(std::exchange(other.c_, nullptr)) {}
    Completion &operator=(Completion &&other) noexcept {
        if (this != &other) {
            abandon();
            c_ = std::exchange(other.c_, nullptr);
        }
        return *this;
    }
    Completion(const Completion &) = delete;
    Completion &operator=(const Completion &) = delete;
    ~Completion() { abandon(); }

    /// Ends the node: GS_OK, or a failure (any other status) and its reason, which fails the run.
    void complete(gs_status status = GS_OK, const char *message = nullptr) noexcept {
        if (c_) gs_complete(std::exchange(c_, nullptr), status, message);
    }
    /// Whether it still has a node to end.
    explicit operator bool() const noexcept { return c_ != nullptr; }

private:
    void abandon() noexcept { complete(GS_ERR_KERNEL_FAILED, "its gs::Completion was destroyed without being completed"); }
    gs_completion *c_ = nullptr;
};

/// What a running kernel sees: its node's inputs and outputs, and its run.
class Context {
public:
    explicit Context(gs_kernel_ctx *ctx) noexcept : ctx_(ctx) {}

    uint32_t num_inputs() const noexcept { return gs_ctx_num_inputs(ctx_); }
    uint32_t num_outputs() const noexcept { return gs_ctx_num_outputs(ctx_); }
    const char *node_name() const noexcept { return gs_ctx_node_name(ctx_); }

    /// The descriptor of input `i` (shape, dtype, bytes); fails for a bad index.
    const gs_tensor &input_tensor(uint32_t i) const {
        const gs_tensor *t = gs_ctx_input(ctx_, i);
        if (!t) detail::fail(detail::status_of(GS_ERR_INVALID_ARGUMENT));
        return *t;
    }
    /// The descriptor of output `i`: the kernel may set its shape and lower its bytes.
    gs_tensor &output_tensor(uint32_t i) {
        gs_tensor *t = gs_ctx_output(ctx_, i);
        if (!t) detail::fail(detail::status_of(GS_ERR_INVALID_ARGUMENT));
        return *t;
    }
    /// Input `i` as elements of T (whole elements only).
    template <class T>
    Span<const T> input(uint32_t i) const {
        const gs_tensor &t = input_tensor(i);
        return Span<const T>(static_cast<const T *>(t.data), t.nbytes / sizeof(T));
    }
    /// Output `i` as elements of T.
    template <class T>
    Span<T> output(uint32_t i) {
        gs_tensor &t = output_tensor(i);
        return Span<T>(static_cast<T *>(t.data), t.nbytes / sizeof(T));
    }
    /// Allocates `count` elements for dynamic output `i` (GS_SIZE_DYNAMIC outputs only). A
    /// memory limit may refuse it: `try_alloc_output` reports that without throwing.
    template <class T>
    Span<T> alloc_output(uint32_t i, size_t count) {
        Span<T> out;
        Status s = try_alloc_output(i, count, out);
        if (!s) detail::fail(std::move(s));
        return out;
    }
    template <class T>
    Status try_alloc_output(uint32_t i, size_t count, Span<T> &out) noexcept {
        gs_tensor *t = nullptr;
        if (count > SIZE_MAX / sizeof(T)) return detail::status_of(gs_ctx_alloc_output(ctx_, i, SIZE_MAX, &t));
        gs_status code = gs_ctx_alloc_output(ctx_, i, count * sizeof(T), &t);
        if (code == GS_OK) out = Span<T>(static_cast<T *>(t->data), count);
        return detail::status_of(code);
    }
    /// Whether output `i` took over its in-place input's buffer.
    bool output_in_place(uint32_t i) const noexcept { return gs_ctx_output_in_place(ctx_, i) != 0; }

    /// The run's data (RunOptions::user_data), as the caller passed it.
    template <class T>
    T *run_data() const noexcept {
        return static_cast<T *>(gs_ctx_user_data(ctx_));
    }
    /// The run's pool and executor (NULL: none), for a nested gs_run or gs::run_nested.
    gs_pool *pool() const noexcept { return gs_ctx_pool(ctx_); }
    gs_executor *executor() const noexcept { return gs_ctx_executor(ctx_); }

    /// Runs `body(begin, end)` over chunks of `grain` items of [begin, end), on this thread and
    /// the run's executor's other threads (gs_ctx_parallel_for); returns once all have run. With
    /// exceptions, the first one a chunk throws is rethrown here after every chunk has run;
    /// without them, a chunk must not fail.
    template <class F>
    void parallel_for(size_t begin, size_t end, size_t grain, const F &body) {
        detail::Loop<F> loop{};  // value-initialized: a partial brace list warns (-Wmissing-field-initializers)
        loop.body = &body;
        // noexcept: nothing may unwind into the library (an escaping exception terminates).
        gs_range_fn chunk = [](size_t b, size_t e, void *user) noexcept {
            static_cast<detail::Loop<F> *>(user)->chunk(b, e);
        };
        loop.finish(gs_ctx_parallel_for(ctx_, begin, end, grain, chunk, &loop));
    }
    /// As parallel_for, with `body(parallel, begin, end)`: `parallel.parallel_for(...)` runs a
    /// loop inside a chunk, on whichever thread runs it (gs_ctx_parallel_for_nested).
    template <class F>
    void parallel_for_nested(size_t begin, size_t end, size_t grain, const F &body) {
        gs_kernel_ctx *ctx = ctx_;
        detail::nested_loop(body, [ctx, begin, end, grain](gs_parallel_fn fn, void *user) {
            return gs_ctx_parallel_for_nested(ctx, begin, end, grain, fn, user);
        });
    }

    /// Defers the node's end (gs_ctx_defer): start the work elsewhere, hand it the Completion,
    /// and return; the node ends when the work completes it. Dynamic outputs must be allocated
    /// and descriptors set before returning.
    [[nodiscard]] Completion defer() {
        gs_completion *c = nullptr;
        detail::check(gs_ctx_defer(ctx_, &c));
        return Completion(c);
    }

    /// Fails the node with `message` once the kernel returns (the way to fail without
    /// exceptions; with them, throwing does the same).
    void fail(const char *message) noexcept {
        gs_ctx_set_error(ctx_, message);
        failed_ = true;
    }
    bool failed() const noexcept { return failed_; }

    gs_kernel_ctx *get() const noexcept { return ctx_; }

private:
    gs_kernel_ctx *ctx_;
    bool failed_ = false;
};

/// A kernel: any callable on a Context. Exceptions fail the run with their message.
using Kernel = std::function<void(Context &)>;
/// A size function: input sizes in, output sizes out (pre-filled with the declared sizes).
using SizeFunction = std::function<void(Span<const size_t> inputs, Span<size_t> outputs)>;

/// Extra settings of a node: estimate, flags, in-place pair, size function.
struct NodeOptions {
    uint64_t estimated_ns = 0;
    bool zero_output = false;
    /// Output `in_place_output` may take over input slot `in_place_input`'s buffer.
    int in_place_output = -1;
    int in_place_input = -1;
    SizeFunction sizes;
};

/// A graph: built with add_input/add_node/mark_output, then finalize(); owns its kernels.
class Graph {
public:
    Graph() { detail::check(gs_graph_new(&raw_)); }
    ~Graph() { gs_graph_free(raw_); }  // before the kernels it points at (members below)
    Graph(Graph &&other) noexcept : nodes_(std::move(other.nodes_)), raw_(std::exchange(other.raw_, nullptr)) {}
    Graph &operator=(Graph &&other) noexcept {
        if (this != &other) {
            gs_graph_free(raw_);
            raw_ = std::exchange(other.raw_, nullptr);
            nodes_ = std::move(other.nodes_);
        }
        return *this;
    }
    Graph(const Graph &) = delete;
    Graph &operator=(const Graph &) = delete;

    /// A graph input of `nbytes` (GS_SIZE_DYNAMIC: each run's binding gives the size).
    gs_value add_input(const std::string &name, size_t nbytes) {
        gs_value v{};
        detail::check(gs_graph_add_input(raw_, name.c_str(), nbytes, &v));
        return v;
    }

    /// A node running `kernel`, reading `inputs`, with one output per size; returns output 0
    /// (output k is {id, k}).
    gs_value add_node(const std::string &name, const std::string &op_type, std::initializer_list<gs_value> inputs,
                      std::initializer_list<size_t> output_sizes, Kernel kernel, NodeOptions options = {}) {
        return add_node(name, op_type, std::vector<gs_value>(inputs), std::vector<size_t>(output_sizes),
                        std::move(kernel), std::move(options));
    }
    gs_value add_node(const std::string &name, const std::string &op_type, const std::vector<gs_value> &inputs,
                      const std::vector<size_t> &output_sizes, Kernel kernel, NodeOptions options = {}) {
        auto node = std::make_unique<NodeState>(NodeState{std::move(kernel), std::move(options.sizes)});
        nodes_.reserve(nodes_.size() + 1);  // the push_back below cannot throw once the graph holds the pointer
        gs_node_desc d{};
        d.name = name.c_str();
        d.op_type = op_type.c_str();
        d.kernel = &Graph::call_kernel;
        d.user_data = node.get();
        d.inputs = inputs.data();
        d.num_inputs = static_cast<uint32_t>(inputs.size());
        d.num_outputs = static_cast<uint32_t>(output_sizes.size());
        d.output_sizes = output_sizes.data();
        d.estimated_ns = options.estimated_ns;
        d.flags = options.zero_output ? GS_NODE_ZERO_OUTPUT : 0;
        if (options.in_place_output >= 0 && options.in_place_input >= 0) {
            d.flags |= GS_NODE_IN_PLACE;
            d.in_place_output = static_cast<uint16_t>(options.in_place_output);
            d.in_place_input = static_cast<uint16_t>(options.in_place_input);
        }
        if (node->sizes) d.size_fn = &Graph::call_sizes;
        uint32_t id = 0;
        detail::check(gs_graph_add_node(raw_, &d, &id));
        nodes_.push_back(std::move(node));  // only once the graph holds the pointer (a failed call keeps none)
        return gs_value{id, 0};
    }

    void mark_output(gs_value v) { detail::check(gs_graph_mark_output(raw_, v)); }
    void finalize() { detail::check(gs_graph_finalize(raw_)); }

    gs_graph_info info() const {
        gs_graph_info i{};
        detail::check(gs_graph_get_info(raw_, &i));
        return i;
    }

    gs_graph *get() const noexcept { return raw_; }

private:
    struct NodeState {
        Kernel kernel;
        SizeFunction sizes;
    };

    // Nothing thrown here reaches the library: a kernel's exception becomes its error message.
    static int32_t call_kernel(gs_kernel_ctx *ctx, void *user) noexcept {
#if GRAPHSCHED_HPP_EXCEPTIONS
        try {
            Context c(ctx);
            static_cast<NodeState *>(user)->kernel(c);
            return c.failed() ? 1 : 0;
        } catch (const std::exception &e) {
            gs_ctx_set_error(ctx, e.what());
        } catch (...) {
            gs_ctx_set_error(ctx, "unknown C++ exception");
        }
        return 1;
#else
        Context c(ctx);
        static_cast<NodeState *>(user)->kernel(c);
        return c.failed() ? 1 : 0;
#endif
    }

    static int32_t call_sizes(const size_t *in, uint32_t n_in, size_t *out, uint32_t n_out, void *user) noexcept {
#if GRAPHSCHED_HPP_EXCEPTIONS
        try {
            static_cast<NodeState *>(user)->sizes(Span<const size_t>(in, n_in), Span<size_t>(out, n_out));
            return 0;
        } catch (...) {
            return 1;
        }
#else
        static_cast<NodeState *>(user)->sizes(Span<const size_t>(in, n_in), Span<size_t>(out, n_out));
        return 0;
#endif
    }

    // Declared before raw_, so destroyed after the graph that calls them.
    std::vector<std::unique_ptr<NodeState>> nodes_;
    gs_graph *raw_ = nullptr;
};

/// A buffer pool.
class Pool {
public:
    explicit Pool(const gs_pool_config &config = gs_pool_config{}) { detail::check(gs_pool_new(&config, &raw_)); }
    ~Pool() { gs_pool_free(raw_); }
    Pool(Pool &&other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Pool &operator=(Pool &&other) noexcept {
        std::swap(raw_, other.raw_);
        return *this;
    }
    Pool(const Pool &) = delete;
    Pool &operator=(const Pool &) = delete;

    gs_pool_stats stats() const {
        gs_pool_stats s{};
        detail::check(gs_pool_get_stats(raw_, &s));
        return s;
    }
    gs_pool *get() const noexcept { return raw_; }

private:
    gs_pool *raw_ = nullptr;
};

/// Worker threads (`threads` in all, the caller of a run included; 0: one per core).
class Executor {
public:
    explicit Executor(uint32_t threads = 0) {
        gs_executor_config c{};
        c.threads = threads;
        detail::check(gs_executor_new(&c, &raw_));
    }
    ~Executor() { gs_executor_free(raw_); }
    Executor(Executor &&other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Executor &operator=(Executor &&other) noexcept {
        std::swap(raw_, other.raw_);
        return *this;
    }
    Executor(const Executor &) = delete;
    Executor &operator=(const Executor &) = delete;

    uint32_t threads() const noexcept { return gs_executor_threads(raw_); }
    gs_executor *get() const noexcept { return raw_; }

private:
    gs_executor *raw_ = nullptr;
};

/// How to run a graph; chain the setters. Bound memory must stay valid until the run returns.
class RunOptions {
public:
    RunOptions &bind(gs_value input, const void *data, size_t nbytes) {
        gs_input_binding b{};
        b.value = input;
        b.tensor.data = const_cast<void *>(data);  // graph inputs are only read
        b.tensor.nbytes = nbytes;
        bindings_.push_back(b);
        return *this;
    }
    RunOptions &executor(const Executor &e) noexcept { return executor(e.get()); }
    RunOptions &executor(gs_executor *e) noexcept {
        raw_.executor = e;
        return *this;
    }
    RunOptions &memory_limit(uint64_t bytes) noexcept {
        raw_.memory_limit_bytes = bytes;
        return *this;
    }
    RunOptions &window(uint32_t nodes) noexcept {
        raw_.window = nodes;
        return *this;
    }
    RunOptions &flags(uint32_t gs_run_flags) noexcept {
        raw_.flags = gs_run_flags;
        return *this;
    }
    RunOptions &user_data(void *data) noexcept {
        raw_.user_data = data;
        return *this;
    }
    RunOptions &observers(gs_observer_fn on_start, gs_observer_fn on_end, void *data) noexcept {
        raw_.on_node_start = on_start;
        raw_.on_node_end = on_end;
        raw_.observer_data = data;
        return *this;
    }
    RunOptions &timeout_ns(uint64_t ns) noexcept {
        raw_.timeout_ns = ns;
        return *this;
    }

    /// The C options, pointing into this object.
    const gs_run_options *get() noexcept {
        raw_.inputs = bindings_.data();
        raw_.num_inputs = bindings_.size();
        return &raw_;
    }

private:
    std::vector<gs_input_binding> bindings_;
    gs_run_options raw_{};
};

/// One run's graph outputs, valid while the result lives.
class Result {
public:
    Result() = default;
    explicit Result(gs_run_result *raw) noexcept : raw_(raw) {}
    ~Result() { gs_result_free(raw_); }
    Result(Result &&other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Result &operator=(Result &&other) noexcept {
        std::swap(raw_, other.raw_);
        return *this;
    }
    Result(const Result &) = delete;
    Result &operator=(const Result &) = delete;

    const gs_tensor output_tensor(gs_value v) const {
        gs_tensor t{};
        detail::check(gs_result_output(raw_, v, &t));
        return t;
    }
    template <class T>
    Span<const T> output(gs_value v) const {
        gs_tensor t = output_tensor(v);
        return Span<const T>(static_cast<const T *>(t.data), t.nbytes / sizeof(T));
    }
    gs_run_stats stats() const {
        gs_run_stats s{};
        detail::check(gs_result_stats(raw_, &s));
        return s;
    }
    gs_run_result *get() const noexcept { return raw_; }

private:
    gs_run_result *raw_ = nullptr;
};

/// Runs `graph` without throwing: the status, and on success the outputs in `out`.
inline Status try_run(const Graph &graph, gs_pool *pool, RunOptions &options, Result &out) noexcept {
    gs_run_result *r = nullptr;
    gs_status code = gs_run(graph.get(), pool, options.get(), &r);
    if (code == GS_OK) out = Result(r);
    return detail::status_of(code);
}
inline Status try_run(const Graph &graph, Pool &pool, RunOptions &options, Result &out) noexcept {
    return try_run(graph, pool.get(), options, out);
}

/// Runs `graph` on `pool`: the outputs, or gs::Error.
inline Result run(const Graph &graph, Pool &pool, RunOptions &options) {
    Result r;
    Status s = try_run(graph, pool, options, r);
    if (!s) detail::fail(std::move(s));
    return r;
}
inline Result run(const Graph &graph, Pool &pool, RunOptions &&options) { return run(graph, pool, options); }

/// From inside a kernel: runs `graph` on the kernel's own run's pool and executor (an If or
/// Loop operator; the options' executor is replaced). The waiting thread works on queued nodes
/// meanwhile, so graphsched's waits cannot deadlock; kernels must not block on one another.
inline Status try_run_nested(const Graph &graph, const Context &ctx, RunOptions &options, Result &out) noexcept {
    options.executor(ctx.executor());
    return try_run(graph, ctx.pool(), options, out);
}
inline Result run_nested(const Graph &graph, const Context &ctx, RunOptions &options) {
    Result r;
    Status s = try_run_nested(graph, ctx, options, r);
    if (!s) detail::fail(std::move(s));
    return r;
}

}  // namespace GRAPHSCHED_HPP_MODE
}  // namespace gs

#endif  // GRAPHSCHED_HPP
