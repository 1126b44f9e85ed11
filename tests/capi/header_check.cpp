// Compiles the public header as C++ (cpp_compat): nothing to run.
#include "fabriclib.h"
static_assert(FABRICLIB_STATUS_OK == 0, "OK is 0");
