#include "b/y.h"
#include "core/error.h"
