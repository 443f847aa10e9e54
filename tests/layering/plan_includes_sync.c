/* plan is below sync: this must not compile as part of plan. */
#include "sync/sync_internal.h"
