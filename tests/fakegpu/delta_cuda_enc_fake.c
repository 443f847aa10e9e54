/* codec/delta_cuda_enc.c itself, built against the model of the CUDA
 * runtime (fake_cuda.h renames the calls it makes), for
 * test_delta_cuda_enc_fake. */
#include "fake_cuda.h"

#include "codec/delta_cuda_enc.c"
