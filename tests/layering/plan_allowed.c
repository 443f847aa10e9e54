/* plan may use common and layout, internal headers included. */
#include "common/internal.h"
#include "ferry/plan.h"
#include "layout/layout_internal.h"
