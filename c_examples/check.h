/*
 * Tiny checking helpers shared by the examples (C and C++).
 *
 * CHECK_OK(call)     the call must return GS_OK; otherwise print the status name and the
 *                    library's last error message, and exit(1).
 * CHECK(cond, ...)   a condition of the example itself; on failure print the printf-style
 *                    message and exit(1).
 */
#ifndef GS_EXAMPLES_CHECK_H
#define GS_EXAMPLES_CHECK_H

#include <graphsched.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_OK(call)                                                                   \
    do {                                                                                 \
        int32_t check_ok_status_ = (int32_t)(call);                                      \
        if (check_ok_status_ != GS_OK) {                                                 \
            fprintf(stderr, "%s:%d: %s\n  returned %s: %s\n", __FILE__, __LINE__, #call, \
                    gs_status_name(check_ok_status_), gs_last_error_message());          \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n  ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif /* GS_EXAMPLES_CHECK_H */
