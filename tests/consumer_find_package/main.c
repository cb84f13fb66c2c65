#include <graphsched.h>
#include <stdio.h>

int main(void) {
    uint32_t v = gs_version_number();
    if (v != GS_VERSION_NUMBER) {
        fprintf(stderr, "gs_version_number() = %u, header says %u\n",
                (unsigned)v, (unsigned)GS_VERSION_NUMBER);
        return 1;
    }
    return 0;
}
