#include "a/x.h"
#include "core/error.h"
