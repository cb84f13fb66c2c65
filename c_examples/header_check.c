/* graphsched.h through a plain -I, compiled (not linked) by ctest with -Wall -Wextra -Wpedantic
 * -Werror in C11 and C17 (the `header_check_*` tests in CMakeLists.txt): the header must not
 * warn in an engine's strictest build. */
#include <graphsched.h>

int main(void) {
    gs_node_desc d = {0};
    gs_run_options o = {0};
    return (int)d.num_inputs + (int)o.flags + (gs_status_name(GS_OK) == 0);
}
