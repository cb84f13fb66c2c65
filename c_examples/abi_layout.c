/*
 * abi_layout: the C view of every struct in graphsched.h must match the sizes and alignments
 * pinned on the Rust side (src/ffi/mod.rs), and the version macros must agree with each other
 * and with the loaded library.
 *
 * The layout is checked twice: by _Static_assert, so a mismatch does not even compile, and at
 * run time, so the program prints the table it checked.
 */
#include <graphsched.h>
#include <stddef.h>
#include <string.h>

#include "check.h"

/* type, size, alignment: the numbers pinned by const_assert_eq!/assert_eq_align! in Rust. */
#define GS_ABI_STRUCTS(X)       \
    X(gs_tensor, 152, 8)        \
    X(gs_value, 8, 4)           \
    X(gs_input_binding, 160, 8) \
    X(gs_graph_info, 80, 8)     \
    X(gs_pool_config, 32, 8)    \
    X(gs_pool_stats, 88, 8)     \
    X(gs_run_stats, 56, 8)      \
    X(gs_node_desc, 80, 8)      \
    X(gs_run_options, 104, 8)   \
    X(gs_node_observation, 32, 8) \
    X(gs_executor_config, 4, 4) \
    X(gs_sim_options, 24, 8)    \
    X(gs_partition_options, 24, 8) \
    X(gs_sim_result, 56, 8)

#define STATIC_LAYOUT(type, size, align)                              \
    _Static_assert(sizeof(type) == (size), "sizeof(" #type ")");      \
    _Static_assert(_Alignof(type) == (align), "_Alignof(" #type ")");
GS_ABI_STRUCTS(STATIC_LAYOUT)

/* Field offsets that follow from the C layout rules and the Rust field order. */
#define GS_ABI_FIELDS(X)                         \
    X(gs_tensor, data, 0)                        \
    X(gs_tensor, nbytes, 8)                      \
    X(gs_tensor, dtype, 16)                      \
    X(gs_tensor, ndim, 20)                       \
    X(gs_tensor, dims, 24)                       \
    X(gs_tensor, strides, 88)                    \
    X(gs_value, output, 4)                       \
    X(gs_input_binding, tensor, 8)               \
    X(gs_node_desc, kernel, 16)                  \
    X(gs_node_desc, num_inputs, 40)              \
    X(gs_node_desc, num_outputs, 44)             \
    X(gs_node_desc, output_sizes, 48)            \
    X(gs_node_desc, flags, 64)                   \
    X(gs_node_desc, size_fn, 72)                 \
    X(gs_run_options, num_inputs, 8)             \
    X(gs_run_options, executor, 16)              \
    X(gs_run_options, memory_limit_bytes, 24)    \
    X(gs_run_options, window, 32)                \
    X(gs_run_options, policy, 36)                \
    X(gs_run_options, flags, 40)                 \
    X(gs_run_options, priority, 44)              \
    X(gs_run_options, plan, 48)                  \
    X(gs_run_options, cancel, 56)                \
    X(gs_run_options, timeout_ns, 64)            \
    X(gs_run_options, user_data, 72)             \
    X(gs_run_options, on_node_start, 80)         \
    X(gs_run_options, on_node_end, 88)           \
    X(gs_run_options, observer_data, 96)         \
    X(gs_node_observation, thread, 4)            \
    X(gs_node_observation, start_ns, 8)          \
    X(gs_node_observation, end_ns, 16)           \
    X(gs_node_observation, ok, 24)               \
    X(gs_executor_config, threads, 0)            \
    X(gs_sim_options, policy, 4)                 \
    X(gs_sim_options, window, 8)                 \
    X(gs_sim_options, memory_limit_bytes, 16)    \
    X(gs_partition_options, threads, 8)          \
    X(gs_partition_options, policy, 12)          \
    X(gs_partition_options, memory_limit_bytes, 16) \
    X(gs_sim_result, peak_live_bytes, 32)        \
    X(gs_sim_result, nodes_run, 40)              \
    X(gs_sim_result, utilization, 48)            \
    X(gs_graph_info, node_lower_bound_bytes, 72) \
    X(gs_pool_stats, releases, 80)               \
    X(gs_run_stats, os_allocs, 32)               \
    X(gs_run_stats, threads, 40)                 \
    X(gs_run_stats, busy_ns, 48)

#define STATIC_OFFSET(type, field, offset) \
    _Static_assert(offsetof(type, field) == (offset), "offsetof(" #type ", " #field ")");
GS_ABI_FIELDS(STATIC_OFFSET)

_Static_assert(sizeof(((gs_tensor *)0)->dims) == GS_MAX_DIMS * sizeof(int64_t), "dims holds GS_MAX_DIMS");
_Static_assert(sizeof(((gs_tensor *)0)->strides) == GS_MAX_DIMS * sizeof(int64_t), "strides holds GS_MAX_DIMS");
_Static_assert(sizeof(gs_status) == 4, "gs_status is 32 bits");
_Static_assert(GS_SIZE_DYNAMIC == SIZE_MAX, "GS_SIZE_DYNAMIC is SIZE_MAX");
_Static_assert(GS_VERSION_NUMBER == GS_VERSION_MAJOR * 10000 + GS_VERSION_MINOR * 100 + GS_VERSION_PATCH,
               "GS_VERSION_NUMBER = major * 10000 + minor * 100 + patch");

static int failures;

static void check_layout(const char *type, size_t size, size_t align, size_t want_size, size_t want_align) {
    int ok = size == want_size && align == want_align;
    printf("  %-20s size %3zu align %zu  %s\n", type, size, align, ok ? "ok" : "MISMATCH");
    if (!ok) {
        fprintf(stderr, "%s: size %zu align %zu, the Rust side pins size %zu align %zu\n", type, size, align,
                want_size, want_align);
        failures++;
    }
}

static void check_offset(const char *type, const char *field, size_t offset, size_t want) {
    if (offset != want) {
        fprintf(stderr, "offsetof(%s, %s) is %zu, expected %zu\n", type, field, offset, want);
        failures++;
    }
}

int main(void) {
    printf("struct layouts:\n");
#define RUNTIME_LAYOUT(type, size, align) check_layout(#type, sizeof(type), _Alignof(type), size, align);
    GS_ABI_STRUCTS(RUNTIME_LAYOUT)
#define RUNTIME_OFFSET(type, field, offset) check_offset(#type, #field, offsetof(type, field), offset);
    GS_ABI_FIELDS(RUNTIME_OFFSET)
    printf("  gs_tensor.dims at %zu, gs_tensor.strides at %zu\n", offsetof(gs_tensor, dims),
           offsetof(gs_tensor, strides));

    /* The version macros agree with each other... */
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", GS_VERSION_MAJOR, GS_VERSION_MINOR, GS_VERSION_PATCH);
    if (strcmp(version, GS_VERSION_STRING) != 0) {
        fprintf(stderr, "GS_VERSION_STRING is \"%s\" but the major/minor/patch macros say \"%s\"\n",
                GS_VERSION_STRING, version);
        failures++;
    }
    /* ...and with the library actually loaded. */
    uint32_t loaded = gs_version_number();
    if (loaded != GS_VERSION_NUMBER) {
        fprintf(stderr, "gs_version_number() is %u but the header says %u\n", (unsigned)loaded,
                (unsigned)GS_VERSION_NUMBER);
        failures++;
    }
    printf("version: header %s (%u), library %u\n", GS_VERSION_STRING, (unsigned)GS_VERSION_NUMBER,
           (unsigned)loaded);

    if (failures) {
        fprintf(stderr, "abi_layout: %d mismatch(es)\n", failures);
        return 1;
    }
    printf("abi_layout: OK\n");
    return 0;
}
