// CPU-only stand-in (see cusparse.h beside it).
#pragma once
typedef struct cublasLtContext* cublasLtHandle_t;
