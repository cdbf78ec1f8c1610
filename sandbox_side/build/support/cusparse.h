// CPU-only stand-in (the CPU torch machine has no cuSPARSE headers): the names ATen/cuda/CUDAContext.h
// declares with, so candidates that include it can be compile-checked. Never used with a CUDA torch.
#pragma once
typedef struct cusparseContext* cusparseHandle_t;
typedef enum { CUSPARSE_STATUS_SUCCESS = 0 } cusparseStatus_t;
const char* cusparseGetErrorString(cusparseStatus_t status);
