/* sync ties the modules together: it sees all of them. */
#include "channel/channel_internal.h"
#include "meta/requests.h"
#include "plan/plan_internal.h"
#include "xport/xport_internal.h"
