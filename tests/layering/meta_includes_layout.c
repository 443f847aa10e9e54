/* meta and layout are unrelated: meta may not see layout's internals. */
#include "layout/layout_internal.h"
