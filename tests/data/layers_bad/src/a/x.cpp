#include "core/error.h"
#include "b/y.h"
