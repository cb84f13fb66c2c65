// cpp_async: intra-op parallelism and asynchronous kernels from C++ (graphsched.hpp).
//
//   fill -> scale (Context::parallel_for_nested over row blocks, then rows) -> sum
//        -> offload (Context::defer; a std::thread completes it) --->
//
// Shows: a kernel splitting a loop over the executor's threads, an exception thrown in a chunk
// failing the run as gs::Error, a kernel handing its gs::Completion to another thread and
// returning at once, and a Completion destroyed without completing failing its node instead of
// hanging the run. Checked on 2 threads and on the calling thread alone.
#include <graphsched.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

void expect(bool ok, const std::string &what) {
    if (!ok) throw std::runtime_error("check failed: " + what);
}

constexpr size_t kRows = 64, kCols = 256, kCount = kRows * kCols;

// Threads standing in for a device; joined before main returns.
std::mutex device_lock;
std::vector<std::thread> device_threads;
std::atomic<bool> chunk_throws{false}, device_drops{false};

}  // namespace

int main() {
    try {
        gs::Graph g;
        gs_value fill = g.add_node("fill", "Fill", {}, {kCount * sizeof(float)}, [](gs::Context &c) {
            auto out = c.output<float>(0);
            for (size_t i = 0; i < out.size(); i++) out[i] = static_cast<float>(i % 9);
        });
        gs_value scale = g.add_node("scale", "Scale", {fill}, {kCount * sizeof(float)}, [](gs::Context &c) {
            const float *in = c.input<float>(0).data();
            float *out = c.output<float>(0).data();
            // Blocks of 4 rows, each a loop of its own over its rows (on whichever thread runs the
            // block); an exception in an inner chunk reaches the kernel through both loops.
            c.parallel_for_nested(0, kRows, 4, [&](const gs::Parallel &p, size_t first, size_t last) {
                p.parallel_for(first, last, 1, [&](const gs::Parallel &, size_t begin, size_t end) {
                    if (chunk_throws && begin == 8) throw std::runtime_error("row block 8 is cursed");
                    for (size_t i = begin * kCols; i < end * kCols; i++) out[i] = 2 * in[i];
                });
            });
        });
        gs_value offload = g.add_node("offload", "Offload", {fill}, {kCount * sizeof(float)}, [](gs::Context &c) {
            const float *in = c.input<float>(0).data();
            float *out = c.output<float>(0).data();
            gs::Completion done = c.defer();
            std::lock_guard<std::mutex> held(device_lock);
            device_threads.emplace_back([in, out, done = std::move(done)]() mutable {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                if (device_drops) return;  // `done` is destroyed here, not completed
                for (size_t i = 0; i < kCount; i++) out[i] = in[i] + 1;
                done.complete();
            });
        });
        gs_value sum = g.add_node("sum", "Sum", {scale, offload}, {sizeof(double)}, [](gs::Context &c) {
            double total = 0;
            for (uint32_t k = 0; k < 2; k++)
                for (float v : c.input<float>(k)) total += v;
            c.output<double>(0)[0] = total;
        });
        g.mark_output(sum);
        g.finalize();

        double want = 0;
        for (size_t i = 0; i < kCount; i++) want += 2.0 * (i % 9) + (i % 9) + 1;

        gs::Pool pool;
        gs::Executor executor(2);
        for (gs::Executor *ex : {&executor, static_cast<gs::Executor *>(nullptr), &executor}) {
            gs::RunOptions options;
            if (ex) options.executor(*ex);
            gs::Result r = gs::run(g, pool, options);
            expect(r.output<double>(sum)[0] == want, "the sum of both branches");
        }

        chunk_throws = true;
        try {
            gs::run(g, pool, gs::RunOptions().executor(executor));
            expect(false, "a throwing chunk fails the run");
        } catch (const gs::Error &e) {
            expect(e.status() == GS_ERR_KERNEL_FAILED, "status KERNEL_FAILED");
            expect(e.message().find("'scale'") != std::string::npos, "names the node: " + e.message());
            expect(e.message().find("cursed") != std::string::npos, "carries the text: " + e.message());
        }
        chunk_throws = false;

        device_drops = true;
        try {
            gs::run(g, pool, gs::RunOptions().executor(executor));
            expect(false, "a dropped completion fails the run");
        } catch (const gs::Error &e) {
            expect(e.message().find("'offload'") != std::string::npos, "names the node: " + e.message());
            expect(e.message().find("destroyed without being completed") != std::string::npos, e.message());
        }
        device_drops = false;
        expect(pool.stats().live_bytes == 0, "every buffer back in the pool");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "cpp_async: %s\n", e.what());
        for (std::thread &t : device_threads) t.join();
        return 1;
    }
    for (std::thread &t : device_threads) t.join();
    std::printf("cpp_async: parallel_for, deferred nodes completed by other threads, and their failures\n");
    return 0;
}
