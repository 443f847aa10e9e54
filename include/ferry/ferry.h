/* ferry: moves model weights from RL trainers to inference engines.
 * Umbrella header; see docs/architecture.md. */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include "ferry/ctx.h"
#include "ferry/layout.h"
#include "ferry/plan.h"
#include "ferry/xport.h"
#include "ferry/meta.h"
#include "ferry/codec.h"
#include "ferry/fp8.h"
#include "ferry/safetensors.h"
#include "ferry/channel.h"
#include "ferry/sync.h"
#include "ferry/status.h"

#endif
