/* codec may not use the sync engine's public API either. */
#include "ferry/sync.h"
