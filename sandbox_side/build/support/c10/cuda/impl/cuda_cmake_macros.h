// Stub for the CPU torch wheel, which lacks this generated header; CUDA builds of torch ship the real one.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
