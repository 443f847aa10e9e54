/* The metadata protocol's protobuf messages stay inside meta: sync calls
 * meta's typed requests (meta/requests.h) and cannot see the messages. */
#include "meta/proto.h"
